import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse } from 'yaml';
import * as client from 'prom-client';
import { CallLog, LimitMetrics, LimitedRecord, LogEntry, callLogEntrySchema, limitedRecordOf } from '../../control-plane/admin/call-log';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { routeQuotasIR, toolServiceQuotasIR } from '../../control-plane/ir/quotas-ir';
import { rateLimitServiceConfig } from '../../control-plane/quotas/ratelimit-service-config';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
import { validateRegistry } from '../../control-plane/registry/validate';
import { projectPath } from '../../control-plane/shared/paths';
import { callRouteFilters } from '../../control-plane/xds/translate/call-lane';
import { callRouteQuotas, gatewayRouteQuotas, leaseSize, rateLimitServiceCluster, toolQuotaContext } from '../../control-plane/xds/translate/quotas';
import { rateLimitEnvironment } from '../../control-plane/devstack/ratelimit';

const service = (name: string, extra: Record<string, unknown> = {}) => ({ name, url: 'http://127.0.0.1:9000/mcp', ...extra });

describe('limits in the registry', () => {
  it.each([
    ['a rate with a unit Envoy does not count in', { calls: { perCaller: '100/min' } }, 'routes[0].quotas.calls.perCaller', /REQUESTS\/UNIT/],
    ['a rate of zero', { calls: { total: '0/second' } }, 'routes[0].quotas.calls.total', /REQUESTS\/UNIT/],
    ['whenServiceDown on a limit that is not shared', { calls: { total: { rate: '5/second', whenServiceDown: 'refuse' } } }, 'routes[0].quotas.calls.total.whenServiceDown', /shared limits/],
    ['a misspelt key', { calls: { perCaler: '5/second' } }, 'routes[0].quotas.calls.perCaler', /unknown key \(did you mean "perCaller"\?\)/],
    ['no call in flight at all', { concurrency: { perCaller: 0 } }, 'routes[0].quotas.concurrency.perCaller', /too small|>=1/],
    ["a route's total calls in flight (a Tool Service's is its circuit breaker)", { concurrency: { total: 2 } }, 'routes[0].quotas.concurrency.total', /unknown key/],
  ])('refuses %s, naming the field', (_case, quotas, field, message) => {
    const { problems } = validateRegistry({ routes: [{ key: 'demo', quotas, toolServices: [service('a')] }] });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ route: 'demo', field });
    expect(problems[0].message).toMatch(message);
  });

  it('gives each route the document defaults it does not set itself, and keeps `unlimited`', () => {
    const { registry, problems } = validateRegistry({
      quotas: { calls: { perCaller: '10/second', total: '100/second' }, discovery: { perCaller: '20/second' } },
      routes: [
        { key: 'a', toolServices: [service('x')] },
        { key: 'b', quotas: { calls: { perCaller: 'unlimited' } }, toolServices: [service('x')] },
      ],
    });
    expect(problems).toEqual([]);
    expect(registry.routes[0].quotas).toEqual({ calls: { perCaller: '10/second', total: '100/second' }, discovery: { perCaller: '20/second' } });
    expect(registry.routes[1].quotas).toEqual({ calls: { perCaller: 'unlimited', total: '100/second' }, discovery: { perCaller: '20/second' } });
    expect(routeQuotasIR('b', registry.routes[1].quotas).calls).toEqual([{ name: 'route:b/calls', rate: { requests: 100, unit: 'second' }, perCaller: false }]);
  });

  it('refuses the routes that would inherit invalid defaults, and reports the defaults once at quotas', () => {
    const { registry, problems } = validateRegistry({ quotas: { calls: { perCaller: 'fast' } }, routes: [{ key: 'a', toolServices: [service('x')] }] });
    expect(registry.routes).toEqual([]);
    expect(problems.map((problem) => problem.field)).toEqual(['quotas.calls.perCaller', 'routes[0].quotas']);
  });

  it('keeps a route resolved with its defaults valid on its own (the form a saved route is checked in again)', () => {
    const { registry } = validateRegistry({ quotas: { calls: { perCaller: '10/second' } }, routes: [{ key: 'a', toolServices: [service('x')] }] });
    expect(validateRegistry({ routes: registry.routes }).registry.routes).toEqual(registry.routes);
  });

  it('refuses a Tool Service id whose limits differ between routes', () => {
    const { problems } = validateRegistry({
      routes: [
        { key: 'a', toolServices: [service('x', { quotas: { calls: { total: '5/second' } } })] },
        { key: 'b', toolServices: [service('x', { quotas: { calls: { total: '6/second' } } })] },
      ],
    });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ route: 'b', message: expect.stringContaining('quotas') });
  });

  it('names every limit by where it is set and what it counts', () => {
    const quotas = toolServiceQuotasIR('weather', {
      calls: { perCaller: { rate: '5/minute', shared: true } },
      tools: [{ tools: ['get_*', 'list'], calls: { total: '1/second' } }],
      concurrency: { total: 4 },
    });
    expect(quotas).toEqual({
      calls: [{ name: 'tool-service:weather/calls/per-caller', rate: { requests: 5, unit: 'minute' }, perCaller: true, shared: { whenServiceDown: 'allow' } }],
      tools: [{ index: 0, patterns: ['get_*', 'list'], calls: [{ name: 'tool:weather/get_*,list/calls', rate: { requests: 1, unit: 'second' }, perCaller: false }] }],
      concurrency: 4,
    });
  });

  it('gives a Tool Service with a concurrency limit a cluster of its own', () => {
    const ir = buildGatewayIR({
      routes: [{ key: 'a', toolServices: [{ id: 'one', name: 'one', url: 'http://h:1/mcp', quotas: { concurrency: { total: 3 } } }, { id: 'two', name: 'two', url: 'http://h:1/mcp' }] }],
    });
    expect(ir.clusters).toHaveLength(2);
  });
});

