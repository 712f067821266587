import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { FlakyToolService } from '../support/flaky-tool-service';
import { MCP_POST_HEADERS, SampleBackends, clusterOf, connectClient, controlPlaneStatus, listedTools, metricValue, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { DocumentedMetric, MetricSource, ScrapedSeries, documentedMetrics, parseExposition } from '../support/observability';

/**
 * The gateway's metrics, scraped from the running processes (real Envoy, control plane, sidecar and
 * Redis): they say what /status and the calls say, at every moment, and every metric
 * docs/observability.md lists exists with exactly the labels it lists.
 */
describe('metrics that tell the truth', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let flaky: FlakyToolService;

  const registry = () => ({
    routes: [
      // A limit never reached: its refusals' counter exists from the start (docs/quotas.md).
      { key: 'demo', quotas: { discovery: { total: '100000/second' } }, toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] },
      { key: 'ops', toolServices: [{ name: 'reports', url: flaky.url, fallback: { text: 'reports are unavailable' } }] },
      { key: 'readers', toolServices: [{ name: 'reports', url: flaky.url, fallback: { text: 'reports are unavailable' }, policy: { denyTools: ['send_email'] } }] },
    ],
  });

  beforeAll(async () => {
    flaky = await FlakyToolService.start();
    ({ stack, backends } = await startGateway('observability-metrics', (b) => {
      backends = b;
      return registry();
    }));
    await waitFor('the reports tools', async () => ((await listedTools(stack.gatewayUrl('ops'))) ?? []).includes('reports__read_report') || undefined);
  });
  afterAll(async () => {
    await stack?.stop();
    await flaky?.stop();
  });

  const scrape = async (source: MetricSource) => {
    const url = { 'control plane': `${stack.controlPlaneAdminUrl}/metrics`, sidecar: `${stack.sidecarAdminUrl}/metrics`, envoy: `${stack.envoyAdminUrl}/stats/prometheus` }[source];
    return parseExposition(await (await fetch(url)).text());
  };
  const rejectedRouteKeys = async () =>
    new Set(((await controlPlaneStatus(stack)).registry.rejectedRoutes as { route?: string }[]).map((problem) => problem.route)).size;
  const call = (route: string, tool: string, id: number) =>
    postJsonRpc(stack.gatewayUrl(route), { jsonrpc: '2.0', id, method: 'tools/call', params: { name: `reports__${tool}`, arguments: {} } });
  const calls = (route: string, outcome: string) => metricValue(stack, 'mcpgw_tool_calls_total', { route, backend: 'reports', outcome });

  it('counts rejected routes, not problems, also when nothing served changes', async () => {
    // Two broken routes, one with two problems; the routes served stay exactly as they were.
    await stack.setPortalRegistry({
      routes: [...registry().routes, { key: 'broken', toolServices: [{ name: 'Bad Name', url: 'not a url' }] }, { key: 'also-broken', toolServices: [] }],
    });
    await waitFor('the broken routes in /status', async () => ((await rejectedRouteKeys()) === 2 ? true : undefined));
    expect((await controlPlaneStatus(stack)).registry.rejectedRoutes.length).toBeGreaterThan(2);
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(2);

    // A document that is not a registry at all is refused as a whole and changes nothing.
    await stack.setPortalRegistry({});
    await waitFor('the refused document', async () =>
      (await metricValue(stack, 'mcpgw_registry_document_rejections_total', { reason: 'not-a-registry' })) === 1 ? true : undefined,
    );
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(2);

    // Fixed: the served routes still do not change, and the gauge follows.
    await stack.setPortalRegistry(registry());
    await waitFor('no rejected route in /status', async () => ((await rejectedRouteKeys()) === 0 ? true : undefined));
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(0);
  });

  it('counts the Envoys that serve an older config because they rejected the latest, until they accept one', async () => {
    await stack.setPortalRegistry({
      routes: [...registry().routes, { key: 'secure', toolServices: [{ name: 'vault', url: 'https://127.0.0.1:9/mcp', transport: { tls: { caFile: '/nonexistent/mcpgw-ca.pem' } } }] }],
    });
    await waitFor('the NACK', async () => ((await metricValue(stack, 'mcpgw_xds_nodes_rejecting', { type: 'Secret' })) === 1 ? true : undefined));
    expect(await metricValue(stack, 'mcpgw_xds_nacks_total', { type: 'Secret' })).toBeGreaterThanOrEqual(1);
    await stack.setPortalRegistry(registry());
    await waitFor('the next config ACKed', async () => ((await metricValue(stack, 'mcpgw_xds_nodes_rejecting')) === 0 ? true : undefined));
    expect(await metricValue(stack, 'mcpgw_xds_nodes_rejecting', { type: 'Secret' })).toBe(0);
  });

  it('counts every outcome of tools/call, and Envoy counts retries and timeouts on the Tool Service cluster', async () => {
    const client = await connectClient(stack.gatewayUrl('demo'));
    await client.callTool({ name: 'jobs__echo', arguments: { text: 'hello' } });
    await client.close();
    flaky.failNextCall('put_setting');
    expect((await call('ops', 'put_setting', 1)).json().result._meta['mcpgw/outcome']).toMatchObject({ outcome: 'ok', attempts: 2 });
    flaky.failNextCall('send_email');
    expect((await call('ops', 'send_email', 2)).json().error.data['mcpgw/outcome'].outcome).toBe('failed');
    expect((await call('ops', 'slow_read', 3)).json().error.data.outcome).toBe('failed');
    expect((await call('readers', 'send_email', 4)).json().error.code).toBe(-32003);
    expect((await call('readers', 'no_such_tool', 5)).json().error.code).toBe(-32602);
    const unknownSession = await postJsonRpc(
      stack.gatewayUrl('demo'),
      { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' } } },
      { ...MCP_POST_HEADERS, 'mcp-session-id': 'no-such-session' },
    );
    expect([unknownSession.status, unknownSession.json().error.code]).toEqual([404, -32001]);

    await waitFor('the call log', async () => ((await calls('readers', 'invalid')) === 1 ? true : undefined));
    expect(await calls('ops', 'ok')).toBe(1);
    expect(await calls('ops', 'failed')).toBe(2);
    expect(await calls('ops', 'degraded')).toBe(0);
    expect(await calls('readers', 'denied')).toBe(1);
    expect(await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'demo', backend: 'jobs', outcome: 'ok' })).toBe(1);
    await waitFor('the unknown session in the call log', async () =>
      (await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'demo', backend: 'jobs', outcome: 'invalid' })) === 1 ? true : undefined,
    );
    expect(await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'demo', backend: 'jobs', outcome: 'failed' })).toBe(0);
    expect(await metricValue(stack, 'mcpgw_tool_call_duration_seconds_count', { route: 'ops', backend: 'reports', tool: 'slow_read', outcome: 'failed' })).toBe(1);

    // Envoy's stats for the cluster of the Tool Service, named so that its tag extraction keeps the
    // whole name in envoy_cluster_name; mcpgw_tool_service_cluster names it for the join.
    const cluster = clusterOf(flaky.url);
    expect(await metricValue(stack, 'mcpgw_tool_service_cluster', { tool_service: 'reports', cluster })).toBe(1);
    const envoy = await scrape('envoy');
    const onCluster = (name: string) => envoy.series.filter((series) => series.name === name && series.labels.envoy_cluster_name === cluster);
    expect(onCluster('envoy_cluster_upstream_rq_retry').map((series) => series.value)).toEqual([1]);
    expect(onCluster('envoy_cluster_upstream_rq_timeout').map((series) => series.value)).toEqual([1]);

    await flaky.stop();
    expect((await call('ops', 'read_report', 7)).json().result._meta['mcpgw/outcome'].outcome).toBe('degraded');
    await waitFor('the fallback in the call log', async () => ((await calls('ops', 'degraded')) === 1 ? true : undefined));
    const afterOutage = await scrape('envoy');
    expect(afterOutage.series.find((series) => series.name === 'envoy_cluster_upstream_cx_connect_fail' && series.labels.envoy_cluster_name === cluster)?.value).toBeGreaterThan(0);
  });

  it('says whether each process reaches Redis at this moment', async () => {
    expect(await metricValue(stack, 'mcpgw_redis_up')).toBe(1);
    expect(await metricValue(stack, 'mcpgw_redis_up', {}, stack.sidecarAdminUrl)).toBe(1);
    await stack.stopProcess('redis');
    expect(await metricValue(stack, 'mcpgw_redis_up')).toBe(0);
    expect(await metricValue(stack, 'mcpgw_redis_up', {}, stack.sidecarAdminUrl)).toBe(0);
    await stack.startRedis();
    await waitFor('both to reach Redis again', async () =>
      (await metricValue(stack, 'mcpgw_redis_up')) + (await metricValue(stack, 'mcpgw_redis_up', {}, stack.sidecarAdminUrl)) === 2 ? true : undefined,
    );
  });

  // Last: it reads what the tests above made happen.
  it('exposes every metric docs/observability.md lists, with exactly the labels it lists', async () => {
    const documented = documentedMetrics();
    expect(documented.filter((metric) => metric.source === 'control plane').length).toBeGreaterThan(20);
    expect(documented.filter((metric) => metric.source === 'envoy').length).toBeGreaterThan(8);
    const scraped = { 'control plane': await scrape('control plane'), sidecar: await scrape('sidecar'), envoy: await scrape('envoy') };
    const seriesOf = (metric: DocumentedMetric): ScrapedSeries[] => {
      const names = metric.type === 'histogram' ? [`${metric.name}_bucket`, `${metric.name}_sum`, `${metric.name}_count`] : [metric.name];
      return scraped[metric.source].series.filter((series) => names.includes(series.name));
    };
    const found = documented.map((metric) => {
      const series = seriesOf(metric);
      const labelSets = new Set(series.map((one) => Object.keys(one.labels).filter((label) => label !== 'le').sort().join(',')));
      return { metric: `${metric.source} ${metric.name}`, declared: scraped[metric.source].families.get(metric.name), labels: [...labelSets] };
    });
    expect(found).toEqual(
      documented.map((metric) => ({ metric: `${metric.source} ${metric.name}`, declared: metric.type, labels: [[...metric.labels].sort().join(',')] })),
    );
  });
});
