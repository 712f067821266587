import { AUDIT_ONLY_KEYS, callLogWireSchema } from '../../control-plane/admin/call-log';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GatewayIR, buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';
import { accessRulesOf } from '../../control-plane/catalog/catalog-store';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
import { projectPath } from '../../control-plane/shared/paths';
import { buildSnapshot } from '../../control-plane/xds/server/snapshot';
import { translate } from '../../control-plane/xds/translate';
import { GATEWAY_DEFAULTS, GatewaySettings } from '../../control-plane/xds/translate/settings';
import { CallLaneCatalog, callLaneCatalogOf } from '../../control-plane/xds/translate/call-lane';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { defaultAccess } from '../../control-plane/xds/translate/access';
import { NO_SIGNING_KEYS } from '../../control-plane/xds/translate/auth';
import { fixtureKeysFor } from '../support/signing-keys';

/**
 * Golden files of the generated xDS. After an intended change, review the diff of
 * `UPDATE_GOLDEN=1 npx jest test/unit/translate-golden` before committing it.
 */
const settings: GatewaySettings = {
  ...GATEWAY_DEFAULTS,
  listener: { address: '127.0.0.1', port: 10000 },
  sidecars: [{ address: '127.0.0.1', port: 18080 }],
  egress: { address: '127.0.0.1', port: 10001 },
  access: defaultAccess({ address: '127.0.0.1', port: 10000 }),
};
const FIXTURES = projectPath('test', 'fixtures', 'registries');
const GOLDEN = projectPath('test', 'golden');

/**
 * A catalog for the registry's routes, as the control plane would have it once the backends answered:
 * each backend with a read-only tool, a tool with its own deadline and a tool the policy denies; the
 * call routes carry these as the call script's rules. The first backend of each route also serves a
 * prompt, resources with subscriptions and completions, which give it routes of their own (ADR-0015).
 */
function catalogFor(ir: GatewayIR): CallLaneCatalog {
  const tool = (name: string, extra: Record<string, unknown> = {}) => ({ name, inputSchema: { type: 'object' as const }, ...extra });
  const tools = [tool('get_status', { annotations: { readOnlyHint: true } }), tool('run_task', { _meta: { 'mcpgw/timeoutMs': 30000 } }), tool('delete_all')];
  return callLaneCatalogOf(
    catalogSnapshot(
      ir.routes.map((route) => ({
        route_key: route.key,
        backends: route.backends.map((backend, index) =>
          backendCatalog(backend.name, [], {
            tool_service: backend.catalogKey,
            tools_json: tools.map((declared) => JSON.stringify(declared)),
            denied_tools: [{ tool: 'delete_all', rule: 'denyTools: delete_*' }],
            ...(index === 0 && {
              capabilities_json: JSON.stringify({ tools: {}, prompts: {}, resources: { subscribe: true }, completions: {} }),
              prompts_json: [JSON.stringify({ name: 'summarize' })],
            }),
          }),
        ),
        ...(route.auth && {
          access: {
            ...accessRulesOf(route.backends.map((backend) => ({ backend: backend.name, rules: backend.policy?.rules, tools }))),
            groupsClaim: route.auth.groupsClaim,
          },
        }),
      })),
    ),
  );
}

const resourcesOf = (registry: ReturnType<typeof loadRegistryFile>, gateway: GatewaySettings = settings) => {
  const ir = buildGatewayIR(registry);
  return translate(ir, catalogFor(ir), gateway, fixtureKeysFor(ir));
};

/** The call script is tested on its own (call-lane-lua.test.ts): golden files name it rather than repeat it. */
function rendered(resources: ReturnType<typeof resourcesOf>): string {
  const script = fs.readFileSync(projectPath('control-plane', 'xds', 'lua', 'call-lane.lua'), 'utf8');
  // The script's generated prelude (its route defaults) stays in the golden file: it is the translation's.
  const named = (value: unknown) =>
    typeof value === 'string' && value.endsWith(script) ? `${value.slice(0, value.length - script.length)}<control-plane/xds/lua/call-lane.lua>` : value;
  return `${JSON.stringify(resources, (_key, value) => named(value), 2)}\n`;
}

function expectGolden(resources: ReturnType<typeof resourcesOf>, file: string): void {
  const golden = path.join(GOLDEN, file);
  if (process.env.UPDATE_GOLDEN) fs.writeFileSync(golden, rendered(resources));
  expect(rendered(resources)).toBe(fs.readFileSync(golden, 'utf8'));
  // Every resource must also encode against Envoy's protos.
  expect(() => buildSnapshot(resources)).not.toThrow();
}

