import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { offeredBy } from '../catalog/client-needs';
import { clientEventId, hasStandaloneStream } from './backend-streams';
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
  clientOf,
  respondBody,
  respondError,
  respondJson,
  sessionNotFound,
} from './decision';
import { ownerOf } from '../auth/caller-identity';
import { JSON_RPC, JsonRpcId, MAX_JSON_DEPTH, idProblem, jsonRpcResult, nestsDeeperThan } from './json-rpc';
import { MODERN_META, MODERN_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSIONS, modernRequestProblem, modernVersionClaim } from './modern-era';
import { setLevelForSession } from './logging-level';
import { LIST_METHODS, ListMethod, RouteCatalogView, listOf } from './route-catalog';
import { ClientFieldsTooLargeError, GatewaySession } from './sessions/session-store';
import { answerUnplacedRequest, isPlacedMethod } from './surface-requests';
import { honoredFilter, listenParamsSchema } from './subscriptions-listen';
import { RESUME_CALL_PREFIX, answerResumedCall, answerUnplacedCall, brokenCallAnswer, resumeTargetOf, resumedCallOutcome } from './tool-call';
import { ListAudience, answerList, listBody } from './tools-list';
import { ENVOY_UNKNOWN_ROUTE_HEADER } from '../xds/translate/settings';

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
    if (head.headers.get(ENVOY_UNKNOWN_ROUTE_HEADER) === 'true') {
      return respondError(404, null, JSON_RPC.INVALID_REQUEST, `unknown route key "${key}"`, 'unknown_route');
    }
    // Envoy routed the key: the catalog of a route just added is on its way (it waits for Envoy's ACK).
    return respondError(503, null, JSON_RPC.INTERNAL_ERROR, `route "${key}" is being added to the gateway: call again`, 'route_pending', {
      'retry-after': '1',
    });
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
  const lastEventId = head.headers.get('last-event-id');
  if (lastEventId === undefined) return { kind: 'stream', session, head };
  // A stream resumed at the backend that gave the event id, which keeps the events.
  const target = resumeTargetOf(lastEventId);
  const given =
    target?.kind === 'call' && target.backendEventId !== undefined
      ? {
          backend: target.call.b,
          backendEventId: target.backendEventId,
          eventIdFor: (id: string) => `${RESUME_CALL_PREFIX}${target.token}.${id}`,
          unresumable: brokenCallAnswer(target.call),
          outcomeOf: (lastError?: string) => resumedCallOutcome(target.call, lastError),
        }
      : target?.kind === 'backend'
        ? { backend: target.backend, backendEventId: target.backendEventId, eventIdFor: (id: string) => clientEventId(target.backend, id) }
        : undefined;
  const backend = given && view.backends.get(given.backend);
  if (!given || !backend || !hasStandaloneStream(backend)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, `Last-Event-ID ${JSON.stringify(lastEventId)} names no stream this gateway can resume on route "${view.key}"`, 'unknown_event_id');
  }
  const resumption = { lastEventId: given.backendEventId, eventIdFor: given.eventIdFor, unresumable: given.unresumable, outcomeOf: given.outcomeOf };
  return { kind: 'resume', session, backend, resumption, head };
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
        const onBehalf = { backendSessionId, protocolVersion: session.protocolVersion, caller: clientOf(head) };
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
  if (isListMethod(message.method)) {
    if (!servesMethod(view, message.method)) return notServedOnRoute(message.method, id, view, 200);
    // A request without a session declared nothing: it gets everything its caller may call.
    const caller = callerOf(head, view);
    return answerListRequest(view, message.method, message.params, id, session ? { ...sessionAudience(session), caller } : { caller });
  }
  if (isPlacedMethod(message.method)) {
    return servesMethod(view, message.method) ? answerUnplacedRequest(message.method, message.params, id, view) : notServedOnRoute(message.method, id, view, 200);
  }
  switch (message.method) {
    case 'ping':
      return respondJson(200, jsonRpcResult(id, {}), 'ping');
    case 'tools/call':
      return answerUnplacedCall(message.params, id, view);
    case 'logging/setLevel':
      if (!view.capabilities.logging) return notServedOnRoute(message.method, id, view, 200);
      if (!session) return respondError(200, id, JSON_RPC.INVALID_REQUEST, 'logging/setLevel needs a session: initialize first', 'session_required');
      return setLevelForSession(message.params, id, session, head, view, context);
    default:
      return respondError(200, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not supported by this gateway`, 'method_not_found');
  }
}

const isListMethod = (method: string): method is ListMethod => method in LIST_METHODS;

/** The capability a method needs the route to declare (route-catalog.ts routeCapabilities). */
const CAPABILITY_OF: Record<string, keyof ServerCapabilities> = {
  'prompts/list': 'prompts',
  'prompts/get': 'prompts',
  'resources/list': 'resources',
  'resources/templates/list': 'resources',
  'resources/read': 'resources',
  'resources/subscribe': 'resources',
  'resources/unsubscribe': 'resources',
  'completion/complete': 'completions',
};

/** Whether the route serves this method: what its initialize and server/discover declare. */
function servesMethod(view: RouteCatalogView, method: string): boolean {
  const capability = CAPABILITY_OF[method];
  if (capability === undefined) return true;
  if (method === 'resources/subscribe' || method === 'resources/unsubscribe') return view.capabilities.resources?.subscribe === true;
  return view.capabilities[capability] !== undefined;
}

/** A method of a capability no backend of the route declares: not served, as the capabilities said. */
function notServedOnRoute(method: string, id: JsonRpcId, view: RouteCatalogView, status: number): Decision {
  return respondError(status, id, JSON_RPC.METHOD_NOT_FOUND, `method "${method}" is not served on route "${view.key}": none of its backends serves ${CAPABILITY_OF[method] ?? method}`, 'method_not_found');
}

function answerListRequest(view: RouteCatalogView, method: ListMethod, params: unknown, id: JsonRpcId, audience: ListAudience, fields?: Record<string, unknown>, meta?: Record<string, unknown>): Decision {
  const answer = answerList(view, method, params, audience);
  if (!answer.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
  return respondBody(200, listBody(LIST_METHODS[method].member, id, answer.result, fields, meta), method.replace(/\//g, '_'));
}

/** How long clients of the stateless revision may cache server/discover. */
const DISCOVER_TTL_MS = 300_000;
/**
 * The catalog changes whenever the registry or a backend does, and a client of the stateless revision
 * hears of it only while it listens (subscriptions/listen): its lists must not be cached.
 */
const LIST_TTL_MS = 0;

const instructionsFor = (view: RouteCatalogView) =>
  `Tools of route "${view.key}", named <backend>${view.toolNameSeparator}<tool>${view.capabilities.prompts ? `; prompts named <backend>${view.toolNameSeparator}<prompt>` : ''}${view.capabilities.resources ? '; resources named <backend>+<uri>' : ''}.`;

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
          capabilities: view.capabilities,
          instructions: instructionsFor(view),
          ttlMs: DISCOVER_TTL_MS,
          cacheScope: 'public',
          _meta: serverInfo,
        }),
        'server_discover',
      );
    case 'tools/call':
      return answerUnplacedCall(message.params, id, view);
    case 'subscriptions/listen': {
      const parsed = listenParamsSchema.safeParse(message.params);
      if (!parsed.success) return respondError(200, id, JSON_RPC.INVALID_PARAMS, 'subscriptions/listen needs params.notifications, a subscription filter', 'invalid_params');
      return { kind: 'listen', view, id, honored: honoredFilter(parsed.data.notifications, view), head };
    }
    default:
      if (isListMethod(message.method)) {
        if (!servesMethod(view, message.method)) return notServedOnRoute(message.method, id, view, 404);
        // A list that depends on who asks must not be reused for anyone else (docs/auth.md).
        const cacheScope = listOf(view, LIST_METHODS[message.method].kind).byCaller ? 'private' : 'public';
        const audience = { ...statelessAudience(message.params), caller: callerOf(head, view) };
        return answerListRequest(view, message.method, message.params, id, audience, { resultType: 'complete', ttlMs: LIST_TTL_MS, cacheScope }, serverInfo);
      }
      if (isPlacedMethod(message.method) && message.method !== 'resources/subscribe' && message.method !== 'resources/unsubscribe') {
        return servesMethod(view, message.method) ? answerUnplacedRequest(message.method, message.params, id, view) : notServedOnRoute(message.method, id, view, 404);
      }
      return respondError(404, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not served in protocol ${MODERN_PROTOCOL_VERSION}`, 'method_not_found');
  }
}

