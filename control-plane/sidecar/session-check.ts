import { z } from 'zod';
import { CHECK_HEADERS, CHECK_STATUS } from '../xds/translate/settings';
import { ownerOf } from '../auth/caller-identity';
import { CredentialsDeniedError } from '../credentials/backend-credentials';
import { IdpRefusedError, IdpUnavailableError } from '../credentials/idp-client';
import { deniedOutcome, failedOutcome } from './call-response';
import { Caller, GATEWAY_SERVER_INFO, GatewayContext, RequestHead, SESSION_HEADER, TOOL_DENIED_CODE, callerOf, clientOf, sessionNotFound } from './decision';
import { JSON_RPC, JsonRpcId, jsonRpcError } from './json-rpc';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { BackendView, RouteCatalogView } from './route-catalog';
import { claimOpenedBackendSession } from './sessions/backend-session-claim';
import { GatewaySession } from './sessions/session-store';
import { InFlightRequest, TakeResult, inFlightRequestOf, leaseHeaderOf } from '../quotas/concurrency-slots';
import { LIMIT_EXCEEDED_CODE } from '../xds/translate/local-replies';
import { LIMIT_HEADER } from '../xds/translate/quotas';
import { toolServiceIdOf } from '../ir/gateway-ir';

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
  /** The request's JSON-RPC method: tools/call, or one of a backend's prompts or resources (prompts/get, resources/read, …). */
  method: string;
  /** The tool, prompt or resource URI it names, in the backend's own words. */
  tool: string;
  rpcId: JsonRpcId;
  /** By when the check must have answered (ms), before Envoy gives up on it. */
  deadlineMs?: number;
}

function checkRequestOf(head: RequestHead): CheckRequest | string {
  const route = head.headers.get(CHECK_HEADERS.route);
  const backend = head.headers.get(CHECK_HEADERS.backend);
  const tool = head.headers.get(CHECK_HEADERS.tool) ?? '';
  const method = head.headers.get(CHECK_HEADERS.method) || 'tools/call';
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
  return { route: route!, backend: backend!, method, tool, rpcId, deadlineMs };
}

const allow = (headers: Record<string, string> = {}): CheckAnswer => ({ status: CHECK_STATUS.ALLOW, headers, body: '' });

/**
 * The call goes without the client's gateway session id, which means nothing to a backend. The
 * gateway session is named, so that the call script remembers this answer for the session's next calls.
 */
const allowWithoutSession = (gatewaySessionId: string): CheckAnswer =>
  allow({ 'x-envoy-auth-headers-to-remove': SESSION_HEADER, [CHECK_HEADERS.gatewaySession]: gatewaySessionId });

const allowInBackendSession = (backendSessionId: string, gatewaySessionId: string): CheckAnswer =>
  allow({ [SESSION_HEADER]: backendSessionId, [CHECK_HEADERS.backendSession]: backendSessionId, [CHECK_HEADERS.gatewaySession]: gatewaySessionId });

const answer = (status: number, body: unknown): CheckAnswer => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Pooled backend sessions one replica keeps at most (per-caller ones add up with callers). */
const MAX_POOLED_SESSIONS = 10_000;

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
 * backend keeps in one is that caller's; a backend whose credentials are the caller's may tie it to
 * the user who opened it), opened on first use with the gateway's own client info and no capabilities
 * (requests from the backend to such a client cannot be carried), and replaced when the backend loses it.
 */
export class StatelessCallSessions {
  private readonly pool = new Map<string, Promise<string>>();

  constructor(private readonly context: Pick<GatewayContext, 'backendSessions'>) {}

  private keyOf(backend: BackendView, owner: string | undefined): string {
    return `${backend.toolService} ${backend.url} ${owner ?? ''}`;
  }

  get(backend: BackendView, owner: string | undefined, caller: Caller): Promise<string> {
    const key = this.keyOf(backend, owner);
    let session = this.pool.get(key);
    if (!session) {
      session = this.context.backendSessions.open(backend, { protocolVersion: POOLED_SESSION_VERSION, clientInfo: GATEWAY_SERVER_INFO, clientCapabilities: {} }, caller);
      session.catch(() => this.pool.delete(key));
      this.pool.set(key, session);
      // The oldest goes first; the backend expires what the gateway no longer uses.
      if (this.pool.size > MAX_POOLED_SESSIONS) this.pool.delete(this.pool.keys().next().value!);
    }
    return session;
  }

