import { GatewayStack } from '../../control-plane/devstack/stack';
import { waitFor } from '../../control-plane/devstack/processes';
import { FlakyToolService } from '../support/flaky-tool-service';
import { listedTools, metricValue, startGateway, toolCallAccessLog } from '../support/gateway-fixture';

/**
 * Seed 004 on the real path: retries only where safe, per-tool deadlines from the Tool Service's own
 * tools/list, a fallback for read-only tools, and attempts visible to the caller.
 */
describe('call resilience through the real Envoy', () => {
  let stack: GatewayStack;
  let flaky: FlakyToolService;
  let dir: string;
  const FALLBACK = 'reports are unavailable right now; last known status: green';

  beforeAll(async () => {
    flaky = await FlakyToolService.start();
    ({ stack, dir } = await startGateway('call-resilience', () => ({
      routes: [
        { key: 'ops', toolServices: [{ name: 'reports', url: flaky.url, fallback: { text: FALLBACK } }] },
        { key: 'readers', toolServices: [{ name: 'reports', url: flaky.url, fallback: { text: FALLBACK }, policy: { readOnly: true, denyTools: ['slow_*'] } }] },
      ],
    })));
    await waitFor('the flaky service tools', async () => ((await listedTools(stack.gatewayUrl('ops'))) ?? []).length === 4 ? true : undefined);
  });
  afterAll(async () => {
    await stack?.stop();
    await flaky?.stop();
  });

  async function call(tool: string, id: number, route = 'ops') {
    const response = await fetch(stack.gatewayUrl(route), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `reports__${tool}`, arguments: {} } }),
    });
    return { status: response.status, attempts: response.headers.get('x-envoy-attempt-count'), body: (await response.json()) as any };
  }

  it.each([
    ['read-only', 'read_report', 'report'],
    ['idempotent', 'put_setting', 'set'],
  ])('retries a %s tool that failed once, and reports the attempts', async (_kind, tool, text) => {
    flaky.received.clear();
    flaky.failNextCall(tool);
    const { status, attempts, body } = await call(tool, 1);
    expect(status).toBe(200);
    expect(body.result.content).toEqual([{ type: 'text', text }]);
    expect(attempts).toBe('2');
    expect(flaky.received.get(tool)).toBe(2);
    // The caller sees the outcome in the result itself (seed 004), not only in headers.
    expect(body.result._meta['mcpgw/outcome']).toEqual({
      outcome: 'ok',
      backend: 'reports',
      tool,
      attempts: 2,
      elapsed_ms: expect.any(Number),
      fallback_used: false,
    });
  });

  it('does not retry a tool that is neither read-only nor idempotent', async () => {
    flaky.received.clear();
    flaky.failNextCall('send_email');
    const { status, attempts, body } = await call('send_email', 2);
    expect(flaky.received.get('send_email')).toBe(1);
    expect(attempts).toBe('1');
    // The backend's own 503 answer reaches the caller as it was sent.
    expect(status).toBe(503);
    expect(body.error.message).toBe('temporarily unavailable');
    expect(body.error.data['mcpgw/outcome']).toMatchObject({ outcome: 'failed', attempts: 1, fallback_used: false, last_error: 'temporarily unavailable' });
  });

  it("enforces a tool's own deadline from its tools/list _meta", async () => {
    const { status, body } = await call('slow_read', 3);
    expect(status).toBe(200);
    expect(body.error).toMatchObject({ code: -32004, data: { http_status: 504, tool: 'slow_read', outcome: 'failed' } });
    // Envoy's timer and its %DURATION% clock differ by a millisecond or two.
    expect(body.error.data.elapsed_ms).toBeGreaterThanOrEqual(290);
  });

  it("keeps tools the route's policy denies out of its list, and answers their calls with the denied outcome", async () => {
    expect(await listedTools(stack.gatewayUrl('readers'))).toEqual(['reports__read_report']);
    flaky.received.clear();
    const { status, body } = await call('send_email', 6, 'readers');
    expect(status).toBe(200);
    expect(body.error).toEqual({
      code: -32003,
      message: 'tool "reports__send_email" is denied on route "readers" by policy (readOnly: the tool is not annotated readOnlyHint: true)',
      data: expect.objectContaining({ outcome: 'denied', backend: 'reports', tool: 'send_email', attempts: 0, fallback_used: false }),
    });
    expect(flaky.received.get('send_email')).toBeUndefined();
    expect((await call('slow_read', 7, 'readers')).body.error.data.rule).toBe('denyTools "slow_*"');
  });

  it('answers a read-only tool with the fallback when the Tool Service is gone, and fails the others', async () => {
    await flaky.stop();
    const degraded = await call('read_report', 4);
    expect(degraded.status).toBe(200);
    expect(degraded.body).toMatchObject({
      jsonrpc: '2.0',
      id: 4,
      result: {
        content: [{ type: 'text', text: FALLBACK }],
        isError: false,
        _meta: { 'mcpgw/outcome': { outcome: 'degraded', fallback_used: true, backend: 'reports', tool: 'read_report' } },
      },
    });
    expect(degraded.body.result._meta['mcpgw/outcome'].attempts).toBeGreaterThanOrEqual(1);

    const failed = await call('send_email', 5);
    expect(failed.body.error).toMatchObject({ code: -32004, data: { outcome: 'failed', fallback_used: false, http_status: 503 } });
  });

  // Last: it reads what the tests above did.
  it("counts every outcome in the control plane's metrics (from Envoy's call log) and writes it to the access log", async () => {
    const calls = (outcome: string) =>
      metricValue(stack, 'mcpgw_tool_calls_total', { route: outcome === 'denied' ? 'readers' : 'ops', backend: 'reports', outcome });
    // Envoy sends its call log in batches, each worker its own: wait for every outcome, not the first batch.
    const counted = async () => ({ ok: await calls('ok'), failed: await calls('failed'), degraded: await calls('degraded'), denied: await calls('denied') });
    const atLeastExpected = (seen: Awaited<ReturnType<typeof counted>>) => seen.ok >= 2 && seen.failed >= 3 && seen.degraded >= 1 && seen.denied >= 2;
    let last: Awaited<ReturnType<typeof counted>> | undefined;
    const seen = await waitFor('every outcome in the call log at the control plane', async () => {
      last = await counted();
      return atLeastExpected(last) ? last : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}; last counted ${JSON.stringify(last)}`);
    });
    expect(seen.ok).toBe(2);
    expect(seen.failed).toBeGreaterThanOrEqual(3);
    expect(seen.degraded).toBe(1);
    expect(seen.denied).toBe(2);
    await waitFor('the access log to be written', async () => (toolCallAccessLog(dir).length >= 8 ? true : undefined));
    const outcomes = toolCallAccessLog(dir).map((entry) => `${entry.tool} ${entry.outcome}`);
    expect(outcomes).toEqual(expect.arrayContaining(['read_report ok', 'send_email failed', 'read_report degraded', 'send_email denied', 'slow_read failed']));
  });
});
