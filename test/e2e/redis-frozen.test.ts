import Redis from 'ioredis';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, listedTools, postJsonRpc, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';

/**
 * A Redis that hangs (SIGSTOP: its port still accepts connections, nothing is answered) costs a
 * session request a clear error naming Redis, never a hang, and costs the control plane nothing but
 * its last-good copies. Real Envoy, sidecar, control plane, Redis and SDK Tool Services.
 */
describe('a frozen Redis (SIGSTOP)', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  const redisProcess = () => stack.processes.get('redis')!.child;

  beforeAll(async () => {
    ({ stack, backends } = await startGateway('redis-frozen', (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }],
    })));
    await waitFor('the route', () => listedToolsOnceServed(stack.gatewayUrl('demo')));
  });

  afterAll(async () => {
    redisProcess()?.kill('SIGCONT');
    await stack?.stop();
  });

  it('runs the Redis it starts with a memory bound that evicts only keys with a TTL (sessions), never last-good state', async () => {
    const redis = new Redis(stack.redisUrl);
    try {
      expect(await redis.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'volatile-lru']);
      expect(Number((await redis.config('GET', 'maxmemory'))[1])).toBe(256 * 1024 * 1024);
      expect(await redis.ttl('mcpgw:route:demo')).toBe(-1);
    } finally {
      redis.disconnect();
    }
    // The control plane has saved its last-good copies by now; every later write meets the frozen Redis.
    redisProcess().kill('SIGSTOP');
  });

  it('answers an initialize with a JSON-RPC error naming Redis, from the sidecar, not as "sidecar unavailable"', async () => {
    const initialize = await postJsonRpc(stack.gatewayUrl('demo'), {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'agent', version: '1' } },
    });
    expect(initialize.json().error.message).toMatch(/session store \(Redis\) unavailable: Command timed out/);
    expect(initialize.json().error.message).not.toContain('sidecar unavailable');
  });

  it('keeps serving what needs no session', async () => {
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts']);
    const call = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'no session' } } });
    expect(call.text).toContain('no session');
  });

  it('applies registry changes one after the other although the last-good store cannot save them', async () => {
    await stack.setPortalRegistry({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] },
        { key: 'late', toolServices: [{ name: 'jobs', url: backends.jobs }] },
      ],
    });
    // Well inside the catalog refresh interval (30 s): the new route's tools come from the update itself.
    expect(await waitFor('the new route', () => listedToolsOnceServed(stack.gatewayUrl('late')), { timeoutMs: 10_000 })).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);
    await stack.setPortalRegistry({ routes: [{ key: 'late', toolServices: [{ name: 'weather', url: backends.weather }] }] });
    await waitFor('the second change', async () => ((await listedTools(stack.gatewayUrl('demo'))) === undefined ? true : undefined), { timeoutMs: 10_000 });
    expect(await waitFor('the changed route', async () => {
      const tools = await listedTools(stack.gatewayUrl('late'));
      return tools?.[0]?.startsWith('weather__') ? tools : undefined;
    }, { timeoutMs: 10_000 })).toEqual(['weather__get_forecast', 'weather__get_alerts']);
    const call = await postJsonRpc(stack.gatewayUrl('late'), { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'weather__get_forecast', arguments: { city: 'Oslo' } } });
    expect(call.text).toContain('Forecast for Oslo');
  });
});