  /** The backend no longer knows this session: the next call opens another. */
  async lost(backend: BackendView, backendSessionId: string): Promise<void> {
    const prefix = this.keyOf(backend, '');
    for (const [key, current] of this.pool) {
      if (key.startsWith(prefix) && (await current.catch(() => undefined)) === backendSessionId) this.pool.delete(key);
    }
  }
}

/**
 * Backend sessions this replica is opening, by gateway session id and backend name: a client's first
 * calls often come together (a client that fans out), and each would otherwise open a session of its
 * own, one initialize and notifications/initialized after another on the backend, the surplus ones
 * ended again (claimOpenedBackendSession); they wait for the one being opened instead. Gateway session
 * ids are random, so one table serves every context of the process; an entry lives while it opens.
 */
const opening = new Map<string, Promise<string | undefined>>();

/**
 * The backend's own session for this gateway session, opened on first use and recorded for every
 * replica; undefined when the gateway session ended meanwhile.
 */
export async function backendSessionFor(session: GatewaySession, backend: BackendView, head: RequestHead, context: GatewayContext): Promise<string | undefined> {
  const known = session.backends[backend.name];
  if (known !== undefined) return known;
  // A backend whose listing got no session id keeps none: an initialize sent it now would be
  // forgotten with the request that carried it, and the call would go without a session anyway.
  if (!backend.sessionful) return '';
  const key = `${session.id} ${backend.name}`;
  const underway = opening.get(key);
  if (underway) return underway;
  const opened = openAndClaim(session, backend, checkedCaller(head), context).finally(() => opening.delete(key));
  opening.set(key, opened);
  return opened;
}

async function openAndClaim(session: GatewaySession, backend: BackendView, caller: Caller, context: GatewayContext): Promise<string | undefined> {
  const opened = await context.backendSessions.open(backend, session, caller);
  const claim = await claimOpenedBackendSession(context, backend, session, { backendSessionId: opened, protocolVersion: session.protocolVersion, caller });
  return claim.kind === 'claimed' ? claim.backendSessionId : undefined;
}

/** What the call script asks about (a check or a credential request), and the backend it names; or the answer when there is none. */
function checkedBackend(
  head: RequestHead,
  context: GatewayContext,
  what: string,
): { request: CheckRequest; view: RouteCatalogView; backend: BackendView } | CheckAnswer {
  const request = checkRequestOf(head);
  if (typeof request === 'string') return answer(400, jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `${what}: ${request}`));
  const view = context.lookup(request.route);
  const backend = view?.backends.get(request.backend);
  // Envoy was told of this backend before this sidecar's catalog was: a moment, at most.
  if (!view || !backend) {
    return answer(CHECK_STATUS.JSON_RPC_ERROR, jsonRpcError(request.rpcId, JSON_RPC.INTERNAL_ERROR, `backend "${request.backend}" is being added to the gateway: call again`));
  }
  return { request, view, backend };
}

/**
 * The caller a check, a credential request or a gateway-lane request is for: its headers as Envoy
 * sent them, and its own Authorization — on the call lane the one the call script moved aside on
 * routes with per-caller credentials.
 */
function checkedCaller(head: RequestHead): Caller {
  const authorization = head.headers.get(CHECK_HEADERS.callerAuthorization);
  return { ...clientOf(head), ...(authorization !== undefined && { authorization }) };
}

/** Answers (status) the call script passes on as they are: the caller may not (403), or the IdP could not be asked (424). */
export const CREDENTIAL_REFUSED_STATUS = { DENIED: 403, UNAVAILABLE: CHECK_STATUS.JSON_RPC_ERROR } as const;

/**
 * A credentials failure as the caller's answer (docs/errors.md): denied (-32003) when the caller's token
 * cannot be used for the backend or the IdP refused to exchange it, -32004 naming the IdP when it could
 * not be asked. Never the caller's token, nor the IdP's: only what was refused and why.
 */
