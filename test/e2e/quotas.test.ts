import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { SampleBackends, envoyStat, listedTools, metricValue, startGateway } from '../support/gateway-fixture';
import { clientFrom, fetchFrom, refusal } from '../support/callers';

/**
 * Per-instance limits (Envoy's local_ratelimit) and concurrency limits, through the real Envoy with
 * real MCP SDK clients (docs/quotas.md). Callers of a route without auth are told apart by their
 * address: one client comes from 127.0.0.1, the other from 127.0.0.2.
 */

describe('per-instance limits and concurrency limits', () => {
  let stack: GatewayStack;
  /** The cluster of the Tool Service with a concurrency limit: the limit is its circuit breaker. */
  let busyCluster: string;
  const busyJobs = (url: string) => ({ id: 'jobs-two-at-a-time', name: 'jobs', url, quotas: { concurrency: { total: 2 } } });

  beforeAll(async () => {
    let backends: SampleBackends;
    ({ stack, backends } = await startGateway('quotas', (b) => ({
      quotas: { discovery: { perCaller: '1000/minute' } },
      routes: [
        { key: 'callers', quotas: { calls: { perCaller: '3/minute' } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
        {
          key: 'tools',
          toolServices: [
            { id: 'weather-limited', name: 'weather', url: b.weather, quotas: { tools: [{ tools: ['get_forecast'], calls: { total: '2/minute' } }] } },
          ],
        },
        { key: 'discovery', quotas: { discovery: { perCaller: '2/minute' } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
        {
          key: 'busy',
          toolServices: [busyJobs(b.jobs)],
        },
      ],
    })));
    busyCluster = buildGatewayIR({ routes: [{ key: 'busy', toolServices: [busyJobs(backends.jobs)] }] }).clusters[0].clusterName;
    for (const route of ['callers', 'tools', 'busy']) await waitFor(`route ${route} to serve tools`, async () => ((await listedTools(stack.gatewayUrl(route)))?.length ? true : undefined));
  });
  afterAll(async () => stack?.stop());

  it("refuses a caller over its limit with 429, Retry-After and a JSON-RPC error naming the limit, while another caller on the route goes on", async () => {
    const first = await clientFrom(stack.gatewayUrl('callers'), '127.0.0.1');
    const second = await clientFrom(stack.gatewayUrl('callers'), '127.0.0.2');
    try {
      for (let call = 0; call < 3; call++) {
        expect((await first.client.callTool({ name: 'jobs__echo', arguments: { text: `call ${call}` } })).content).toEqual([{ type: 'text', text: `call ${call}` }]);
      }
      const refused = await refusal(first.client.callTool({ name: 'jobs__echo', arguments: { text: 'one too many' } }));
      expect(refused.status).toBe(429);
      expect(refused.error).toMatchObject({
        code: -32029,
        message: expect.stringContaining('route:callers/calls/per-caller'),
        data: { outcome: 'limited', limit: 'route:callers/calls/per-caller', backend: 'jobs', tool: 'echo' },
      });
      expect(Number(refused.error.data.retry_after_s)).toBeGreaterThan(0);
      expect((await second.client.callTool({ name: 'jobs__echo', arguments: { text: 'unaffected' } })).content).toEqual([{ type: 'text', text: 'unaffected' }]);
    } finally {
      await Promise.all([first.close(), second.close()]);
    }
  });

  it('answers the raw refusal with HTTP 429, Retry-After and the JSON-RPC id of the request', async () => {
    const { fetch, close } = fetchFrom('127.0.0.3');
    try {
      const call = (id: number) =>
        fetch!(stack.gatewayUrl('callers'), {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'jobs__echo' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id,
            method: 'tools/call',
            params: { name: 'jobs__echo', arguments: { text: 'x' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
          }),
        });
      for (let id = 1; id <= 3; id++) expect((await call(id)).status).toBe(200);
      const response = await call(42);
      expect(response.status).toBe(429);
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(response.headers.get('content-type')).toBe('application/json');
      expect(response.headers.get('x-mcpgw-limit')).toBe('route:callers/calls/per-caller');
      expect(await response.json()).toMatchObject({ jsonrpc: '2.0', id: 42, error: { code: -32029 } });
    } finally {
      await close();
    }
  });

  it("refuses a tool over its tool-level limit and leaves the Tool Service's other tools alone", async () => {
    const { client, close } = await clientFrom(stack.gatewayUrl('tools'), '127.0.0.1');
    try {
      for (let call = 0; call < 2; call++) await client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Oslo' } });
      const refused = await refusal(client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Oslo' } }));
      expect(refused.status).toBe(429);
      expect(refused.error).toMatchObject({ code: -32029, data: { limit: 'tool:weather-limited/get_forecast/calls', tool: 'get_forecast' } });
      for (let call = 0; call < 4; call++) {
        expect((await client.callTool({ name: 'weather__get_alerts', arguments: { region: 'north' } })).content).toEqual([{ type: 'text', text: 'No alerts for north' }]);
      }
    } finally {
      await close();
    }
  });

  it('limits what the gateway answers itself with its own limit, apart from the calls', async () => {
    const url = stack.gatewayUrl('discovery');
    const list = async (address: string) => {
      const { fetch, close } = fetchFrom(address);
      try {
        const response = await fetch!(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/list' }),
        });
        return { status: response.status, body: await response.json() };
      } finally {
        await close();
      }
    };
    expect((await list('127.0.0.4')).status).toBe(200);
    expect((await list('127.0.0.4')).status).toBe(200);
    const refused = await list('127.0.0.4');
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ id: 5, error: { code: -32029, data: { limit: 'route:discovery/discovery/per-caller' } } });
    expect((await list('127.0.0.5')).status).toBe(200);
    // A tools/call of the refused caller is counted by the route's call limits, not its discovery limit.
    const { client, close } = await clientFrom(url, '127.0.0.6');
    try {
      expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'still' } })).content).toEqual([{ type: 'text', text: 'still' }]);
    } finally {
      await close();
    }
  });

  it('refuses a call past the Tool Service\'s calls in flight at once (429) while two calls hang, and serves again once they end', async () => {
    const url = stack.gatewayUrl('busy');
    const hanging = await Promise.all([0, 1].map(() => clientFrom(url, '127.0.0.1')));
    const calls = hanging.map(({ client }) => client.callTool({ name: 'jobs__run_job', arguments: { steps: 200, interval_ms: 100 } }, undefined, { timeout: 60_000 }).catch(() => undefined));
    const other = await clientFrom(url, '127.0.0.2');
    try {
      // Both hanging calls hold the Tool Service's slots (its cluster's circuit breaker is at capacity)
      // before the other caller asks: asked sooner, its call could take a slot a hanging call then lacks.
      await waitFor('two calls in flight to the Tool Service', async () => ((await envoyStat(stack, `cluster.${busyCluster}.circuit_breakers.default.rq_open`)) === 1 ? true : undefined));
      const refused = await refusal(other.client.callTool({ name: 'jobs__echo', arguments: { text: 'x' } }));
      expect(refused.status).toBe(429);
      expect(refused.error).toMatchObject({ code: -32029, data: { outcome: 'limited', limit: 'tool-service:jobs-two-at-a-time/concurrency', in_flight_limit: 2 } });
      await Promise.all(hanging.map(({ close }) => close()));
      await Promise.all(calls);
      await waitFor('the Tool Service to take calls again', async () =>
        (await other.client.callTool({ name: 'jobs__echo', arguments: { text: 'after' } }).catch(() => undefined)) ? true : undefined,
      );
    } finally {
      await other.close();
    }
  });

  it('counts refused calls as limited in the call metrics, and every refusal by its limit', async () => {
    // The call log arrives in batches (every second): the last refusal of the tests above included.
    await waitFor('the call log to report the refusals', async () =>
      (await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'callers', outcome: 'limited' })) >= 2 &&
      (await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'busy' })) >= 1
        ? true
        : undefined,
    );
    expect(await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'tools', backend: 'weather', outcome: 'limited' })).toBe(1);
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'callers', lane: 'calls', limit: 'route:callers/calls/per-caller' })).toBe(2);
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'tools', lane: 'calls', limit: 'tool:weather-limited/get_forecast/calls' })).toBe(1);
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'discovery', lane: 'discovery', limit: 'route:discovery/discovery/per-caller' })).toBe(1);
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'busy', lane: 'calls', limit: 'tool-service:jobs-two-at-a-time/concurrency' })).toBeGreaterThanOrEqual(1);
  });
});
