import * as http from 'node:http';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { splitResourceUri } from '../catalog/resource-naming';
import { Logger } from '../shared/log';
import { sseEvent } from './backend-messages';
import { BackendStreams, StreamEnd, hasStandaloneStream } from './backend-streams';
import { GATEWAY_SERVER_INFO, GatewayContext, RequestHead, clientOf } from './decision';
import { JsonObject, JsonRpcId, isObject } from './json-rpc';
import { KEEPALIVE_MS, LIST_CHANGED_METHODS } from './list-changed-streams';
import { MODERN_META, MODERN_PROTOCOL_VERSION } from './modern-era';
import { BackendView, ListKind, RouteCatalogView } from './route-catalog';

/**
 * subscriptions/listen (MCP 2026-07-28; docs/adr/0015-federated-resources-and-prompts.md): a client of
 * the stateless revision opens a stream for the change notifications it asks for. The gateway answers
 * it itself: list changes come from its catalog (as they do to session clients' GET streams), and
 * resource updates from the backends the subscribed URIs name, each listened to for as long as the
 * client listens — in a backend session of the listen's own (resources/subscribe, then its GET stream)
 * for a backend of a session-based revision, with a subscriptions/listen of its own for one of the
 * stateless revision. Every notification carries the listen's id as its subscription id; no event ids.
 */

export const SUBSCRIPTION_ID_META_KEY = 'io.modelcontextprotocol/subscriptionId';

const filterSchema = z.looseObject({
  toolsListChanged: z.boolean().optional(),
  promptsListChanged: z.boolean().optional(),
  resourcesListChanged: z.boolean().optional(),
  resourceSubscriptions: z.array(z.string()).optional(),
});
export const listenParamsSchema = z.looseObject({ notifications: filterSchema });
export type ListenFilter = z.output<typeof filterSchema>;

/** What the gateway delivers of a requested filter: what the route can serve, and URIs of backends that take subscriptions. */
export interface HonoredFilter {
  toolsListChanged?: true;
  promptsListChanged?: true;
  resourcesListChanged?: true;
  resourceSubscriptions?: string[];
}

/** A backend whose resources a listen can follow: one that takes subscriptions, and that the gateway can hear them from. */
const followsSubscriptions = (backend: BackendView) =>
  backend.capabilities.resources?.subscribe === true && (backend.protocolVersion === MODERN_PROTOCOL_VERSION || hasStandaloneStream(backend));

export function honoredFilter(requested: ListenFilter, view: RouteCatalogView): HonoredFilter {
  const subscribed = (requested.resourceSubscriptions ?? []).filter((uri) => {
    const backend = view.backendsBySchemeName.get(splitResourceUri(uri)?.schemeName ?? '');
    return backend !== undefined && followsSubscriptions(backend);
  });
  return {
    ...(requested.toolsListChanged === true && { toolsListChanged: true }),
    ...(requested.promptsListChanged === true && view.capabilities.prompts && { promptsListChanged: true }),
    ...(requested.resourcesListChanged === true && view.capabilities.resources && { resourcesListChanged: true }),
    ...(subscribed.length > 0 && { resourceSubscriptions: [...new Set(subscribed)] }),
  };
}

const HONORS: Record<ListKind, keyof HonoredFilter> = { tools: 'toolsListChanged', prompts: 'promptsListChanged', resources: 'resourcesListChanged', resourceTemplates: 'resourcesListChanged' };

interface Listener {
  id: JsonRpcId;
  honored: HonoredFilter;
  write(message: { method: string; params?: JsonObject }): void;
}

export class ListenStreams {
  private readonly byRoute = new Map<string, Set<Listener>>();
  private readonly open = new Set<http.ServerResponse>();

  constructor(
    private readonly context: GatewayContext,
    private readonly backendStreams: BackendStreams,
    private readonly log: Logger,
  ) {}

