import { toolServiceIdOf } from '../ir/gateway-ir';
import { CHECK_HEADERS, CHECK_STATUS } from '../xds/translate/settings';
import { SpanKind, Tracing, failSpan } from '../shared/tracing';
import { Caller, GatewayContext, RequestHead, SESSION_HEADER } from './decision';
import { CheckAnswer } from './session-check';

/**
 * The sidecar's spans (docs/observability.md#traces): what it does on a call's behalf, each a child of
 * the span whose trace context the request carries (Envoy's span of the call, or of the session check).
 */
export const SIDECAR_SPANS = {
  /** The call lane's session check; made only when Envoy's span of the call is sampled. */
  sessionCheck: 'mcp.sidecar.session_check',
  /** initialize + notifications/initialized with a backend, for a client's session or the stateless pool. */
  openBackendSession: 'mcp.sidecar.backend_session.open',
  /** DELETE of a backend session when the client's session ends. */
  closeBackendSession: 'mcp.sidecar.backend_session.close',
  /** A backend lost a call's session: forgotten, the next call opens a new one. */
  lostBackendSession: 'mcp.sidecar.backend_session.lost',
  /** A client's notification or answer posted in its backend session. */
  relay: 'mcp.sidecar.relay',
} as const;

/**
 * The session check in its span: route, backend and tool as Envoy named them; a refusal the client
 * cannot help (a backend session that would not open, the session store down) marks it failed.
 */
export function tracedCheck(tracing: Tracing, head: RequestHead, check: () => Promise<CheckAnswer>): Promise<CheckAnswer> {
  if (!tracing.enabled) return check();
  const attributes = {
    'mcp.gateway.route': head.headers.get(CHECK_HEADERS.route) ?? '',
    'mcp.gateway.backend': head.headers.get(CHECK_HEADERS.backend) ?? '',
    'gen_ai.tool.name': head.headers.get(CHECK_HEADERS.tool) ?? '',
    'mcp.session.present': head.headers.has(SESSION_HEADER),
  };
  return tracing.inSpan(SIDECAR_SPANS.sessionCheck, { kind: SpanKind.SERVER, parentHeaders: head.headers, attributes }, async (span) => {
    const answer = await check();
    span.setAttribute('http.response.status_code', answer.status);
    if (answer.status === CHECK_STATUS.JSON_RPC_ERROR || answer.status >= 500) failSpan(span, `the call was refused with ${answer.status}`);
    return answer;
  });
}

/**
 * The sidecar's requests to backends, each in its span, carrying that span's trace context instead of
 * the client's (which names the span it hangs under), so that the backend's own span hangs under it.
 */
export function tracedBackendSessions(sessions: GatewayContext['backendSessions'], tracing: Tracing): GatewayContext['backendSessions'] {
  if (!tracing.enabled) return sessions;
  const backendAttributes = (backend: { name: string; toolService: string }) => ({
    'mcp.gateway.backend': backend.name,
    'mcp.gateway.tool_service': toolServiceIdOf(backend.toolService),
  });
  // The request to the backend carries the span's trace context in place of the client's.
  const inSpan = (caller: Caller): Caller => ({ ...caller, headers: tracing.headersFor(caller.headers) });
  return {
    open: (backend, session, caller) =>
      tracing.inSpan(
        SIDECAR_SPANS.openBackendSession,
        { kind: SpanKind.CLIENT, parentHeaders: caller.headers, attributes: { ...backendAttributes(backend), 'mcp.protocol.version': session.protocolVersion } },
        () => sessions.open(backend, session, inSpan(caller)),
      ),
    close: (backend, onBehalf) =>
      tracing.inSpan(SIDECAR_SPANS.closeBackendSession, { kind: SpanKind.CLIENT, parentHeaders: onBehalf.caller.headers, attributes: backendAttributes(backend) }, () =>
        sessions.close(backend, { ...onBehalf, caller: inSpan(onBehalf.caller) }),
      ),
    relay: (backend, onBehalf, message) =>
      tracing.inSpan(SIDECAR_SPANS.relay, { kind: SpanKind.CLIENT, parentHeaders: onBehalf.caller.headers, attributes: backendAttributes(backend) }, async (span) => {
        const answer = await sessions.relay(backend, { ...onBehalf, caller: inSpan(onBehalf.caller) }, message);
        span.setAttribute('http.response.status_code', answer.status);
        return answer;
      }),
    // A backend stream: its own span is the stream's (backend-streams.ts).
    request: (backend, caller, init) => sessions.request(backend, inSpan(caller), init),
  };
}
