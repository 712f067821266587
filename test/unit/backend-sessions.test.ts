import * as http from 'node:http';
import { AddressInfo } from 'node:net';
import { closeServer } from '../../control-plane/shared/http-listen';
import { BackendView } from '../../control-plane/sidecar/route-catalog';
import { BackendCredentialsProvider } from '../../control-plane/credentials/backend-credentials';
import { TOKEN_CACHE_DEFAULTS, TokenCache } from '../../control-plane/credentials/token-cache';
import { BackendRequests } from '../../control-plane/sidecar/sessions/backend-sessions';

/**
 * The sidecar's own requests to a backend read Streamable HTTP answers as the SSE spec says
 * (issue 13): an answer may come after a priming event, a comment, a notification, `id:` and `retry:`
 * lines, split over several `data:` lines, with CRLF line ends.
 */
describe('opening a backend session whose initialize answers in SSE', () => {
  let server: http.Server;
  let url: string;
  const posted: { method: string; headers: http.IncomingHttpHeaders }[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        const message = JSON.parse(body) as { method: string; id?: number; params: { clientInfo?: { name: string } } };
        posted.push({ method: message.method, headers: req.headers });
        if (message.method !== 'initialize') {
          res.writeHead(202).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': 'backend-7' });
        res.write('id: 1\r\nretry: 3000\r\ndata:\r\n\r\n');
        res.write(': a comment\r\n\r\n');
        if (message.params.clientInfo?.name === 'refused') {
          // A log message first, then the refusal: the refusal is the answer.
          res.write(`event: message\r\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'hello' } })}\r\n\r\n`);
          res.end(`event: message\r\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: message.id, error: { code: -32600, message: 'clients named refused are refused' } })}\r\n\r\n`);
          return;
        }
        // The answer over two data: lines, split between two members (the lines are joined with a line feed).
        res.end(
          `id: 2\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":${message.id},\r\n` +
            `data: "result":{"protocolVersion":"2025-11-25","capabilities":{"logging":{}},"serverInfo":{"name":"x","version":"1"}}}\r\n\r\n`,
        );
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
  });
  afterAll(async () => {
    await closeServer(server);
  });

  const backend = () =>
    ({ name: 'b', url, capabilities: { logging: {} }, protocolVersion: '2025-11-25', sessionful: true, credentials: { mode: 'none', audience: '', resource: '', scopes: [] } }) as unknown as BackendView;
  // Straight to the test server (in the gateway: Envoy's egress listener); a backend without credentials.
  const requests = new BackendRequests(() => fetch, new BackendCredentialsProvider(undefined, new TokenCache(TOKEN_CACHE_DEFAULTS, { lookup: () => undefined, issued: () => undefined })), 2000);
  const openBackendSession = (view: BackendView, session: Parameters<BackendRequests['open']>[1]) => requests.open(view, session, { headers: {} });

  it('finds the answer after the priming event and a comment, its data joined over lines', async () => {
    const id = await openBackendSession(backend(), { protocolVersion: '2025-11-25', clientInfo: { name: 'c', version: '1' }, clientCapabilities: {} });
    expect(id).toBe('backend-7');
  });

  it('takes the answer, not a notification sent before it: a refusal is a refusal', async () => {
    await expect(openBackendSession(backend(), { protocolVersion: '2025-11-25', clientInfo: { name: 'refused', version: '1' }, clientCapabilities: {} })).rejects.toThrow(
      'initialize answered 200: clients named refused are refused',
    );
  });

  it('sets the log level the client chose before this backend session existed', async () => {
    posted.length = 0;
    await openBackendSession(backend(), { protocolVersion: '2025-11-25', clientInfo: { name: 'c', version: '1' }, clientCapabilities: {}, logLevel: 'debug' });
    expect(posted.map((request) => request.method)).toEqual(['initialize', 'notifications/initialized', 'logging/setLevel']);
    expect(posted[2].headers['mcp-session-id']).toBe('backend-7');
  });
});
