import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { envoyStat, listedTools, metricValue, startGateway, testDir, writeRegistry } from '../support/gateway-fixture';
import { callEcho, expectWhenServiceDown } from '../support/shared-limits';

/**
 * Leased shared limits (docs/adr/0016-quotas.md, "Leased shared limits"): with
 * --shared-limit-lease-workers, each Envoy worker's call script takes tokens of a shared limit from the
 * real ratelimit service (envoyproxy/ratelimit on Redis) a lease at a time and spends them itself. Two
 * gateways, each with its own control plane, sidecar and Envoy (two workers each here), share one
 * ratelimit service; the control plane is told of four workers, so a lease is a limit / 80.
 */
describe('leased shared limits', () => {
  const WORKERS = 4;
  // A day's window: the test never sees it end (a minute's could, and would count anew).
  const LEASED = 400;
  const LEASE = Math.floor(LEASED / (20 * WORKERS));
  let first: GatewayStack;
  let second: GatewayStack;

  const registry = (b: { jobs: string }) => ({
    routes: [
      { key: 'small', quotas: { calls: { total: { rate: '4/minute', shared: true } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
      {
        key: 'leased',
        quotas: { calls: { total: { rate: `${LEASED}/day`, shared: true } } },
        toolServices: [{ id: 'jobs-leased', name: 'jobs', url: b.jobs, quotas: { tools: [{ tools: ['echo'], calls: { perCaller: { rate: `${LEASED * 2}/day`, shared: true } } }] } }],
      },
      { key: 'open', quotas: { calls: { perCaller: { rate: '10/minute', shared: true, whenServiceDown: 'allow' } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
      { key: 'closed', quotas: { calls: { perCaller: { rate: '10/minute', shared: true, whenServiceDown: 'refuse' } } }, toolServices: [{ name: 'jobs', url: b.jobs }] },
    ],
  });
  const leaseArgs = ['--shared-limit-lease-workers', String(WORKERS)];

  beforeAll(async () => {
    let backends: { jobs: string };
    ({ stack: first, backends } = await startGateway('quotas-leased', registry, { rateLimit: true, controlPlaneArgs: leaseArgs }));
    const dir = testDir('quotas-leased-second');
    second = await GatewayStack.start({
      registryFile: writeRegistry(dir, registry(backends)),
      logDir: dir,
      sharedRateLimit: { socketPath: first.rateLimitSocket, configFile: first.rateLimitConfigFile },
      controlPlaneArgs: leaseArgs,
    });
    for (const stack of [first, second]) {
      for (const route of ['small', 'leased', 'open', 'closed']) await waitFor(`route ${route} to serve tools`, async () => ((await listedTools(stack.gatewayUrl(route)))?.length ? true : undefined));
    }
  });
  afterAll(async () => {
    await second?.stop();
    await first?.stop();
  });

  const call = callEcho;
  const serviceRequests = async () => (await envoyStat(first, 'cluster.mcpgw_ratelimit.upstream_rq_total')) + (await envoyStat(second, 'cluster.mcpgw_ratelimit.upstream_rq_total'));

  it('keeps a limit too small to lease exact (one token per call): the fifth call of four a minute is refused on either Envoy, naming the limit', async () => {
    for (const [stack, id] of [[first, 1], [second, 2], [first, 3], [second, 4]] as const) expect((await call(stack, 'small', id)).status).toBe(200);
    for (const stack of [first, second]) {
      const refused = await call(stack, 'small', 5);
      expect(refused.status).toBe(429);
      expect(refused.headers.get('x-mcpgw-limit')).toBe('route:small/calls');
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(refused.json()).toMatchObject({
        id: 5,
        error: { code: -32029, message: expect.stringContaining('route:small/calls'), data: { outcome: 'limited', limit: 'route:small/calls', details: 'request_rate_limited' } },
      });
    }
    await waitFor('the call log to count the refusal', async () =>
      (await metricValue(first, 'mcpgw_limited_requests_total', { route: 'small', limit: 'route:small/calls' })) >= 1 ? true : undefined,
    );
  });

  it('never lets more calls through than a leased limit across two Envoys, asks the service about once a lease, and refuses past it without asking', async () => {
    const before = await serviceRequests();
    let served = 0;
    let made = 0;
    let refused: Awaited<ReturnType<typeof call>> | undefined;
    // Alternating between the Envoys until both refuse (each may hold a few tokens the other cannot spend).
    for (let idle = 0; idle < 20; made++) {
      const answer = await call(made % 2 ? second : first, 'leased', made);
      if (answer.status === 200) {
        served++;
        idle = 0;
      } else {
        expect(answer.status).toBe(429);
        refused = answer;
        idle++;
      }
      expect(made).toBeLessThan(LEASED + 100);
    }
    expect(served).toBeLessThanOrEqual(LEASED);
    // Stranded: at most a lease per worker, and one lease of the renewal that went over.
    expect(served).toBeGreaterThanOrEqual(LEASED - (WORKERS + 1) * LEASE);
    expect(refused!.json()).toMatchObject({ error: { code: -32029, data: { outcome: 'limited', limit: 'route:leased/calls' } } });
    const asked = (await serviceRequests()) - before;
    expect(asked).toBeLessThan(made / 2);
    // Over the limit: refused from each worker's memory until the window ends; only a worker that has
    // not heard of it yet asks the service, once.
    const over = await serviceRequests();
    for (let id = 0; id < 10; id++) expect((await call(id % 2 ? second : first, 'leased', id)).status).toBe(429);
    expect((await serviceRequests()) - over).toBeLessThanOrEqual(WORKERS);
  });

  it('lets the calls of a whenServiceDown: allow limit through and refuses those of a refuse limit (503) while the service is down, and counts again once it is back', async () => {
    await expectWhenServiceDown(first, second);
  });
});