/**
 * What a session client may use: a session-era backend gets its calls in the client's own session with
 * it, opened with the client's capabilities; a backend of the stateless revision gets them with an
 * envelope the gateway makes up, which declares none (ADR-0007), and a session client could not answer
 * its input_required results anyway.
 */
function sessionAudience(session: GatewaySession): ListAudience {
  const declared = offeredBy(session.clientCapabilities);
  const none = offeredBy({});
  return { offeredBy: (backend) => (backend.protocolVersion === MODERN_PROTOCOL_VERSION ? none : declared) };
}

/**
 * What a stateless client may use (ADR-0007): a backend of the stateless revision gets the client's own
 * capabilities with each request; a backend of a session-based revision takes its calls in a pooled
 * backend session that declares none, so nothing that needs the client is offered from it.
 */
function statelessAudience(params: Record<string, unknown> | undefined): ListAudience {
  const meta = (params?._meta ?? {}) as Record<string, unknown>;
  const declared = offeredBy(meta[MODERN_META.clientCapabilities]);
  const none = offeredBy({});
  return { offeredBy: (backend) => (backend.protocolVersion === MODERN_PROTOCOL_VERSION || backend.alsoModern ? declared : none) };
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
      capabilities: view.capabilities,
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
  cached: GatewaySession | undefined,
  context: GatewayContext,
): Promise<Decision> {
  if (!('result' in message) && !('error' in message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC request, notification or response', 'invalid_request');
  }
  const target = parseServerRequestId(message.id);
  const backend = target && view.backends.get(target.backend);
  const outstanding = target && backend && cached && (await takeRecordedAnswer(context, cached.id, backend.name, target.rawId));
  if (!target || !backend || !outstanding) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, `response to id ${JSON.stringify(message.id)}, which no backend of route "${view.key}" sent through this gateway`, 'unknown_response');
  }
  // The request may have come on a backend stream another replica opened, in a backend session this
  // replica's copy of the gateway session does not know yet (docs/adr/0018-stream-relaying.md).
  const session = cached && cached.backends[backend.name] === undefined ? ((await context.sessions.get(cached.id, { fresh: true })) ?? cached) : cached;
  return {
    kind: 'relay',
    backend,
    onBehalf: {
      backendSessionId: session?.backends[backend.name] ?? '',
      protocolVersion: session?.protocolVersion ?? LATEST_PROTOCOL_VERSION,
      caller: clientOf(head),
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
  const caller = clientOf(head);
  for (const [name, backendSessionId] of Object.entries(session.backends)) {
    const backend = view.backends.get(name);
    if (!backend || !backendSessionId) continue;
    context.backendSessions
      .relay(backend, { backendSessionId, protocolVersion: session.protocolVersion, caller }, JSON.stringify(message))
      .then((answer) => {
        if (answer.status >= 400) throw new Error(`it answered HTTP ${answer.status}`);
      })
      .catch((error: Error) => context.log.warn('could not pass a notification on', { route: view.key, backend: name, method: message.method, error: error.message }));
  }
  return ACCEPTED;
}

