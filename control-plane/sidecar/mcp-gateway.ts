import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { Logger } from '../shared/log';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
import { callPolicy } from './call-policy';
import {
  CallOutcomeName,
  JsonResponseRewriter,
  ProxiedToolCall,
  ResponseFacts,
  ResponseRewriter,
  SseResponseRewriter,
  annotateMessage,
  finalOutcome,
  outcomeOf,
  parseServerRequestId,
  saysSessionUnknown,
} from './call-response';
import { JSON_RPC, JsonRpcId, jsonRpcError, jsonRpcResult } from './json-rpc';
import {
  MODERN_META,
  MODERN_PROTOCOL_VERSION,
  MODERN_PROTOCOL_VERSIONS,
  encodeMcpHeaderValue,
  modernRequestProblem,
  modernVersionClaim,
  withoutModernEnvelope,
} from './modern-era';
import { BackendView, RouteCatalogView, resolveTool } from './route-catalog';
import { BackendAnswer, OnBehalf } from './sessions/backend-sessions';
import { GatewaySession, SessionStore } from './sessions/session-store';
import { answerToolsList } from './tools-list';

/** The sidecar's answer to one request: answer it here, or send it on to exactly one backend. */
export type Decision =
  | { kind: 'respond'; status: number; headers: Record<string, string>; body: string; reason: string; metadata?: RequestMetadata }
  | {
      kind: 'forward';
      cluster: string;
      body: string;
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

type Respond = Extract<Decision, { kind: 'respond' }>;

function respondJson(status: number, payload: unknown, reason: string, headers: Record<string, string> = {}): Respond {
  return { kind: 'respond', status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(payload), reason };
}

function respondError(status: number, id: JsonRpcId, code: number, message: string, reason: string, headers?: Record<string, string>) {
  return respondJson(status, jsonRpcError(id, code, message), reason, headers);
}

/** What the sidecar decides with: the in-memory catalog, the session store and the backends' sessions. */
export interface GatewayContext {
  lookup(routeKey: string): RouteCatalogView | undefined;
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

const SESSION_HEADER = 'mcp-session-id';
const PROTOCOL_VERSION_HEADER = 'mcp-protocol-version';
/** A tools/call of a tool the route's policy denies (docs/errors.md). */
export const TOOL_DENIED_CODE = -32003;
/** The code the MCP SDK servers use for an unknown session, with HTTP 404. */
const SESSION_NOT_FOUND = -32001;

const unsupportedVersionHeader = (head: RequestHead) => {
  const version = head.headers.get(PROTOCOL_VERSION_HEADER);
  return version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version);
};

const unsupportedVersion = (head: RequestHead) =>
  respondError(
    400,
    null,
    JSON_RPC.INVALID_REQUEST,
    `unsupported MCP-Protocol-Version "${head.headers.get(PROTOCOL_VERSION_HEADER)}" (supported: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`,
    'unsupported_protocol_version',
  );

/** Extracts the route key from /mcp/{routeKey}; the key comes only from the URI, never from a default. */
export function routeKeyOf(path: string): { key?: string; error?: Decision } {
  const pathOnly = path.split('?', 1)[0];
  const match = /^\/mcp(?:\/([^/]*))?\/?$/.exec(pathOnly);
  if (!match) {
    return { error: respondError(404, null, JSON_RPC.INVALID_REQUEST, 'not an MCP route: use /mcp/{routeKey}', 'not_mcp_path') };
  }
  if (!match[1]) {
    return {
      error: respondError(400, null, JSON_RPC.INVALID_REQUEST, 'route key is required: use /mcp/{routeKey}', 'route_key_required'),
    };
  }
  return { key: decodeURIComponent(match[1]) };
}

/**
 * Decides on the request line and headers. Only well-formed POSTs to a known route go on to the body;
 * a DELETE ends its session here.
 */
export async function decideOnHead(head: RequestHead, context: GatewayContext): Promise<Decision> {
  const { key, error } = routeKeyOf(head.path);
  if (error) return error;
  const view = context.lookup(key!);
  if (!view) {
    return respondError(404, null, JSON_RPC.INVALID_REQUEST, `unknown route key "${key}"`, 'unknown_route');
  }
  // A POST's body says which era it is from, and so how an unknown version is answered (decideOnMessage).
  if (head.method !== 'POST' && unsupportedVersionHeader(head)) return unsupportedVersion(head);
  if (head.method === 'DELETE') return endSession(head, view, context);
  if (head.method !== 'POST') {
    // No standalone SSE stream (GET) is offered: the spec lets a server answer 405.
    return respondError(405, null, JSON_RPC.INVALID_REQUEST, `method ${head.method} is not allowed on this endpoint`, 'method_not_allowed', {
      allow: 'POST, DELETE',
    });
  }
  const contentType = head.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(contentType)) {
    return respondError(415, null, JSON_RPC.INVALID_REQUEST, 'Content-Type must be application/json', 'unsupported_media_type');
  }
  const accept = head.headers.get('accept') ?? '';
  if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
    return respondError(
      406,
      null,
      JSON_RPC.INVALID_REQUEST,
      'Accept must list both application/json and text/event-stream',
      'not_acceptable',
    );
  }
  return { kind: 'read-body' };
}

