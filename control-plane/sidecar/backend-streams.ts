import * as http from 'node:http';
import { EventSourceMessage } from 'eventsource-parser';
import { describeListingFailure } from '../catalog/tool-fetcher';
import { RelayedMessage, exposeResultUris, relayBackendMessage } from './backend-messages';
import { OUTCOME_META_KEY } from './call-response';
import { Caller, GatewayContext, RequestHead, Resumption, clientOf, respondError } from './decision';
import { JSON_RPC, JsonObject, isObject } from './json-rpc';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { BackendView, ListKind } from './route-catalog';
import { readEvents } from './sessions/backend-sessions';
import { GatewaySession, SessionChanges } from './sessions/session-store';
import { RESUME_DONE } from './tool-call';

/**
 * Streams the gateway holds to backends on clients' behalf (docs/adr/0015-federated-resources-and-prompts.md):
 * - while a client of a session-based revision holds its GET stream, each of its backend sessions
 *   (with a backend that keeps sessions) gets a GET stream in it (follow);
 * - while a client of the stateless revision listens (subscriptions/listen), each backend its resource
 *   subscriptions name gets a stream of its own (subscriptions-listen.ts).
 * What a backend sends there reaches the client (backend-messages.ts). Bounded per gateway session and
 * per replica; nothing is opened for a client that holds no stream, and everything is closed when it
 * lets go.
 */

/** What the sidecar tells the control plane about a backend it heard from (catalog-subscriber.ts). */
export interface BackendReports {
  /** The backend says one of its lists changed: list it again. */
  listChanged(backend: BackendView, list: ListKind, route: string): void;
  /** A stream to the backend failed (it could not be reached): serve it degraded at once. */
  failed(backend: BackendView, reason: string, route: string): void;
}

export interface BackendStreamLimits {
  /** Backend streams one gateway session (or one subscriptions/listen) may hold. */
  perSession: number;
  /** Backend streams this replica holds over all clients. */
  total: number;
}

export const BACKEND_STREAM_DEFAULTS: BackendStreamLimits = { perSession: 32, total: 2000 };

/** After a stream failed or ended, the next attempt waits 1 s, doubling up to 30 s (reset by a stream that opened). */
const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30_000;
/** The longest a backend may take to answer the request that opens its stream (the stream itself may stay silent). */
const OPEN_TIMEOUT_MS = 10_000;
/** How often a client's held stream looks for backend sessions it does not listen to yet. */
const FOLLOW_POLL_MS = 1000;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });

/** How one attempt at a backend stream ended: 'done' (nothing more to listen to), 'opened' (it was open, then ended), 'retry'. */
export type StreamEnd = 'done' | 'opened' | 'retry';

/** A backend the gateway can hold a standalone stream to: one of a session-based revision that keeps sessions. */
export const hasStandaloneStream = (backend: BackendView) => backend.protocolVersion !== MODERN_PROTOCOL_VERSION && backend.sessionful;

/**
 * The event id a session client is given for a backend's own in the stream of a method other than
 * tools/call (a call's names the call: tool-call.ts resumeTargetOf): the backend named, so that a GET
 * with it as Last-Event-ID is resumed at that backend, which keeps the events. The call script gives
 * the same (client_event_id in call-lane.lua). docs/adr/0018-stream-relaying.md.
 */
export const clientEventId = (backend: string, eventId: string) => `mcpgw:${backend}:${eventId}`;

/** The messages of a backend's SSE stream, relayed (backend-messages.ts), until the stream ends. */
export async function relayEvents(body: ReadableStream<Uint8Array>, backend: BackendView, onRelayed: (relayed: RelayedMessage, message: unknown) => void): Promise<void> {
  await readEvents(body, (event) => {
    if (event.data.trim() === '') return;
    let message: unknown;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    onRelayed(relayBackendMessage(message, backend), message);
  });
}

/**
 * The answer on a resumed stream as the call script gives a direct one: its result's resource URIs
 * named, and — for a call's stream — the call's outcome in `result._meta` or `error.data` (unless it
 * carries one already), so that a resumed result reads like any other.
 */
export function answerOfResumedCall(message: JsonObject, backend: BackendView, resumption: Pick<Resumption, 'outcomeOf'>): JsonObject {
  if (isObject(message.result)) {
    const result = exposeResultUris(message.result, backend.name);
    const meta = isObject(result._meta) ? result._meta : {};
    const outcome = meta[OUTCOME_META_KEY] === undefined ? resumption.outcomeOf?.() : undefined;
    return { ...message, result: outcome ? { ...result, _meta: { ...meta, [OUTCOME_META_KEY]: outcome } } : result };
  }
  if (isObject(message.error)) {
    const lastError = typeof message.error.message === 'string' ? message.error.message : 'error';
    const data = message.error.data;
    // Error data that is not an object, or that names an outcome already (Envoy's own replies put one at
    // its top, docs/errors.md), is left as it is, as the call script leaves it.
    if (data !== undefined && (!isObject(data) || data.outcome !== undefined || data[OUTCOME_META_KEY] !== undefined)) return message;
    const outcome = resumption.outcomeOf?.(lastError);
    return outcome ? { ...message, error: { ...message.error, data: { ...(data ?? {}), [OUTCOME_META_KEY]: outcome } } } : message;
  }
  return message;
}

