import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { listedTools, metricValue, startGateway, testDir, writeRegistry } from '../support/gateway-fixture';
import { callEcho, expectWhenServiceDown } from '../support/shared-limits';

/**
 * Shared limits: counted by the real ratelimit service (envoyproxy/ratelimit) on Redis for every
 * Envoy, and what each limit does while the service cannot answer (docs/quotas.md). Two gateways,
 * each with its own control plane, sidecar and Envoy, share one ratelimit service.
 */
describe('shared limits', () => {
  let first: GatewayStack;
  let second: GatewayStack;

  const registry = (b: { jobs: string }) => ({
    routes: [
      { key: 'shared', quotas: { calls: { total: { rate: '4/minute', shared: true } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
      { key: 'open', quotas: { calls: { perCaller: { rate: '100/minute', shared: true, whenServiceDown: 'allow' } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
      { key: 'closed', quotas: { calls: { perCaller: { rate: '100/minute', shared: true, whenServiceDown: 'refuse' } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
    ],
  });

  beforeAll(async () => {
    let backends: { jobs: string };
    ({ stack: first, backends } = await startGateway('quotas-shared', registry, { rateLimit: true }));
    const dir = testDir('quotas-shared-second');
    second = await GatewayStack.start({
      registryFile: writeRegistry(dir, registry(backends)),
      logDir: dir,
      sharedRateLimit: { socketPath: first.rateLimitSocket, configFile: first.rateLimitConfigFile },
    });
    for (const stack of [first, second]) {
      for (const route of ['shared', 'open', 'closed']) await waitFor(`route ${route} to serve tools`, async () => ((await listedTools(stack.gatewayUrl(route)))?.length ? true : undefined));
    }
  });
  afterAll(async () => {
    await second?.stop();
    await first?.stop();
  });

  const call = callEcho;

  it('counts a shared limit across two Envoys: the fifth call of four a minute is refused on either, naming the limit', async () => {
    for (const [stack, id] of [[first, 1], [second, 2], [first, 3], [second, 4]] as const) expect((await call(stack, 'shared', id)).status).toBe(200);
    for (const stack of [first, second]) {
      const refused = await call(stack, 'shared', 5);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(refused.json()).toMatchObject({
        id: 5,
        error: { code: -32029, message: expect.stringContaining('route:shared/calls'), data: { outcome: 'limited', details: 'request_rate_limited' } },
      });
    }
    await waitFor('the call log to count the refusal', async () =>
      (await metricValue(first, 'mcpgw_limited_requests_total', { route: 'shared', limit: 'route:shared/calls' })) >= 1 ? true : undefined,
    );
  });

  it('refuses a caller already over a shared limit from the service\'s memory: further refused calls add nothing to its count in Redis', async () => {
    // Over the limit of four a minute (already, after the test above).
    for (let id = 1; (await call(first, 'shared', id)).status !== 429; id++) expect(id).toBeLessThan(5);
    const redis = first.redisClient();
    try {
      // The service's key of this minute's count: <prefix><domain>_<key>_<value>_…_<window start, s>.
      const window = Math.floor(Date.now() / 60_000) * 60;
      const key = `mcpgw:ratelimit:mcpgw_limit_route:shared/calls_scope_shared_${window}`;
      const counted = await redis.get(key);
      expect(Number(counted)).toBeGreaterThan(4);
      for (const id of [6, 7, 8]) expect((await call(id % 2 ? first : second, 'shared', id)).status).toBe(429);
      expect(await redis.get(key)).toBe(counted);
    } finally {
      redis.disconnect();
    }
  });

  it('lets the calls of a whenServiceDown: allow limit through and refuses those of a refuse limit (503) while the service is down, and counts again once it is back', async () => {
    await expectWhenServiceDown(first, second);
  });
});