interface JsonRpcMessage {
  jsonrpc?: unknown;
  id?: JsonRpcId;
  method?: unknown;
  params?: Record<string, unknown>;
}

function negotiatedVersion(requested: unknown): string {
  return typeof requested === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;
}

const sessionNotFound = (id: JsonRpcId) =>
  respondError(404, id, SESSION_NOT_FOUND, 'Session not found: initialize a new session', 'session_not_found');

/** The session a request names, if it names one; `false` when it names one that does not exist here. */
async function sessionOf(head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<GatewaySession | undefined | false> {
  const id = head.headers.get(SESSION_HEADER);
  if (id === undefined) return undefined;
  const session = await context.sessions.get(id);
  // A session belongs to the route it was opened on.
  return session && session.route === view.key ? session : false;
}

/** DELETE: ends the backend sessions, then the gateway session. */
async function endSession(head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const session = await sessionOf(head, view, context);
  if (session === undefined) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'DELETE needs the Mcp-Session-Id of the session to end', 'session_required');
  }
  if (session === false) return sessionNotFound(null);
  await Promise.all(
    Object.entries(session.backends)
      .filter(([, backendSessionId]) => backendSessionId)
      .map(async ([name, backendSessionId]) => {
        const backend = view.backends.get(name);
        if (!backend) return;
        const onBehalf = { backendSessionId, protocolVersion: session.protocolVersion, clientHeaders: clientHeadersOf(head) };
        await context.backendSessions.close(backend, onBehalf).catch((error: Error) =>
          context.log.warn('could not end a backend session', { route: view.key, backend: name, error: error.message }),
        );
      }),
  );
  await context.sessions.remove(session.id);
  return { kind: 'respond', status: 204, headers: {}, body: '', reason: 'session_ended' };
}

/** Decides on the whole JSON-RPC body of a POST whose head passed decideOnHead. */
export async function decideOnBody(head: RequestHead, body: Buffer, context: GatewayContext): Promise<Decision> {
  const view = context.lookup(routeKeyOf(head.path).key!);
  if (!view) return decideOnHead(head, context);
  let message: JsonRpcMessage;
  try {
    message = JSON.parse(body.toString('utf8')) as JsonRpcMessage;
  } catch (error) {
    return respondError(400, null, JSON_RPC.PARSE_ERROR, `Parse error: ${(error as Error).message}`, 'parse_error');
  }
  if (Array.isArray(message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'JSON-RPC batches are not supported', 'batch');
  }
  if (typeof message !== 'object' || message === null || message.jsonrpc !== '2.0') {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC 2.0 message', 'invalid_request');
  }
  const metadata: RequestMetadata = {
    route: view.key,
    ...(typeof message.method === 'string' && { method: message.method }),
    ...(message.id !== undefined && { rpc_id: message.id }),
  };
  const decision = await decideOnMessage(message, head, view, context);
  if (decision.kind === 'read-body') return decision;
  return { ...decision, metadata: { ...metadata, ...decision.metadata } };
}

