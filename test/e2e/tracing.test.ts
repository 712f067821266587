import * as path from 'node:path';
import { Span, SpanKind } from '@opentelemetry/api';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, listedTools, postJsonRpc, testDir, writeRegistry } from '../support/gateway-fixture';
import { Jaeger, StoredSpan, startJaeger } from '../support/jaeger';
import { TestTracer, TracedToolService, traceparentOf } from '../support/traced-tool-service';

/**
 * Traces through the whole gateway (docs/observability.md#traces): a real Jaeger receives OTLP from
 * Envoy 1.40's OpenTelemetry tracer, the sidecar and the control plane, and from the test's own agent
 * and Tool Services (OpenTelemetry JS), and is read back through its query API.
 */

const TRACESTATE = 'agent=1,vendor=x';

/** An MCP SDK client whose every request carries the agent's span as its trace context. */
async function agentClient(url: string, span: Span): Promise<Client> {
  const client = new Client({ name: 'traced-agent', version: '1.0.0' });
  const traceHeaders = { traceparent: traceparentOf(span), tracestate: TRACESTATE };
  const tracedFetch: typeof fetch = (input, init) => fetch(input, { ...init, headers: { ...Object.fromEntries(new Headers(init?.headers)), ...traceHeaders } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: tracedFetch }));
  return client;
}

const spanNamed = (spans: StoredSpan[], service: string, operation: string) => spans.find((span) => span.service === service && span.operationName === operation);
/** The parent span id a traceparent names. */
const parentIdIn = (traceparent: string | undefined) => traceparent?.split('-')[2];

/**
 * Jaeger, the test's agent and Tool Services (each exporting its spans to it), and a gateway in front of
 * those Tool Services on route `traced`, with tracing to Jaeger at `samplingRatio`.
 */
class TracedGateway {
  private constructor(
    readonly jaeger: Jaeger,
    readonly agent: TestTracer,
    private readonly backendTracer: TestTracer,
    readonly services: Map<string, TracedToolService>,
    readonly stack: GatewayStack,
  ) {}

  static async start(name: string, services: [kind: 'sessions' | 'modern', name: string][], samplingRatio: number): Promise<TracedGateway> {
    const dir = testDir(name);
    const jaeger = await startJaeger(path.join(dir, 'jaeger'));
    const backendTracer = new TestTracer(jaeger.otlpHttpUrl, 'test-backend');
    const started = await Promise.all(services.map(([kind, serviceName]) => TracedToolService.start(kind, serviceName, backendTracer)));
    const registry = { routes: [{ key: 'traced', toolServices: started.map((service) => ({ id: service.name, name: service.name, url: service.url })) }] };
    const stack = await GatewayStack.start({
      registryFile: writeRegistry(dir, registry),
      logDir: dir,
      tracing: { otlpEndpoint: jaeger.otlpHttpUrl, samplingRatio },
      catalogRefreshMs: 600_000,
    });
    const gateway = new TracedGateway(jaeger, new TestTracer(jaeger.otlpHttpUrl, 'test-agent'), backendTracer, new Map(started.map((service) => [service.name, service])), stack);
    await waitFor('every backend in the catalog', async () => (((await listedTools(gateway.url)) ?? []).length === services.length ? true : undefined));
    return gateway;
  }

  get url(): string {
    return this.stack.gatewayUrl('traced');
  }

  service(name: string): TracedToolService {
    return this.services.get(name)!;
  }

  async stop(): Promise<void> {
    await this.stack.stop();
    await Promise.all([...this.services.values()].map((service) => service.stop()));
    await this.agent.shutdown();
    await this.backendTracer.shutdown();
    await this.jaeger.stop();
  }
}

