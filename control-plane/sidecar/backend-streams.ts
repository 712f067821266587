import { describeListingFailure } from '../catalog/tool-fetcher';
import { backendFetch } from '../shared/backend-fetch';
import { RelayedMessage, relayBackendMessage } from './backend-messages';
import { GatewayContext, RequestHead, clientHeadersOf } from './decision';
import { JsonObject } from './json-rpc';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { BackendView, ListKind } from './route-catalog';
import { backendSessionFor } from './session-check';
import { readEvents } from './sessions/backend-sessions';
import { GatewaySession } from './sessions/session-store';

/**
 * The backends' own standalone streams, listened to on a client's behalf while the client holds its
 * own GET stream (docs/adr/0015-federated-resources-and-prompts.md): each backend of the route that
 * keeps sessions gets the client's session (opened now where there is none yet, and recorded for every
 * replica) and a GET stream in it; what the backend sends there reaches the client's stream
 * (backend-messages.ts). Bounded per gateway session and per replica; nothing is opened for a client
 * that holds no stream, and everything is closed when its last stream closes.
 */

/** What the sidecar tells the control plane about a backend it heard from (catalog-subscriber.ts). */
export interface BackendReports {
  /** The backend says one of its lists changed: list it again. */
  listChanged(backend: BackendView, list: ListKind, route: string): void;
  /** A stream to the backend failed (it could not be reached): serve it degraded at once. */
  failed(backend: BackendView, reason: string, route: string): void;
}

export interface BackendStreamLimits {
  /** Backend streams one gateway session may hold. */
  perSession: number;
  /** Backend streams this replica holds over all sessions. */
  total: number;
}

export const BACKEND_STREAM_DEFAULTS: BackendStreamLimits = { perSession: 32, total: 2000 };

/** After a stream failed or ended, the next attempt waits 1 s, doubling up to 30 s (reset by a stream that opened). */
const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30_000;
/** The longest a backend may take to answer the GET that opens its stream (the stream itself may stay silent). */
const OPEN_TIMEOUT_MS = 10_000;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });

/** A backend the gateway can hold a standalone stream to: one of a session-based revision that keeps sessions. */
export const hasStandaloneStream = (backend: BackendView) => backend.protocolVersion !== MODERN_PROTOCOL_VERSION && backend.sessionful;

export class BackendStreams {
  private held = 0;
  private warnedFull = false;

  constructor(
    private readonly context: GatewayContext,
    private readonly limits: BackendStreamLimits,
    private readonly reports: BackendReports,
  ) {}

  /** Backend streams this replica holds now. */
  get open(): number {
    return this.held;
  }

  /**
   * Listens to every backend of the session's route on the client's behalf, handing what they send to
   * `deliver`, until the returned stop is called.
   */
  follow(session: GatewaySession, head: RequestHead, deliver: (message: JsonObject) => void): () => void {
    const stop = new AbortController();
    const view = this.context.lookup(session.route);
    const backends = [...(view?.backends.values() ?? [])].filter(hasStandaloneStream).slice(0, this.limits.perSession);
    for (const backend of backends) {
      if (this.held >= this.limits.total) {
        if (!this.warnedFull) this.context.log.warn('this sidecar holds its most backend streams: some clients hear nothing from some backends outside their requests', { limit: this.limits.total });
        this.warnedFull = true;
        break;
      }
      this.held++;
      void this.followOne(session, backend.name, head, deliver, stop.signal).finally(() => {
        this.held--;
        if (this.held < this.limits.total) this.warnedFull = false;
      });
    }
    return () => stop.abort();
  }

  private async followOne(session: GatewaySession, name: string, head: RequestHead, deliver: (message: JsonObject) => void, signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      const backend = this.context.lookup(session.route)?.backends.get(name);
      // Gone from the route, or no longer one that keeps sessions: nothing to listen to.
      if (!backend || !hasStandaloneStream(backend)) return;
      const ended = backend.state === 'missing' ? 'retry' : await this.listenOnce(session, backend, head, deliver, signal).catch((error: unknown) => error as Error);
      if (ended === 'done') return;
      if (ended instanceof Error && !signal.aborted) {
        failures++;
        const reason = describeListingFailure(ended, OPEN_TIMEOUT_MS);
        this.context.log.warn('a backend stream failed; trying again', { route: session.route, backend: name, error: reason });
        this.reports.failed(backend, reason, session.route);
      } else if (ended === 'opened') {
        failures = 0;
      }
      await sleep(Math.min(RETRY_MIN_MS * 2 ** failures, RETRY_MAX_MS), signal);
    }
  }

  /**
   * One GET stream in the client's session with the backend, read until it ends. 'done': the backend
   * offers no stream, or the gateway session ended; 'opened': it was open and ended; 'retry': it
   * could not be opened this time (the backend lost its session, which is forgotten).
   */
  private async listenOnce(gateway: GatewaySession, backend: BackendView, head: RequestHead, deliver: (message: JsonObject) => void, signal: AbortSignal): Promise<'done' | 'opened' | 'retry'> {
    // Read anew: another replica may have opened this backend's session meanwhile.
    const session = await this.context.sessions.get(gateway.id);
    if (!session) return 'done';
    const backendSessionId = await backendSessionFor(session, backend, head, this.context);
    // The gateway session ended meanwhile, or the backend runs without sessions after all.
    if (!backendSessionId) return 'done';
    // The stream lives as long as the client's; only its opening is bounded.
    const stream = new AbortController();
    const stop = () => stream.abort();
    signal.addEventListener('abort', stop, { once: true });
    const opening = setTimeout(() => stream.abort(new DOMException(`no answer in ${OPEN_TIMEOUT_MS} ms`, 'TimeoutError')), OPEN_TIMEOUT_MS);
    try {
      return await this.read(session, backend, backendSessionId, head, deliver, stream.signal, () => clearTimeout(opening));
    } finally {
      clearTimeout(opening);
      signal.removeEventListener('abort', stop);
      stream.abort();
    }
  }

  private async read(
    session: GatewaySession,
    backend: BackendView,
    backendSessionId: string,
    head: RequestHead,
    deliver: (message: JsonObject) => void,
    signal: AbortSignal,
    opened: () => void,
  ): Promise<'opened' | 'done' | 'retry'> {
    const response = await backendFetch(backend.tls)(backend.url, {
      method: 'GET',
      headers: { ...clientHeadersOf(head), accept: 'text/event-stream', 'mcp-session-id': backendSessionId, 'mcp-protocol-version': session.protocolVersion },
      signal,
    });
    opened();
    if (response.status === 405) {
      await response.body?.cancel();
      return 'done';
    }
    if (response.status === 404 || response.status === 400) {
      await response.body?.cancel();
      await this.context.sessions.forgetBackend(session.id, backend.name, backendSessionId);
      return 'retry';
    }
    if (!response.ok || !(response.headers.get('content-type') ?? '').includes('text/event-stream') || !response.body) {
      await response.body?.cancel();
      throw new Error(`HTTP ${response.status}: the backend's standalone stream could not be opened`);
    }
    const reader = readEvents(response.body, (event) => {
      if (event.data.trim() === '') return;
      let relayed: RelayedMessage;
      try {
        relayed = relayBackendMessage(JSON.parse(event.data), backend);
      } catch {
        return;
      }
      if (relayed.kind === 'deliver') deliver(relayed.message);
      else if (relayed.kind === 'list-changed') this.reports.listChanged(backend, relayed.list, session.route);
    });
    await reader.catch((error: Error) => {
      if (!signal.aborted) throw error;
    });
    return 'opened';
  }
}
