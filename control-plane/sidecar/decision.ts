import type { ConcurrencySlots } from '../quotas/concurrency-slots';
import { CallerIdentity, callerIdentityOf } from '../auth/caller-identity';
import type { BackendCredentialsProvider } from '../credentials/backend-credentials';
import { Logger } from '../shared/log';
import { CallOutcome, CallOutcomeName } from './call-response';
import { JsonRpcId, jsonRpcError } from './json-rpc';
import { BackendView, RouteCatalogView } from './route-catalog';
import { BackendAnswer, BackendSessionFields, OnBehalf } from './sessions/backend-sessions';
import { GatewaySession, SessionStore } from './sessions/session-store';
import type { HonoredFilter } from './subscriptions-listen';

/** The vocabulary of the sidecar's decisions: what it is asked, what it answers, what it decides with. */

/**
 * The sidecar's answer to one request of the gateway lane (docs/adr/0008-data-path-lanes.md): answer
 * it here, read its body first, hold it as the client's standalone stream, or pass a client's answer
 * on to the backend that asked.
 */
export type Decision =
  | { kind: 'respond'; status: number; headers: Record<string, string>; body: ResponseBody; reason: string; metadata?: RequestMetadata }
  | { kind: 'read-body' }
  | { kind: 'stream'; session: GatewaySession; head: RequestHead }
  | { kind: 'resume'; session: GatewaySession; backend: BackendView; resumption: Resumption; head: RequestHead }
  | { kind: 'listen'; view: RouteCatalogView; id: JsonRpcId; honored: HonoredFilter; head: RequestHead }
  | { kind: 'relay'; backend: BackendView; onBehalf: OnBehalf; body: string };

/** A stream resumed at its backend (docs/adr/0018-stream-relaying.md). */
export interface Resumption {
  /** The backend's own id of the last event the client saw. */
  lastEventId: string;
  /** The id the client is given for one of the backend's events. */
  eventIdFor(backendEventId: string): string;
  /** What the client gets when the backend cannot resume the stream (a call's: its JSON-RPC error); without it, an HTTP error. */
  unresumable?: { status: number; headers: Record<string, string>; body: string };
  /** A call's stream: the outcome its answer gets, as the call script gives it (undefined: none). */
  outcomeOf?(lastError?: string): CallOutcome | undefined;
}

/** What the sidecar knows of a request it answered, for its metrics and logs. */
export interface RequestMetadata {
  route?: string;
  method?: string;
  rpc_id?: JsonRpcId;
  backend?: string;
  tool?: string;
  outcome?: CallOutcomeName;
}

export interface RequestHead {
  method: string;
  path: string;
  headers: Map<string, string>;
}

/**
 * A body that goes out in parts, one after another, never joined (tools-list.ts listBody): a whole
 * list's entries are the catalog's own bytes, shared by every answer of a catalog version. Joined, each
 * answer of a 5,000-tool list made a 1.74 MB copy outside V8's heap, and that memory's pressure made
 * V8 mark and compact the whole heap every few answers (docs/adr/0008-data-path-lanes.md, "List answers").
 */
export class PartedBody {
  /** In bytes, as a Buffer's length. */
  readonly length: number;

  constructor(readonly parts: readonly Buffer[]) {
    this.length = parts.reduce((sum, part) => sum + part.length, 0);
  }

  /** The whole body as text (tests and logs; the sidecar never joins it to answer). */
  toString(): string {
    return Buffer.concat(this.parts).toString('utf8');
  }
}

export type ResponseBody = string | Buffer | PartedBody;

export const GATEWAY_SERVER_INFO = { name: 'mcp-federation-gateway', version: '0.1.0' };

const JSON_HEADERS = { 'content-type': 'application/json' };

export type Respond = Extract<Decision, { kind: 'respond' }>;
/** An answer serialized here, as text (errors and small results); only list answers come in parts. */
export type TextRespond = Respond & { body: string };

export function respondJson(status: number, payload: unknown, reason: string, headers: Record<string, string> = {}): TextRespond {
  return respondBody(status, JSON.stringify(payload), reason, headers);
}

