import * as http from 'node:http';
import { Logger } from '../shared/log';
import { BackendStreams } from './backend-streams';
import { sseEvent } from './backend-messages';
import { RequestHead } from './decision';
import { JSON_RPC, jsonRpcError } from './json-rpc';
import { ListKind, RouteCatalogView, listOf } from './route-catalog';
import { GatewaySession } from './sessions/session-store';

/** Envoy cuts a stream silent for longer than the streams route's idle timeout (120 s): a comment well before. */
export const KEEPALIVE_MS = 30_000;

/** The notification that tells a client one of its lists changed. */
export const LIST_CHANGED_METHODS: Record<ListKind, string> = {
  tools: 'notifications/tools/list_changed',
  prompts: 'notifications/prompts/list_changed',
  resources: 'notifications/resources/list_changed',
  resourceTemplates: 'notifications/resources/list_changed',
};

/** What a route serves in one list, as far as a client's list request can tell: the keys, in order. */
export function servedKeys(view: RouteCatalogView, kind: ListKind): string {
  return listOf(view, kind)
    .items.map((item) => item.key)
    .join('\n');
}

/** The lists of a route whose served entries differ between two catalog versions. */
export function changedLists(previous: RouteCatalogView, current: RouteCatalogView): ListKind[] {
  return (['tools', 'prompts', 'resources', 'resourceTemplates'] as const).filter((kind) => servedKeys(previous, kind) !== servedKeys(current, kind));
}

/**
 * Clients' standalone GET streams (their session checked), held open so that each can be told when
 * its route's lists change, and hear what the route's backends send outside its requests
 * (backend-streams.ts) while it holds one. Every replica holds its own streams and learns of changes
 * from its own catalog stream: nothing is shared. A session holds at most maxPerSession streams at a
 * time, so that no client can take the slots Envoy keeps for everyone's streams.
 */
export class ListChangedStreams {
  private readonly byRoute = new Map<string, Set<http.ServerResponse>>();
  private readonly bySession = new Map<string, { streams: http.ServerResponse[]; stopFollowing: () => void }>();

  constructor(
    private readonly maxPerSession: number,
    private readonly log: Logger,
    private readonly backendStreams?: BackendStreams,
  ) {}

  hold(session: GatewaySession, head: RequestHead, res: http.ServerResponse): void {
    const held = this.bySession.get(session.id);
    const open = held?.streams.length ?? 0;
    if (open >= this.maxPerSession) {
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(JSON.stringify(jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `this session already holds ${open} streams (at most ${this.maxPerSession}): close one first`)));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const streams = this.byRoute.get(session.route) ?? new Set();
    this.byRoute.set(session.route, streams);
    streams.add(res);
    // The backends are listened to once per session, whatever number of streams it holds: each message reaches one of them.
    const entry = held ?? {
      streams: [],
      stopFollowing: this.backendStreams?.follow(session, head, (message) => this.bySession.get(session.id)?.streams[0]?.write(sseEvent(message))) ?? (() => undefined),
    };
    entry.streams.push(res);
    this.bySession.set(session.id, entry);
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
    res.on('close', () => {
      clearInterval(keepalive);
      streams.delete(res);
      entry.streams = entry.streams.filter((stream) => stream !== res);
      if (entry.streams.length > 0) return;
      entry.stopFollowing();
      this.bySession.delete(session.id);
    });
  }

  /** Tells every client holding a stream of this route which of its lists changed. */
  listsChanged(route: string, lists: ListKind[]): void {
    const streams = this.byRoute.get(route);
    if (!streams?.size || lists.length === 0) return;
    const methods = [...new Set(lists.map((kind) => LIST_CHANGED_METHODS[kind]))];
    this.log.info('telling clients their lists changed', { route, streams: streams.size, notifications: methods });
    const frames = methods.map((method) => sseEvent({ jsonrpc: '2.0', method })).join('');
    for (const res of streams) res.write(frames);
  }

  close(): void {
    for (const streams of this.byRoute.values()) for (const res of streams) res.end();
  }
}
