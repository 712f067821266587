import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
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
  saysSessionUnknown,
} from './call-response';
import {
  Decision,
  GATEWAY_SERVER_INFO,
  GatewayContext,
  JsonRpcMessage,
  PROTOCOL_VERSION_HEADER,
  RequestHead,
  Respond,
  SESSION_HEADER,
  TOOL_DENIED_CODE,
  ToolCallForward,
  clientHeadersOf,
  respondError,
  respondJson,
} from './decision';
import { JSON_RPC, JsonRpcId, jsonRpcError } from './json-rpc';
import { MODERN_META, MODERN_PROTOCOL_VERSION, encodeMcpHeaderValue, withoutModernEnvelope } from './modern-era';
import { BackendView, RouteCatalogView, resolveTool } from './route-catalog';
import { OnBehalf } from './sessions/backend-sessions';
import { GatewaySession } from './sessions/session-store';

/**
 * A tools/call: the one backend its prefix names, the form that backend speaks, and what the response
 * path does with the answer (outcome, a new backend session when the backend has lost or wants one).
 */

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

export async function decideToolCall(
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
export type CallingClient = { era: 'session'; session?: GatewaySession } | { era: 'stateless' };

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
): Promise<Respond> {
  const backend = call.backendView;
  const clientHeaders = clientHeadersOf(head);
  let onBehalf: OnBehalf | undefined;
  try {
    if (call.session) {
      const { gateway, backendSessionId: stale } = call.session;
      await context.sessions.forgetBackend(gateway.id, backend.name, stale);
      const { [backend.name]: _forgotten, ...others } = gateway.backends;
      const fresh = await context.backendSessions.open(backend, { ...gateway, backends: others }, clientHeaders);
      const backendSessionId = await context.sessions.claimBackend(gateway.id, backend.name, fresh);
      onBehalf = { backendSessionId, protocolVersion: gateway.protocolVersion, clientHeaders };
    } else {
      const session = { id: '', route: call.route, protocolVersion: LATEST_PROTOCOL_VERSION, clientInfo: GATEWAY_SERVER_INFO, clientCapabilities: {}, backends: {} };
      onBehalf = { backendSessionId: await context.backendSessions.open(backend, session, clientHeaders), protocolVersion: LATEST_PROTOCOL_VERSION, clientHeaders };
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
    // A session opened for this one call ends with it.
    if (!call.session && onBehalf?.backendSessionId) {
      await context.backendSessions.close(backend, onBehalf).catch((error: Error) =>
        context.log.warn('could not end a one-call backend session', { route: call.route, backend: backend.name, error: error.message }),
      );
    }
  }
}