async function decideOnMessage(message: JsonRpcMessage, head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const versionHeader = head.headers.get(PROTOCOL_VERSION_HEADER);
  if (modernVersionClaim(message.params) !== undefined || (versionHeader !== undefined && MODERN_PROTOCOL_VERSIONS.includes(versionHeader))) {
    return decideModern(message, head, view, context);
  }
  if (unsupportedVersionHeader(head)) return unsupportedVersion(head);
  const id = message.id;
  if (message.method === 'initialize' && id !== undefined) return initializeSession(message, id, view, context);
  const session = await sessionOf(head, view, context);
  if (session === false) return sessionNotFound(id ?? null);
  if (typeof message.method !== 'string') return routeClientResponse(message, view, session);
  if (id === undefined) return relayNotification(message, head, view, session, context);
  switch (message.method) {
    case 'ping':
      return respondJson(200, jsonRpcResult(id, {}), 'ping');
    case 'tools/list': {
      const answer = answerToolsList(view, message.params);
      return answer.ok
        ? respondJson(200, jsonRpcResult(id, answer.result), 'tools_list')
        : respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
    }
    case 'tools/call':
      return decideToolCall(message, id, head, view, { era: 'session', session }, context);
    default:
      return respondError(200, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not supported by this gateway`, 'method_not_found');
  }
}

/** Answers to tools/list and server/discover may be cached this long by clients of the stateless revision. */
const DISCOVER_TTL_MS = 300_000;
/** The catalog changes whenever the registry or a backend does, and the gateway sends no list_changed yet. */
const TOOLS_LIST_TTL_MS = 0;

/**
 * A request of MCP 2026-07-28 (no session; docs/adr/0007-mcp-2026-07-28.md). The gateway answers
 * server/discover and tools/list itself and sends tools/call on to its backend in the session-less
 * form of 2025-11-25, which every backend speaks today.
 */
async function decideModern(message: JsonRpcMessage, head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const id = message.id ?? null;
  if (typeof message.method !== 'string') {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, `protocol ${MODERN_PROTOCOL_VERSION} has no client responses: the gateway sent no request`, 'invalid_request');
  }
  if (modernVersionClaim(message.params) === undefined) {
    return respondError(400, id, JSON_RPC.INVALID_PARAMS, `a ${MODERN_PROTOCOL_VERSION} request carries params._meta["${MODERN_META.protocolVersion}"]`, 'modern_meta_missing');
  }
  const modern = { ...message, method: message.method };
  const problem = modernRequestProblem(modern, head.headers);
  if (problem) return respondJson(problem.status, problem.body, 'modern_request_invalid');
  if (message.id === undefined) return ACCEPTED;
  const serverInfo = { [MODERN_META.serverInfo]: GATEWAY_SERVER_INFO };
  switch (message.method) {
    case 'server/discover':
      return respondJson(
        200,
        jsonRpcResult(id, {
          resultType: 'complete',
          supportedVersions: [MODERN_PROTOCOL_VERSION, ...SUPPORTED_PROTOCOL_VERSIONS],
          capabilities: { tools: { listChanged: false } },
          instructions: `Tools of route "${view.key}", named <backend>${view.toolNameSeparator}<tool>.`,
          ttlMs: DISCOVER_TTL_MS,
          cacheScope: 'public',
          _meta: serverInfo,
        }),
        'server_discover',
      );
    case 'tools/list': {
      const answer = answerToolsList(view, message.params);
      if (!answer.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
      const result = { resultType: 'complete', ...answer.result, ttlMs: TOOLS_LIST_TTL_MS, cacheScope: 'public', _meta: { ...answer.result._meta, ...serverInfo } };
      return respondJson(200, jsonRpcResult(id, result), 'tools_list');
    }
    case 'tools/call':
      return decideToolCall(message, id, head, view, { era: 'stateless' }, context);
    default:
      return respondError(404, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not served in protocol ${MODERN_PROTOCOL_VERSION}`, 'method_not_found');
  }
}

/** The gateway is the client's MCP server: its own capabilities, and a session of its own. */
async function initializeSession(message: JsonRpcMessage, id: JsonRpcId, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const protocolVersion = negotiatedVersion(message.params?.protocolVersion);
  const session = await context.sessions.create({
    route: view.key,
    protocolVersion,
    clientInfo: (message.params?.clientInfo as Record<string, unknown>) ?? {},
    clientCapabilities: (message.params?.capabilities as Record<string, unknown>) ?? {},
  });
  return respondJson(
    200,
    jsonRpcResult(id, {
      protocolVersion,
      capabilities: { tools: { listChanged: false } },
      serverInfo: GATEWAY_SERVER_INFO,
      instructions: `Tools of route "${view.key}", named <backend>${view.toolNameSeparator}<tool>.`,
    }),
    'initialize',
    { [SESSION_HEADER]: session.id },
  );
}

