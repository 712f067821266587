import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, connectClientHoldingStream, controlPlaneStatus, listedTools, listedToolsOnceServed, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * What the catalog says about backends (real Envoy, sidecar, control plane, MCP SDK peers): a
 * backend whose tools/list grows to 50 MB is cut at the bound and served from its last good copy;
 * a backend that comes back is listed within seconds, not at the next full refresh, and clients are
 * told; a failure names its cause.
 */

interface DegradedBackend {
  name: string;
  state: string;
  lastError: string | null;
  tools: number;
}

async function toolsListResult(url: string): Promise<{ names: string[]; degraded: DegradedBackend[] }> {
  const response = await postJsonRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  expect(response.status).toBe(200);
  const result = response.json().result;
  return { names: result.tools.map((tool: { name: string }) => tool.name), degraded: result._meta['mcpgw/federation'].degradedBackends };
}

const HUGE_TOOLS = 500;
const HUGE_DESCRIPTION_BYTES = 100_000; // 500 tools x 100 KB: a 50 MB tools/list in one page

describe('a backend whose tools/list grows to 50 MB', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let huge: ScriptedToolService;
  let neverListed: ScriptedToolService | undefined;

  beforeAll(async () => {
    huge = await ScriptedToolService.start(['alpha', 'beta'], 1000);
    ({ stack, backends } = await startGateway('catalog-huge-tools-list', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] },
        { key: 'big', toolServices: [{ name: 'weather', url: b.weather }, { id: 'huge', name: 'huge', url: huge.url }] },
      ],
    })));
    await waitFor('the big route with both backends', async () => ((await listedTools(stack.gatewayUrl('big'))) ?? []).length === 4 || undefined);
  });

  afterAll(async () => {
    await stack?.stop();
    await huge?.stop();
    await neverListed?.stop();
  });

  it('is cut at the bound and degraded with the reason; its last good tools are served, other routes answer as before', async () => {
    huge.setTools(Array.from({ length: HUGE_TOOLS }, (_, index) => `tool_${index}`));
    huge.setDescriptionBytes(HUGE_DESCRIPTION_BYTES);
    const refreshing = fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=big`, { method: 'POST' });
    // While the control plane reads the huge answer, another route is served as usual.
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts']);
    const refreshed = (await (await refreshing).json()) as { routes: { backends: { name: string; state: string; last_error: string; tools: number }[] }[] };
    expect(refreshed.routes[0].backends.find((backend) => backend.name === 'huge')).toMatchObject({ state: 'stale', last_error: 'tools/list exceeded 10 MiB', tools: 2 });

    // The control plane answered; the sidecars hear of the change over their catalog stream a moment later.
    const big = await waitFor('the sidecar to serve the degraded catalog', async () => {
      const listed = await toolsListResult(stack.gatewayUrl('big'));
      return listed.degraded.length > 0 ? listed : undefined;
    });
    expect(big.names).toEqual(['huge__alpha', 'huge__beta', 'weather__get_forecast', 'weather__get_alerts']);
    expect(big.degraded).toEqual([expect.objectContaining({ name: 'huge', state: 'stale', lastError: 'tools/list exceeded 10 MiB', tools: 2 })]);
    const call = await postJsonRpc(stack.gatewayUrl('big'), { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'weather__get_forecast', arguments: { city: 'Oslo' } } });
    expect(call.text).toContain('Forecast for Oslo');
    expect((await toolsListResult(stack.gatewayUrl('demo'))).degraded).toEqual([]);
  });

  it('is served without its tools on a route where it was never listed, and from its shared last good copy under a new id of a backend listed before', async () => {
    neverListed = await ScriptedToolService.start(Array.from({ length: HUGE_TOOLS }, (_, index) => `tool_${index}`), 1000);
    neverListed.setDescriptionBytes(HUGE_DESCRIPTION_BYTES);
    await stack.setPortalRegistry({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] },
        { key: 'big', toolServices: [{ name: 'weather', url: backends.weather }, { id: 'huge', name: 'huge', url: huge.url }] },
        { key: 'fresh', toolServices: [{ name: 'jobs', url: backends.jobs }, { id: 'huge-fresh', name: 'huge', url: neverListed.url }] },
        // Another id on the backend 'big' lists: the same listing (docs/tools-list.md), so the same last good tools and state.
        { key: 'again', toolServices: [{ id: 'huge-again', name: 'huge', url: huge.url }] },
      ],
    });
    const fresh = await waitFor('the new route', async () => {
      const listed = await postJsonRpc(stack.gatewayUrl('fresh'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      return listed.status === 200 ? toolsListResult(stack.gatewayUrl('fresh')) : undefined;
    });
    expect(fresh.names).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);
    expect(fresh.degraded).toEqual([expect.objectContaining({ name: 'huge', state: 'missing', lastError: 'tools/list exceeded 10 MiB', tools: 0 })]);
    const again = await toolsListResult(stack.gatewayUrl('again'));
    expect(again.names).toEqual(['huge__alpha', 'huge__beta']);
    expect(again.degraded).toEqual([expect.objectContaining({ name: 'huge', state: 'stale', lastError: 'tools/list exceeded 10 MiB', tools: 2 })]);
  });
});

describe('a backend that comes back', () => {
  let stack: GatewayStack;
  let latePort: number;
  let late: ScriptedToolService | undefined;

  beforeAll(async () => {
    latePort = await freePort();
    // The catalog's full refresh stays at its 30 s default: only the fast re-listing can find the backend in time.
    // Its backoff is capped at 2 s here (10 s by default, with jitter 12 s: too close to the test's bound on a loaded host).
    ({ stack } = await startGateway(
      'catalog-backend-back',
      (b) => ({
        routes: [{ key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'late', url: `http://127.0.0.1:${latePort}/mcp` }] }],
      }),
      { extraArgs: { controlPlane: ['--catalog-retry-max-ms', '2000'] } },
    ));
  });

  afterAll(async () => {
    await stack?.stop();
    await late?.stop();
  });

  it('is named with the cause while down, then listed within seconds, and clients with a stream are told', async () => {
    const down = await waitFor('the down backend reported', async () => {
      const backend = (await controlPlaneStatus(stack)).catalog.routes[0].backends.find((b: { name: string }) => b.name === 'late');
      return backend?.last_error ? backend : undefined;
    });
    expect(down).toMatchObject({ state: 'missing', last_error: `connection refused (127.0.0.1:${latePort})` });

    // The control plane's status can be ahead of the sidecar's catalog (sent once Envoy has the routes).
    await waitFor('the sidecar to serve the route', () => listedToolsOnceServed(stack.gatewayUrl('demo')));
    // Told only on a stream held before the backend comes back.
    const client = await connectClientHoldingStream(stack.gatewayUrl('demo'));
    let notified = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      notified++;
    });
    try {
      late = await ScriptedToolService.start(['ping'], 50, latePort);
      await waitFor('the list_changed notification', async () => (notified > 0 ? true : undefined), { timeoutMs: 15_000 });
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'late__ping']);
    } finally {
      await client.close();
    }
  });
});
