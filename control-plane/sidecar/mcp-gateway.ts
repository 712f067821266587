import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { parseServerRequestId } from './call-response';
import {
  Decision,
  GATEWAY_SERVER_INFO,
  GatewayContext,
  JsonRpcMessage,
  PROTOCOL_VERSION_HEADER,
  RequestHead,
  RequestMetadata,
  SESSION_HEADER,
  callerOf,
  clientHeadersOf,
  respondBody,
  respondError,
  respondJson,
  sessionNotFound,
} from './decision';
import { ownerOf } from '../auth/caller-identity';
import { JSON_RPC, JsonRpcId, MAX_JSON_DEPTH, idProblem, jsonRpcResult, nestsDeeperThan } from './json-rpc';
import { MODERN_META, MODERN_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSIONS, modernRequestProblem, modernVersionClaim } from './modern-era';
import { RouteCatalogView } from './route-catalog';
import { ClientFieldsTooLargeError, GatewaySession } from './sessions/session-store';
import { answerResumedCall, answerUnplacedCall } from './tool-call';
import { answerToolsList, toolsListBody } from './tools-list';

/** The sidecar's decisions on requests: answered here, or sent on to exactly one backend (tool-call.ts). */

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
  try {
    return { key: decodeURIComponent(match[1]) };
  } catch {
    return { error: respondError(400, null, JSON_RPC.INVALID_REQUEST, 'malformed route key: it is not valid percent-encoding', 'malformed_route_key') };
  }
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
  if (head.method === 'GET') {
    const resumed = answerResumedCall(head.headers.get('last-event-id'));
    if (resumed) return resumed;
  }
  if (head.method === 'GET' && head.headers.has(SESSION_HEADER)) return openStream(head, view, context);
  if (head.method !== 'POST') {
    // Without a session no standalone SSE stream is offered: the spec lets a server answer 405.
    return respondError(405, null, JSON_RPC.INVALID_REQUEST, `method ${head.method} is not allowed on this endpoint`, 'method_not_allowed', {
      allow: 'GET, POST, DELETE',
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

function negotiatedVersion(requested: unknown): string {
  return typeof requested === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;
}

/** The session a request names, if it names one; `false` when it names one that does not exist here. */
async function sessionOf(head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<GatewaySession | undefined | false> {
  const id = head.headers.get(SESSION_HEADER);
  if (id === undefined) return undefined;
  const session = await context.sessions.get(id);
  // A session belongs to the route it was opened on, and to the caller who opened it: to anyone
  // else it does not exist (docs/auth.md).
  return session && session.route === view.key && session.owner === ownerOf(callerOf(head, view)) ? session : false;
}

/**
 * GET with a session: the client's standalone SSE stream, held by this sidecar, which tells it when
 * the route's tools change (notifications/tools/list_changed).
 */
async function openStream(head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  if (!(head.headers.get('accept') ?? '').includes('text/event-stream')) {
    return respondError(406, null, JSON_RPC.INVALID_REQUEST, 'Accept must list text/event-stream', 'not_acceptable');
  }
  const session = await sessionOf(head, view, context);
  if (!session) return sessionNotFound(null);
  return { kind: 'stream', session };
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
  const text = body.toString('utf8');
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
    return respondError(400, null, JSON_RPC.PARSE_ERROR, `Parse error: JSON nested more than ${MAX_JSON_DEPTH} levels deep`, 'parse_error');
  }
  let message: JsonRpcMessage;
  try {
    message = JSON.parse(text) as JsonRpcMessage;
  } catch (error) {
    return respondError(400, null, JSON_RPC.PARSE_ERROR, `Parse error: ${(error as Error).message}`, 'parse_error');
  }
  if (Array.isArray(message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'JSON-RPC batches are not supported', 'batch');
  }
  if (typeof message !== 'object' || message === null || message.jsonrpc !== '2.0') {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC 2.0 message', 'invalid_request');
  }
  // A request's id is the client's to choose, within JSON-RPC's rule (an answer's is the gateway's own: routeClientResponse).
  const badId = typeof message.method === 'string' ? idProblem(message.id) : undefined;
  if (badId) return respondError(400, null, JSON_RPC.INVALID_REQUEST, badId, 'invalid_id');
  const metadata: RequestMetadata = {
    route: view.key,
    ...(typeof message.method === 'string' && { method: message.method }),
    ...(message.id !== undefined && { rpc_id: message.id }),
  };
  const decision = await decideOnMessage(message, head, view, context);
  if (decision.kind !== 'respond') return decision;
  return { ...decision, metadata: { ...metadata, ...decision.metadata } };
}

async function decideOnMessage(message: JsonRpcMessage, head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const versionHeader = head.headers.get(PROTOCOL_VERSION_HEADER);
  if (modernVersionClaim(message.params) !== undefined || (versionHeader !== undefined && MODERN_PROTOCOL_VERSIONS.includes(versionHeader))) {
    return decideModern(message, head, view);
  }
  if (unsupportedVersionHeader(head)) return unsupportedVersion(head);
  const id = message.id;
  if (message.method === 'initialize' && id !== undefined) return initializeSession(message, id, head, view, context);
  const session = await sessionOf(head, view, context);
  if (session === false) return sessionNotFound(id ?? null);
  if (typeof message.method !== 'string') return routeClientResponse(message, head, view, session, context);
  if (id === undefined) return relayNotification(message, head, view, session, context);
  switch (message.method) {
    case 'ping':
      return respondJson(200, jsonRpcResult(id, {}), 'ping');
    case 'tools/list': {
      const answer = answerToolsList(view, message.params, callerOf(head, view));
      return answer.ok
        ? respondBody(200, toolsListBody(id, answer.result), 'tools_list')
        : respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
    }
    case 'tools/call':
      return answerUnplacedCall(message.params, id, view);
    default:
      return respondError(200, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not supported by this gateway`, 'method_not_found');
  }
}

/** How long clients of the stateless revision may cache server/discover. */
const DISCOVER_TTL_MS = 300_000;
/**
 * The catalog changes whenever the registry or a backend does, and clients of the stateless revision
 * get no change notification (no subscriptions/listen yet): their tools/list must not be cached.
 */
const TOOLS_LIST_TTL_MS = 0;

const instructionsFor = (view: RouteCatalogView) => `Tools of route "${view.key}", named <backend>${view.toolNameSeparator}<tool>.`;

/**
 * A request of MCP 2026-07-28 (no session; docs/adr/0007-mcp-2026-07-28.md). The gateway answers
 * server/discover and tools/list itself; Envoy's call lane sends tools/call on to its backend in the
 * revision that backend speaks (docs/adr/0008-data-path-lanes.md).
 */
function decideModern(message: JsonRpcMessage, head: RequestHead, view: RouteCatalogView): Decision {
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
          instructions: instructionsFor(view),
          ttlMs: DISCOVER_TTL_MS,
          cacheScope: 'public',
          _meta: serverInfo,
        }),
        'server_discover',
      );
    case 'tools/list': {
      const answer = answerToolsList(view, message.params, callerOf(head, view));
      if (!answer.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
      // A list that depends on who asks must not be reused for anyone else (docs/auth.md).
      const cacheScope = view.listVariesByCaller ? 'private' : 'public';
      return respondBody(200, toolsListBody(id, answer.result, { resultType: 'complete', ttlMs: TOOLS_LIST_TTL_MS, cacheScope }, serverInfo), 'tools_list');
    }
    case 'tools/call':
      return answerUnplacedCall(message.params, id, view);
    default:
      return respondError(404, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not served in protocol ${MODERN_PROTOCOL_VERSION}`, 'method_not_found');
  }
}

/** The gateway is the client's MCP server: its own capabilities, and a session of its own. */
async function initializeSession(message: JsonRpcMessage, id: JsonRpcId, head: RequestHead, view: RouteCatalogView, context: GatewayContext): Promise<Decision> {
  const protocolVersion = negotiatedVersion(message.params?.protocolVersion);
  const owner = ownerOf(callerOf(head, view));
  let session: GatewaySession;
  try {
    session = await context.sessions.create({
      route: view.key,
      ...(owner !== undefined && { owner }),
      protocolVersion,
      clientInfo: (message.params?.clientInfo as Record<string, unknown>) ?? {},
      clientCapabilities: (message.params?.capabilities as Record<string, unknown>) ?? {},
    });
  } catch (error) {
    if (error instanceof ClientFieldsTooLargeError) return respondError(200, id, JSON_RPC.INVALID_PARAMS, error.message, 'client_fields_too_large');
    throw error;
  }
  return respondJson(
    200,
    jsonRpcResult(id, {
      protocolVersion,
      capabilities: { tools: { listChanged: true } },
      serverInfo: GATEWAY_SERVER_INFO,
      instructions: instructionsFor(view),
    }),
    'initialize',
    { [SESSION_HEADER]: session.id },
  );
}

const ACCEPTED: Decision = { kind: 'respond', status: 202, headers: {}, body: '', reason: 'accepted' };

/**
 * The call script records a backend's request to the client as it sends it on (not before: it cannot),
 * so a quick client's answer may arrive a moment before the record does.
 */
export const ANSWER_RECORD_GRACE_MS = 200;
const RECORD_POLL_MS = 20;

async function takeRecordedAnswer(context: GatewayContext, sessionId: string, backend: string, rawId: string): Promise<boolean> {
  const giveUpAt = performance.now() + ANSWER_RECORD_GRACE_MS;
  for (;;) {
    if (await context.sessions.takeAnswer(sessionId, backend, rawId)) return true;
    if (performance.now() >= giveUpAt) return false;
    await new Promise((resolve) => setTimeout(resolve, RECORD_POLL_MS));
  }
}

/**
 * A client's answer to a request a backend sent it through the gateway (sampling, elicitation,
 * roots): back to that backend, in that backend's session, under the backend's own id. Only an answer
 * to a request still outstanding in the client's session goes on (the call script recorded it as it
 * passed, control-plane/xds/lua/call-lane.lua), and only once.
 */
async function routeClientResponse(
  message: JsonRpcMessage,
  head: RequestHead,
  view: RouteCatalogView,
  session: GatewaySession | undefined,
  context: GatewayContext,
): Promise<Decision> {
  if (!('result' in message) && !('error' in message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC request, notification or response', 'invalid_request');
  }
  const target = parseServerRequestId(message.id);
  const backend = target && view.backends.get(target.backend);
  const outstanding = target && backend && session && (await takeRecordedAnswer(context, session.id, backend.name, target.rawId));
  if (!target || !backend || !outstanding) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, `response to id ${JSON.stringify(message.id)}, which no backend of route "${view.key}" sent through this gateway`, 'unknown_response');
  }
  return {
    kind: 'relay',
    backend,
    onBehalf: {
      backendSessionId: session?.backends[backend.name] ?? '',
      protocolVersion: session?.protocolVersion ?? LATEST_PROTOCOL_VERSION,
      clientHeaders: clientHeadersOf(head),
    },
    body: JSON.stringify({ ...message, id: target.id }),
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
      .post(backend, { backendSessionId, protocolVersion: session.protocolVersion, clientHeaders }, JSON.stringify(message))
      .then((answer) => {
        if (answer.status >= 400) throw new Error(`it answered HTTP ${answer.status}`);
      })
      .catch((error: Error) => context.log.warn('could not pass a notification on', { route: view.key, backend: name, method: message.method, error: error.message }));
  }
  return ACCEPTED;
}