/** The GET that resumes a backend's stream after its event `lastEventId`, in one of its sessions (MCP resumability). */
export const resumeRequest = (backendSessionId: string, protocolVersion: string, lastEventId: string) => ({
  method: 'GET',
  headers: { accept: 'text/event-stream', 'mcp-session-id': backendSessionId, 'mcp-protocol-version': protocolVersion, 'last-event-id': lastEventId },
});

export class BackendStreams {
  private held = 0;
  private warnedFull = false;
  /** Per gateway session, each of its clients' held streams' look for backend sessions to listen in (follow). */
  private readonly followers = new Map<string, Set<() => void>>();

  constructor(
    private readonly context: GatewayContext,
    readonly limits: BackendStreamLimits,
    readonly reports: BackendReports,
    changes: SessionChanges,
  ) {
    changes.onChanged((id) => {
      for (const look of this.followers.get(id) ?? []) look();
    });
  }

  /** Backend streams this replica holds now. */
  get open(): number {
    return this.held;
  }

  /**
   * Runs `attempt` again and again until it is done or `signal` aborts, as one of this replica's
   * backend streams: a failed attempt is reported (the backend is served degraded at once) and the
   * next waits longer. False when the replica already holds its most.
   */
  hold(backend: () => BackendView | undefined, route: string, attempt: (signal: AbortSignal) => Promise<StreamEnd>, signal: AbortSignal, ended: () => void = () => undefined): boolean {
    if (!this.occupy()) {
      if (!this.warnedFull) this.context.log.warn('this sidecar holds its most backend streams: some clients hear nothing from some backends outside their requests', { limit: this.limits.total });
      this.warnedFull = true;
      return false;
    }
    void this.keepListening(backend, route, attempt, signal).finally(() => {
      this.vacate();
      ended();
    });
    return true;
  }

  /** Takes one of the replica's backend-stream slots (a held stream, a resume, a pooled call); false when it holds its most. */
  occupy(): boolean {
    if (this.held >= this.limits.total) return false;
    this.held++;
    return true;
  }

  /** Gives back a slot occupy took. */
  vacate(): void {
    this.held--;
    if (this.held < this.limits.total) this.warnedFull = false;
  }