describe("the ratelimit service's configuration", () => {
  it("holds the registry's shared limits, each scope and caller counted apart", () => {
    const ir = buildGatewayIR(loadRegistryFile(path.join(projectPath('test', 'fixtures', 'registries'), 'quotas.yaml')));
    expect(rateLimitServiceConfig(ir)).toEqual({
      domain: 'mcpgw',
      descriptors: [
        { key: 'limit', value: 'route:demo/calls', descriptors: [{ key: 'scope', rate_limit: { unit: 'second', requests_per_unit: 100, name: 'route:demo/calls' } }] },
        {
          key: 'limit',
          value: 'route:signed-in/calls/per-caller',
          descriptors: [
            {
              key: 'scope',
              descriptors: [
                { key: 'caller', rate_limit: { unit: 'minute', requests_per_unit: 30, name: 'route:signed-in/calls/per-caller' } },
                { key: 'remote_address', rate_limit: { unit: 'minute', requests_per_unit: 30, name: 'route:signed-in/calls/per-caller' } },
              ],
            },
          ],
        },
        {
          key: 'limit',
          value: 'tool-service:weather/calls/per-caller',
          descriptors: [
            {
              key: 'scope',
              descriptors: [
                { key: 'caller', rate_limit: { unit: 'hour', requests_per_unit: 1000, name: 'tool-service:weather/calls/per-caller' } },
                { key: 'remote_address', rate_limit: { unit: 'hour', requests_per_unit: 1000, name: 'tool-service:weather/calls/per-caller' } },
              ],
            },
          ],
        },
        { key: 'limit', value: 'tool:weather/run_task/calls', descriptors: [{ key: 'scope', rate_limit: { unit: 'day', requests_per_unit: 50, name: 'tool:weather/run_task/calls' } }] },
      ],
    });
  });
});

