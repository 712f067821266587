import { z } from 'zod';
import { CHECK_HEADERS, CHECK_STATUS } from '../xds/translate/settings';
import { failedOutcome } from './call-response';
import { ownerOf } from '../auth/caller-identity';
import { GATEWAY_SERVER_INFO, GatewayContext, RequestHead, SESSION_HEADER, callerOf, clientHeadersOf, sessionNotFound } from './decision';
import { JSON_RPC, JsonRpcId, jsonRpcError } from './json-rpc';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { BackendView, RouteCatalogView } from './route-catalog';
import { claimOpenedBackendSession } from './sessions/backend-session-claim';
import { GatewaySession } from './sessions/session-store';

/**
 * The call lane's session check (docs/adr/0008-data-path-lanes.md): Envoy asks it, over HTTP, before
 * it sends a tools/call that needs per-call state — a call in a gateway session, or a stateless
 * client's call for a backend that hands out sessions. It answers from memory and the session store,
 * opening the backend's own session on first use, and never holds the call itself.
 */


export interface CheckAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * What Envoy tells the check (the call script's verdict, from its metadata): read by hand rather than
 * through a schema, since this runs on every call in a session.
 */
interface CheckRequest {
  route: string;
  backend: string;
  tool: string;
  rpcId: JsonRpcId;
  /** By when the check must have answered (ms), before Envoy gives up on it. */
  deadlineMs?: number;
}

function checkRequestOf(head: RequestHead): CheckRequest | string {
  const route = head.headers.get(CHECK_HEADERS.route);
  const backend = head.headers.get(CHECK_HEADERS.backend);
  const tool = head.headers.get(CHECK_HEADERS.tool) ?? '';
  const rpcIdJson = head.headers.get(CHECK_HEADERS.rpcId);
  const missing = [!route && CHECK_HEADERS.route, !backend && CHECK_HEADERS.backend, rpcIdJson === undefined && CHECK_HEADERS.rpcId].filter(Boolean);
  if (missing.length > 0) return `${missing.join(', ')} missing`;
  let rpcId: unknown;
  try {
    rpcId = JSON.parse(rpcIdJson!);
  } catch {
    rpcId = undefined;
  }
  if (typeof rpcId !== 'string' && typeof rpcId !== 'number' && rpcId !== null) return `${CHECK_HEADERS.rpcId} is not a JSON-RPC id`;
  const deadline = head.headers.get(CHECK_HEADERS.deadline);
  const deadlineMs = deadline === undefined ? undefined : Number(deadline);
  if (deadlineMs !== undefined && !(Number.isInteger(deadlineMs) && deadlineMs > 0)) return `${CHECK_HEADERS.deadline} is not a number of ms`;
  return { route: route!, backend: backend!, tool, rpcId, deadlineMs };
}

const ALLOW_UNCHANGED: CheckAnswer = { status: CHECK_STATUS.ALLOW, headers: {}, body: '' };

/**
 * The call goes without the client's gateway session id, which means nothing to a backend. The
 * gateway session is named, so that the call script remembers this answer for the session's next calls.
 */
const allowWithoutSession = (gatewaySessionId: string): CheckAnswer => ({
  status: CHECK_STATUS.ALLOW,
  headers: { 'x-envoy-auth-headers-to-remove': SESSION_HEADER, [CHECK_HEADERS.gatewaySession]: gatewaySessionId },
  body: '',
});

function allowInBackendSession(backendSessionId: string, gatewaySessionId: string): CheckAnswer {
  return {
    status: CHECK_STATUS.ALLOW,
    headers: { [SESSION_HEADER]: backendSessionId, [CHECK_HEADERS.backendSession]: backendSessionId, [CHECK_HEADERS.gatewaySession]: gatewaySessionId },
    body: '',
  };
}

const answer = (status: number, body: unknown): CheckAnswer => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/**
 * The revision of pooled backend sessions: the last one in which a server never closes a call's
 * stream expecting the client to reconnect (SEP-1699 came with 2025-11-25). A stateless client cannot
 * reconnect (2026-07-28 has no event ids), and Envoy carries its call. The call script sends the same
 * version header (POOLED_SESSION_VERSION in call-lane.lua). docs/adr/0018-stream-relaying.md.
 */
export const POOLED_SESSION_VERSION = '2025-06-18';

/**
 * Backend sessions for calls of stateless (2026-07-28) clients to backends of a session-based
 * revision: one per backend and caller on this replica (callers never share a backend session: what a
 * backend keeps in one is that caller's), opened on first use with the gateway's own client info and
 * no capabilities (requests from the backend to such a client cannot be carried), and replaced when
 * the backend loses it.
 */
export class StatelessCallSessions {
  private readonly byBackend = new Map<string, Promise<string>>();

  constructor(private readonly context: Pick<GatewayContext, 'backendSessions'>) {}

  private keyOf(backend: BackendView, owner: string | undefined): string {
    return `${backend.toolService} ${backend.url} ${owner ?? ''}`;
  }

  get(backend: BackendView, owner: string | undefined, clientHeaders: Record<string, string>): Promise<string> {
    const key = this.keyOf(backend, owner);
    let session = this.byBackend.get(key);
    if (!session) {
      session = this.context.backendSessions.open(backend, { protocolVersion: POOLED_SESSION_VERSION, clientInfo: GATEWAY_SERVER_INFO, clientCapabilities: {} }, clientHeaders);
      session.catch(() => this.byBackend.delete(key));
      this.byBackend.set(key, session);
    }
    return session;
  }

  /** The backend no longer knows this session: the next call opens another. */
  async lost(backend: BackendView, backendSessionId: string): Promise<void> {
    const prefix = this.keyOf(backend, '');
    for (const [key, current] of this.byBackend) {
      if (key.startsWith(prefix) && (await current.catch(() => undefined)) === backendSessionId) this.byBackend.delete(key);
    }
  }
}

/**
 * The backend's own session for this gateway session, opened on first use and recorded for every
 * replica; undefined when the gateway session ended meanwhile.
 */
export async function backendSessionFor(session: GatewaySession, backend: BackendView, head: RequestHead, context: GatewayContext): Promise<string | undefined> {
  const known = session.backends[backend.name];
  if (known !== undefined) return known;
  const clientHeaders = clientHeadersOf(head);
  const opened = await context.backendSessions.open(backend, session, clientHeaders);
  const claim = await claimOpenedBackendSession(context, backend, session, { backendSessionId: opened, protocolVersion: session.protocolVersion, clientHeaders });
  return claim.kind === 'claimed' ? claim.backendSessionId : undefined;
}

export async function checkCall(head: RequestHead, context: GatewayContext, statelessSessions: StatelessCallSessions): Promise<CheckAnswer> {
  const startedAt = performance.now();
  const request = checkRequestOf(head);
  if (typeof request === 'string') return answer(400, jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `session check: ${request}`));
  const { rpcId: id, backend: backendName, tool, route, deadlineMs } = request;
  const view = context.lookup(route);
  const backend = view?.backends.get(backendName);
  if (!view || !backend) {
    // Envoy was told of this backend before this sidecar's catalog was: a moment, at most.
    return answer(CHECK_STATUS.JSON_RPC_ERROR, jsonRpcError(id, JSON_RPC.INTERNAL_ERROR, `backend "${backendName}" is being added to the gateway: call again`));
  }
  const decided = decideCall(head, request, view, backend, context, statelessSessions, startedAt);
  if (deadlineMs === undefined) return decided;
  // Envoy gives up on the check at its timeout: answered before it, a backend too slow to open its
  // session is named as such (-32004), never taken for the sidecar being away. The session still
  // opening is kept for the next call once it is open (or ended at the backend, claimOpenedBackendSession).
  let timer: NodeJS.Timeout | undefined;
  const tooSlow = new Promise<CheckAnswer>((resolve) => {
    timer = setTimeout(() => {
      const reason = `its session was not open after ${deadlineMs} ms`;
      const message = `backend ${backend.name} could not open a session in time: tools/call ${tool} failed (${reason})`;
      resolve(answer(CHECK_STATUS.JSON_RPC_ERROR, jsonRpcError(id, BACKEND_UNAVAILABLE_CODE, message, failedOutcome(backend.name, tool, startedAt, reason))));
    }, deadlineMs);
  });
  try {
    return await Promise.race([decided, tooSlow]);
  } finally {
    clearTimeout(timer);
  }
}