/** A JSON answer already serialized: text, or the parts of a list answer (tools-list.ts listBody). */
export function respondBody<Body extends ResponseBody>(status: number, body: Body, reason: string, headers: Record<string, string> = {}): Respond & { body: Body } {
  return { kind: 'respond', status, headers: { ...JSON_HEADERS, ...headers }, body, reason };
}

export function respondError(status: number, id: JsonRpcId, code: number, message: string, reason: string, headers?: Record<string, string>) {
  return respondJson(status, jsonRpcError(id, code, message), reason, headers);
}

/** What the sidecar decides with: the in-memory catalog, the session store and the backends' sessions. */
export interface GatewayContext {
  lookup(routeKey: string): RouteCatalogView | undefined;
  sessions: SessionStore;
  /**
   * Requests the sidecar makes to a backend itself, on the client's behalf: with the client's own
   * headers, and the backend's credentials for that client (never the client's own Authorization).
   */
  backendSessions: {
    open(backend: BackendView, session: BackendSessionFields, caller: Caller): Promise<string>;
    close(backend: BackendView, onBehalf: OnBehalf): Promise<void>;
    /** A client's notification or answer, posted in the backend session; the backend's HTTP answer. */
    relay(backend: BackendView, onBehalf: OnBehalf, message: string): Promise<BackendAnswer>;
    /** Any other request (a backend stream's GET or POST), with the same headers and credentials. */
    request(backend: BackendView, caller: Caller, init: { method: string; headers: Record<string, string>; body?: string; signal: AbortSignal }): Promise<Response>;
  };
  /** The Authorization each backend gets on a caller's behalf (docs/auth.md, Backends). */
  credentials: Pick<BackendCredentialsProvider, 'authorizationFor' | 'credentialFor'>;
  /** Per-caller concurrency slots (docs/quotas.md), in Redis; absent without --redis. */
  concurrency?: Pick<ConcurrencySlots, 'take'>;
  log: Logger;
}

export const SESSION_HEADER = 'mcp-session-id';
export const PROTOCOL_VERSION_HEADER = 'mcp-protocol-version';
/** A tools/call of a tool the route's policy denies (docs/errors.md). */
export const TOOL_DENIED_CODE = -32003;
/** The code the MCP SDK servers use for an unknown session, with HTTP 404. */
const SESSION_NOT_FOUND = -32001;

/** An unknown, expired, forged or other-route session id: 404, as the spec says, so the client initializes anew. */
export const sessionNotFound = (id: JsonRpcId) =>
  respondError(404, id, SESSION_NOT_FOUND, 'Session not found: initialize a new session', 'session_not_found');

export interface JsonRpcMessage {
  jsonrpc?: unknown;
  id?: JsonRpcId;
  method?: unknown;
  params?: Record<string, unknown>;
}

/**
 * Headers of the hop itself, or the gateway's own, or the caller's credentials (docs/auth.md, Backends):
 * not what a request made on the client's behalf carries as they are.
 */
const NOT_ON_BEHALF = /^(:|host$|content-length$|content-type$|accept$|connection$|keep-alive$|transfer-encoding$|te$|upgrade$|authorization$|mcp-session-id$|mcp-protocol-version$|x-envoy-|x-mcpgw-)/;

/** The client on whose behalf the sidecar makes a request to a backend. */
export interface Caller {
  /** Its own headers (traceparent, tracestate, …): such a request must look to the backend like the client's own. */
  headers: Record<string, string>;
  /** The Authorization it presented: what per-caller backend credentials are made from, never sent on as it is. */
  authorization?: string;
}

export function clientOf(head: RequestHead): Caller {
  const authorization = head.headers.get('authorization');
  return {
    headers: Object.fromEntries([...head.headers].filter(([name]) => !NOT_ON_BEHALF.test(name))),
    ...(authorization !== undefined && { authorization }),
  };
}

/**
 * The caller of a request on a route that takes tokens, as Envoy validated it (docs/auth.md); always
 * undefined on an open route, whatever a client sent.
 */
export function callerOf(head: RequestHead, view: Pick<RouteCatalogView, 'groupsClaim'>): CallerIdentity | undefined {
  return view.groupsClaim ? callerIdentityOf((name) => head.headers.get(name)) : undefined;
}