describe("the ratelimit service's address", () => {
  const settings = { rateLimitTimeoutMs: 200, maxTrackedCallers: 10 };
  const endpointOf = (cluster: ReturnType<typeof rateLimitServiceCluster>) =>
    (cluster.load_assignment as { endpoints: { lb_endpoints: { endpoint: { address: unknown } }[] }[] }).endpoints[0].lb_endpoints[0].endpoint.address;

  it("is a Unix socket on Envoy's host in a static cluster (a pipe has no name to resolve)", () => {
    const cluster = rateLimitServiceCluster({ ...settings, rateLimitService: { socketPath: '/run/mcpgw/ratelimit.sock' } });
    expect(cluster.type).toBe('STATIC');
    expect(endpointOf(cluster)).toEqual({ pipe: { path: '/run/mcpgw/ratelimit.sock' } });
  });

  it('or a host and port, resolved by DNS', () => {
    const cluster = rateLimitServiceCluster({ ...settings, rateLimitService: { address: 'ratelimit.internal', port: 8081 } });
    expect(cluster.type).toBe('STRICT_DNS');
    expect(endpointOf(cluster)).toEqual({ socket_address: { address: 'ratelimit.internal', port_value: 8081 } });
  });

  it('is where the service the dev stack runs listens, and its Redis is reached the same way', () => {
    const ports = { grpc: { socketPath: '/s/ratelimit.sock' }, http: 1, debug: 2 };
    const env = rateLimitEnvironment('/d', ports, { socketPath: '/s/redis.sock', user: 'mcpgw', password: 'p' });
    expect(env).toMatchObject({ GRPC_UDS: '/s/ratelimit.sock', REDIS_SOCKET_TYPE: 'unix', REDIS_URL: '/s/redis.sock', REDIS_AUTH: 'mcpgw:p' });
    expect(env.GRPC_PORT).toBeUndefined();
    const overTcp = rateLimitEnvironment('/d', { ...ports, grpc: { port: 8081 } }, { host: '10.0.0.5', port: 6380, tlsCaFile: '/ca.pem' });
    expect(overTcp).toMatchObject({ GRPC_HOST: '127.0.0.1', GRPC_PORT: '8081', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: '10.0.0.5:6380', REDIS_TLS: 'true' });
  });
});

describe('who a caller is', () => {
  const ir = buildGatewayIR(loadRegistryFile(path.join(projectPath('test', 'fixtures', 'registries'), 'quotas.yaml')));
  const route = (key: string) => ir.routes.find((candidate) => candidate.key === key)!;
  const jobs = ir.toolServices.find((service) => service.id === 'jobs')!;
  const sharedEntries = (parts: ReturnType<typeof callRouteQuotas>) =>
    Object.values(parts.sharedFilters).flatMap((config) => (config as unknown as { value: { rate_limits: { actions: unknown[] }[] } }).value.rate_limits);

  it("is the validated token's subject on a route with auth, from jwt_authn's claim header (a client's copy is removed before it)", () => {
    const [entry] = sharedEntries(callRouteQuotas(route('signed-in'), jobs));
    expect(entry.actions).toContainEqual({ request_headers: { descriptor_key: 'caller', header_name: 'x-mcpgw-claim-sub' } });
    expect(JSON.stringify(entry.actions)).not.toContain('remote_address');
  });

  it("is the client's address on a route without auth, on both lanes", () => {
    const local = callRouteQuotas(route('demo'), jobs).rateLimits.concat(gatewayRouteQuotas(route('demo')).rateLimits);
    // A per-caller entry is (limit, scope, caller); a total one (limit, scope).
    const perCaller = local.filter((entry) => entry.actions.length === 3);
    expect(perCaller.length).toBeGreaterThan(0);
    for (const entry of perCaller) expect(entry.actions).toContainEqual({ remote_address: {} });
  });
});

describe("the call script's tool limits", () => {
  it('flags each tool a limit applies to with the first matching entry, and gives the script its values', () => {
    const tools = toolServiceQuotasIR('weather', {
      tools: [
        { tools: ['get_*'], calls: { perCaller: '10/minute', total: { rate: '50/day', shared: true, whenServiceDown: 'refuse' } } },
        { tools: ['get_alerts', 'run_*'], calls: { total: '1/second' } },
      ],
    }).tools;
    const backend = { era: 'session' as const, sessionful: false, tools: new Map([['get_alerts', 'r'], ['run_job', ''], ['echo', '']]), denied: new Map(), approvals: new Map(), prompts: new Set<string>(), serves: { prompts: false, resources: false, subscriptions: false, completions: false }, fallbackText: '' };
    const route = { backends: new Map([['weather', backend]]), accessRules: [] };
    const config = callRouteFilters('demo', 'weather', '__', route, undefined, { annotate: true, auditArguments: false, credentials: 'none', quotas: { toolServiceId: 'weather', tools, inFlight: [], deadlineMs: 600_000 }, pooledCallLane: false })[
      'envoy.filters.http.lua'
    ] as unknown as { filter_context: Record<string, unknown> };
    expect(config.filter_context).toMatchObject({
      tool_service: 'weather',
      'tool:get_alerts': 'r;q=0',
      'tool:run_job': 'q=1',
      'tool:echo': '',
      'quota:0:caller_local': 'calls:10/minute',
      'quota:0:total_refuse': 'tool:weather/get_*/calls',
      'quota:1:total_local': 'calls:1/second',
    });
  });
});

