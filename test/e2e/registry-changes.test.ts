import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { XdsApiType } from '../../control-plane/devstack/envoy';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import {
  SampleBackends,
  connectClient,
  controlPlaneStatus,
  envoyDynamicClusters,
  envoyStat,
  listedTools,
  metricValue,
  postJsonRpc,
  startGateway,
  clusterOf,
  listedToolsOnceServed,
} from '../support/gateway-fixture';

/**
 * Registry changes through the dev Portal reach Envoy and the sidecar while traffic flows, over
 * state-of-the-world and delta ADS alike, without draining the listener or cutting a stream.
 */
describe.each<XdsApiType>(['GRPC', 'DELTA_GRPC'])('registry changes through the Portal (ADS %s)', (xdsApiType) => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let weatherEuPort: number;
  let client: Client;
  const textOf = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;

  const demo = () => ({
    key: 'demo',
    toolServices: [
      { name: 'weather', url: backends.weather },
      { name: 'jobs', url: backends.jobs },
    ],
  });

  beforeAll(async () => {
    ({ stack, backends } = await startGateway(`registry-changes-${xdsApiType}`, (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }] }), {
      xdsApiType,
      registryRefreshMs: 2000,
    }));
    weatherEuPort = await freePort();
    await stack.startSample('weather', weatherEuPort);
    client = await connectClient(stack.gatewayUrl('demo'));
  });

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
  });

  it('adds a route and a Tool Service while a stream runs on another route, without cutting it', async () => {
    const progress: number[] = [];
    let firstProgress!: () => void;
    const streaming = new Promise<void>((resolve) => (firstProgress = resolve));
    const call = client.callTool({ name: 'jobs__run_job', arguments: { steps: 8, interval_ms: 250 } }, undefined, {
      onprogress: ({ progress: step }) => {
        progress.push(step);
        firstProgress();
      },
    });
    await streaming;

    // The gateway's listener and the egress listener (docs/xds.md), both added at start.
    const listenersAdded = await envoyStat(stack, 'listener_manager.listener_added');
    await stack.setPortalRegistry({
      routes: [
        demo(),
        {
          key: 'late',
          toolServices: [
            { id: 'weather-eu', name: 'weather_eu', url: `http://127.0.0.1:${weatherEuPort}/mcp` },
            { name: 'jobs', url: backends.jobs },
          ],
        },
      ],
    });
    const tools = await waitFor('the new route to list its tools', () => listedToolsOnceServed(stack.gatewayUrl('late')), { timeoutMs: 5000, intervalMs: 20 });
    expect(tools).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather_eu__get_forecast', 'weather_eu__get_alerts']);
    const late = await connectClient(stack.gatewayUrl('late'));
    try {
      const forecast = await waitFor('a call through the new cluster', async () =>
        late.callTool({ name: 'weather_eu__get_forecast', arguments: { city: 'Lyon' } }).catch(() => undefined),
      );
      expect(textOf(forecast)).toBe('Forecast for Lyon: sunny, 14°C');
    } finally {
      await late.close();
    }

    expect(textOf(await call)).toBe('job finished after 8 steps');
    expect(progress).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // Registry changes travel in RDS/CDS only: no listener was added, modified or drained.
    expect(await envoyStat(stack, 'listener_manager.listener_added')).toBe(listenersAdded);
    expect(await envoyStat(stack, 'listener_manager.listener_modified')).toBe(0);
    expect(await envoyStat(stack, 'listener_manager.total_listeners_draining')).toBe(0);
  });

  it('removes a Tool Service and a route; the rest is untouched', async () => {
    await stack.setPortalRegistry({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }] }] });
    await waitFor('the route to disappear', async () => ((await postJsonRpc(stack.gatewayUrl('late'), { jsonrpc: '2.0', id: 1, method: 'tools/list' })).status === 404 ? true : undefined));
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['weather__get_forecast', 'weather__get_alerts']);
    await expect(client.callTool({ name: 'jobs__echo', arguments: { text: 'x' } })).rejects.toThrow(/unknown backend "jobs"/);
    expect(textOf(await client.callTool({ name: 'weather__get_alerts', arguments: { region: 'south' } }))).toBe('No alerts for south');
    await waitFor('Envoy to drop the clusters nothing uses', async () => {
      const clusters = await envoyDynamicClusters(stack);
      return [...clusters].sort().join() === ['mcp_sidecar', 'mcp_sidecar_check', 'mcp_sidecar_streams', 'mcpgw_ratelimit', clusterOf(backends.weather)].sort().join() ? clusters : undefined;
    });
  });

  it('keeps the previous state of a route the Portal now sends broken, and applies the rest', async () => {
    await stack.setPortalRegistry({
      routes: [
        { key: 'demo', toolServices: [{ name: 'Weather', url: backends.weather }] },
        { key: 'extra', toolServices: [{ name: 'jobs', url: backends.jobs }] },
      ],
    });
    await waitFor('the valid new route', () => listedToolsOnceServed(stack.gatewayUrl('extra')));
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['weather__get_forecast', 'weather__get_alerts']);
    const status = await controlPlaneStatus(stack);
    expect(status.registry.rejectedRoutes).toEqual([
      {
        route: 'demo',
        field: 'routes[0].toolServices[0].name',
        path: ['routes', 0, 'toolServices', 0, 'name'],
        message: 'must be snake_case (lowercase letters, digits and single underscores)',
      },
    ]);
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(1);
  });

  it('changes nothing while the Portal fails or is gone', async () => {
    const failedBefore = await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'failed' });
    await stack.setPortalOutage(503);
    await waitFor('a failed poll', async () =>
      (await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'failed' })) > failedBefore ? true : undefined,
    );
    expect((await controlPlaneStatus(stack)).registry.lastError.message).toMatch(/Portal answered 503/);
    expect(await listedTools(stack.gatewayUrl('extra'))).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);

    await stack.stopProcess('portal');
    await waitFor('the Portal to be reported unreachable', async () =>
      /Portal unreachable/.test((await controlPlaneStatus(stack)).registry.lastError.message) ? true : undefined,
    );
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['weather__get_forecast', 'weather__get_alerts']);
    expect(textOf(await client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Oslo' } }))).toBe('Forecast for Oslo: sunny, 14°C');
  });
});
