import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, clusterOf, connectClient, postJsonRpc, startGateway } from '../support/gateway-fixture';

/**
 * The whole path on real parts: SDK client → Envoy 1.40 (call lane: mcp filter, call script, session
 * check) → sample Tool Service, and Envoy → sidecar for what the gateway answers itself, configured
 * over ADS by the control plane.
 */
describe('walking skeleton (real Envoy, sidecar, control plane, MCP SDK peers)', () => {
  let stack: GatewayStack;
  let client: Client;
  let backends: SampleBackends;

  beforeAll(async () => {
    ({ stack, backends } = await startGateway('walking-skeleton', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] },
        { key: 'solo', toolServices: [{ name: 'jobs', url: b.jobs }] },
      ],
    })));
    client = await connectClient(stack.gatewayUrl('demo'));
  });

  afterAll(async () => {
    await client?.close();
    await stack?.stop();
  });

  const textOf = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;

  it('lists the tools of every backend of the route, prefixed with the backend name', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts']);
    expect(tools.find((tool) => tool.name === 'weather__get_forecast')?.inputSchema.required).toEqual(['city']);
  });

  it('serves only the route\'s own backends on another route', async () => {
    const solo = await connectClient(stack.gatewayUrl('solo'));
    try {
      expect((await solo.listTools()).tools.map((tool) => tool.name)).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);
      await expect(solo.callTool({ name: 'weather__get_forecast', arguments: { city: 'Seoul' } })).rejects.toThrow(
        /unknown backend "weather" on route "solo"/,
      );
    } finally {
      await solo.close();
    }
  });

  it('calls a tool on each backend and returns its result', async () => {
    expect(textOf(await client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Seoul' } }))).toBe(
      'Forecast for Seoul: sunny, 15°C',
    );
    expect(textOf(await client.callTool({ name: 'jobs__echo', arguments: { text: 'through envoy' } }))).toBe('through envoy');
  });

  it('streams progress notifications frame by frame, long before the result', async () => {
    const steps = 5;
    const intervalMs = 300;
    const started = Date.now();
    const progressAt: number[] = [];
    const result = await client.callTool({ name: 'jobs__run_job', arguments: { steps, interval_ms: intervalMs } }, undefined, {
      onprogress: () => progressAt.push(Date.now() - started),
    });
    const resultAt = Date.now() - started;
    expect(textOf(result)).toBe(`job finished after ${steps} steps`);
    expect(progressAt).toHaveLength(steps);
    // Buffering anywhere on the path would deliver every frame together with the result.
    const span = (steps - 1) * intervalMs;
    expect(resultAt - progressAt[0]).toBeGreaterThanOrEqual(span / 2);
    expect(progressAt[steps - 1] - progressAt[0]).toBeGreaterThanOrEqual(span / 2);
  });

  it('rejects unprefixed and unknown tool names with a JSON-RPC error, never a guess', async () => {
    await expect(client.callTool({ name: 'get_forecast', arguments: {} })).rejects.toThrow(/has no backend prefix/);
    await expect(client.callTool({ name: 'weather__nope', arguments: {} })).rejects.toThrow(/backend "weather" has no tool "nope"/);
  });

  it('rejects /mcp without a route key', async () => {
    const response = await postJsonRpc(`http://127.0.0.1:${stack.ports.listener}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(response.status).toBe(400);
    expect(response.contentType).toBe('application/json');
    expect(response.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: 'route key is required: use /mcp/{routeKey}' },
    });
  });

  it('rejects an unknown route key', async () => {
    const response = await postJsonRpc(stack.gatewayUrl('nope'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(response.status).toBe(404);
    expect(response.json().error).toEqual({ code: -32600, message: 'unknown route key "nope"' });
  });

  it('lets no client header choose the backend', async () => {
    const response = await postJsonRpc(
      stack.gatewayUrl('demo'),
      { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'weather__get_alerts', arguments: { region: 'north' } } },
      { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-mcpgw-cluster': 'tool_service.jobs' },
    );
    expect(response.status).toBe(200);
    expect(response.text).toContain('No alerts for north');
  });

  it('shows in Envoy\'s config_dump the listener, routes and clusters that came over xDS', async () => {
    const dump = (await (await fetch(`${stack.envoyAdminUrl}/config_dump`)).json()) as { configs: Record<string, unknown>[] };
    const section = (suffix: string) => dump.configs.find((config) => String(config['@type']).endsWith(`.${suffix}`))!;

    const listeners = section('ListenersConfigDump') as { dynamic_listeners: { name: string }[]; static_listeners?: unknown[] };
    expect(listeners.dynamic_listeners.map((listener) => listener.name)).toEqual(['mcp_egress', 'mcp_gateway']);
    expect(listeners.static_listeners ?? []).toHaveLength(0);

    const routes = section('RoutesConfigDump') as {
      dynamic_route_configs: { route_config: { name: string; virtual_hosts: { routes: { name: string }[] }[] } }[];
    };
    // Envoy lists the egress listener's routes beside the gateway's, in no fixed order.
    const routeConfig = routes.dynamic_route_configs.map((config) => config.route_config).find((config) => config.name === 'mcp_routes')!;
    expect(routeConfig).toBeDefined();
    expect(routeConfig.virtual_hosts[0].routes.map((route) => route.name)).toEqual([
      // Refused on their headers before any route key's (405 / 415 / 406, docs/errors.md).
      'method_not_allowed',
      'unsupported_media_type',
      'not_acceptable_without_json',
      'not_acceptable_without_event_stream',
      'demo/call/weather',
      'demo/call/jobs',
      'demo/streams',
      'demo/listen',
      'demo/end',
      'demo/gateway',
      'solo/call/jobs',
      'solo/streams',
      'solo/listen',
      'solo/end',
      'solo/gateway',
      'unknown_route',
      'approval_pages',
      'not_found',
    ]);

    const clusters = section('ClustersConfigDump') as {
      static_clusters: { cluster: { name: string } }[];
      dynamic_active_clusters: { cluster: { name: string } }[];
    };
    expect(clusters.static_clusters.map((entry) => entry.cluster.name).sort()).toEqual(['call_log_control_plane', 'xds_control_plane']);
    expect(clusters.dynamic_active_clusters.map((entry) => entry.cluster.name).sort()).toEqual(
      ['mcp_sidecar', 'mcp_sidecar_check', 'mcp_sidecar_streams', 'mcpgw_ratelimit', clusterOf(backends.jobs), clusterOf(backends.weather)].sort(),
    );
  });
});