describe('registry → IR → xDS golden files', () => {
  it.each(fs.readdirSync(FIXTURES).filter((file) => file.endsWith('.yaml')))('%s', (file) => {
    expectGolden(resourcesOf(loadRegistryFile(path.join(FIXTURES, file))), file.replace(/\.yaml$/, '.xds.json'));
  });

  it('two-routes.yaml with tracing settings: the tracer, its collector cluster, span names and attributes', () => {
    const tracing = { otlpEndpoint: 'http://otel-collector:4318', samplingRatio: 0.01, serviceName: 'mcpgw-envoy' };
    expectGolden(resourcesOf(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml')), { ...settings, tracing }), 'two-routes.tracing.xds.json');
  });

  it('has nothing of tracing without tracing settings: no tracer, collector cluster, span ids filter, span names or attributes', () => {
    const off = JSON.stringify(resourcesOf(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml'))));
    for (const piece of ['envoy.tracers.opentelemetry', 'otel_collector', 'envoy.filters.http.header_mutation', '"decorator"', '"custom_tags"']) expect(off).not.toContain(piece);
  });

  it("leaves out Envoy's JSON access log when it is off, and keeps the call log the control plane reads", () => {
    const accessLogsOf = (gateway: GatewaySettings) => {
      const [listener] = resourcesOf(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml')), gateway)[TYPE_URL.listener];
      const manager = JSON.parse(JSON.stringify(listener)).filter_chains[0].filters[0].typed_config;
      return manager.access_log.map((log: { name: string }) => log.name);
    };
    expect(accessLogsOf(settings)).toEqual(['envoy.access_loggers.stdout', 'envoy.access_loggers.fluentd', 'envoy.access_loggers.fluentd']);
    expect(accessLogsOf({ ...settings, envoyAccessLog: false })).toEqual(['envoy.access_loggers.fluentd', 'envoy.access_loggers.fluentd']);
  });

  it('sends the call log in two batches of the same record, split by whether the call holds a concurrency lease, the leased calls every 50 ms', () => {
    const [listener] = resourcesOf(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml')), { ...settings, auditArguments: true })[TYPE_URL.listener];
    const manager = JSON.parse(JSON.stringify(listener)).filter_chains[0].filters[0].typed_config;
    const [leased, others] = manager.access_log.filter((log: { name: string }) => log.name === 'envoy.access_loggers.fluentd');
    expect(leased.typed_config).toEqual({ ...others.typed_config, stat_prefix: 'mcpgw_leased_calls', buffer_flush_interval: '0.050s' });
    expect(others.typed_config).toMatchObject({ stat_prefix: 'mcpgw_calls', buffer_flush_interval: '0.250s' });
    // The same records are chosen; then the lease decides: present and not empty, or absent or empty (Envoy's metadata filter has no negation).
    const [chosen, leasedHalf] = leased.filter.and_filter.filters;
    const [chosenToo, otherHalf] = others.filter.and_filter.filters;
    expect(chosenToo).toEqual(chosen);
    const lease = { filter: 'envoy.filters.http.ext_authz', path: [{ key: 'x-mcpgw-concurrency-lease' }] };
    expect(leasedHalf.metadata_filter).toEqual({ matcher: { ...lease, value: { string_match: { safe_regex: { regex: '.+' } } } }, match_if_key_not_found: false });
    expect(otherHalf.metadata_filter).toEqual({ matcher: { ...lease, value: { string_match: { exact: '' } } }, match_if_key_not_found: true });
  });

  it("formats the audit's fields into the call log's record only when the control plane writes an audit", () => {
    const recordOf = (gateway: GatewaySettings): Record<string, string> => {
      const [listener] = resourcesOf(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml')), gateway)[TYPE_URL.listener];
      const manager = JSON.parse(JSON.stringify(listener)).filter_chains[0].filters[0].typed_config;
      return manager.access_log.find((log: { name: string }) => log.name === 'envoy.access_loggers.fluentd').typed_config.record;
    };
    const withoutAudit = Object.keys(recordOf(settings));
    const withAudit = Object.keys(recordOf({ ...settings, auditArguments: true }));
    expect(withAudit.filter((key) => !withoutAudit.includes(key)).sort()).toEqual([...AUDIT_ONLY_KEYS].sort());
    // Every key the consumers read has its format string.
    expect(withAudit.sort()).toEqual(Object.keys(callLogWireSchema.shape).sort());
  });

  it('is unchanged when the registry lists routes and Tool Services in another order', () => {
    const registry = loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml'));
    const reordered = {
      routes: [...registry.routes].reverse().map((route) => ({ ...route, toolServices: [...route.toolServices].reverse() })),
    };
    expect(buildSnapshot(resourcesOf(reordered))).toEqual(buildSnapshot(resourcesOf(registry)));
  });

  it('keeps the listener byte-identical across different registries', () => {
    const [first, second] = ['two-routes.yaml', 'tls-and-dns.yaml'].map((file) =>
      buildSnapshot(resourcesOf(loadRegistryFile(path.join(FIXTURES, file)))),
    );
    expect(first.get(TYPE_URL.listener)).toEqual(second.get(TYPE_URL.listener));
    expect(first.get(TYPE_URL.routeConfiguration)!.version).not.toBe(second.get(TYPE_URL.routeConfiguration)!.version);
  });
});

describe('backend credentials in the xDS', () => {
  it('make a credential part of the upstream: one cluster per (upstream, credential), shared by Tool Services with the same', () => {
    const url = 'http://127.0.0.1:18102/mcp';
    const ir = buildGatewayIR({
      routes: [
        {
          key: 'r',
          toolServices: [
            { id: 'plain', name: 'plain', url },
            { id: 'sa', name: 'sa', url, credentials: { mode: 'serviceAccount', tokenFile: '/s/token' } },
            { id: 'sa-too', name: 'sa_too', url, credentials: { mode: 'serviceAccount', tokenFile: '/s/token' } },
            { id: 'exchange', name: 'exchange', url, credentials: { mode: 'tokenExchange', audience: 'a' } },
          ],
        },
      ],
    });
    const clusterOf = (id: string) => ir.toolServices.find((service) => service.id === id)!.clusterName;
    expect(new Set(['plain', 'sa', 'exchange'].map(clusterOf)).size).toBe(3);
    expect(clusterOf('sa-too')).toBe(clusterOf('sa'));
    // Without credentials, a cluster keeps the name it always had.
    expect(clusterOf('plain')).toBe(buildGatewayIR({ routes: [{ key: 'x', toolServices: [{ id: 'x', name: 'x', url }] }] }).clusters[0].clusterName);
  });

  it("refer to the listener's certificate by name: other files change the secret, never a byte of the listener", () => {
    const ir = buildGatewayIR(loadRegistryFile(path.join(FIXTURES, 'two-routes.yaml')));
    const [first, second] = ['/a', '/b'].map((dir) =>
      buildSnapshot(translate(ir, catalogFor(ir), { ...settings, listenerTls: { certFile: `${dir}/tls.crt`, keyFile: `${dir}/tls.key` } }, NO_SIGNING_KEYS)),
    );
    expect(first.get(TYPE_URL.listener)).toEqual(second.get(TYPE_URL.listener));
    expect(first.get(TYPE_URL.secret)!.version).not.toBe(second.get(TYPE_URL.secret)!.version);
  });
});

describe('Tool Services that share an upstream', () => {
  it('share one cluster, and each route keeps its own Tool Service deadlines', () => {
    const ir = buildGatewayIR({
      routes: [
        { key: 'patient', toolServices: [{ id: 'jobs', name: 'jobs', url: 'http://127.0.0.1:18102/mcp' }] },
        { key: 'hasty', toolServices: [{ id: 'jobs-hasty', name: 'jobs', url: 'http://127.0.0.1:18102/mcp', transport: { requestTimeoutMs: 500 } }] },
      ],
    });
    const resources = translate(ir, catalogFor(ir), settings, NO_SIGNING_KEYS);
    expect(resources[TYPE_URL.cluster].filter((cluster) => String(cluster.name).startsWith('backend_'))).toHaveLength(1);
    const routes = (resources[TYPE_URL.routeConfiguration][0] as unknown as { virtual_hosts: { routes: { name: string; route?: { timeout?: string } }[] }[] })
      .virtual_hosts[0].routes;
    // The default whole-call deadline (TRANSPORT_DEFAULTS.requestTimeoutMs, 10 min).
    expect(routes.find((route) => route.name === 'patient/call/jobs')?.route?.timeout).toBe('600s');
    expect(routes.find((route) => route.name === 'hasty/call/jobs')?.route?.timeout).toBe('0.500s');
  });
});

describe('the pooled-call lane (docs/adr/0018-stream-relaying.md, "Gaps closed later", 1)', () => {
  it('is a route of a session-era backend only when its Tool Service opted in, and only then does the call route name it to the script', () => {
    const url = 'http://127.0.0.1:18102/mcp';
    const ir = buildGatewayIR({
      routes: [
        {
          key: 'r',
          toolServices: [
            { id: 'resumed', name: 'resumed', url, transport: { resumeCutPooledCalls: true } },
            { id: 'direct', name: 'direct', url },
          ],
        },
      ],
    });
    const routes = (translate(ir, catalogFor(ir), settings, NO_SIGNING_KEYS)[TYPE_URL.routeConfiguration][0] as unknown as {
      virtual_hosts: { routes: { name: string; typed_per_filter_config?: Record<string, { filter_context: Record<string, unknown> }> }[] }[];
    }).virtual_hosts[0].routes;
    const names = routes.map((route) => route.name);
    expect(names).toContain('r/pooled-call/resumed');
    expect(names.filter((name) => name.includes('/pooled-call/'))).toEqual(['r/pooled-call/resumed']);
    const scriptContext = (name: string) => routes.find((route) => route.name === name)!.typed_per_filter_config!['envoy.filters.http.lua'].filter_context;
    expect(scriptContext('r/call/resumed').pooled_call_lane).toBe(true);
    // The script's default (false): a route without the lane carries nothing for it.
    expect(scriptContext('r/call/direct')).not.toHaveProperty('pooled_call_lane');
    // One cluster still: the lane is the route's, not the upstream's.
    expect(new Set(ir.toolServices.map((service) => service.clusterName)).size).toBe(1);
  });
});