/** Headers of the hop itself, or the gateway's own: not what a request made on the client's behalf carries. */
const NOT_ON_BEHALF = /^(:|host$|content-length$|content-type$|accept$|connection$|keep-alive$|transfer-encoding$|te$|upgrade$|mcp-session-id$|mcp-protocol-version$|x-envoy-|x-mcpgw-)/;

/**
 * The client's own headers (Authorization, traceparent, tracestate, …) for a request the sidecar makes
 * to a backend on the client's behalf: such a request must look to the backend like the client's own.
 */
function clientHeadersOf(head: RequestHead): Record<string, string> {
  return Object.fromEntries([...head.headers].filter(([name]) => !NOT_ON_BEHALF.test(name)));
}

const ACCEPTED: Decision = { kind: 'respond', status: 202, headers: {}, body: '', reason: 'accepted' };

/**
 * A client's answer to a request a backend sent it through the gateway (sampling, elicitation,
 * roots): back to that backend, in that backend's session, under the backend's own id.
 */
function routeClientResponse(message: JsonRpcMessage, view: RouteCatalogView, session: GatewaySession | undefined): Decision {
  if (!('result' in message) && !('error' in message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC request, notification or response', 'invalid_request');
  }
  const target = parseServerRequestId(message.id);
  const backend = target && view.backends.get(target.backend);
  if (!target || !backend) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, `response to id ${JSON.stringify(message.id)}, which no backend of route "${view.key}" sent through this gateway`, 'unknown_response');
  }
  const backendSessionId = session?.backends[backend.name];
  return {
    kind: 'forward',
    cluster: backend.cluster,
    body: JSON.stringify({ ...message, id: target.id }),
    headers: backendSessionId ? { [SESSION_HEADER]: backendSessionId } : {},
    removeHeaders: backendSessionId ? [] : [SESSION_HEADER],
    metadata: { backend: backend.name },
  };
}

/**
 * A client's notification (cancelled, roots/list_changed, …) concerns the backends it talks to
 * through this session: every backend session of it gets a copy. Ids of the client's requests are the
 * same in every backend session, so a cancel reaches the one backend running that request; the
 * others have no such request and ignore it. initialized is the gateway's own: each backend got its
 * own when its session opened.
 */
function relayNotification(
  message: JsonRpcMessage,
  head: RequestHead,
  view: RouteCatalogView,
  session: GatewaySession | undefined,
  context: GatewayContext,
): Decision {
  if (message.method === 'notifications/initialized' || !session) return ACCEPTED;
  const clientHeaders = clientHeadersOf(head);
  for (const [name, backendSessionId] of Object.entries(session.backends)) {
    const backend = view.backends.get(name);
    if (!backend || !backendSessionId) continue;
    context.backendSessions
      .notify(backend, { backendSessionId, protocolVersion: session.protocolVersion, clientHeaders }, message)
      .catch((error: Error) => context.log.warn('could not pass a notification on', { route: view.key, backend: name, method: message.method, error: error.message }));
  }
  return ACCEPTED;
}

/**
 * The backend's own session for this gateway session, opened on first use. A backend that cannot be
 * reached gets none now (the call then fails in Envoy, in JSON-RPC form) and is asked again next time.
 */
async function backendSessionFor(session: GatewaySession, backend: BackendView, head: RequestHead, context: GatewayContext): Promise<string | undefined> {
  const known = session.backends[backend.name];
  if (known !== undefined) return known;
  try {
    const opened = await context.backendSessions.open(backend, session, clientHeadersOf(head));
    return await context.sessions.claimBackend(session.id, backend.name, opened);
  } catch (error) {
    context.log.warn('could not open a backend session; the call goes on without one', {
      route: session.route,
      backend: backend.name,
      error: (error as Error).message,
    });
    return undefined;
  }
}