describe('traces of calls through the gateway (real Jaeger, Envoy 1.40, sidecar, control plane, Redis)', () => {
  let gateway: TracedGateway;
  let jaeger: Jaeger;
  let agent: TestTracer;
  let sessions: TracedToolService;
  let modern: TracedToolService;

  beforeAll(async () => {
    gateway = await TracedGateway.start('tracing', [['sessions', 'sessions'], ['modern', 'modern'], ['sessions', 'doomed']], 1);
    ({ jaeger, agent } = gateway);
    [sessions, modern] = [gateway.service('sessions'), gateway.service('modern')];
  });
  afterAll(async () => gateway?.stop());

  it("holds the agent's span, mcp.gateway.forward and the backend's span in that order, with the MCP attributes; tracestate reaches the backend", async () => {
    const span = agent.tracer.startSpan('agent task', { kind: SpanKind.CLIENT });
    const client = await agentClient(gateway.url, span);
    const result = await client.callTool({ name: 'sessions__echo', arguments: { text: 'traced' } });
    await client.close();
    span.end();
    expect(result.content).toEqual([{ type: 'text', text: 'traced' }]);

    const { traceId, spanId: agentSpanId } = span.spanContext();
    const call = sessions.requests('tools/call').at(-1)!;
    expect(call.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(parentIdIn(call.traceparent)).not.toBe(agentSpanId);
    expect(call.tracestate).toBe(TRACESTATE);

    const spans = await jaeger.untilTrace(traceId, (found) =>
      spanNamed(found, 'test-agent', 'agent task') && spanNamed(found, 'test-backend', 'sessions tools/call') && spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward') ? found : undefined,
    );
    const forward = spanNamed(spans, 'mcpgw-envoy', 'mcp.gateway.forward')!;
    expect(forward.parentSpanId).toBe(agentSpanId);
    expect(forward.spanId).toBe(parentIdIn(call.traceparent));
    expect(spanNamed(spans, 'test-backend', 'sessions tools/call')!.parentSpanId).toBe(forward.spanId);
    expect(forward.tags).toMatchObject({
      'mcp.method.name': 'tools/call',
      'mcp.gateway.route': 'traced',
      'mcp.gateway.backend': 'sessions',
      'gen_ai.tool.name': 'echo',
      'mcp.gateway.outcome': 'ok',
      'mcp.gateway.attempts': '1',
      'mcp.session.present': 'true',
      'span.kind': 'server',
    });
    expect(forward.tags['otel.status_code']).toBeUndefined();
    // The sidecar answered initialize in the same trace, under its own span name.
    expect(spans.some((stored) => stored.operationName === 'mcp.gateway.answer' && stored.tags['mcp.method.name'] === 'initialize')).toBe(true);
  });

  it("puts the sidecar's session check and the backend session it opens into the call's trace; the backend's initialize hangs under the open", async () => {
    const span = agent.tracer.startSpan('agent task', { kind: SpanKind.CLIENT });
    const client = await agentClient(gateway.url, span);
    await client.callTool({ name: 'sessions__echo', arguments: { text: 'first call of a session' } });
    await client.close();
    span.end();
    const { traceId } = span.spanContext();
    const initialize = sessions.requests('initialize').find((request) => request.traceparent?.includes(traceId))!;

    const spans = await jaeger.untilTrace(traceId, (found) =>
      spanNamed(found, 'mcpgw-sidecar', 'mcp.sidecar.backend_session.open') &&
      spanNamed(found, 'test-backend', 'sessions initialize') &&
      spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward')
        ? found
        : undefined,
    );
    const check = spanNamed(spans, 'mcpgw-sidecar', 'mcp.sidecar.session_check')!;
    const open = spanNamed(spans, 'mcpgw-sidecar', 'mcp.sidecar.backend_session.open')!;
    const forward = spanNamed(spans, 'mcpgw-envoy', 'mcp.gateway.forward')!;
    expect(check.tags).toMatchObject({ 'mcp.gateway.route': 'traced', 'mcp.gateway.backend': 'sessions', 'gen_ai.tool.name': 'echo', 'mcp.session.present': true });
    // Under the call's span (directly, or under Envoy's span of the ext_authz request it makes).
    const ancestors = (stored: StoredSpan | undefined): string[] => (stored?.parentSpanId ? [stored.parentSpanId, ...ancestors(spans.find((other) => other.spanId === stored.parentSpanId))] : []);
    expect(ancestors(check)).toContain(forward.spanId);
    expect(open.parentSpanId).toBe(check.spanId);
    expect(open.tags).toMatchObject({ 'mcp.gateway.backend': 'sessions', 'mcp.gateway.tool_service': 'sessions' });
    expect(parentIdIn(initialize.traceparent)).toBe(open.spanId);
    expect(spanNamed(spans, 'test-backend', 'sessions initialize')!.parentSpanId).toBe(open.spanId);
  });

  it("makes the control plane's catalog fetches spans, parents of the Tool Service's own", async () => {
    const fetched = await waitFor('a traced tools/list of the control plane', async () => {
      const traces = await jaeger.traces('mcpgw-control-plane', 'mcp.catalog.tools_list');
      return traces.find((spans) => spanNamed(spans, 'test-backend', 'sessions tools/list'));
    }, { timeoutMs: 30_000, intervalMs: 500 });
    const listing = spanNamed(fetched, 'mcpgw-control-plane', 'mcp.catalog.tools_list')!;
    expect(listing.tags).toMatchObject({ 'mcp.gateway.tool_service': 'sessions', 'mcp.gateway.tools': 1, 'span.kind': 'client' });
    expect(spanNamed(fetched, 'test-backend', 'sessions tools/list')!.parentSpanId).toBe(listing.spanId);
  });

  it('writes the gateway span into params._meta of a 2026-07-28 request, so that a stateless backend reading it hangs under it', async () => {
    const span = agent.tracer.startSpan('agent task', { kind: SpanKind.CLIENT });
    const traceparent = traceparentOf(span);
    const answer = await postJsonRpc(
      gateway.url,
      {
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: {
          name: 'modern__echo',
          arguments: { text: 'stateless' },
          _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientCapabilities': {},
            traceparent,
            tracestate: TRACESTATE,
          },
        },
      },
      { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'modern__echo', traceparent, tracestate: TRACESTATE },
    );
    span.end();
    expect(answer.status).toBe(200);
    const { traceId, spanId: agentSpanId } = span.spanContext();
    const call = modern.requests('tools/call').at(-1)!;
    expect(call.metaTraceparent).toBe(call.traceparent);
    expect(call.metaTraceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(parentIdIn(call.metaTraceparent)).not.toBe(agentSpanId);

    const spans = await jaeger.untilTrace(traceId, (found) => (spanNamed(found, 'test-backend', 'modern tools/call') && spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward') ? found : undefined));
    const forward = spanNamed(spans, 'mcpgw-envoy', 'mcp.gateway.forward')!;
    expect(forward.parentSpanId).toBe(agentSpanId);
    expect(forward.tags).toMatchObject({ 'mcp.gateway.backend': 'modern', 'mcp.session.present': 'false' });
    expect(spanNamed(spans, 'test-backend', 'modern tools/call')!.parentSpanId).toBe(forward.spanId);
  });

  it("traces a call without trace context in a trace of Envoy's own, with the MCP attributes (the span ids filter skips it)", async () => {
    const answer = await postJsonRpc(
      gateway.url,
      { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'modern__echo', arguments: { text: 'untraced' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } },
      { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'modern__echo' },
    );
    expect(answer.status).toBe(200);
    const call = modern.requests('tools/call').at(-1)!;
    const [, traceId, forwardSpanId] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(call.traceparent ?? '') ?? [];
    expect(traceId).toBeDefined();
    expect(call.metaTraceparent).toBeUndefined();

    const forward = await jaeger.untilTrace(traceId, (found) => spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward'));
    expect(forward.spanId).toBe(forwardSpanId);
    expect(forward.parentSpanId).toBeUndefined();
    expect(forward.tags).toMatchObject({ 'mcp.gateway.backend': 'modern', 'mcp.gateway.outcome': 'ok', 'mcp.gateway.attempts': '1', 'mcp.session.present': 'false' });
  });

  it('gives a failed call error status and its outcome', async () => {
    await gateway.service('doomed').stop();
    const span = agent.tracer.startSpan('agent task', { kind: SpanKind.CLIENT });
    const answer = await postJsonRpc(
      gateway.url,
      { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'doomed__echo', arguments: { text: 'nobody home' } } },
      { ...MCP_POST_HEADERS, traceparent: traceparentOf(span) },
    );
    span.end();
    expect(answer.status).toBe(200);
    expect(answer.json().error.data).toMatchObject({ outcome: 'failed', backend: 'doomed' });

    const forward = await jaeger.untilTrace(span.spanContext().traceId, (found) => spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward'));
    expect(forward.tags).toMatchObject({
      'otel.status_code': 'ERROR',
      error: true,
      'mcp.gateway.outcome': 'failed',
      'mcp.gateway.backend': 'doomed',
      'http.status_code': '503',
    });
  });
});

describe('traces with sampling off (ratio 0)', () => {
  let gateway: TracedGateway;

  beforeAll(async () => {
    gateway = await TracedGateway.start('tracing-unsampled', [['sessions', 'sessions']], 0);
  });
  afterAll(async () => gateway?.stop());

  it("exports nothing of calls it starts or whose caller does not sample, and follows a caller's sampled flag", async () => {
    const { agent, jaeger } = gateway;
    const sessions = gateway.service('sessions');
    const call = (headers: Record<string, string>) =>
      postJsonRpc(gateway.url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'sessions__echo', arguments: { text: 'x' } } }, { ...MCP_POST_HEADERS, ...headers });
    // No session: the call goes without the session check (a session-era backend refuses it, which is all this needs).
    await call({});
    const unsampled = agent.tracer.startSpan('unsampled agent task');
    await call({ traceparent: traceparentOf(unsampled).replace(/-01$/, '-00') });
    expect(sessions.requests('tools/call').at(-1)!.traceparent).toMatch(/-00$/);
    const sampled = agent.tracer.startSpan('sampled agent task');
    await call({ traceparent: traceparentOf(sampled) });
    sampled.end();

    // Once the sampled call's span arrived, Envoy has exported what it had: it is the only one.
    await jaeger.untilTrace(sampled.spanContext().traceId, (found) => spanNamed(found, 'mcpgw-envoy', 'mcp.gateway.forward'));
    const envoyTraces = await jaeger.traces('mcpgw-envoy');
    const envoySpans = envoyTraces.flat().filter((span) => span.service === 'mcpgw-envoy');
    expect(envoySpans.map((span) => `${span.traceId} ${span.operationName} ${span.tags['mcp.method.name']}`)).toEqual([
      `${sampled.spanContext().traceId} mcp.gateway.forward tools/call`,
    ]);
    expect(await jaeger.traces('mcpgw-control-plane')).toEqual([]);
    expect(await jaeger.traces('mcpgw-sidecar')).toEqual([]);
  });
});