function credentialsRefusal(error: unknown, call: { id: JsonRpcId; backend: string; method: string; tool: string; startedAt: number }, context: GatewayContext): CheckAnswer | undefined {
  if (error instanceof CredentialsDeniedError || error instanceof IdpRefusedError) {
    const reason = error instanceof IdpRefusedError ? `the caller's token cannot be exchanged for backend ${call.backend}: ${error.message}` : error.message;
    return answer(
      CREDENTIAL_REFUSED_STATUS.DENIED,
      jsonRpcError(call.id, TOOL_DENIED_CODE, `${call.method} ${call.tool} denied: ${reason}`, deniedOutcome(call.backend, call.tool, call.startedAt, reason)),
    );
  }
  if (error instanceof IdpUnavailableError) {
    context.log.warn('a call waits for an identity provider that cannot be asked', { backend: call.backend, idp: error.idp, error: error.message });
    const reason = `${error.message}: backend ${call.backend} was not called`;
    return answer(
      CREDENTIAL_REFUSED_STATUS.UNAVAILABLE,
      jsonRpcError(call.id, BACKEND_UNAVAILABLE_CODE, `${call.method} ${call.tool} failed: ${reason}`, failedOutcome(call.backend, call.tool, call.startedAt, reason)),
    );
  }
  return undefined;
}

/** The header the credential answer says for how long its Authorization may be reused, in ms. */
export const CREDENTIAL_TTL_HEADER = 'x-mcpgw-credential-ttl-ms';

/**
 * A call script's request for a backend's per-caller credentials (token exchange, passthrough): the
 * Authorization the backend gets, as the body, and how long the Envoy worker may keep it; or the
 * caller's answer when the caller may not, or the IdP cannot be asked.
 */
export async function answerBackendCredential(head: RequestHead, context: GatewayContext): Promise<CheckAnswer> {
  const startedAt = performance.now();
  const checked = checkedBackend(head, context, 'credential request');
  if (!('backend' in checked)) return checked;
  const { backend, request: { rpcId: id, method, tool } } = checked;
  try {
    const { authorization, ttlMs } = await context.credentials.credentialFor(backend, checkedCaller(head).authorization);
    if (authorization === undefined) throw new Error(`backend ${backend.name} takes no credentials from its callers`);
    return { status: 200, headers: { 'content-type': 'text/plain', [CREDENTIAL_TTL_HEADER]: String(Math.floor(ttlMs)) }, body: authorization };
  } catch (error) {
    const refused = credentialsRefusal(error, { id, backend: backend.name, method, tool, startedAt }, context);
    if (refused) return refused;
    throw error;
  }
}

export async function checkCall(head: RequestHead, context: GatewayContext, statelessSessions: StatelessCallSessions): Promise<CheckAnswer> {
  const checked = checkedBackend(head, context, 'session check');
  if (!('backend' in checked)) return checked;
  const { view, backend, request } = checked;
  const inFlight = inFlightRequestOf(head.headers.get(CHECK_HEADERS.concurrency), toolServiceIdOf(backend.toolService), request.tool);
  if (typeof inFlight === 'string') return answer(400, jsonRpcError(request.rpcId, JSON_RPC.INVALID_REQUEST, `session check: ${inFlight}`));
  const decided = await decideInTime(head, request, view, backend, context, statelessSessions);
  if (decided.status !== CHECK_STATUS.ALLOW || !inFlight) return decided;
  return withSlots(decided, head, request, view, backend, inFlight, context);
}

/**
 * The call's per-caller concurrency slots (docs/quotas.md), taken once everything else let it go: the
 * lease goes to Envoy's metadata, whose call log gives it back when the call ends. Over a limit:
 * 429 with Retry-After and the JSON-RPC error naming it. Without Redis, or while it cannot be asked,
 * the call goes uncounted (fail open, warned): a fairness limit must not stop every call.
 */
