import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { listedTools, startGateway } from '../support/gateway-fixture';

/**
 * MCP SDK v2 clients (@modelcontextprotocol/client, which can speak 2026-07-28) through the gateway,
 * which serves the session-based revisions (2025-03-26 to 2025-11-25) only: a client that negotiates
 * lands on 2025-11-25 and works; one pinned to 2026-07-28 is told clearly that it is not offered
 * (docs/adr/0007-mcp-2026-07-28.md).
 */
describe('MCP SDK v2 clients through the gateway', () => {
  let stack: GatewayStack;

  beforeAll(async () => {
    ({ stack } = await startGateway('protocol-eras', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }] }] })));
    await listedTools(stack.gatewayUrl('demo'));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it.each(['legacy', 'auto'] as const)('serves a v2 client in %s negotiation on 2025-11-25', async (mode) => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode } });
    try {
      await client.connect(new V2Transport(new URL(stack.gatewayUrl('demo'))));
      expect(client.getNegotiatedProtocolVersion()).toBe('2025-11-25');
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain('jobs__echo');
      const result = await client.callTool({ name: 'jobs__echo', arguments: { text: 'from v2' } });
      expect(result.content).toEqual([{ type: 'text', text: 'from v2' }]);
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'jobs', tool: 'echo' });
    } finally {
      await client.close();
    }
  });

  it('tells a v2 client pinned to 2026-07-28 that the revision is not offered', async () => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await expect(client.connect(new V2Transport(new URL(stack.gatewayUrl('demo'))))).rejects.toThrow(
      'did not offer pinned protocol version 2026-07-28',
    );
    await client.close();
  });
});
