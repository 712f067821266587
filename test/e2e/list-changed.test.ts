import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { waitFor } from '../../control-plane/devstack/processes';
import { connectClientHoldingStream, listedTools, postJsonRpc, startGateway, MCP_POST_HEADERS } from '../support/gateway-fixture';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * notifications/tools/list_changed: a client's standalone GET stream is held by the sidecars' stream
 * server, and told when the tools its route serves change.
 */
describe('tools/list_changed through the gateway (real Envoy, SDK client)', () => {
  let stack: GatewayStack;
  let toolbox: ScriptedToolService;

  beforeAll(async () => {
    toolbox = await ScriptedToolService.start(['alpha']);
    ({ stack } = await startGateway('list-changed', () => ({ routes: [{ key: 'live', toolServices: [{ name: 'box', url: toolbox.url }] }] })));
    await waitFor('the toolbox in the catalog', async () => ((await listedTools(stack.gatewayUrl('live'))) ?? []).length === 1 || undefined);
  });
  afterAll(async () => {
    await stack?.stop();
    await toolbox?.stop();
  });

  const refresh = () => fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=live`, { method: 'POST' });

  it('tells a client with a session that its tools changed, and not when they did not', async () => {
    const client = await connectClientHoldingStream(stack.gatewayUrl('live'));
    let notified = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      notified++;
    });
    try {
      expect(client.getServerCapabilities()?.tools).toEqual({ listChanged: true });
      await refresh();
      // A refresh that changes nothing is no news.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(notified).toBe(0);
      toolbox.setTools(['alpha', 'beta']);
      await refresh();
      await waitFor('the list_changed notification', async () => (notified === 1 ? true : undefined));
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(['box__alpha', 'box__beta']);
    } finally {
      await client.close();
    }
  });

  it('answers a GET stream without a session 405, and with an unknown one 404', async () => {
    const get = (headers: Record<string, string>) => fetch(stack.gatewayUrl('live'), { headers: { accept: 'text/event-stream', ...headers } });
    expect((await get({})).status).toBe(405);
    const unknown = await get({ 'mcp-session-id': 'A'.repeat(32) });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: number } }).error.code).toBe(-32001);
    // POSTs are unaffected.
    expect((await postJsonRpc(stack.gatewayUrl('live'), { jsonrpc: '2.0', id: 1, method: 'ping' }, MCP_POST_HEADERS)).status).toBe(200);
  });
});