  private async keepListening(backendNow: () => BackendView | undefined, route: string, attempt: (signal: AbortSignal) => Promise<StreamEnd>, signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      const backend = backendNow();
      if (!backend) return;
      const ended = backend.state === 'missing' ? 'retry' : await attempt(signal).catch((error: unknown) => error as Error);
      if (ended === 'done') return;
      if (ended instanceof Error && !signal.aborted) {
        failures++;
        const reason = describeListingFailure(ended, OPEN_TIMEOUT_MS);
        this.context.log.warn('a backend stream failed; trying again', { route, backend: backend.name, error: reason });
        this.reports.failed(backend, reason, route);
      } else if (ended === 'opened') {
        failures = 0;
      }
      await sleep(Math.min(RETRY_MIN_MS * 2 ** failures, RETRY_MAX_MS), signal);
    }
  }

  /**
   * A backend stream's request, on `caller`'s behalf (through Envoy's egress listener, with the
   * backend's credentials for that caller, as every request of the sidecar's): its answer's head must
   * come within OPEN_TIMEOUT_MS, its body lasts until `signal` aborts or the backend ends it. `read`
   * gets the answer; the request is ended when it returns.
   */
  async stream<T>(
    backend: BackendView,
    caller: Caller,
    init: { method: string; headers: Record<string, string>; body?: string },
    signal: AbortSignal,
    read: (response: Response, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const stream = new AbortController();
    const stop = () => stream.abort();
    signal.addEventListener('abort', stop, { once: true });
    const opening = setTimeout(() => stream.abort(new DOMException(`no answer in ${OPEN_TIMEOUT_MS} ms`, 'TimeoutError')), OPEN_TIMEOUT_MS);
    try {
      const response = await this.context.backendSessions.request(backend, caller, { ...init, signal: stream.signal });
      clearTimeout(opening);
      return await read(response, stream.signal);
    } finally {
      clearTimeout(opening);
      signal.removeEventListener('abort', stop);
      stream.abort();
    }
  }

  /**
   * Listens, on the client's behalf, to each backend session the client's gateway session has (opened
   * by its calls, reads, subscriptions or logging/setLevel, on any replica), handing what they send to
   * `deliver`, until the returned stop is called. A backend session opened later is listened in as
   * soon as the replica that recorded it says so (SessionChanges): a backend that asks its client
   * something right after the session opened asks on a stream that is open by then. The gateway
   * session is also read again every FOLLOW_POLL_MS, for a word lost on the way (from the session
   * cache: within the cache's freshness). None is opened for listening alone.
   */
  follow(session: GatewaySession, head: RequestHead, deliver: (message: JsonObject) => void): () => void {
    const stop = new AbortController();
    const followed = new Set<string>();
    const look = async () => {
      const current = await this.context.sessions.get(session.id).catch(() => undefined);
      if (!current) return;
      for (const [name, backendSessionId] of Object.entries(current.backends)) {
        if (stop.signal.aborted || followed.has(name) || !backendSessionId || followed.size >= this.limits.perSession) continue;
        // Gone from the route, or no longer one that keeps sessions: nothing to listen to.
        const backendNow = () => {
          const backend = this.context.lookup(session.route)?.backends.get(name);
          return backend && hasStandaloneStream(backend) ? backend : undefined;
        };
        if (!backendNow()) continue;
        followed.add(name);
        const attempt = () => this.listenInSession(session, name, backendNow()!, head, deliver, stop.signal);
        // When it ends (the backend lost that session), a backend session opened later is followed anew.
        if (!this.hold(backendNow, session.route, attempt, stop.signal, () => followed.delete(name))) followed.delete(name);
      }
    };
    const poll = setInterval(() => void look(), FOLLOW_POLL_MS);
    const told = () => void look();
    const lookers = this.followers.get(session.id) ?? new Set<() => void>();
    this.followers.set(session.id, lookers.add(told));
    void look();
    return () => {
      clearInterval(poll);
      lookers.delete(told);
      if (lookers.size === 0 && this.followers.get(session.id) === lookers) this.followers.delete(session.id);
      stop.abort();
    };
  }

  /**
   * One GET stream in the client's session with the backend, read until it ends. 'done': the backend
   * offers no stream, or the client's session with it ended (the backend lost it: forgotten, so the
   * client's next request opens another, which the follower then finds).
   */
  private async listenInSession(
    gateway: GatewaySession,
    name: string,
    backend: BackendView,
    head: RequestHead,
    deliver: (message: JsonObject) => void,
    signal: AbortSignal,
  ): Promise<StreamEnd> {
    const session = await this.context.sessions.get(gateway.id);
    const backendSessionId = session?.backends[name];
    if (!session || !backendSessionId) return 'done';
    const init = {
      method: 'GET',
      headers: { accept: 'text/event-stream', 'mcp-session-id': backendSessionId, 'mcp-protocol-version': session.protocolVersion },
    };
    return this.stream(backend, clientOf(head), init, signal, async (response, streamSignal) => {
      if (response.status === 405) return 'done';
      if (response.status === 404 || response.status === 400) {
        await this.context.sessions.forgetBackend(session.id, name, backendSessionId);
        return 'done';
      }
      await this.relayAll(response, backend, session.route, streamSignal, (relayed, message) => {
        if (relayed.kind !== 'deliver') return;
        this.expectAnswer(session.id, backend, message);
        deliver(relayed.message);
      });
      return 'opened';
    });
  }

  /**
   * A client's GET with a Last-Event-ID the gateway gave (a call's stream cut, by the client's
   * connection or by the backend, SEP-1699): resumed at the backend that gave the id, in the client's
   * session with it — read fresh, since any replica may have opened it — and relayed until the backend
   * ends it. The backend keeps the events (bounded by its own store); the gateway keeps none, so any
   * replica can resume any stream. Counts as one of this replica's backend streams while it lasts.
   */
  async resume(gateway: GatewaySession, backend: BackendView, resumption: Resumption, head: RequestHead, res: http.ServerResponse): Promise<void> {
    // A call's stream that cannot be resumed gets the call's error (tool-call.ts brokenCallAnswer); another, the HTTP error.
    const refuse = (status: number, message: string) => {
      const refusal = resumption.unresumable ?? respondError(status, null, JSON_RPC.INVALID_REQUEST, message, 'resume_refused');
      res.writeHead(refusal.status, refusal.headers);
      res.end(refusal.body);
    };
    if (!this.occupy()) return refuse(503, 'this gateway replica holds its most backend streams: resume again later');
    try {
      await this.resumeIn(gateway, backend, resumption, head, res, refuse);
    } finally {
      this.vacate();
    }
  }

  private async resumeIn(
    gateway: GatewaySession,
    backend: BackendView,
    resumption: Resumption,
    head: RequestHead,
    res: http.ServerResponse,
    refuse: (status: number, message: string) => void,
  ): Promise<void> {
    const session = await this.context.sessions.get(gateway.id, { fresh: true });
    const backendSessionId = session?.backends[backend.name];
    if (!session || !backendSessionId) return refuse(400, `there is no session with backend "${backend.name}" to resume a stream in`);
    this.context.log.info(`resuming a stream of backend ${backend.name}`, { route: session.route, backend: backend.name });
    const closed = new AbortController();
    res.on('close', () => closed.abort());
    try {
      await this.stream(backend, clientOf(head), resumeRequest(backendSessionId, session.protocolVersion, resumption.lastEventId), closed.signal, async (response) => {
        if (!response.ok || !(response.headers.get('content-type') ?? '').includes('text/event-stream') || !response.body) {
          await response.body?.cancel();
          if (response.status === 404) await this.context.sessions.forgetBackend(session.id, backend.name, backendSessionId);
          return refuse(response.status === 404 ? 404 : 502, `backend ${backend.name} could not resume the stream (HTTP ${response.status})`);
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.flushHeaders();
        await readEvents(response.body, (event) => res.write(this.resumedEvent(event, resumption, session.id, backend, session.route)));
      });
    } catch (error) {
      if (!res.headersSent) refuse(502, `backend ${backend.name} could not resume the stream: ${(error as Error).message}`);
    } finally {
      res.end();
    }
  }

  /**
   * A backend's request passed on to the client: its answer is awaited in the client's session (only
   * an outstanding request's answer goes on, docs/adr/0009-edge-hardening.md). The client may answer
   * before the record lands; the answer waits for it a moment (ANSWER_RECORD_GRACE_MS).
   */
  private expectAnswer(gatewaySessionId: string, backend: BackendView, message: unknown): void {
    if (!isObject(message) || typeof message.method !== 'string' || (typeof message.id !== 'string' && typeof message.id !== 'number')) return;
    this.context.sessions
      .expectAnswer(gatewaySessionId, backend.name, JSON.stringify(message.id))
      .catch((error: Error) => this.context.log.warn("could not record a backend's request to its client; the client's answer will be refused", { backend: backend.name, error: error.message }));
  }

  /**
   * One event of a resumed stream, as the call script would have passed it: the event id named for the
   * gateway, a backend's request under a scoped id, its notifications named (backend-messages.ts), the
   * resource URIs of the call's result named, and the call's answer with its outcome (answerOfResumedCall).
   */
  private resumedEvent(event: EventSourceMessage, resumption: Resumption, gatewaySessionId: string, backend: BackendView, route: string): string {
    let message: unknown;
    try {
      message = event.data.trim() === '' ? undefined : JSON.parse(event.data);
    } catch {
      message = undefined;
    }
    let data = '';
    const answer = isObject(message) && typeof message.method !== 'string';
    if (isObject(message) && answer) {
      data = JSON.stringify(answerOfResumedCall(message, backend, resumption));
    } else if (message !== undefined) {
      const relayed = relayBackendMessage(message, backend);
      if (relayed.kind === 'deliver') {
        this.expectAnswer(gatewaySessionId, backend, message);
        data = JSON.stringify(relayed.message);
      } else if (relayed.kind === 'list-changed') this.reports.listChanged(backend, relayed.list, route);
    }
    // The answer's event is marked done, as the call script marks it: a resume after it has nothing to get.
    const id = answer ? `id: ${RESUME_DONE}\n` : event.id ? `id: ${resumption.eventIdFor(event.id)}\n` : '';
    return `event: ${event.event ?? 'message'}\n${id}data: ${data}\n\n`;
  }

  /**
   * An SSE answer relayed to its end (list changes reported to the control plane). A stream that could
   * not be opened is an error (the backend failed); one that opened and then ended, cleanly or not
   * (a backend ends a session's stream when the session ends), is not.
   */
  async relayAll(response: Response, backend: BackendView, route: string, signal: AbortSignal, onRelayed: (relayed: RelayedMessage, message: unknown) => void): Promise<void> {
    if (!response.ok || !(response.headers.get('content-type') ?? '').includes('text/event-stream') || !response.body) {
      throw new Error(`HTTP ${response.status}: the backend's stream could not be opened`);
    }
    await relayEvents(response.body, backend, (relayed, message) => {
      if (relayed.kind === 'list-changed') this.reports.listChanged(backend, relayed.list, route);
      else onRelayed(relayed, message);
    }).catch((error: Error) => {
      if (!signal.aborted) this.context.log.debug('a backend stream ended', { route, backend: backend.name, error: error.message });
    });
  }
}
