import * as http from 'node:http';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { EdgeToolService } from '../support/edge-tool-service';
import { MCP_POST_HEADERS, clusterOf, connectClient, envoyStat, listedTools, listedToolsOnceServed, postJsonRpc, startGateway } from '../support/gateway-fixture';

/**
 * Isolation at the default limits (docs/adr/0009-edge-hardening.md): one client holding 1,100 calls on
 * a backend that never answers — past that backend's circuit breaker (1,024 calls, then its queue) —
 * along with all the standalone streams its session may hold and bursts of the gateway's own methods,
 * leaves every other backend, route and client answering. Calls in flight hold nothing of the sidecar's.
 */
describe('one backend, route or client cannot refuse requests on another', () => {
  let stack: GatewayStack;
  let edge: EdgeToolService;
  const HUNG_CALLS = 1_100;
  const TOOL_SERVICE_MAX_REQUESTS = 1_024;
  // Sockets of their own for the hung calls: they never come back to a pool.
  const hungAgent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const hung: http.ClientRequest[] = [];
  let sessionA: string;

  beforeAll(async () => {
    edge = await EdgeToolService.start();
    ({ stack } = await startGateway('isolation', (b) => ({
      routes: [
        { key: 'busy', toolServices: [{ name: 'edge', url: edge.url }, { name: 'weather', url: b.weather }] },
        { key: 'other', toolServices: [{ name: 'jobs', url: b.jobs }] },
      ],
    })));
    // The catalog reaches the sidecar after Envoy's ACK: until then a route answers "being added".
    for (const route of ['busy', 'other']) {
      await waitFor(`route ${route} served`, () => listedToolsOnceServed(stack.gatewayUrl(route)));
    }
    // Client A: one session, and 1,100 calls of a tool that never answers, each on its own connection.
    sessionA = await initializeSession(stack.gatewayUrl('busy'));
    for (let index = 0; index < HUNG_CALLS; index++) {
      const request = http.request(stack.gatewayUrl('busy'), {
        method: 'POST',
        agent: hungAgent,
        headers: { ...MCP_POST_HEADERS, 'mcp-session-id': sessionA, 'mcp-protocol-version': '2025-11-25' },
      });
      request.on('error', () => undefined);
      request.on('response', (response) => response.resume());
      request.end(JSON.stringify({ jsonrpc: '2.0', id: index + 1, method: 'tools/call', params: { name: 'edge__hang', arguments: {} } }));
      hung.push(request);
      // A hundred at a time: Envoy may open as many connections to the backend as its breaker lets
      // through at once, and 1,024 at once overflow the in-test Tool Service's accept backlog (Node's
      // 511) on a loaded machine: the calls past it fail their connect timeout (that backend's own
      // calls; but this test needs the breaker's whole share held).
      const opened = index + 1;
      if (opened % 100 === 0 && opened <= TOOL_SERVICE_MAX_REQUESTS) await waitUntil(async () => edge.hanging === opened, `${opened} calls at the backend`);
    }
    await waitUntil(async () => edge.hanging === TOOL_SERVICE_MAX_REQUESTS, 'the backend to hold every call its circuit breaker lets through');
  }, 120_000);

  afterAll(async () => {
    for (const request of hung) request.destroy();
    hungAgent.destroy();
    await stack?.stop();
    await edge?.stop();
  });

  it('holds exactly the backend circuit breaker of calls at the backend; the rest wait in its queue', async () => {
    expect(edge.hanging).toBe(TOOL_SERVICE_MAX_REQUESTS);
    expect(await envoyStat(stack, `cluster.${clusterOf(edge.url)}.upstream_rq_active`)).toBe(TOOL_SERVICE_MAX_REQUESTS);
    expect(await envoyStat(stack, `cluster.${clusterOf(edge.url)}.upstream_rq_pending_active`)).toBe(HUNG_CALLS - TOOL_SERVICE_MAX_REQUESTS);
  });

  it("holds nothing of the sidecar's: every call's session check is over", async () => {
    expect(await envoyStat(stack, 'cluster.mcp_sidecar_check.upstream_rq_active')).toBe(0);
    expect(await envoyStat(stack, 'cluster.mcp_sidecar.upstream_rq_active')).toBe(0);
  });

  it('answers tools/list and calls on another route', async () => {
    expect(await listedTools(stack.gatewayUrl('other'))).toEqual(expect.arrayContaining(['jobs__echo']));
    const client = await connectClient(stack.gatewayUrl('other'));
    try {
      expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'still here' } })).content).toEqual([{ type: 'text', text: 'still here' }]);
    } finally {
      await client.close();
    }
  });

  it("answers another client on the same route: initialize, tools/list, the other backend's calls, its own stream", async () => {
    const client = await connectClient(stack.gatewayUrl('busy'));
    try {
      expect((await client.listTools()).tools.map((tool) => tool.name)).toEqual(expect.arrayContaining(['edge__hang', 'weather__get_forecast']));
      expect((await client.callTool({ name: 'weather__get_forecast', arguments: { city: 'Oslo' } })).content).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it("a burst of the gateway's own methods from client A, and every standalone stream its session may hold, leave client B answering", async () => {
    const streams = await Promise.all(
      Array.from({ length: 8 }, () =>
        fetch(stack.gatewayUrl('busy'), { headers: { accept: 'text/event-stream', 'mcp-session-id': sessionA, 'mcp-protocol-version': '2025-11-25' } }),
      ),
    );
    const burst = Promise.all(Array.from({ length: 300 }, (_, index) => postJsonRpc(stack.gatewayUrl('busy'), { jsonrpc: '2.0', id: index, method: 'tools/list' })));
    const clientB = await connectClient(stack.gatewayUrl('busy'));
    try {
      expect((await clientB.callTool({ name: 'weather__get_forecast', arguments: { city: 'Bergen' } })).content).toHaveLength(1);
      expect((await clientB.listTools()).tools.length).toBeGreaterThan(0);
    } finally {
      await clientB.close();
    }
    expect((await burst).every((answer) => answer.status === 200)).toBe(true);
    const statuses = streams.map((stream) => stream.status).sort();
    // At most 4 standalone streams per session (--max-streams-per-session): the rest are refused, the
    // slots Envoy keeps for everyone's streams stay free.
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429, 429, 429]);
    for (const stream of streams) await stream.body?.cancel();
  });
});

async function waitUntil(condition: () => Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const giveUpAt = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > giveUpAt) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A session of the 2025-11-25 revision, opened over raw HTTP (initialize, then initialized): its id. */
async function initializeSession(url: string): Promise<string> {
  const headers = { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2025-11-25' };
  const initialized = await fetch(url, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'client-a', version: '1' } } }),
  });
  await initialized.text();
  const session = initialized.headers.get('mcp-session-id');
  if (!session) throw new Error(`initialize answered ${initialized.status} without a session`);
  await (await fetch(url, { method: 'POST', headers: { ...headers, 'mcp-session-id': session }, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).text();
  return session;
}
