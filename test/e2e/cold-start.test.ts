import Redis from 'ioredis';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, callToolContent, controlPlaneStatus, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';

/** docs/adr/0000-portal-registry-decisions.md §7: a cold start with the Portal and a backend down serves the routes and tools Redis kept. */
describe('cold start from Redis last-good (real Redis, Envoy, Portal client)', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let redis: Redis;

  beforeAll(async () => {
    ({ stack, backends } = await startGateway('cold-start', (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }],
    })));
    redis = new Redis(stack.redisUrl);
  });

  afterAll(async () => {
    redis?.disconnect();
    await stack?.stop();
  });

  it('keeps one Redis hash per route with its mapping and its catalog', async () => {
    const saved = await waitFor('the route to be saved with both catalogs', async () => {
      const fields = await redis.hgetall('mcpgw:route:demo');
      return fields.catalog && JSON.parse(fields.catalog).length === 2 ? fields : undefined;
    });
    expect(JSON.parse(saved.mapping)).toMatchObject({ key: 'demo', toolServices: [{ name: 'weather' }, { name: 'jobs' }] });
    expect(await redis.smembers('mcpgw:routes')).toEqual(['demo']);
  });

  it('brings routes and tools back when the Portal and a backend are down at start', async () => {
    for (const name of ['sidecar', 'control-plane', 'portal', `tool-service-weather-${backends.ports.weather}`]) await stack.stopProcess(name);
    await stack.startControlPlane();
    await stack.startSidecar();

    const status = await controlPlaneStatus(stack);
    expect(status.registry.origin).toBe('redis-last-good');
    expect(status.registry.lastError.message).toMatch(/Portal unreachable/);
    const tools = await waitFor('the restored tools through Envoy', () => listedToolsOnceServed(stack.gatewayUrl('demo')), { timeoutMs: 5000 });
    expect(tools).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts']);

    const weather = await waitFor('the weather backend to be reported', async () => {
      const backend = (await controlPlaneStatus(stack)).catalog.routes[0].backends.find((b: { name: string }) => b.name === 'weather');
      return backend.last_error && !/restored from Redis/.test(backend.last_error) ? backend : undefined;
    });
    expect(weather).toMatchObject({ state: 'stale', tools: 2 });
    expect((await controlPlaneStatus(stack)).readiness).toEqual({ status: 'UP', readyRoutes: ['demo'], routesWithoutSnapshot: [] });

    expect(await callToolContent(stack.gatewayUrl('demo'), 'jobs__echo', { text: 'after a cold start' })).toEqual([
      { type: 'text', text: 'after a cold start' },
    ]);
  });
});