describe('leased shared limits (--shared-limit-lease-workers)', () => {
  const ir = buildGatewayIR(loadRegistryFile(path.join(projectPath('test', 'fixtures', 'registries'), 'quotas.yaml')));
  const route = (key: string) => ir.routes.find((candidate) => candidate.key === key)!;
  const jobs = ir.toolServices.find((service) => service.id === 'jobs')!;

  it("go to the call script instead of the shared filters, each with its scope and a lease of at most 1/20 of the limit over the workers", () => {
    const exact = callRouteQuotas(route('signed-in'), jobs);
    expect(Object.keys(exact.sharedFilters).length).toBeGreaterThan(0);
    const leased = callRouteQuotas(route('signed-in'), jobs, 4);
    expect(leased.sharedFilters).toEqual({});
    const sharedNames = ir.routes.find((candidate) => candidate.key === 'signed-in')!.quotas.calls.filter((limit) => limit.shared);
    expect(leased.leased.map((limit) => limit.name)).toEqual(expect.arrayContaining(sharedNames.map((limit) => limit.name)));
    for (const limit of leased.leased) {
      const rate = [...route('signed-in').quotas.calls, ...jobs.quotas.calls].find((candidate) => candidate.name === limit.name)!.rate;
      expect(limit.lease).toBe(Math.max(1, Math.floor(rate.requests / 80)));
      expect(limit.scope).toMatch(/^(signed-in|jobs)$/);
    }
  });

  it('leave a limit marked exact to the shared filters (asked per call), and refuse exact on a limit that is not shared', () => {
    const { registry, problems } = validateRegistry({
      routes: [
        {
          key: 'a',
          quotas: { calls: { perCaller: { rate: '600/minute', shared: true }, total: { rate: '6000/minute', shared: true, whenServiceDown: 'refuse', exact: true } } },
          toolServices: [service('x')],
        },
      ],
    });
    expect(problems).toEqual([]);
    const ir = buildGatewayIR(registry);
    const parts = callRouteQuotas(ir.routes[0], ir.toolServices[0], 2);
    expect(parts.leased.map((limit) => limit.name)).toEqual(['route:a/calls/per-caller']);
    expect(Object.keys(parts.sharedFilters)).toEqual(['mcpgw.quota.shared_refusing']);
    const refused = validateRegistry({ routes: [{ key: 'a', quotas: { calls: { total: { rate: '6/minute', exact: true } } }, toolServices: [service('x')] }] });
    expect(refused.problems).toEqual([expect.objectContaining({ field: 'routes[0].quotas.calls.total.exact', message: expect.stringMatching(/exact is for shared limits/) })]);
  });

  it('keep a small limit exact: a lease of one token, asked per call', () => {
    expect(leaseSize({ requests: 79, unit: 'minute' }, 4)).toBe(1);
    expect(leaseSize({ requests: 160, unit: 'minute' }, 4)).toBe(2);
    expect(leaseSize({ requests: 1_000_000, unit: 'second' }, 2)).toBe(25_000);
  });

  it("give the call script a tool's leased limits in place of the values of its metadata keys", () => {
    const [tool] = toolServiceQuotasIR('weather', { tools: [{ tools: ['get_*'], calls: { perCaller: '10/minute', total: { rate: '6000/hour', shared: true, whenServiceDown: 'refuse' } } }] }).tools;
    expect(toolQuotaContext(tool, 2)).toEqual({
      caller_local: 'calls:10/minute',
      leases: [{ name: 'tool:weather/get_*/calls', caller: false, refuse: true, lease: 150, window_s: 3600 }],
    });
    expect(toolQuotaContext(tool)).toEqual({ caller_local: 'calls:10/minute', total_refuse: 'tool:weather/get_*/calls' });
  });
});

