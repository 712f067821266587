import * as http from 'node:http';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, SampleBackends, listedTools, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { SpyToolService } from '../support/spy-tool-service';

/**
 * Replies Envoy makes itself, each in JSON-RPC form with the status the client needs: the session
 * check out of reach, the session check's own JSON-RPC errors, paths that are not MCP routes, and the
 * mcp filter's own answers to requests of an unknown protocol revision.
 */
describe("Envoy's own replies on the call lane and around it", () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  /** A backend that keeps sessions (the sample ones keep none: the gateway opens no session there). */
  let keeper: SpyToolService;

  beforeAll(async () => {
    keeper = await SpyToolService.start();
    ({ stack, backends } = await startGateway('envoy-replies', (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'keeper', url: keeper.url }] }],
    })));
    await listedTools(stack.gatewayUrl('demo'));
  });
  afterAll(async () => {
    await stack?.stop();
    await keeper?.stop();
  });

  async function session(): Promise<string> {
    const answer = await postJsonRpc(stack.gatewayUrl('demo'), {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'agent', version: '1' } },
    });
    expect(answer.status).toBe(200);
    return answer.headers.get('mcp-session-id')!;
  }
  const call = (sessionId: string, tool = 'jobs__echo') =>
    postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: tool, arguments: { text: 'x' } } }, {
      ...MCP_POST_HEADERS,
      'mcp-session-id': sessionId,
      'mcp-protocol-version': '2025-11-25',
    });

  it('answers a path that is no MCP route with 404 and a JSON-RPC error', async () => {
    const response = await fetch(`${stack.gatewayUrl('demo').replace(/\/mcp\/demo$/, '')}/elsewhere`);
    expect(response.status).toBe(404);
    expect(response.headers.get('content-type')).toBe('application/json');
    expect(await response.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'not an MCP route: use /mcp/{routeKey}' } });
  });

  it.each(['2099-01-01', '1999-01-01'])("passes the mcp filter's own -32022 for a protocol revision it does not serve (%s), not wrapped in another error", async (version) => {
    const response = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 3, method: 'tools/list' }, {
      ...MCP_POST_HEADERS,
      'mcp-protocol-version': version,
      'mcp-method': 'tools/list',
    });
    expect(response.status).toBe(400);
    expect(response.json().error).toMatchObject({ code: -32022, message: expect.not.stringContaining('{') });
  });

  describe('requests refused on their headers, with the HTTP status that names the problem', () => {
    const initialize = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'a', version: '1' } } });
    async function refusedWith(response: Response, status: number, message: RegExp) {
      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toBe('application/json');
      expect(await response.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringMatching(message) } });
    }

    it.each(['PUT', 'PATCH'])('%s: 405 with Allow (RFC 9110), on an MCP endpoint and elsewhere', async (method) => {
      for (const url of [stack.gatewayUrl('demo'), `${stack.gatewayUrl('demo').replace(/\/mcp\/demo$/, '')}/elsewhere`]) {
        const response = await fetch(url, { method, headers: MCP_POST_HEADERS, body: initialize });
        expect(response.headers.get('allow')).toBe('GET, POST, DELETE');
        await refusedWith(response, 405, /^method not allowed/);
      }
    });

    it.each([['text/plain'], ['application/json-patch+json'], ['application/x-www-form-urlencoded']])('a POST of Content-Type %s: 415', async (contentType) => {
      const response = await fetch(stack.gatewayUrl('demo'), { method: 'POST', headers: { ...MCP_POST_HEADERS, 'content-type': contentType }, body: initialize });
      await refusedWith(response, 415, /^unsupported media type/);
    });

    it.each([['application/json'], ['text/event-stream'], ['*/*']])('a POST that accepts only %s: 406', async (accept) => {
      const response = await fetch(stack.gatewayUrl('demo'), { method: 'POST', headers: { ...MCP_POST_HEADERS, accept }, body: initialize });
      await refusedWith(response, 406, /^not acceptable/);
    });

    it('a POST without Accept or Content-Type at all: 406 and 415 (fetch always adds an Accept, so plain node:http)', async () => {
      const post = (headers: Record<string, string>) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = http.request(stack.gatewayUrl('demo'), { method: 'POST', headers }, (response) => {
            let body = '';
            response.on('data', (chunk) => (body += chunk));
            response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
          });
          request.on('error', reject);
          request.end(initialize);
        });
      const noAccept = await post({ 'content-type': 'application/json' });
      expect(noAccept.status).toBe(406);
      expect(JSON.parse(noAccept.body)).toMatchObject({ error: { code: -32600, message: expect.stringMatching(/^not acceptable/) } });
      const noContentType = await post({ accept: MCP_POST_HEADERS.accept });
      expect(noContentType.status).toBe(415);
      expect(JSON.parse(noContentType.body)).toMatchObject({ error: { code: -32600, message: expect.stringMatching(/^unsupported media type/) } });
    });

    it('serves a POST whose JSON Content-Type has parameters, as the mcp filter does', async () => {
      const response = await fetch(stack.gatewayUrl('demo'), { method: 'POST', headers: { ...MCP_POST_HEADERS, 'content-type': 'application/json; charset=utf-8' }, body: initialize });
      expect(response.status).toBe(200);
      expect(response.headers.get('mcp-session-id')).toBeTruthy();
    });
  });

  it('answers a session call whose backend session cannot be opened with -32004 naming the backend, on HTTP 200', async () => {
    const sessionId = await session();
    await keeper.stop();
    const response = await call(sessionId, 'keeper__echo');
    expect(response.status).toBe(200);
    expect(response.json()).toMatchObject({ id: 7, error: { code: -32004, message: expect.stringContaining('backend keeper could not open a session') } });
  });

  it('answers a session call to a backend that keeps no sessions, and is gone, with -32004 naming the backend, on HTTP 200', async () => {
    const sessionId = await session();
    await stack.stopProcess(`tool-service-jobs-${backends.ports.jobs}`);
    const response = await call(sessionId);
    expect(response.status).toBe(200);
    expect(response.json()).toMatchObject({ id: 7, error: { code: -32004, message: expect.stringContaining('backend jobs is unavailable') } });
  });

  // Last: it stops the sidecar.
  it('answers a session call with 503 and -32603 when the session check cannot be asked', async () => {
    const sessionId = await session();
    await stack.stopProcess('sidecar');
    const response = await call(sessionId);
    expect(response.status).toBe(503);
    expect(response.contentType).toBe('application/json');
    expect(response.json()).toMatchObject({ id: 7, error: { code: -32603, message: expect.stringContaining('gateway sidecar unavailable') } });
  });
});
