import * as http from 'node:http';
import { Logger } from '../shared/log';
import { JSON_RPC, jsonRpcError } from './json-rpc';
import { RouteCatalogView } from './route-catalog';
import { GatewaySession } from './sessions/session-store';

/** Envoy cuts a stream silent for longer than the streams route's idle timeout (120 s): a comment well before. */
const KEEPALIVE_MS = 30_000;

const LIST_CHANGED = `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' })}\n\n`;

/** What a route serves, as far as a client's tools/list can tell: the names, in order. */
export function servedNames(view: RouteCatalogView): string {
  return view.tools.map((exposed) => exposed.tool.name).join('\n');
}

/**
 * Clients' standalone GET streams (their session checked), held open so that each can be told when
 * its route's tools change. Every replica holds its own streams and learns of changes from its own
 * catalog stream: nothing is shared. A session holds at most maxPerSession streams at a time, so
 * that no client can take the slots Envoy keeps for everyone's streams.
 */
export class ListChangedStreams {
  private readonly byRoute = new Map<string, Set<http.ServerResponse>>();
  private readonly perSession = new Map<string, number>();

  constructor(
    private readonly maxPerSession: number,
    private readonly log: Logger,
  ) {}

  hold(session: GatewaySession, res: http.ServerResponse): void {
    const open = this.perSession.get(session.id) ?? 0;
    if (open >= this.maxPerSession) {
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(JSON.stringify(jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `this session already holds ${open} streams (at most ${this.maxPerSession}): close one first`)));
      return;
    }
    this.perSession.set(session.id, open + 1);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const streams = this.byRoute.get(session.route) ?? new Set();
    this.byRoute.set(session.route, streams);
    streams.add(res);
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
    res.on('close', () => {
      clearInterval(keepalive);
      streams.delete(res);
      const left = (this.perSession.get(session.id) ?? 1) - 1;
      if (left > 0) this.perSession.set(session.id, left);
      else this.perSession.delete(session.id);
    });
  }

  /** Tells every client holding a stream of these routes that their tools changed. */
  toolsChanged(routes: string[]): void {
    for (const route of routes) {
      const streams = this.byRoute.get(route);
      if (!streams?.size) continue;
      this.log.info('telling clients their tools changed', { route, streams: streams.size });
      for (const res of streams) res.write(LIST_CHANGED);
    }
  }

  close(): void {
    for (const streams of this.byRoute.values()) for (const res of streams) res.end();
  }
}