async function decideToolCall(
  message: JsonRpcMessage,
  id: JsonRpcId,
  head: RequestHead,
  view: RouteCatalogView,
  client: CallingClient,
  context: GatewayContext,
): Promise<Decision> {
  const name = message.params?.name;
  if (typeof name !== 'string') {
    return respondError(200, id, JSON_RPC.INVALID_PARAMS, 'tools/call needs params.name', 'invalid_params');
  }
  const resolution = resolveTool(view, name);
  if (!resolution.ok && resolution.denied) {
    const { backend, toolName, rule } = resolution.denied;
    const outcome = { outcome: 'denied', backend: backend.name, tool: toolName, attempts: 0, elapsed_ms: 0, fallback_used: false, rule };
    return {
      ...respondJson(200, jsonRpcError(id, TOOL_DENIED_CODE, resolution.message, outcome), 'tool_denied'),
      metadata: { backend: backend.name, tool: toolName, outcome: 'denied' },
    };
  }
  if (!resolution.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, resolution.message, 'unknown_tool');
  const policy = callPolicy(resolution.tool, resolution.backend);
  const statelessBackend = resolution.backend.protocolVersion === MODERN_PROTOCOL_VERSION;
  const session = client.era === 'session' ? client.session : undefined;
  const renamed = { ...message, params: { ...message.params, name: resolution.toolName } };
  // The client's gateway session id means nothing to a backend: it gets its own session id, or none.
  const backendSessionId = session && !statelessBackend ? await backendSessionFor(session, resolution.backend, head, context) : undefined;
  const form = statelessBackend ? statelessCall(renamed, resolution.toolName, client) : sessionCall(renamed, client);
  const forwarded = JSON.stringify(form.message);
  return {
    kind: 'forward',
    cluster: resolution.backend.cluster,
    body: forwarded,
    headers: { ...policy.headers, ...form.headers, ...(backendSessionId && { [SESSION_HEADER]: backendSessionId }) },
    removeHeaders: [...(backendSessionId ? [] : [SESSION_HEADER]), ...form.removeHeaders],
    metadata: { backend: resolution.backend.name, tool: resolution.toolName, ...(policy.fallback && { fallback: policy.fallback }) },
    toolCall: {
      route: view.key,
      rpcId: id,
      backend: resolution.backend.name,
      tool: resolution.toolName,
      backendView: resolution.backend,
      body: forwarded,
      ...(session && backendSessionId && { session: { gateway: session, backendSessionId } }),
      ...(policy.timeoutMs !== undefined && { timeoutMs: policy.timeoutMs }),
      ...(client.era === 'stateless' && { modern: true }),
    },
  };
}

/** Who asks: a client in a session-based revision (with its gateway session, if it has one), or one of the stateless revision. */
type CallingClient = { era: 'session'; session?: GatewaySession } | { era: 'stateless' };

interface BackendForm {
  message: JsonRpcMessage;
  headers: Record<string, string>;
  removeHeaders: string[];
}

/**
 * A call for a backend of a session-based revision (2025-11-25 and before): as it came from a client
 * of that era, or, from a stateless client, without the stateless envelope and routing headers.
 */
function sessionCall(message: JsonRpcMessage, client: CallingClient): BackendForm {
  if (client.era === 'session') return { message, headers: {}, removeHeaders: [] };
  return {
    message: { ...message, params: withoutModernEnvelope(message.params ?? {}) },
    headers: { [PROTOCOL_VERSION_HEADER]: LATEST_PROTOCOL_VERSION },
    removeHeaders: ['mcp-method', 'mcp-name'],
  };
}

/**
 * A call for a backend of the stateless revision: with the `_meta` envelope and the routing headers
 * that name the backend's own tool. A stateless client's envelope goes on as it came (its
 * capabilities included: it can answer an input_required result); a session client's is made up
 * with no capabilities, since it could not answer one.
 */
function statelessCall(message: JsonRpcMessage, toolName: string, client: CallingClient): BackendForm {
  const params = message.params ?? {};
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  const envelope =
    client.era === 'stateless'
      ? {}
      : {
          [MODERN_META.protocolVersion]: MODERN_PROTOCOL_VERSION,
          [MODERN_META.clientCapabilities]: {},
          [MODERN_META.clientInfo]: client.session?.clientInfo.name ? client.session.clientInfo : GATEWAY_SERVER_INFO,
        };
  return {
    message: { ...message, params: { ...params, _meta: { ...meta, ...envelope } } },
    headers: { [PROTOCOL_VERSION_HEADER]: MODERN_PROTOCOL_VERSION, 'mcp-method': 'tools/call', 'mcp-name': encodeMcpHeaderValue(toolName) },
    removeHeaders: [],
  };
}

/**
 * The rewriter for one tools/call response body, by its content type; undefined for a body left
 * alone. onOutcome hears the outcome of the final answer as it passes.
 */
