import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { startEverythingServer } from '../support/everything-server';
import { MCP_POST_HEADERS, connectClient, controlPlaneStatus, listedTools, postJsonRpc, startGateway, testDir } from '../support/gateway-fixture';
import { ModernToolService } from '../support/modern-tool-service';

/**
 * Both protocol eras through the gateway (docs/adr/0007-mcp-2026-07-28.md): MCP SDK v2 clients
 * (@modelcontextprotocol/client) in the session-based revision (2025-11-25) and the stateless one
 * (2026-07-28), and v1 clients, in front of SDK v1 Tool Services that speak only the former and an
 * SDK v2 Tool Service that speaks only the latter.
 */
describe('both protocol eras through the gateway (SDK v1 and v2 clients and backends)', () => {
  let stack: GatewayStack;
  let everything: ManagedProcess;
  let modern: ModernToolService;

  beforeAll(async () => {
    const everythingPort = await freePort();
    everything = await startEverythingServer(everythingPort, path.join(testDir('protocol-eras-everything'), 'everything.log'));
    modern = await ModernToolService.start();
    ({ stack } = await startGateway('protocol-eras', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }] },
        { key: 'mixed', toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'modern', url: modern.url }] },
        { key: 'stateful', toolServices: [{ name: 'everything', url: `http://127.0.0.1:${everythingPort}/mcp` }] },
      ],
      // No catalog refresh during the tests: the backend sessions server-everything counts are the calls' own.
    }), { catalogRefreshMs: 600_000 }));
    await listedTools(stack.gatewayUrl('demo'));
    await waitFor('server-everything in the catalog', async () => (((await listedTools(stack.gatewayUrl('stateful'))) ?? []).length > 0 ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await everything?.stop();
    await modern?.stop();
  });

  it.each<[string, 'legacy' | 'auto' | { pin: string }, string]>([
    ['legacy negotiation (initialize)', 'legacy', '2025-11-25'],
    ['auto negotiation (server/discover)', 'auto', '2026-07-28'],
    ['a pin to 2026-07-28', { pin: '2026-07-28' }, '2026-07-28'],
  ])('serves a v2 client in %s', async (_case, mode, version) => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode } });
    try {
      await client.connect(new V2Transport(new URL(stack.gatewayUrl('demo'))));
      expect(client.getNegotiatedProtocolVersion()).toBe(version);
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain('jobs__echo');
      const result = await client.callTool({ name: 'jobs__echo', arguments: { text: 'from v2' } });
      expect(result.content).toEqual([{ type: 'text', text: 'from v2' }]);
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'jobs', tool: 'echo' });
      const progress: number[] = [];
      const job = await client.callTool({ name: 'jobs__run_job', arguments: { steps: 3, interval_ms: 20 } }, { onprogress: ({ progress: step }) => progress.push(step) });
      expect(job.content).toEqual([{ type: 'text', text: 'job finished after 3 steps' }]);
      expect(progress).toEqual([1, 2, 3]);
    } finally {
      await client.close();
    }
  });

  it('gives a stateless client’s call to a backend that needs a session a pooled backend session, in one attempt', async () => {
    const sessionsOpened = () => fs.readFileSync(everything.options.logFile!, 'utf8').match(/Session initialized with ID/g)?.length ?? 0;
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    const openedBefore = sessionsOpened();
    try {
      await client.connect(new V2Transport(new URL(stack.gatewayUrl('stateful'))));
      const sum = await client.callTool({ name: 'everything__get-sum', arguments: { a: 2, b: 3 } });
      expect(JSON.stringify(sum.content)).toContain('5');
      expect(sum._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'everything', attempts: 1 });
      const again = await client.callTool({ name: 'everything__get-sum', arguments: { a: 4, b: 5 } });
      expect(JSON.stringify(again.content)).toContain('9');
    } finally {
      await client.close();
    }
    // One backend session for both calls.
    expect(sessionsOpened() - openedBefore).toBe(1);
  });

  it('lists a Tool Service of the stateless revision, and calls it statelessly for clients of either era', async () => {
    await waitFor('the stateless Tool Service in the catalog', async () => (((await listedTools(stack.gatewayUrl('mixed'))) ?? []).includes('modern__shout') ? true : undefined));
    const status = await controlPlaneStatus(stack);
    const mixed = status.catalog.routes.find((route: { route: string }) => route.route === 'mixed');
    expect(mixed.backends.map((backend: { name: string; protocol_version: string }) => [backend.name, backend.protocol_version])).toEqual([
      ['jobs', '2025-11-25'],
      ['modern', '2026-07-28'],
    ]);
    const sessionClient = await connectClient(stack.gatewayUrl('mixed'));
    const statelessClient = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    try {
      await statelessClient.connect(new V2Transport(new URL(stack.gatewayUrl('mixed'))));
      for (const client of [sessionClient, statelessClient]) {
        const shouted = await client.callTool({ name: 'modern__shout', arguments: { text: 'both eras' } });
        expect(shouted.content).toEqual([{ type: 'text', text: 'BOTH ERAS' }]);
        expect(shouted._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'modern', tool: 'shout', attempts: 1 });
      }
    } finally {
      await sessionClient.close();
      await statelessClient.close();
    }
    // Every request the backend got was of its own revision (the catalog's failed 2025 attempt aside).
    expect(modern.protocolVersions.filter((version) => version !== '2026-07-28').every((version) => version === '')).toBe(true);
  });

  const modernHeaders = (method: string, name?: string) => ({
    ...MCP_POST_HEADERS,
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': method,
    ...(name !== undefined && { 'mcp-name': name }),
  });
  const envelope = (version = '2026-07-28') => ({
    'io.modelcontextprotocol/protocolVersion': version,
    'io.modelcontextprotocol/clientCapabilities': {},
  });

  it.each<[string, Record<string, string>, unknown, number, number]>([
    [
      'an Mcp-Name that is not the tool in the body',
      modernHeaders('tools/call', 'jobs__run_job'),
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' }, _meta: envelope() } },
      400,
      -32020,
    ],
    [
      'a version the gateway does not serve',
      { ...modernHeaders('tools/list'), 'mcp-protocol-version': '2027-01-01' },
      { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: envelope('2027-01-01') } },
      400,
      -32022,
    ],
    ['a method the revision removed (ping)', modernHeaders('ping'), { jsonrpc: '2.0', id: 3, method: 'ping', params: { _meta: envelope() } }, 404, -32601],
  ])('answers %s in the revision’s own terms', async (_case, headers, body, status, code) => {
    const response = await postJsonRpc(stack.gatewayUrl('demo'), body, headers);
    expect(response.status).toBe(status);
    expect(response.json().error.code).toBe(code);
  });
});
