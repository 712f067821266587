import { Logger } from '../shared/log';
import { CallOutcomeName, ProxiedToolCall } from './call-response';
import { JsonRpcId, jsonRpcError } from './json-rpc';
import { BackendView, RouteCatalogView } from './route-catalog';
import { BackendAnswer, OnBehalf } from './sessions/backend-sessions';
import { GatewaySession, SessionStore } from './sessions/session-store';

/** The vocabulary of the sidecar's decisions: what it is asked, what it answers, what it decides with. */

/** The sidecar's answer to one request: answer it here, or send it on to exactly one backend. */
export type Decision =
  | { kind: 'respond'; status: number; headers: Record<string, string>; body: string; reason: string; metadata?: RequestMetadata }
  | {
      kind: 'forward';
      cluster: string;
      /** The body to send on; none for a request without one. */
      body?: string;
      headers: Record<string, string>;
      /** Client headers that must not reach the backend (a gateway session id the backend does not know). */
      removeHeaders: string[];
      metadata: RequestMetadata;
      /** Set for a tools/call: its response is annotated with the call's outcome on the way back. */
      toolCall?: ToolCallForward;
    }
  | { kind: 'read-body' };

/**
 * What the sidecar tells Envoy about a request, as dynamic metadata: the access log and the JSON-RPC
 * local replies (docs/errors.md) read it.
 */
export interface RequestMetadata {
  route?: string;
  method?: string;
  rpc_id?: JsonRpcId;
  backend?: string;
  tool?: string;
  /** Text of the degraded result Envoy answers with if every attempt of a read-only tool fails. */
  fallback?: string;
  /** The call's outcome, once the gateway knows it (docs/errors.md). */
  outcome?: CallOutcomeName;
}

/** A tools/call on its way to one backend, as the response path needs it. */
export interface ToolCallForward extends ProxiedToolCall {
  route: string;
  backendView: BackendView;
  /** The forwarded body, to send again if the backend no longer knows the session it went in. */
  body: string;
  /** The backend session the call went in, if any. */
  session?: { gateway: GatewaySession; backendSessionId: string };
  /** The tool's own deadline, if it has one. */
  timeoutMs?: number;
}

export interface RequestHead {
  method: string;
  path: string;
  headers: Map<string, string>;
}

export const GATEWAY_SERVER_INFO = { name: 'mcp-federation-gateway', version: '0.1.0' };

const JSON_HEADERS = { 'content-type': 'application/json' };

export type Respond = Extract<Decision, { kind: 'respond' }>;

export function respondJson(status: number, payload: unknown, reason: string, headers: Record<string, string> = {}): Respond {
  return { kind: 'respond', status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(payload), reason };
}

export function respondError(status: number, id: JsonRpcId, code: number, message: string, reason: string, headers?: Record<string, string>) {
  return respondJson(status, jsonRpcError(id, code, message), reason, headers);
}

/** What the sidecar decides with: the in-memory catalog, the session store and the backends' sessions. */
export interface GatewayContext {
  lookup(routeKey: string): RouteCatalogView | undefined;
  /** Whether the sidecars hold clients' GET streams (tools/list_changed); without, GET is answered 405. */
  streams: boolean;
  sessions: SessionStore;
  /** Requests the sidecar makes to a backend itself, on the client's behalf (with the client's own headers). */
  backendSessions: {
    open(backend: BackendView, session: GatewaySession, clientHeaders: Record<string, string>): Promise<string>;
    close(backend: BackendView, onBehalf: OnBehalf): Promise<void>;
    notify(backend: BackendView, onBehalf: OnBehalf, notification: unknown): Promise<void>;
    resend(backend: BackendView, onBehalf: OnBehalf, body: string, timeoutMs: number): Promise<BackendAnswer>;
  };
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

/** Headers of the hop itself, or the gateway's own: not what a request made on the client's behalf carries. */
const NOT_ON_BEHALF = /^(:|host$|content-length$|content-type$|accept$|connection$|keep-alive$|transfer-encoding$|te$|upgrade$|mcp-session-id$|mcp-protocol-version$|x-envoy-|x-mcpgw-)/;

/**
 * The client's own headers (Authorization, traceparent, tracestate, …) for a request the sidecar makes
 * to a backend on the client's behalf: such a request must look to the backend like the client's own.
 */
export function clientHeadersOf(head: RequestHead): Record<string, string> {
  return Object.fromEntries([...head.headers].filter(([name]) => !NOT_ON_BEHALF.test(name)));
}