async function withSlots(allowed: CheckAnswer, head: RequestHead, request: CheckRequest, view: RouteCatalogView, backend: BackendView, inFlight: InFlightRequest, context: GatewayContext): Promise<CheckAnswer> {
  if (!context.concurrency) {
    uncountedWarning(context, 'a call is under a per-caller concurrency limit, but this sidecar has no --redis to count it in: not counted', inFlight);
    return allowed;
  }
  const owner = ownerOf(callerOf(head, view));
  const caller = owner === undefined ? `address ${head.headers.get(CHECK_HEADERS.clientAddress) ?? ''}` : `subject ${owner}`;
  let taken: TakeResult;
  try {
    taken = await context.concurrency.take(caller, inFlight);
  } catch (error) {
    uncountedWarning(context, 'concurrency slots could not be taken (Redis): calls go uncounted', inFlight, error as Error);
    return allowed;
  }
  if (taken.taken) return { ...allowed, headers: { ...allowed.headers, [CHECK_HEADERS.concurrencyLease]: leaseHeaderOf(taken.lease) } };
  const { name, inFlight: limit } = taken.limit;
  const body = jsonRpcError(request.rpcId, LIMIT_EXCEEDED_CODE, `concurrency limit reached: ${name} (tools/call in flight at once); retry after ${IN_FLIGHT_RETRY_AFTER_S} s`, {
    outcome: 'limited',
    limit: name,
    in_flight_limit: limit,
    retry_after_s: IN_FLIGHT_RETRY_AFTER_S,
    backend: backend.name,
    tool: request.tool,
  });
  return { status: 429, headers: { 'content-type': 'application/json', 'retry-after': String(IN_FLIGHT_RETRY_AFTER_S), [LIMIT_HEADER]: name }, body: JSON.stringify(body) };
}

/** Uncounted calls are warned of at most every WARNING_INTERVAL_MS: an outage of Redis must not flood the log. */
const WARNING_INTERVAL_MS = 10_000;
let lastWarningAt = -Infinity;
function uncountedWarning(context: GatewayContext, message: string, inFlight: InFlightRequest, error?: Error): void {
  const now = performance.now();
  if (now - lastWarningAt < WARNING_INTERVAL_MS) return;
  lastWarningAt = now;
  context.log.warn(message, { limit: inFlight.limits[0].name, ...(error && { error: error.message }) });
}

/** A caller at its concurrency limit may call again once one of its calls ended: soon, as a rule. */
const IN_FLIGHT_RETRY_AFTER_S = 1;

async function decideInTime(
  head: RequestHead,
  request: CheckRequest,
  view: RouteCatalogView,
  backend: BackendView,
  context: GatewayContext,
  statelessSessions: StatelessCallSessions,
): Promise<CheckAnswer> {
  const startedAt = performance.now();
  const { rpcId: id, method, tool, deadlineMs } = request;
  const decided = decideCall(head, request, view, backend, context, statelessSessions, startedAt);
  if (deadlineMs === undefined) return decided;
  // Envoy gives up on the check at its timeout: answered before it, a backend too slow to open its
  // session is named as such (-32004), never taken for the sidecar being away. The session still
  // opening is kept for the next call once it is open (or ended at the backend, claimOpenedBackendSession).
  let timer: NodeJS.Timeout | undefined;
  const tooSlow = new Promise<CheckAnswer>((resolve) => {
    timer = setTimeout(() => {
      const reason = `its session was not open after ${deadlineMs} ms`;
      const message = `backend ${backend.name} could not open a session in time: ${method} ${tool} failed (${reason})`;
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
  { rpcId: id, method, tool, route }: CheckRequest,
  view: RouteCatalogView,
  backend: BackendView,
  context: GatewayContext,
  statelessSessions: StatelessCallSessions,
  startedAt: number,
): Promise<CheckAnswer> {
  const statelessBackend = backend.protocolVersion === MODERN_PROTOCOL_VERSION;
  const sessionId = head.headers.get(SESSION_HEADER);
  const caller = checkedCaller(head);
  const owner = ownerOf(callerOf(head, view));
  try {
    if (sessionId === undefined) {
      // A stateless client: the call script asks only when the backend needs a session.
      if (statelessBackend) return allow();
      const pooled = await statelessSessions.get(backend, owner, caller);
      return pooled ? allowInBackendSession(pooled, '') : allow();
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
    // Opening the backend's session on the caller's behalf needs its credentials too.
    const refused = credentialsRefusal(error, { id, backend: backend.name, method, tool, startedAt }, context);
    if (refused) return refused;
    const reason = (error as Error).message;
    if (/session store/.test(reason)) {
      return answer(503, jsonRpcError(id, JSON_RPC.INTERNAL_ERROR, `gateway error: ${reason}`));
    }
    context.log.warn('could not open a backend session for a call', { backend: backend.name, error: reason });
    const message = `backend ${backend.name} could not open a session: ${method} ${tool} failed (${reason})`;
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