describe('refusals in the call log', () => {
  /** A call-log record as Envoy's fluentd logger formats it: Envoy's route, its response flags by long name, the limit headers. */
  const entry = (route: string, flags: string, status: number, headers: { 'x-mcpgw-limit'?: string; 'x-ratelimit-limit'?: string } = {}): LogEntry =>
    callLogEntrySchema.parse({
      envoy_route: route,
      flags,
      status,
      limit: headers['x-mcpgw-limit'] ?? null,
      ratelimit_limit: headers['x-ratelimit-limit'] ?? null,
    });

  it.each<[string, ReturnType<typeof entry>, LimitedRecord | undefined]>([
    ['a per-instance limit on the call lane', entry('demo/call/jobs', 'RateLimited', 429, { 'x-mcpgw-limit': 'route:demo/calls/per-caller' }), { route: 'demo', lane: 'calls', limit: 'route:demo/calls/per-caller' }],
    ['a discovery limit', entry('demo/gateway', 'RateLimited', 429, { 'x-mcpgw-limit': 'route:demo/discovery' }), { route: 'demo', lane: 'discovery', limit: 'route:demo/discovery' }],
    [
      'a shared limit, by the names Envoy lists',
      entry('demo/call/jobs', 'RateLimited', 429, { 'x-ratelimit-limit': '4, 4;w=60;name="route:demo/calls", 9;w=1;name="tool-service:jobs/calls"' }),
      { route: 'demo', lane: 'calls', limit: 'route:demo/calls | tool-service:jobs/calls' },
    ],
    ['a refusing shared limit without its service', entry('demo/call/jobs', 'RateLimitServiceError', 503), { route: 'demo', lane: 'calls', limit: 'shared (the ratelimit service did not answer)' }],
    ['a concurrency limit', entry('demo/call/jobs', 'UpstreamOverflow', 429, { 'x-mcpgw-limit': 'tool-service:jobs/concurrency' }), { route: 'demo', lane: 'calls', limit: 'tool-service:jobs/concurrency' }],
    [
      "a per-caller concurrency limit (the session check's 429)",
      entry('demo/call/jobs', 'UnauthorizedExternalService', 429, { 'x-mcpgw-limit': 'route:demo/concurrency/per-caller' }),
      { route: 'demo', lane: 'calls', limit: 'route:demo/concurrency/per-caller' },
    ],
    [
      "a leased shared limit the call script refused (its outcome, no Envoy flag)",
      { ...entry('demo/call/jobs', '-', 429, { 'x-mcpgw-limit': 'route:demo/calls' }), outcome: 'limited' },
      { route: 'demo', lane: 'calls', limit: 'route:demo/calls' },
    ],
    ['a session the check does not know (not a limit)', entry('demo/call/jobs', 'UnauthorizedExternalService', 404), undefined],
    ['an overflow that is not a limit of ours (no 429)', entry('demo/call/jobs', 'UpstreamOverflow', 503), undefined],
    ['an answered call', entry('demo/call/jobs', '-', 200), undefined],
  ])('%s', (_case, logged, expected) => {
    expect(limitedRecordOf(logged)).toEqual(expected);
  });

  it('reach the limit observers from either lane, also without a backend (the gateway lane)', () => {
    const recorded: LimitedRecord[] = [];
    const log = new CallLog([], undefined, [], [{ record: (limited) => recorded.push(limited) }]);
    log.add(entry('demo/gateway', 'RateLimited', 429, { 'x-mcpgw-limit': 'route:demo/discovery/per-caller' }));
    expect(recorded).toEqual([{ route: 'demo', lane: 'discovery', limit: 'route:demo/discovery/per-caller' }]);
  });
});