async function decideCall(
  head: RequestHead,
  { rpcId: id, tool, route }: CheckRequest,
  view: RouteCatalogView,
  backend: BackendView,
  context: GatewayContext,
  statelessSessions: StatelessCallSessions,
  startedAt: number,
): Promise<CheckAnswer> {
  const statelessBackend = backend.protocolVersion === MODERN_PROTOCOL_VERSION;
  const sessionId = head.headers.get(SESSION_HEADER);
  const owner = ownerOf(callerOf(head, view));
  try {
    if (sessionId === undefined) {
      // A stateless client: the call script asks only when the backend needs a session.
      if (statelessBackend) return ALLOW_UNCHANGED;
      const pooled = await statelessSessions.get(backend, owner, clientHeadersOf(head));
      return pooled ? allowInBackendSession(pooled, '') : ALLOW_UNCHANGED;
    }
    const session = await context.sessions.get(sessionId);
    const notFound = () => {
      const { status, headers, body } = sessionNotFound(id);
      return { status, headers, body };
    };
    // Another route's session, or another caller's (or a session with an owner presented without a token): unknown here.
    if (!session || session.route !== route || session.owner !== owner) return notFound();
    if (statelessBackend) return allowWithoutSession(session.id);
    const backendSessionId = await backendSessionFor(session, backend, head, context);
    if (backendSessionId === undefined) return notFound();
    return backendSessionId ? allowInBackendSession(backendSessionId, session.id) : allowWithoutSession(session.id);
  } catch (error) {
    const reason = (error as Error).message;
    if (/session store/.test(reason)) {
      return answer(503, jsonRpcError(id, JSON_RPC.INTERNAL_ERROR, `gateway error: ${reason}`));
    }
    context.log.warn('could not open a backend session for a call', { backend: backend.name, error: reason });
    const message = `backend ${backend.name} could not open a session: tools/call ${tool} failed (${reason})`;
    return answer(CHECK_STATUS.JSON_RPC_ERROR, jsonRpcError(id, BACKEND_UNAVAILABLE_CODE, message, failedOutcome(backend.name, tool, startedAt, reason)));
  }
}

/** The call script's report of a backend that lost the session a call went in: forgotten, so the next call opens a new one. */
export const lostSessionSchema = z.object({
  route: z.string(),
  backend: z.string(),
  backendSessionId: z.string().min(1),
  gatewaySessionId: z.string(),
});

export async function forgetLostSession(report: z.output<typeof lostSessionSchema>, context: GatewayContext, statelessSessions: StatelessCallSessions): Promise<void> {
  const backend = context.lookup(report.route)?.backends.get(report.backend);
  if (!backend) return;
  if (report.gatewaySessionId) await context.sessions.forgetBackend(report.gatewaySessionId, backend.name, report.backendSessionId);
  else await statelessSessions.lost(backend, report.backendSessionId);
}

