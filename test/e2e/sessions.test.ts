import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { CancellableToolService } from '../support/cancellable-tool-service';
import { startEverythingServer } from '../support/everything-server';
import { MCP_POST_HEADERS, listedTools, postJsonRpc, startGateway, testDir, listedToolsOnceServed } from '../support/gateway-fixture';

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
  let everythingPort: number;
  let jsonJobsPort: number;
  let waiter: CancellableToolService;
  const clients: Client[] = [];
  /**
   * The waiter backend authenticates every request: the gateway's own service-account token for it
   * (credentials.mode serviceAccount), on the catalog's listings and on everything sent on an agent's behalf.
   */
  const WAITER_TOKEN = 'gateway-token-for-waiter';
  const asAgent = { authorization: 'Bearer the-agents-own-token' };

  beforeAll(async () => {
    const port = await freePort();
    everythingPort = port;
    latePort = await freePort();
    waiter = await CancellableToolService.start([WAITER_TOKEN]);
    const ownDir = testDir('sessions-everything');
    const waiterTokenFile = path.join(ownDir, 'waiter.token');
    fs.writeFileSync(waiterTokenFile, `${WAITER_TOKEN}\n`);
    everything = await startEverythingServer(port, path.join(ownDir, 'everything.log'));
    jsonJobsPort = await freePort();
    ({ stack, dir } = await startGateway('sessions', (b) => ({
      routes: [
        { key: 'stateful', toolServices: [{ name: 'everything', url: `http://127.0.0.1:${port}/mcp` }, { name: 'jobs', url: b.jobs }] },
        { key: 'late', toolServices: [{ name: 'jobs', url: b.jobs }, { id: 'late-everything', name: 'later', url: `http://127.0.0.1:${latePort}/mcp` }] },
        // A backend without sessions that answers in one JSON body once the result is ready: its
        // first byte comes as late as its answer.
        { key: 'json', toolServices: [{ id: 'jobs-json', name: 'jobs', url: `http://127.0.0.1:${jsonJobsPort}/mcp` }, { name: 'weather', url: b.weather }] },
        {
          key: 'cancel',
          toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'waiter', url: waiter.url, credentials: { mode: 'serviceAccount', tokenFile: waiterTokenFile } }],
        },
      ],
    })));
    await stack.startSample('jobs', jsonJobsPort, { jsonResponse: true });
    await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=json`, { method: 'POST' });
    await waitFor('the catalog of the JSON-mode backend', async () => (((await listedTools(stack.gatewayUrl('json'))) ?? []).includes('jobs__run_job') ? true : undefined));
  });

  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await stack?.stop();
    await everything?.stop();
    await lateEverything?.stop();
    await waiter?.stop();
  });

  async function connect(
    route: string,
    client = new Client({ name: 'session-test', version: '1.0.0' }),
    headers: Record<string, string> = {},
  ): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
    const transport = new StreamableHTTPClientTransport(new URL(stack.gatewayUrl(route)), { requestInit: { headers } });
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
    await waitFor('the restarted sidecar to have the catalog', () => listedToolsOnceServed(stack.gatewayUrl('stateful')));
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

  it('lets no call of an ended session through once a second has passed since its check, however long the checked call took to answer', async () => {
    // jobs keeps no sessions: the Envoy worker that checked a call of this session remembers the
    // check for 1 s (docs/adr/0008-data-path-lanes.md). The slow call and the call after it share one
    // connection, so one worker; the DELETE takes another.
    const { transport } = await connect('json');
    const sessionId = transport.sessionId!;
    const oneConnection = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const url = new URL(stack.gatewayUrl('json'));
    const call = (id: number, name: string, args: Record<string, unknown>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = http.request(url, { method: 'POST', agent: oneConnection, headers: { ...MCP_POST_HEADERS, 'mcp-session-id': sessionId } }, (response) => {
          let body = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (body += chunk));
          response.on('end', () => resolve({ status: response.statusCode!, body }));
        });
        request.on('error', reject);
        request.end(JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } }));
      });
    try {
      const startedAt = performance.now();
      // Its answer (and with it, its first byte) comes 1.5 s after the check let it go.
      const slow = call(1, 'jobs__run_job', { steps: 1, interval_ms: 1500 });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await transport.terminateSession();
      expect((await slow).body).toContain('job finished after 1 steps');
      expect(performance.now() - startedAt).toBeGreaterThan(1_000);
      const afterTheEnd = await call(2, 'jobs__echo', { text: 'after the end' });
      expect(afterTheEnd.status).toBe(404);
      expect(JSON.parse(afterTheEnd.body).error.code).toBe(-32001);
    } finally {
      oneConnection.destroy();
    }
  });

  it("carries a backend's sampling and elicitation requests to the client, and the client's answers back", async () => {
    const agent = new Client({ name: 'session-test', version: '1.0.0' }, { capabilities: { sampling: {}, elicitation: {} } });
    const asked: string[] = [];
    agent.setRequestHandler(CreateMessageRequestSchema, async (request) => {
      asked.push(request.method);
      return { model: 'test-model', role: 'assistant', content: { type: 'text', text: 'sampled by the agent' } };
    });
    agent.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.method);
      return { action: 'accept', content: { name: 'Ada Lovelace' } };
    });
    const { client } = await connect('stateful', agent);
    const sampled = await client.callTool({ name: 'everything__trigger-sampling-request', arguments: { prompt: 'weather?' } });
    expect(JSON.stringify(sampled.content)).toContain('sampled by the agent');
    expect(sampled._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'everything', tool: 'trigger-sampling-request', attempts: 1 });
    const elicited = await client.callTool({ name: 'everything__trigger-elicitation-request', arguments: {} });
    expect(JSON.stringify(elicited.content)).toContain('- Name: Ada Lovelace');
    expect(asked).toEqual(['sampling/createMessage', 'elicitation/create']);
  });

  it("refuses a client's \"answer\" to a request no backend of its session sent it (400), without passing it on", async () => {
    const { client, transport } = await connect('stateful');
    // The backend session exists (a call went in it), so a forged answer would have somewhere to go.
    await toggle(client);
    const forged = await postJsonRpc(
      stack.gatewayUrl('stateful'),
      { jsonrpc: '2.0', id: 'mcpgw:everything:0', result: { action: 'accept', content: { name: 'Mallory' } } },
      { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': transport.sessionId!, 'mcp-protocol-version': '2025-11-25' },
    );
    expect(forged.status).toBe(400);
    expect(forged.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringContaining('which no backend of route "stateful" sent') } });
  });

  it("passes the client's cancellation to the backend session running the call, and only there", async () => {
    const { client } = await connect('cancel', undefined, asAgent);
    expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'jobs joins the session' } })).content).toHaveLength(1);
    const abort = new AbortController();
    const pending = client.callTool({ name: 'waiter__wait', arguments: {} }, undefined, { signal: abort.signal });
    await waitFor('the backend to start the call', async () => (waiter.started.length === 1 ? true : undefined));
    abort.abort('the agent changed its mind');
    await expect(pending).rejects.toThrow();
    await waitFor('the cancellation to reach the backend', async () => (waiter.cancelled.length === 1 ? true : undefined));
    expect(waiter.cancelled[0]).toMatchObject({ session: waiter.started[0].session, requestId: waiter.started[0].requestId });
    expect(String(waiter.cancelled[0].reason)).toContain('the agent changed its mind');
    // The session open (initialize) and the relayed cancel carried the gateway's token for the waiter.
    expect(waiter.unauthorized).toBe(0);
  });

  it("answers a call the backend refused for a session it forgot (404) with a JSON-RPC error, keeps the client's session, and opens a new backend session for the next call", async () => {
    const { client, transport } = await connect('cancel', undefined, asAgent);
    const whoami = async () => ((await client.callTool({ name: 'waiter__whoami', arguments: {} })).content as { text: string }[])[0].text;
    const before = await whoami();
    const gatewaySession = transport.sessionId;
    // The gateway listens in the backend session for the client's GET stream: a GET that reached the
    // waiter after it forgot would be a 404 that ends the session before this test's call can.
    await waitFor('the gateway to listen in the backend session', async () => (waiter.listenedIn.includes(before) ? true : undefined));
    waiter.forgetSessions();
    await expect(client.callTool({ name: 'waiter__whoami', arguments: {} })).rejects.toThrow(
      /-32004.*backend waiter lost the session of this call and ran nothing: call again/,
    );
    const after = await whoami();
    expect(after).not.toBe(before);
    expect(after).toMatch(/^[0-9a-f-]{36}$/);
    expect(await whoami()).toBe(after);
    expect(transport.sessionId).toBe(gatewaySession);
    expect(waiter.unauthorized).toBe(0);
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

  // Last: it restarts server-everything, which the other tests use.
  it('opens a new backend session after the backend forgot its own (restart): one call is answered "call again", the client keeps its session', async () => {
    const { client, transport } = await connect('stateful');
    const before = await toggle(client);
    await everything.stop();
    everything = await startEverythingServer(everythingPort, path.join(dir, 'everything-restarted.log'));
    await expect(toggle(client)).rejects.toThrow(/lost the session of this call and ran nothing: call again/);
    const after = await toggle(client);
    // A new backend session (its toggle state starts afresh), under the same gateway session.
    expect(after.started).toBe(true);
    expect(after.session).not.toBe(before.session);
    expect((await toggle(client)).session).toBe(after.session);
    expect(transport.sessionId).toBeDefined();
    const echoed = await client.callTool({ name: 'everything__echo', arguments: { message: 'still here' } });
    expect(echoed.content).toEqual([{ type: 'text', text: 'Echo: still here' }]);
  });
});