describe('mcpgw_limited_requests_total', () => {
  it('starts every limit the registry names at 0, on its route and lane', async () => {
    const registry = new client.Registry();
    new LimitMetrics(registry).expect(buildGatewayIR(loadRegistryFile(path.join(projectPath('test', 'fixtures', 'registries'), 'quotas.yaml'))));
    const series = (await registry.getSingleMetric('mcpgw_limited_requests_total')!.get()).values;
    expect(series.every((one) => one.value === 0)).toBe(true);
    const demo = series.filter((one) => one.labels.route === 'demo').map((one) => `${one.labels.lane} ${one.labels.limit}`);
    expect(demo.sort()).toEqual(
      [
        'calls route:demo/calls/per-caller',
        'calls route:demo/calls',
        'discovery route:demo/discovery/per-caller',
        'calls tool-service:weather/calls/per-caller',
        'calls tool:weather/run_task/calls',
        'calls tool-service:jobs/calls',
        'calls tool-service:jobs/concurrency',
        'calls route:demo/concurrency/per-caller',
        'calls tool-service:jobs/concurrency/per-caller',
      ].sort(),
    );
  });
});

describe('docs/quotas.md', () => {
  it('shows a registry the gateway accepts whole', () => {
    const text = fs.readFileSync(projectPath('docs', 'quotas.md'), 'utf8');
    const example = /```yaml\n([\s\S]*?)\n```/.exec(text);
    expect(example).not.toBeNull();
    const { problems } = validateRegistry(parse(example![1]));
    expect(problems).toEqual([]);
  });
});

describe('per-caller concurrency limits in the registry', () => {
  it('gives each route the default, keeps `unlimited`, and names each limit by where it is set', () => {
    const { registry, problems } = validateRegistry({
      quotas: { concurrency: { perCaller: 4 } },
      routes: [
        { key: 'a', toolServices: [service('x', { quotas: { concurrency: { total: 8, perCaller: 2 }, tools: [{ tools: ['run_*'], concurrency: { perCaller: 1 } }] } })] },
        { key: 'b', quotas: { concurrency: { perCaller: 'unlimited' } }, toolServices: [service('y')] },
      ],
    });
    expect(problems).toEqual([]);
    expect(routeQuotasIR('a', registry.routes[0].quotas).concurrencyPerCaller).toEqual({ name: 'route:a/concurrency/per-caller', inFlight: 4 });
    expect(routeQuotasIR('b', registry.routes[1].quotas).concurrencyPerCaller).toBeUndefined();
    const x = toolServiceQuotasIR('x', registry.routes[0].toolServices[0].quotas);
    expect(x).toMatchObject({ concurrency: 8, concurrencyPerCaller: { name: 'tool-service:x/concurrency/per-caller', inFlight: 2 }, tools: [{ patterns: ['run_*'], calls: [], concurrencyPerCaller: 1 }] });
  });

  it('refuses a tool entry that limits nothing, naming it', () => {
    const { problems } = validateRegistry({ routes: [{ key: 'a', toolServices: [service('x', { quotas: { tools: [{ tools: ['run_*'] }] } })] }] });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ field: 'routes[0].toolServices[0].quotas.tools[0]', message: expect.stringMatching(/needs calls or concurrency/) });
  });
});

describe("a route's quota metadata (what its refusals are named from)", () => {
  it('is on a route with limits, on both lanes', () => {
    const ir = buildGatewayIR(loadRegistryFile(path.join(projectPath('test', 'fixtures', 'registries'), 'quotas.yaml')));
    const demo = ir.routes.find((route) => route.key === 'demo')!;
    const service = ir.toolServices.find((candidate) => candidate.catalogKey === demo.backends[0].catalogKey)!;
    expect(callRouteQuotas(demo, service).metadata?.filter_metadata['mcpgw.quota']).toMatchObject({ route: 'demo', lane: 'calls' });
    expect(gatewayRouteQuotas(demo).metadata?.filter_metadata['mcpgw.quota']).toEqual({ route: 'demo', lane: 'discovery' });
  });

  it('is left out where nothing reads it: a route without limits (thousands of them cost Envoy megabytes)', () => {
    const { registry } = validateRegistry({ routes: [{ key: 'plain', toolServices: [service('a')] }] });
    const ir = buildGatewayIR(registry!);
    expect(callRouteQuotas(ir.routes[0], ir.toolServices[0]).metadata).toBeUndefined();
    expect(gatewayRouteQuotas(ir.routes[0]).metadata).toBeUndefined();
  });
});
