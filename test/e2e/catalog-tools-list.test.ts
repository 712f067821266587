import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { connectClient, controlPlaneStatus, metricValue, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * Issue 4 parts 1-2 on real parts (Envoy, sidecar, control plane, Redis, MCP SDK peers): naming
 * rules, duplicates and the per-route cap decided by the control plane, tools/list pages with an
 * opaque cursor, degraded metadata, and the on-demand catalog refresh.
 */

const numbered = (prefix: string, count: number) => Array.from({ length: count }, (_, index) => `${prefix}${String(index).padStart(3, '0')}`);
const LONG_NAME = 'l'.repeat(70);
/** 220 good tools, one breaking only the client rule (a dot), one breaking MCP's rule (a space), one too long for clients, one listed twice. */
const TOOLBOX_TOOLS = [...numbered('t', 110), 'dotted.name', 'bad name', ...numbered('t', 220).slice(110), 't000', LONG_NAME];

interface FederationMeta {
  route: string;
  degradedBackends: { name: string; state: string; failingSince: string | null; lastSuccessAt: string | null; lastError: string | null; tools: number }[];
  warning?: string;
}
interface ToolsListPage {
  tools: { name: string }[];
  nextCursor?: string;
  _meta: { 'mcpgw/federation': FederationMeta };
}
interface RouteStatus {
  route: string;
  exposed_tools: number;
  backends: { name: string; state: string; last_error: string; tools: number; exposed_tools: number }[];
  reported_tools: { tool: string; backend: string; rule: string; action: string; reason: string }[];
}

describe('catalog rules and tools/list answers (real Envoy, sidecar, control plane, MCP SDK peers)', () => {
  let stack: GatewayStack;
  let dir: string;
  let toolbox: ScriptedToolService;
  let client: Client;
  let customControlPlane: ManagedProcess | undefined;

  beforeAll(async () => {
    toolbox = await ScriptedToolService.start(TOOLBOX_TOOLS);
    // Nothing ever listens here: a backend that has never answered.
    const ghostPort = await freePort();
    ({ stack, dir } = await startGateway('catalog-tools-list', (backends) => ({
      routes: [
        { key: 'wide', toolServices: [{ name: 'toolbox', url: toolbox.url }, { name: 'weather', url: backends.weather }] },
        { key: 'lonely', toolServices: [{ name: 'ghost', url: `http://127.0.0.1:${ghostPort}/mcp` }] },
      ],
      // Pages of 100 here, to test paging; the default is every tool in one answer.
    }), { toolsListPageSize: 100 }));
    // Both backends listed, as the sidecar serves them (a big listing can come after Envoy is up).
    await waitFor('the wide route with both backends listed', async () => ((await toolsList('wide'))._meta['mcpgw/federation'].degradedBackends.length === 0 ? true : undefined));
    client = await connectClient(stack.gatewayUrl('wide'));
  });

  afterAll(async () => {
    await client?.close();
    await customControlPlane?.stop();
    await stack?.stop();
    await toolbox?.stop();
  });

  const toolsList = async (route: string, cursor?: string) => {
    const response = await postJsonRpc(stack.gatewayUrl(route), { jsonrpc: '2.0', id: 1, method: 'tools/list', ...(cursor && { params: { cursor } }) });
    expect(response.status).toBe(200);
    return response.json().result as ToolsListPage;
  };
  const routeStatus = async (route: string): Promise<RouteStatus> =>
    (await controlPlaneStatus(stack)).catalog.routes.find((candidate: RouteStatus) => candidate.route === route);
  const refreshNow = async (route: string): Promise<RouteStatus> => {
    const response = await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=${route}`, { method: 'POST' });
    expect(response.status).toBe(200);
    return ((await response.json()) as { routes: RouteStatus[] }).routes[0];
  };
  const textOf = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;

  it('serves the route in pages of 100 to an SDK client: checked names, deterministic order, nothing twice', async () => {
    const pages: string[][] = [];
    let cursor: string | undefined;
    do {
      const result = await client.listTools(cursor ? { cursor } : undefined);
      pages.push(result.tools.map((tool) => tool.name));
      cursor = result.nextCursor;
    } while (cursor);
    expect(pages.map((page) => page.length)).toEqual([100, 100, 22]);
    expect(pages.flat()).toEqual([...numbered('toolbox__t', 220), 'weather__get_forecast', 'weather__get_alerts']);
    expect((await toolsList('wide'))._meta).toEqual({ 'mcpgw/federation': { route: 'wide', degradedBackends: [] } });
  });

  it('reports in /status and the metrics every tool a rule left out, and which rule', async () => {
    const wide = await routeStatus('wide');
    expect(wide.exposed_tools).toBe(222);
    expect(wide.backends.map(({ name, state, tools, exposed_tools }) => ({ name, state, tools, exposed_tools }))).toEqual([
      { name: 'toolbox', state: 'ok', tools: 224, exposed_tools: 220 },
      { name: 'weather', state: 'ok', tools: 2, exposed_tools: 2 },
    ]);
    expect(wide.reported_tools.map(({ tool, rule, action }) => [tool, rule, action])).toEqual([
      ['toolbox__dotted.name', 'client-tool-name', 'dropped'],
      ['toolbox__bad name', 'mcp-tool-name', 'dropped'],
      ['toolbox__t000', 'duplicate-name', 'dropped'],
      [`toolbox__${LONG_NAME}`, 'client-tool-name', 'dropped'],
    ]);
    expect(await metricValue(stack, 'mcpgw_catalog_reported_tools', { rule: 'client-tool-name', action: 'dropped' })).toBe(2);
    expect(await metricValue(stack, 'mcpgw_catalog_reported_tools', { rule: 'mcp-tool-name' })).toBe(1);
    expect(await metricValue(stack, 'mcpgw_catalog_reported_tools', { rule: 'duplicate-name' })).toBe(1);
    expect(await metricValue(stack, 'mcpgw_catalog_reported_tools', { rule: 'route-tool-cap' })).toBe(0);
  });

  it('calls a tool by its exact exposed name; a tool the rules left out is unknown', async () => {
    expect(textOf(await client.callTool({ name: 'toolbox__t150', arguments: {} }))).toBe('called t150');
    await expect(client.callTool({ name: 'toolbox__dotted.name', arguments: {} })).rejects.toThrow(/backend "toolbox" has no tool "dotted.name"/);
  });

  it('answers an invalid cursor with JSON-RPC error -32602 on HTTP 200', async () => {
    const response = await postJsonRpc(stack.gatewayUrl('wide'), { jsonrpc: '2.0', id: 'c', method: 'tools/list', params: { cursor: 'not-ours' } });
    expect(response.status).toBe(200);
    expect(response.json()).toEqual({
      jsonrpc: '2.0',
      id: 'c',
      error: { code: -32602, message: 'invalid cursor: use the nextCursor of an earlier tools/list answer on route "wide"' },
    });
  });

  it('continues after the last tool returned when the catalog changes between pages, refreshed on demand', async () => {
    const first = await toolsList('wide');
    expect(first.tools.at(-1)?.name).toBe('toolbox__t099');
    toolbox.setTools(numbered('t', 220).slice(50));
    try {
      const refreshed = await refreshNow('wide');
      expect(refreshed.backends.find((backend) => backend.name === 'toolbox')).toMatchObject({ state: 'ok', tools: 170, exposed_tools: 170 });
      await waitFor('the sidecar to serve the changed catalog', async () =>
        (await toolsList('wide')).tools[0].name === 'toolbox__t050' ? true : undefined,
      );
      // An offset cursor (100) would now skip t100-t149.
      expect((await toolsList('wide', first.nextCursor)).tools.slice(0, 2).map((tool) => tool.name)).toEqual(['toolbox__t100', 'toolbox__t101']);
    } finally {
      toolbox.setTools(TOOLBOX_TOOLS);
      await refreshNow('wide');
    }
  });

  it('answers a route whose backends never answered with an empty list and a warning, still HTTP 200', async () => {
    const result = await toolsList('lonely');
    expect(result.tools).toEqual([]);
    expect(result.nextCursor).toBeUndefined();
    expect(result._meta['mcpgw/federation']).toEqual({
      route: 'lonely',
      degradedBackends: [
        { name: 'ghost', state: 'missing', failingSince: expect.stringMatching(/^\d{4}-\d\d-\d\dT/), lastSuccessAt: null, lastError: expect.any(String), tools: 0 },
      ],
      warning: 'no backend of route "lonely" has answered tools/list: the list is empty until one does',
    });
  });

  it('serves every sidecar what a control plane restarted with other settings decides: separator, policy, cap, page size', async () => {
    await stack.stopProcess('control-plane');
    customControlPlane = new ManagedProcess({
      name: 'control-plane-custom',
      command: process.execPath,
      args: [
        ...stack.controlPlaneArgs(),
        '--tool-name-separator', '.',
        '--tool-name-policy', 'warn',
        '--max-tools-per-route', '150',
        '--tools-list-page-size', '60',
      ],
      logFile: path.join(dir, 'control-plane-custom.log'),
    });
    const first = await waitFor(
      'the sidecar to serve the new settings',
      async () => {
        const page = await toolsList('wide').catch(() => undefined);
        return page?.tools[0]?.name === 'toolbox.t000' && page._meta['mcpgw/federation'].degradedBackends.length === 0 ? page : undefined;
      },
      { timeoutMs: 30000 },
    );
    const names = first.tools.map((tool) => tool.name);
    let cursor = first.nextCursor;
    const pageSizes = [first.tools.length];
    while (cursor) {
      const page = await toolsList('wide', cursor);
      pageSizes.push(page.tools.length);
      names.push(...page.tools.map((tool) => tool.name));
      cursor = page.nextCursor;
    }
    expect(pageSizes).toEqual([60, 60, 30]);
    // Dotted names are kept under warn; the cap keeps the first 150 in order, so weather's tools are cut.
    expect(names).toEqual([...numbered('toolbox.t', 110), 'toolbox.dotted.name', ...numbered('toolbox.t', 149).slice(110)]);

    const wide = await routeStatus('wide');
    const reported = (rule: string) => wide.reported_tools.filter((finding) => finding.rule === rule).map(({ tool, action }) => [tool, action]);
    expect(reported('mcp-tool-name')).toEqual([['toolbox.bad name', 'dropped']]);
    expect(reported('duplicate-name')).toEqual([['toolbox.t000', 'dropped']]);
    expect(reported('client-tool-name')).toHaveLength(224);
    expect(reported('client-tool-name').every(([, action]) => action === 'kept')).toBe(true);
    expect(reported('route-tool-cap')).toHaveLength(74);
    expect(reported('route-tool-cap').slice(-2)).toEqual([
      ['weather.get_forecast', 'dropped'],
      ['weather.get_alerts', 'dropped'],
    ]);
    expect(await metricValue(stack, 'mcpgw_catalog_reported_tools', { rule: 'route-tool-cap', action: 'dropped' })).toBe(74);

    // The sidecar may hear from the new control plane before Envoy has reconnected to it: until Envoy
    // has its routes (the separator is in their call rules), a dotted name is "being added".
    await waitFor("Envoy to have answered the new control plane's routes", async () => {
      const nodes = (await controlPlaneStatus(stack)).xds.nodes as { sent: Record<string, string>; acked: Record<string, string> }[];
      const routes = (node: (typeof nodes)[number]) => node.acked[TYPE_URL.routeConfiguration];
      return nodes.length === 1 && routes(nodes[0]) !== undefined && routes(nodes[0]) === nodes[0].sent[TYPE_URL.routeConfiguration] ? true : undefined;
    });
    const dotted = await connectClient(stack.gatewayUrl('wide'));
    try {
      expect(textOf(await dotted.callTool({ name: 'toolbox.t001', arguments: {} }))).toBe('called t001');
      await expect(dotted.callTool({ name: 'toolbox__t001', arguments: {} })).rejects.toThrow(/has no backend prefix: call it as <backend>\.<tool>/);
      await expect(dotted.callTool({ name: 'weather.get_forecast', arguments: { city: 'Seoul' } })).rejects.toThrow(
        /backend "weather" has no tool "get_forecast"/,
      );
    } finally {
      await dotted.close();
    }
  });

  it('keeps a downed backend\'s last-good tools, marked stale in _meta with since when and why; the refresh answers with that state', async () => {
    await toolbox.stop();
    const refreshed = await refreshNow('wide');
    const toolboxState = refreshed.backends.find((backend) => backend.name === 'toolbox')!;
    expect(toolboxState).toMatchObject({ state: 'stale', exposed_tools: 150 });
    expect(toolboxState.last_error).not.toBe('');

    const result = await waitFor('the sidecar to report toolbox as stale', async () => {
      const page = await toolsList('wide');
      return page._meta['mcpgw/federation'].degradedBackends.length > 0 ? page : undefined;
    });
    expect(result.tools[0].name).toBe('toolbox.t000');
    expect(result._meta['mcpgw/federation']).toEqual({
      route: 'wide',
      degradedBackends: [
        {
          name: 'toolbox',
          state: 'stale',
          failingSince: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          lastSuccessAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          lastError: toolboxState.last_error,
          tools: 150,
        },
      ],
    });
  });
});
