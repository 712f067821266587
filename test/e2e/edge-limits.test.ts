import { execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { EdgeToolService } from '../support/edge-tool-service';
import { SampleBackends, connectClient, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { postHttp2, sendRaw } from '../support/raw-http';

/**
 * Envoy at the edge (docs/adr/0009-edge-hardening.md): every protocol error, limit and timeout answers
 * with its status and a JSON-RPC body; a client's own address headers are replaced by the real one;
 * request ids and nesting are bounded in both lanes; a backend's slow session, or its death mid-stream,
 * is named to the client at once.
 */
describe('edge limits through the real Envoy', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let edge: EdgeToolService;
  const MAX_BODY = 64 * 1024;

  beforeAll(async () => {
    edge = await EdgeToolService.start();
    ({ stack, backends } = await startGateway(
      'edge-limits',
      (b) => ({
        routes: [
          { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }, { name: 'edge', url: edge.url }] },
        ],
      }),
      {
        // Short enough for a test to wait them out; every other edge setting at its default.
        // The request timeout also covers the session check (Envoy disarms it once the request went
        // upstream), so it stays above --session-check-timeout-ms (6 s).
        controlPlaneArgs: ['--request-headers-timeout-ms', '1000', '--request-timeout-ms', '7000', '--max-request-body-bytes', String(MAX_BODY)],
        extraArgs: { sidecar: ['--max-request-body-bytes', String(MAX_BODY)] },
      },
    ));
  });
  afterAll(async () => {
    await stack?.stop();
    await edge?.stop();
  });

  const port = () => stack.ports.listener;
  const rpcErrorOf = (body: string) => JSON.parse(body) as { jsonrpc: string; id: unknown; error: { code: number; message: string; data?: Record<string, unknown> } };

  describe("Envoy's own protocol errors reach the client with their status and a JSON-RPC body", () => {
    const post = (version: string, extraHeaders: string, body = '{}') =>
      `POST /mcp/demo ${version}\r\nHost: gw\r\nContent-Type: application/json\r\n${extraHeaders}Content-Length: ${body.length}\r\n\r\n${body}`;

    it.each([
      ['HTTP/1.0', () => sendRaw(port(), [post('HTTP/1.0', '')]), 426, 'Upgrade Required'],
      [
        'Content-Length together with Transfer-Encoding',
        () => sendRaw(port(), ['POST /mcp/demo HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n']),
        400,
        'Bad Request',
      ],
      ['headers over 64 KiB', () => sendRaw(port(), [post('HTTP/1.1', `X-Big: ${'a'.repeat(70 * 1024)}\r\n`)]), 431, 'request headers too large'],
      ['more than 100 headers', () => sendRaw(port(), [post('HTTP/1.1', Array.from({ length: 120 }, (_, i) => `X-H${i}: v\r\n`).join(''))]), 431, 'request headers too large'],
      ['an escaped slash in the path', () => sendRaw(port(), ['POST /mcp/demo%2Fx HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n']), 400, 'an escaped slash or backslash is not allowed'],
      ['headers sent too slowly', () => sendRaw(port(), ['POST /mcp/demo HTTP/1.1\r\nHost: gw\r\n', { pauseMs: 3_000 }, 'X-Late: 1\r\n\r\n']), 408, 'request not received in time'],
      [
        'a body sent too slowly',
        () => sendRaw(port(), ['POST /mcp/demo HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 60\r\n\r\n{"jsonrpc"', { pauseMs: 8_000 }, ':"2.0"}'], 12_000),
        408,
        'request not received in time',
      ],
    ])('%s', async (_case, send, status, message) => {
      const answer = await send();
      expect(answer.ended).toBe('closed');
      expect(answer.status).toBe(status);
      expect(answer.headers['content-type']).toBe('application/json');
      expect(rpcErrorOf(answer.body)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringContaining(message), data: { http_status: status } } });
    });
  });

  describe('the body limit holds on HTTP/2 as on HTTP/1.1: 413 with a JSON-RPC body', () => {
    const call = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x'.repeat(MAX_BODY) } } }));
    const pieces = (buffer: Buffer, size: number) => Array.from({ length: Math.ceil(buffer.length / size) }, (_, i) => buffer.subarray(i * size, (i + 1) * size));

    it.each([
      ['with a content-length', { contentLength: call.length }],
      ['streamed without one', {}],
    ])('%s', async (_case, options) => {
      const answer = await postHttp2(port(), '/mcp/demo', pieces(call, 16 * 1024), options);
      expect(answer.status).toBe(413);
      expect(rpcErrorOf(answer.body).error).toMatchObject({ code: -32600, message: expect.stringContaining('request body too large') });
    });

    it('sent slowly: refused as soon as it passes the limit, not when it ends', async () => {
      const huge = Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"jobs__echo","arguments":{"text":"'), Buffer.alloc(40 * MAX_BODY, 'x')]);
      const answer = await postHttp2(port(), '/mcp/demo', pieces(huge, 8 * 1024), { pauseMs: 20 });
      expect(answer.status).toBe(413);
      expect(answer.chunksSent).toBeLessThan(huge.length / (8 * 1024));
    });

    it('and on HTTP/1.1 (with the SDK-like headers)', async () => {
      const answer = await postJsonRpc(stack.gatewayUrl('demo'), call.toString());
      expect(answer.status).toBe(413);
      expect(answer.json().error.code).toBe(-32600);
    });
  });

  describe('request ids and nesting, in both lanes', () => {
    const tooDeep = (method: string, params: string) => `{"jsonrpc":"2.0","id":1,"method":"${method}","params":${params.replace('DEEP', `${'['.repeat(100_000)}${']'.repeat(100_000)}`)}}`;

    it.each([
      ['tools/list (the gateway lane)', tooDeep('tools/list', '{"x":DEEP}')],
      ['tools/call (the call lane)', tooDeep('tools/call', '{"name":"jobs__echo","arguments":{"text":DEEP}}')],
      ['initialize', tooDeep('initialize', '{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"a","version":"1","x":DEEP}}')],
    ])('JSON nested 100,000 deep in %s: 400 and a JSON-RPC error, nothing runs out of stack', async (_case, body) => {
      const answer = await postJsonRpc(stack.gatewayUrl('demo'), body);
      expect(answer.status).toBe(400);
      expect(answer.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringContaining('not a valid JSON') } });
    });

    const ids: [string, string][] = [
      ['an object', '{"a":1}'],
      ['an array', '[1]'],
      ['a fraction', '1.5'],
      ['a 5,000-digit number', '9'.repeat(5000)],
      ['a 300-byte string', `"${'x'.repeat(300)}"`],
      ['true', 'true'],
    ];
    it.each(ids.flatMap(([what, id]) => [
      [what, 'tools/list', id],
      [what, 'tools/call', id],
    ]))('an id that is %s, in %s: 400 and -32600', async (_what, method, id) => {
      const params = method === 'tools/call' ? ',"params":{"name":"jobs__echo","arguments":{"text":"x"}}' : '';
      const answer = await postJsonRpc(stack.gatewayUrl('demo'), `{"jsonrpc":"2.0","id":${id},"method":"${method}"${params}}`);
      expect(answer.status).toBe(400);
      expect(answer.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    });

    it.each([['an integer', 42], ['a string', 'call-1']])('an id that is %s is answered under it in both lanes', async (_what, id) => {
      const listed = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id, method: 'tools/list' });
      expect(listed.json().id).toBe(id);
      const called = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'weather__get_forecast', arguments: { city: 'Oslo' } } });
      expect(called.text).toContain(`"id":${JSON.stringify(id)}`);
    });

    it('a route key that is not valid percent-encoding (/mcp/%zz): 400 and -32600', async () => {
      const answer = await postJsonRpc(`http://127.0.0.1:${port()}/mcp/%zz`, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(answer.status).toBe(400);
      expect(answer.json().error).toMatchObject({ code: -32600, message: expect.stringContaining('malformed route key') });
    });
  });

  it("replaces a client's own X-Forwarded-For and Forwarded with its real address, and keeps its application headers (underscores too)", async () => {
    const headers = { 'x-forwarded-for': '6.6.6.6, 7.7.7.7', forwarded: 'for=6.6.6.6', x_tenant_id: 'acme', 'x-app-header': 'kept' };
    const client = new Client({ name: 'edge-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(stack.gatewayUrl('demo')), { requestInit: { headers } }));
    try {
      const result = await client.callTool({ name: 'edge__headers', arguments: {} });
      const seen = JSON.parse((result.content as { text: string }[])[0].text) as Record<string, string>;
      // One address, Envoy's view of the peer (for a loopback peer Envoy writes its host's own address).
      expect(seen['x-forwarded-for']).toMatch(/^[0-9.]+$/);
      expect(seen['x-envoy-external-address']).toBe('127.0.0.1');
      expect(seen.forwarded).toBeUndefined();
      expect(seen.x_tenant_id).toBe('acme');
      expect(seen['x-app-header']).toBe('kept');
    } finally {
      await client.close();
    }
  });

  it("passes none of the client's query string to a backend: the backend sees the path the registry names", async () => {
    const client = await connectClient(`${stack.gatewayUrl('demo')}?api_key=forged&debug=1`);
    try {
      const result = await client.callTool({ name: 'edge__request_path', arguments: {} });
      expect((result.content as { text: string }[])[0].text).toBe('/mcp');
    } finally {
      await client.close();
    }
  });

  it("a backend's own HTML error page (a stack trace, file paths) never reaches the client: -32004 with the backend's status", async () => {
    const client = await connectClient(stack.gatewayUrl('demo'));
    try {
      const error = (await client.callTool({ name: 'edge__error_page', arguments: {} }).catch((caught: unknown) => caught)) as McpError;
      expect(error).toBeInstanceOf(McpError);
      expect(error.code).toBe(-32004);
      expect(error.message).toContain('backend edge answered HTTP 413: tools/call error_page failed');
      expect(error.data).toMatchObject({ outcome: 'failed', backend: 'edge', tool: 'error_page', http_status: 413 });
      expect(JSON.stringify({ message: error.message, data: error.data })).not.toMatch(/PayloadTooLargeError|node_modules|<html|<pre/i);
    } finally {
      await client.close();
    }
  });

  describe("a backend's session that opens slowly", () => {
    afterEach(() => {
      edge.initializeDelayMs = 0;
    });

    it('within the deadline (3 s of the 5 s the sidecar gives it): the call is answered, in the one backend session opened for it', async () => {
      edge.initializeDelayMs = 3_000;
      const client = await connectClient(stack.gatewayUrl('demo'));
      try {
        const opened = edge.sessions.length;
        const result = await client.callTool({ name: 'edge__headers', arguments: {} });
        expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'edge' });
        await client.callTool({ name: 'edge__headers', arguments: {} });
        expect(edge.sessions.length - opened).toBe(1);
      } finally {
        await client.close();
      }
    });

    it('past the deadline: -32004 naming the backend, before Envoy gives up on the check (never "sidecar unavailable"); the next call is answered', async () => {
      edge.initializeDelayMs = 7_000;
      const client = await connectClient(stack.gatewayUrl('demo'));
      try {
        const startedAt = performance.now();
        const error = (await client.callTool({ name: 'edge__headers', arguments: {} }).catch((caught: unknown) => caught)) as McpError;
        expect(error).toBeInstanceOf(McpError);
        expect(error.code).toBe(-32004);
        expect(error.message).toContain('backend edge could not open a session');
        expect(error.data).toMatchObject({ outcome: 'failed', backend: 'edge', tool: 'headers' });
        expect(performance.now() - startedAt).toBeLessThan(6_000);
        edge.initializeDelayMs = 0;
        const result = await client.callTool({ name: 'edge__headers', arguments: {} });
        expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok' });
      } finally {
        await client.close();
      }
    });
  });

  it('a Tool Service killed mid-stream: the SDK client learns at once with -32004 naming the backend, not at its own timeout', async () => {
    const client = await connectClient(stack.gatewayUrl('demo'));
    const jobs = stack.processes.get(stack.sampleName({ service: 'jobs', port: backends.ports.jobs }))!;
    let killedAt = 0;
    try {
      const error = (await client
        .callTool({ name: 'jobs__run_job', arguments: { steps: 20, interval_ms: 500 } }, undefined, {
          timeout: 60_000,
          onprogress: () => {
            if (killedAt) return;
            killedAt = performance.now();
            execFileSync('kill', ['-KILL', String(jobs.child.pid)]);
          },
        })
        .catch((caught: unknown) => caught)) as McpError;
      expect(error).toBeInstanceOf(McpError);
      expect(error.code).toBe(-32004);
      expect(error.message).toContain('backend jobs ended the stream of tools/call run_job before its answer');
      expect(performance.now() - killedAt).toBeLessThan(5_000);
    } finally {
      await client.close();
    }
  });
});
