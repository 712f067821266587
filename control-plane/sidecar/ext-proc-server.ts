import * as grpc from '@grpc/grpc-js';
import { toStruct } from '../xds/protobuf/proto-json';
import { BACKEND_CLUSTER_HEADER, METADATA_NAMESPACE } from '../xds/translate/settings';
import { CallOutcomeName, ResponseFacts, ResponseRewriter, saysSessionUnknown } from './call-response';
import { JSON_RPC } from './json-rpc';
import { Decision, GatewayContext, RequestHead, RequestMetadata, Respond, ToolCallForward, respondError } from './decision';
import { decideOnBody, decideOnHead, routeKeyOf } from './mcp-gateway';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { SidecarObserver } from './sidecar-metrics';
import { resendInNewBackendSession, responseRewriter } from './tool-call';

interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

interface HttpHeaders {
  headers?: { headers: HeaderValue[] };
  end_of_stream: boolean;
}

interface HttpBody {
  body: Buffer;
  end_of_stream: boolean;
}

interface ProcessingRequest {
  request_headers?: HttpHeaders | null;
  request_body?: HttpBody | null;
  response_headers?: HttpHeaders | null;
  response_body?: HttpBody | null;
}

type ProcessingResponse = Record<string, unknown>;

function headerOption(key: string, value: string) {
  return { header: { key, raw_value: Buffer.from(value) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' };
}

function readHead(headers: HeaderValue[]): RequestHead {
  const map = new Map<string, string>();
  for (const header of headers) {
    map.set(header.key.toLowerCase(), header.raw_value?.length ? header.raw_value.toString('utf8') : (header.value ?? ''));
  }
  return { method: map.get(':method') ?? '', path: map.get(':path') ?? '', headers: map };
}

/**
 * Headers only the gateway may set: its own steering header and Envoy's per-request controls
 * (timeouts, retries). A client's copies are dropped before anything else happens.
 */
const isGatewayOwnedHeader = (name: string) => name.startsWith('x-mcpgw-') || name.startsWith('x-envoy-');

function dynamicMetadata(metadata: RequestMetadata | undefined) {
  return metadata ? { dynamic_metadata: toStruct({ [METADATA_NAMESPACE]: metadata }) } : {};
}

/** The sidecar's own answer to a request: Envoy sends it to the client at once. */
function immediateResponse(decision: Respond): ProcessingResponse {
  return {
    immediate_response: {
      status: { code: decision.status },
      headers: { set_headers: Object.entries(decision.headers).map(([key, value]) => headerOption(key, value)) },
      body: Buffer.from(decision.body),
      details: `mcpgw_${decision.reason}`,
    },
    ...dynamicMetadata(decision.metadata),
  };
}

/** Spells a Decision in ext_proc terms for the phase it was taken in. */
function toProcessingResponse(decision: Decision, phase: 'request_headers' | 'request_body', head: RequestHead): ProcessingResponse {
  switch (decision.kind) {
    case 'respond':
      return immediateResponse(decision);
    case 'read-body':
      return { [phase]: { response: { header_mutation: { remove_headers: [...head.headers.keys()].filter(isGatewayOwnedHeader) } } } };
    case 'forward': {
      // A request without a body (a GET stream) is steered as it is.
      const body = decision.body === undefined ? undefined : Buffer.from(decision.body);
      const headers = { ...decision.headers, [BACKEND_CLUSTER_HEADER]: decision.cluster, ...(body && { 'content-length': String(body.length) }) };
      return {
        [phase]: {
          response: {
            status: 'CONTINUE',
            header_mutation: {
              set_headers: Object.entries(headers).map(([key, value]) => headerOption(key, value)),
              remove_headers: decision.removeHeaders,
            },
            ...(body && { body_mutation: { body } }),
            clear_route_cache: true,
          },
        },
        ...dynamicMetadata(decision.metadata),
      };
    }
  }
}

const IGNORE: SidecarObserver = { decided: () => undefined, toolCallFinished: () => undefined };

/** What Envoy sends the sidecar after a tools/call's response headers: the body only, streamed or whole (ext_proc ProcessingMode). */
const responseBodyMode = (mode: 'STREAMED' | 'BUFFERED') => ({
  request_header_mode: 'SKIP',
  response_header_mode: 'SKIP',
  request_body_mode: 'NONE',
  response_body_mode: mode,
  request_trailer_mode: 'SKIP',
  response_trailer_mode: 'SKIP',
});
const STREAM_RESPONSE_BODY = responseBodyMode('STREAMED');
const BUFFER_RESPONSE_BODY = responseBodyMode('BUFFERED');

/** How long Envoy waits while the sidecar sends a call again itself (below the filter's max_message_timeout). */
const RESEND_MESSAGE_TIMEOUT_S = 290;
const RESEND_DEFAULT_TIMEOUT_MS = 120_000;

/**
 * The response half of a steered tools/call: its final message gets the call's outcome (attempts,
 * elapsed_ms; docs/errors.md), requests the backend sends the client get ids the gateway can route
 * back, and a backend that no longer knows its session gets a new one. Everything else passes as sent.
 */
class ToolCallResponse {
  private rewriter: ResponseRewriter | undefined;
  /** Attempts so far, while a 400 body is read to see whether the backend lost the session. */
  private checkingBadRequest: number | undefined;
  private outcome: CallOutcomeName | undefined;

  constructor(
    private readonly call: ToolCallForward,
    private readonly head: RequestHead,
    private readonly startedAt: number,
    private readonly context: GatewayContext,
    private readonly observer: SidecarObserver,
    private readonly write: (response: ProcessingResponse) => void,
  ) {}

  private facts(attempts: number): ResponseFacts {
    return { attempts, elapsedMs: () => Math.round(performance.now() - this.startedAt) };
  }

  async onHeaders(headers: HttpHeaders): Promise<ProcessingResponse> {
    const response = readHead(headers.headers?.headers ?? []).headers;
    const attempts = Number(response.get('x-envoy-attempt-count')) || 1;
    const status = Number(response.get(':status'));
    // Only calls in a session, or of stateless clients to backends of a session-based revision, may
    // have met a backend that wants a (new) session.
    const statelessBackend = this.call.backendView.protocolVersion === MODERN_PROTOCOL_VERSION;
    const mayNeedSession = !statelessBackend && (this.call.session !== undefined || this.call.modern === true);
    if (mayNeedSession && status === 404) return this.resend(attempts);
    if (mayNeedSession && status === 400 && !headers.end_of_stream) {
      // Held whole (a short error) so that nothing reaches the client before the sidecar has read it.
      this.checkingBadRequest = attempts;
      return { response_headers: {}, mode_override: BUFFER_RESPONSE_BODY };
    }
    this.rewriter = responseRewriter(response.get('content-type') ?? '', this.call, this.facts(attempts), (outcome) => (this.outcome = outcome));
    if (!this.rewriter || headers.end_of_stream) return { response_headers: {} };
    // The body may change length: the response goes on without one (chunked, or HTTP/2 framing).
    return { response_headers: { response: { header_mutation: { remove_headers: ['content-length'] } } }, mode_override: STREAM_RESPONSE_BODY };
  }

  /** Synchronous for body chunks, so that their answers go out in their order. */
  onBody(body: HttpBody): ProcessingResponse | Promise<ProcessingResponse> {
    if (this.checkingBadRequest !== undefined) {
      return saysSessionUnknown(400, body.body) ? this.resend(this.checkingBadRequest) : { response_body: {} };
    }
    if (!this.rewriter) return { response_body: {} };
    const out = this.rewriter.push(body.body, body.end_of_stream);
    const answer = { response_body: out.equals(body.body) ? {} : { response: { body_mutation: { body: out } } } };
    if (!body.end_of_stream || !this.outcome) return answer;
    this.count(this.outcome);
    // For the access log.
    return { ...answer, ...dynamicMetadata({ outcome: this.outcome }) };
  }

  private count(outcome: CallOutcomeName): void {
    this.observer.toolCallFinished(this.call.route, this.call.backend, outcome, (performance.now() - this.startedAt) / 1000);
  }

  private async resend(attempts: number): Promise<ProcessingResponse> {
    this.write({ override_message_timeout: { seconds: String(RESEND_MESSAGE_TIMEOUT_S), nanos: 0 } });
    const call = { ...this.call, timeoutMs: Math.min(this.call.timeoutMs ?? RESEND_DEFAULT_TIMEOUT_MS, (RESEND_MESSAGE_TIMEOUT_S - 5) * 1000) };
    const answer = await resendInNewBackendSession(call, this.head, this.facts(attempts + 1), this.context);
    this.observer.decided(this.call.route, answer.reason);
    if (answer.metadata?.outcome) this.count(answer.metadata.outcome);
    // It carries the outcome for the access log in its metadata.
    return immediateResponse(answer);
  }
}

/**
 * envoy.service.ext_proc.v3.ExternalProcessor: one bidirectional stream per HTTP request. Envoy sends
 * the headers, then (BUFFERED) the whole body; each gets exactly one response. A steered tools/call
 * also sends its response headers and, when the sidecar asks for it (mode_override), its body chunks.
 */
export function extProcServiceHandlers(context: GatewayContext, observer: SidecarObserver = IGNORE): grpc.UntypedServiceImplementation {
  /** Route keys label metrics only when the route exists: clients choose the paths. */
  const routeLabel = (requestHead: RequestHead | undefined) => {
    const key = requestHead && routeKeyOf(requestHead.path).key;
    return key !== undefined && context.lookup(key) ? key : '(none)';
  };
  const observe = (decision: Decision, requestHead: RequestHead) => {
    if (decision.kind === 'read-body') return;
    const route = routeLabel(requestHead);
    observer.decided(route, decision.kind === 'respond' ? decision.reason : 'forward');
    context.log.debug('request decided', {
      route,
      method: requestHead.method,
      decision: decision.kind === 'respond' ? decision.reason : 'forward',
      ...(decision.kind === 'forward' && { cluster: decision.cluster }),
    });
    if (decision.kind === 'respond' && decision.metadata?.outcome && decision.metadata.backend) {
      observer.toolCallFinished(route, decision.metadata.backend, decision.metadata.outcome, 0);
    }
  };
  return {
    Process(call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) {
      let head: RequestHead | undefined;
      let toolCallResponse: ToolCallResponse | undefined;
      const startedAt = performance.now();
      const write = (response: ProcessingResponse) => call.write(response);
      // Envoy sends each message only after it has the answer to the one before, except streamed body
      // chunks, which are answered synchronously and so in order.
      call.on('data', async (request: ProcessingRequest) => {
        try {
          if (request.request_headers) {
            head = readHead(request.request_headers.headers?.headers ?? []);
            let decision = await decideOnHead(head, context);
            if (decision.kind === 'read-body' && request.request_headers.end_of_stream) {
              decision = await decideOnBody(head, Buffer.alloc(0), context);
            }
            observe(decision, head);
            write(toProcessingResponse(decision, 'request_headers', head));
          } else if (request.request_body && head) {
            const decision = await decideOnBody(head, request.request_body.body, context);
            observe(decision, head);
            if (decision.kind === 'forward' && decision.toolCall) {
              toolCallResponse = new ToolCallResponse(decision.toolCall, head, startedAt, context, observer, write);
            }
            write(toProcessingResponse(decision, 'request_body', head));
          } else if (request.response_headers) {
            write(toolCallResponse ? await toolCallResponse.onHeaders(request.response_headers) : { response_headers: {} });
          } else if (request.response_body) {
            const answer = toolCallResponse ? toolCallResponse.onBody(request.response_body) : { response_body: {} };
            write(answer instanceof Promise ? await answer : answer);
          }
        } catch (error) {
          context.log.error('ext_proc request failed', { error: (error as Error).stack, path: head?.path });
          if (request.request_headers || request.request_body) {
            // Nothing was decided: the client learns why, in JSON-RPC form (no backend is reached).
            write(immediateResponse(respondError(503, null, JSON_RPC.INTERNAL_ERROR, `gateway error: ${(error as Error).message}`, 'gateway_error')));
          } else {
            // On the response path Envoy fails open: the rest of the answer passes untouched.
            call.emit('error', { code: grpc.status.INTERNAL, details: (error as Error).message });
          }
        }
      });
      call.on('end', () => call.end());
      call.on('error', () => undefined);
    },
  };
}