  hold(view: RouteCatalogView, id: JsonRpcId, honored: HonoredFilter, head: RequestHead, res: http.ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const stamp = (message: { method: string; params?: JsonObject }) => ({
      jsonrpc: '2.0',
      method: message.method,
      params: { ...message.params, _meta: { ...(isObject(message.params?._meta) ? message.params._meta : {}), [SUBSCRIPTION_ID_META_KEY]: id } },
    });
    const listener: Listener = { id, honored, write: (message) => res.write(sseEvent(stamp(message))) };
    listener.write({ method: 'notifications/subscriptions/acknowledged', params: { notifications: { ...honored } } });
    if (Object.keys(honored).length === 0) {
      // Nothing it asked for can be delivered: the listen ends at once, gracefully.
      res.end(sseEvent({ jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: { [SUBSCRIPTION_ID_META_KEY]: id, [MODERN_META.serverInfo]: GATEWAY_SERVER_INFO } } }));
      return;
    }
    const listeners = this.byRoute.get(view.key) ?? new Set();
    this.byRoute.set(view.key, listeners);
    listeners.add(listener);
    this.open.add(res);
    const stop = new AbortController();
    this.followSubscriptions(view, honored.resourceSubscriptions ?? [], head, listener, stop.signal);
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
    res.on('close', () => {
      clearInterval(keepalive);
      stop.abort();
      listeners.delete(listener);
      this.open.delete(res);
    });
  }

  /** Tells every listener of this route that asked for them which of its lists changed. */
  listsChanged(route: string, lists: ListKind[]): void {
    const listeners = this.byRoute.get(route);
    if (!listeners?.size || lists.length === 0) return;
    for (const listener of listeners) {
      const methods = new Set(lists.filter((kind) => listener.honored[HONORS[kind]]).map((kind) => LIST_CHANGED_METHODS[kind]));
      for (const method of methods) listener.write({ method });
    }
  }

  close(): void {
    for (const res of this.open) res.end();
  }

  /** One backend stream for each backend the subscribed URIs name, relaying its updates of those URIs. */
  private followSubscriptions(view: RouteCatalogView, uris: string[], head: RequestHead, listener: Listener, signal: AbortSignal): void {
    const byBackend = new Map<string, Map<string, string>>();
    for (const uri of uris) {
      const split = splitResourceUri(uri)!;
      const backend = view.backendsBySchemeName.get(split.schemeName)!;
      const owns = byBackend.get(backend.name) ?? new Map<string, string>();
      owns.set(split.own, uri);
      byBackend.set(backend.name, owns);
    }
    for (const [name, owns] of [...byBackend].slice(0, this.backendStreams.limits.perSession)) {
      const backendNow = () => {
        const backend = this.context.lookup(view.key)?.backends.get(name);
        return backend && followsSubscriptions(backend) ? backend : undefined;
      };
      const onUpdate = (message: unknown) => {
        const params = isObject(message) && message.method === 'notifications/resources/updated' && isObject(message.params) ? message.params : undefined;
        const exposed = typeof params?.uri === 'string' ? owns.get(params.uri) : undefined;
        if (exposed !== undefined) listener.write({ method: 'notifications/resources/updated', params: { ...params, uri: exposed } });
      };
      const held = backendNow()?.protocolVersion === MODERN_PROTOCOL_VERSION
        ? this.backendStreams.hold(backendNow, view.key, (attemptSignal) => this.listenModern(backendNow()!, [...owns.keys()], head, onUpdate, view.key, attemptSignal), signal)
        : this.followInOwnSession(backendNow, view.key, [...owns.keys()], head, onUpdate, signal);
      if (!held) this.log.warn('a listen follows fewer backends than its subscriptions name: this sidecar holds its most backend streams', { route: view.key });
    }
  }

  /**
   * A backend of a session-based revision: a backend session of the listen's own (the client's
   * subscriptions are its alone), subscribed to each URI, and its GET stream; ended with the listen.
   */
  private followInOwnSession(backendNow: () => BackendView | undefined, route: string, owns: string[], head: RequestHead, onUpdate: (message: unknown) => void, signal: AbortSignal): boolean {
    const caller = clientOf(head);
    let opened: { backend: BackendView; id: string } | undefined;
    const attempt = async (attemptSignal: AbortSignal): Promise<StreamEnd> => {
      const backend = backendNow()!;
      if (!opened) {
        const id = await this.context.backendSessions.open(backend, { protocolVersion: LATEST_PROTOCOL_VERSION, clientInfo: GATEWAY_SERVER_INFO, clientCapabilities: {} }, caller);
        opened = { backend, id };
        const onBehalf = { backendSessionId: id, protocolVersion: LATEST_PROTOCOL_VERSION, caller };
        for (const [index, uri] of owns.entries()) {
          const answer = await this.context.backendSessions.relay(backend, onBehalf, JSON.stringify({ jsonrpc: '2.0', id: index + 1, method: 'resources/subscribe', params: { uri } }));
          if (answer.status >= 400) throw new Error(`HTTP ${answer.status}: resources/subscribe was refused`);
        }
      }
      const init = { method: 'GET', headers: { accept: 'text/event-stream', 'mcp-session-id': opened.id, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION } };
      return this.backendStreams.stream(backend, caller, init, attemptSignal, async (response, streamSignal): Promise<StreamEnd> => {
        if (response.status === 405) return 'done';
        if (response.status === 404 || response.status === 400) {
          // The backend lost the session, and the subscriptions with it: a new one subscribes again.
          opened = undefined;
          return 'retry';
        }
        await this.backendStreams.relayAll(response, backend, route, streamSignal, (_relayed, message) => onUpdate(message));
        return 'opened';
      });
    };
    signal.addEventListener(
      'abort',
      () => {
        if (!opened) return;
        const { backend, id } = opened;
        this.context.backendSessions.close(backend, { backendSessionId: id, protocolVersion: LATEST_PROTOCOL_VERSION, caller }).catch((error: Error) =>
          this.log.warn('could not end a listen’s backend session; the backend expires it', { route, backend: backend.name, error: error.message }),
        );
      },
      { once: true },
    );
    return this.backendStreams.hold(backendNow, route, attempt, signal);
  }

  /** A backend of the stateless revision: a subscriptions/listen of the gateway's own for the backend's URIs. */
  private listenModern(backend: BackendView, owns: string[], head: RequestHead, onUpdate: (message: unknown) => void, route: string, signal: AbortSignal): Promise<StreamEnd> {
    const body = {
      jsonrpc: '2.0',
      id: 1,
      method: 'subscriptions/listen',
      params: {
        notifications: { resourceSubscriptions: owns },
        _meta: { [MODERN_META.protocolVersion]: MODERN_PROTOCOL_VERSION, [MODERN_META.clientCapabilities]: {}, [MODERN_META.clientInfo]: GATEWAY_SERVER_INFO },
      },
    };
    const init = {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': MODERN_PROTOCOL_VERSION,
        'mcp-method': 'subscriptions/listen',
      },
      body: JSON.stringify(body),
    };
    return this.backendStreams.stream(backend, clientOf(head), init, signal, async (response, streamSignal): Promise<StreamEnd> => {
      await this.backendStreams.relayAll(response, backend, route, streamSignal, (_relayed, message) => onUpdate(message));
      return 'opened';
    });
  }
}