export function responseRewriter(
  contentType: string,
  call: ProxiedToolCall,
  facts: ResponseFacts,
  onOutcome: (outcome: CallOutcomeName) => void = () => undefined,
): ResponseRewriter | undefined {
  const rewrite = (message: unknown) => {
    const rewritten = annotateMessage(message, call, facts);
    const outcome = finalOutcome(rewritten ?? message, call.rpcId);
    if (outcome) onOutcome(outcome);
    return rewritten;
  };
  if (/^text\/event-stream\b/i.test(contentType)) return new SseResponseRewriter(rewrite);
  if (/^application\/json\b/i.test(contentType)) return new JsonResponseRewriter(rewrite);
  return undefined;
}


/**
 * A backend answered that it does not know the session of a call (404, or 400 "no valid session"):
 * it ran nothing. The gateway opens a backend session and sends the call again itself; the answer
 * comes whole, not streamed.
 * - A call of a client's gateway session lost its backend session (the backend restarted or expired
 *   it): the new one replaces it, so the client's session goes on.
 * - A call of the stateless revision (2026-07-28, no session at all) reached a backend that needs
 *   one: the session is opened for this call only, with no client capabilities (requests from the
 *   backend to the client cannot be carried across eras), and ended after it.
 * If no session can be opened, the client gets a JSON-RPC error naming the backend, never the
 * backend's 404 (which would end the client's own session with the gateway).
 */
export async function resendInNewBackendSession(
  call: ToolCallForward & { timeoutMs: number },
  head: RequestHead,
  facts: ResponseFacts,
  context: GatewayContext,
): Promise<Decision> {
  const backend = call.backendView;
  const clientHeaders = clientHeadersOf(head);
  let oneOff: OnBehalf | undefined;
  try {
    let onBehalf: OnBehalf;
    if (call.session) {
      const { gateway, backendSessionId: stale } = call.session;
      await context.sessions.forgetBackend(gateway.id, backend.name, stale);
      const { [backend.name]: _forgotten, ...others } = gateway.backends;
      const fresh = await context.backendSessions.open(backend, { ...gateway, backends: others }, clientHeaders);
      const backendSessionId = await context.sessions.claimBackend(gateway.id, backend.name, fresh);
      onBehalf = { backendSessionId, protocolVersion: gateway.protocolVersion, clientHeaders };
    } else {
      const session = { id: '', route: call.route, protocolVersion: LATEST_PROTOCOL_VERSION, clientInfo: GATEWAY_SERVER_INFO, clientCapabilities: {}, backends: {} };
      oneOff = { backendSessionId: await context.backendSessions.open(backend, session, clientHeaders), protocolVersion: LATEST_PROTOCOL_VERSION, clientHeaders };
      onBehalf = oneOff;
    }
    const answer = await context.backendSessions.resend(backend, onBehalf, call.body, call.timeoutMs);
    if (saysSessionUnknown(answer.status, answer.body)) throw new Error(`it answered ${answer.status} in its new session too`);
    context.log.info('call sent again in a new backend session', { route: call.route, backend: backend.name, tool: call.tool, oneOff: !call.session });
    let outcome: CallOutcomeName | undefined;
    const rewriter = responseRewriter(answer.contentType, call, facts, (final) => (outcome = final));
    const body = (rewriter ? rewriter.push(answer.body, true) : answer.body).toString('utf8');
    return {
      kind: 'respond',
      status: answer.status,
      headers: { 'content-type': answer.contentType },
      body,
      reason: call.session ? 'backend_session_renewed' : 'backend_session_for_one_call',
      metadata: { route: call.route, backend: call.backend, tool: call.tool, ...(outcome && { outcome }) },
    };
  } catch (error) {
    const reason = (error as Error).message;
    const message = `backend ${backend.name} needs a session and could not start one: tools/call ${call.tool} failed (${reason})`;
    const data = { ...outcomeOf(call, facts, reason), http_status: 503 };
    return {
      ...respondJson(200, jsonRpcError(call.rpcId, BACKEND_UNAVAILABLE_CODE, message, data), 'backend_session_lost'),
      metadata: { route: call.route, backend: call.backend, tool: call.tool, outcome: 'failed' },
    };
  } finally {
    if (oneOff?.backendSessionId) {
      await context.backendSessions.close(backend, oneOff).catch((error: Error) =>
        context.log.warn('could not end a one-call backend session', { route: call.route, backend: backend.name, error: error.message }),
      );
    }
  }
}
