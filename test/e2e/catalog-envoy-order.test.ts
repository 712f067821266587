import { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { connectClient, controlPlaneStatus, listedTools, startGateway } from '../support/gateway-fixture';
import { HoldableRelay } from '../support/holdable-relay';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * The sidecars list tools, Envoy calls them, and each hears of a catalog change on its own stream
 * (docs/xds.md). A tool is listed only once Envoy can call it: here Envoy's xDS goes through a relay
 * that holds the control plane's pushes back, as a loaded host can (real Envoy, sidecar, control plane).
 */
describe('a tool is listed only once Envoy can call it', () => {
  let stack: GatewayStack;
  let relay: HoldableRelay;
  let late: ScriptedToolService | undefined;
  let latePort: number;

  beforeAll(async () => {
    relay = await HoldableRelay.start();
    latePort = await freePort();
    ({ stack } = await startGateway(
      'catalog-envoy-order',
      (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'late', url: `http://127.0.0.1:${latePort}/mcp` }] }] }),
      { envoyXdsPort: (port) => relay.to(port) },
    ));
  });

  afterAll(async () => {
    await stack?.stop();
    await late?.stop();
    await relay?.stop();
  });

  it("keeps a backend's new tools out of tools/list until Envoy has answered the routes that call them", async () => {
    const url = stack.gatewayUrl('demo');
    expect(await listedTools(url)).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);
    relay.hold();
    try {
      late = await ScriptedToolService.start(['ping'], 50, latePort);
      expect((await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=demo`, { method: 'POST' })).status).toBe(200);
      await waitFor("the routes with late's tools pushed to Envoy, not yet answered", async () => {
        const [envoy] = (await controlPlaneStatus(stack)).xds.nodes as { sent: Record<string, string>; acked: Record<string, string> }[];
        return envoy.sent[TYPE_URL.routeConfiguration] !== envoy.acked[TYPE_URL.routeConfiguration] ? true : undefined;
      });
      // Envoy would answer a call of late__ping "has no tool" now: it is not listed either.
      expect(await listedTools(url)).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami']);
    } finally {
      relay.release();
    }
    await waitFor('late__ping listed', async () => (((await listedTools(url)) ?? []).includes('late__ping') ? true : undefined));
    const client = await connectClient(url);
    try {
      const result = (await client.callTool({ name: 'late__ping', arguments: {} })) as CallToolResult;
      expect(result.content).toEqual([{ type: 'text', text: 'called ping' }]);
    } finally {
      await client.close();
    }
  });
});
