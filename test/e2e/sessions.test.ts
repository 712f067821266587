import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { startEverythingServer } from '../support/everything-server';
import { listedTools, postJsonRpc, startGateway, testDir } from '../support/gateway-fixture';

/**
 * Sessions across the gateway with a real stateful backend (@modelcontextprotocol/server-everything):
 * one gateway session maps to one backend session, through sidecar restarts and late backends.
 */
describe('sessions through the gateway (server-everything, real Envoy and Redis)', () => {
  let stack: GatewayStack;
  let dir: string;
  let everything: ManagedProcess;
  let lateEverything: ManagedProcess | undefined;
  let latePort: number;
  const clients: Client[] = [];

  beforeAll(async () => {
    const port = await freePort();
    latePort = await freePort();
    everything = await startEverythingServer(port, path.join(testDir('sessions-everything'), 'everything.log'));
    ({ stack, dir } = await startGateway('sessions', (b) => ({
      routes: [
        { key: 'stateful', toolServices: [{ name: 'everything', url: `http://127.0.0.1:${port}/mcp` }, { name: 'jobs', url: b.jobs }] },
        { key: 'late', toolServices: [{ name: 'jobs', url: b.jobs }, { id: 'late-everything', name: 'later', url: `http://127.0.0.1:${latePort}/mcp` }] },
      ],
    })));
  });

  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await stack?.stop();
    await everything?.stop();
    await lateEverything?.stop();
  });

  async function connect(route: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
    const client = new Client({ name: 'session-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(stack.gatewayUrl(route)));
    await client.connect(transport);
    clients.push(client);
    return { client, transport };
  }

  /** server-everything's per-session toggle names the backend session it ran in. */
  async function toggle(client: Client, tool = 'everything__toggle-simulated-logging'): Promise<{ started: boolean; session: string }> {
    const result = await client.callTool({ name: tool, arguments: {} });
    const text = (result.content as { text: string }[])[0].text;
    const match = /(Started|Stopped) simulated.* for session ([0-9a-f-]{36})/.exec(text);
    if (!match) throw new Error(`unexpected toggle answer: ${text}`);
    return { started: match[1] === 'Started', session: match[2] };
  }

  it('gives the client a gateway session and keeps one backend session behind it', async () => {
    const { client, transport } = await connect('stateful');
    expect(transport.sessionId).toMatch(/^[A-Za-z0-9_-]{32}$/);
    const first = await toggle(client);
    expect((await client.callTool({ name: 'everything__echo', arguments: { message: 'hi' } })).content).toEqual([{ type: 'text', text: 'Echo: hi' }]);
    expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'stateless too' } })).content).toEqual([{ type: 'text', text: 'stateless too' }]);
    const second = await toggle(client);
    expect(first).toEqual({ started: true, session: expect.any(String) });
    expect(second).toEqual({ started: false, session: first.session });
    // The backend never sees the gateway's own session id.
    expect(first.session).not.toBe(transport.sessionId);
  });

  it('keeps the session working when the sidecar restarts mid-session', async () => {
    const { client } = await connect('stateful');
    const before = await toggle(client);
    await stack.stopProcess('sidecar');
    await stack.startSidecar();
    await waitFor('the restarted sidecar to have the catalog', () => listedTools(stack.gatewayUrl('stateful')));
    const after = await toggle(client);
    expect(after).toEqual({ started: false, session: before.session });
    expect((await client.listTools()).tools.map((tool) => tool.name)).toContain('everything__get-sum');
  });

  it('lets a backend that was down at initialize join the session when it comes back', async () => {
    const { client } = await connect('late');
    expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'early' } })).content).toEqual([{ type: 'text', text: 'early' }]);
    lateEverything = await startEverythingServer(latePort, path.join(dir, 'late-everything.log'));
    await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=late`, { method: 'POST' });
    await waitFor('the late backend in the catalog', async () =>
      ((await listedTools(stack.gatewayUrl('late'))) ?? []).includes('later__toggle-simulated-logging') ? true : undefined,
    );
    const first = await toggle(client, 'later__toggle-simulated-logging');
    const second = await toggle(client, 'later__toggle-simulated-logging');
    expect(second).toEqual({ started: false, session: first.session });
  });

  it('ends the backend sessions on DELETE, and then answers the old id with 404', async () => {
    const { client, transport } = await connect('stateful');
    const { session: backendSession } = await toggle(client);
    const gatewaySession = transport.sessionId!;
    await transport.terminateSession();
    await waitFor('server-everything to end the backend session', async () =>
      fs.readFileSync(everything.options.logFile!, 'utf8').includes(`Received session termination request for session ${backendSession}`) ? true : undefined,
    );
    const stale = await postJsonRpc(stack.gatewayUrl('stateful'), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': gatewaySession,
    });
    expect(stale.status).toBe(404);
    expect(stale.json().error.code).toBe(-32001);
  });

  it('answers a forged session id with 404', async () => {
    const forged = await postJsonRpc(stack.gatewayUrl('stateful'), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' } } }, {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
    });
    expect(forged.status).toBe(404);
    expect(forged.json()).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32001 } });
  });
});
