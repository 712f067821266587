import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { waitFor } from '../../control-plane/devstack/processes';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { SampleBackends, clusterOf, connectClient, startGateway } from '../support/gateway-fixture';

interface NodeStatus {
  acked: Record<string, string>;
  lastNack?: unknown;
}

/** The same gateway as the walking skeleton, with Envoy's bootstrap asking for incremental ADS (DELTA_GRPC). */
describe('delta xDS (real Envoy on DELTA_GRPC ADS)', () => {
  let stack: GatewayStack;
  let dir: string;
  let backends: SampleBackends;
  let client: Client;

  beforeAll(async () => {
    ({ stack, dir, backends } = await startGateway(
      'delta-xds',
      (backends) => ({
        routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] }],
      }),
      { xdsApiType: 'DELTA_GRPC' },
    ));
    client = await connectClient(stack.gatewayUrl('demo'));
  });

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
  });

  it('serves MCP through the listener, routes and clusters that came over delta xDS', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toContain('weather__get_forecast');
    const result = (await client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Seoul' } })) as CallToolResult;
    expect(result.content[0]).toEqual({ type: 'text', text: 'Forecast for Seoul: sunny, 15°C' });
  });

  it('shows in Envoy\'s config_dump the xDS resources, each with its own per-resource version', async () => {
    const dump = (await (await fetch(`${stack.envoyAdminUrl}/config_dump`)).json()) as { configs: Record<string, unknown>[] };
    const section = (suffix: string) => dump.configs.find((config) => String(config['@type']).endsWith(`.${suffix}`))!;

    const listeners = section('ListenersConfigDump') as { dynamic_listeners: { name: string }[] };
    // The gateway's listener, and the egress listener of the gateway's own requests to Tool Services.
    expect(listeners.dynamic_listeners.map((listener) => listener.name).sort()).toEqual(['mcp_egress', 'mcp_gateway']);

    const routes = section('RoutesConfigDump') as { dynamic_route_configs: { route_config: { name: string } }[] };
    expect(routes.dynamic_route_configs.map((entry) => entry.route_config.name).sort()).toEqual(['mcp_egress_routes', 'mcp_routes']);

    const clusters = section('ClustersConfigDump') as { dynamic_active_clusters: { version_info: string; cluster: { name: string } }[] };
    const dynamicClusters = clusters.dynamic_active_clusters;
    expect(dynamicClusters.map((entry) => entry.cluster.name).sort()).toEqual(['mcp_sidecar', 'mcp_sidecar_check', 'mcp_sidecar_streams', 'mcpgw_ratelimit', clusterOf(backends.jobs), clusterOf(backends.weather)].sort());
    // State of the world would stamp every cluster with the one response version; delta versions each resource.
    expect(new Set(dynamicClusters.map((entry) => entry.version_info)).size).toBe(dynamicClusters.length);
  });

  it('has every pushed type ACKed by Envoy and nothing NACKed', async () => {
    const pushedTypes = [TYPE_URL.cluster, TYPE_URL.listener, TYPE_URL.routeConfiguration];
    const node = await waitFor('Envoy to ACK clusters, listeners and routes', async () => {
      const status = (await (await fetch(`${stack.controlPlaneAdminUrl}/status`)).json()) as { xds: { nodes: NodeStatus[] } };
      const [first] = status.xds.nodes;
      return first && pushedTypes.every((typeUrl) => first.acked[typeUrl]) ? first : undefined;
    });
    expect(node.lastNack).toBeUndefined();

    const metrics = await (await fetch(`${stack.controlPlaneAdminUrl}/metrics`)).text();
    expect(metrics).toMatch(/^mcpgw_xds_acks_total\{type="RouteConfiguration"\} [1-9]/m);
    expect(metrics).not.toMatch(/^mcpgw_xds_nacks_total\{/m);
    expect(fs.readFileSync(path.join(dir, 'control-plane.log'), 'utf8')).not.toContain('xds NACK');
  });
});
