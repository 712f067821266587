import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { TLSSocket } from 'node:tls';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { SubscribeRequestSchema, UnsubscribeRequestSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { closeServer } from '../../control-plane/shared/http-listen';
import { LOOPBACK } from './loopback-mcp-service';

/** One HTTP request the spy received, as it arrived. */
export interface SpiedRequest {
  /** POST, GET or DELETE. */
  httpMethod: string;
  /** The JSON-RPC method of a POST ("initialize", "tools/call", "notifications/cancelled", …); "" for a client's answer or none. */
  rpcMethod: string;
  /** The tool of a tools/call. */
  tool?: string;
  /** Every header, lower-case names. */
  headers: Record<string, string>;
  /** The backend session the request named (or, for initialize, the one it opened). */
  session?: string;
  /** The serial number of the client certificate the TLS peer presented, when the spy runs mTLS. */
  clientCertSerial?: string;
}

export interface SpyTls {
  certFile: string;
  keyFile: string;
  /** Clients must present a certificate issued by this CA (mTLS). */
  clientCaFile: string;
}

/** What the spy serves besides its tools when started with `surface` (SpyToolService.SURFACE names them). */
const SURFACE = { prompt: 'greet', resource: 'note://spy' } as const;

/**
 * A real stateful MCP SDK Tool Service in the test's own process that records every header of every
 * request it gets — whatever the request kind (session open, call, notification, a client's answer,
 * DELETE) — so that tests can check what the gateway sends a backend on a client's behalf. Tools:
 * `echo` answers at once; `hold` streams a progress notification (to a client that asks for progress),
 * then answers only when the test calls `release()` (a stream in flight). Over https it requires a client certificate from
 * `clientCaFile` and records the one each request came with. With `surface` it also serves the rest of
 * what a gateway forwards to one backend: the prompt `greet` (its argument `name` completes), the
 * resource `note://spy` (which takes subscriptions) and logging.
 */
export class SpyToolService {
  readonly requests: SpiedRequest[] = [];
  private readonly transports = new Map<string, StreamableHTTPServerTransport>();
  private releaseHeld: (() => void)[] = [];
  /** TLS handshakes the spy refused (no or a wrong client certificate). */
  refusedHandshakes = 0;

  private constructor(
    readonly port: number,
    private readonly server: http.Server,
    readonly scheme: 'http' | 'https',
  ) {}

  get url(): string {
    return `${this.scheme}://${LOOPBACK}:${this.port}/mcp`;
  }

  static readonly SURFACE = SURFACE;

  static async start(options: { tls?: SpyTls; port?: number; surface?: boolean } = {}): Promise<SpyToolService> {
    const port = options.port ?? (await freePort());
    const app = createMcpExpressApp({ host: LOOPBACK });
    const tls = options.tls;
    const server = tls
      ? https.createServer({
          cert: fs.readFileSync(tls.certFile),
          key: fs.readFileSync(tls.keyFile),
          ca: fs.readFileSync(tls.clientCaFile),
          requestCert: true,
          rejectUnauthorized: true,
        })
      : http.createServer();
    const spy = new SpyToolService(port, server, tls ? 'https' : 'http');
    server.on('tlsClientError', () => spy.refusedHandshakes++);
    app.all('/mcp', async (req, res) => {
      const body = req.body as { method?: unknown; params?: { name?: unknown } } | undefined;
      const headers = Object.fromEntries(Object.entries(req.headers).map(([name, value]) => [name, Array.isArray(value) ? value.join(', ') : String(value)]));
      const sessionHeader = req.headers['mcp-session-id'];
      const record: SpiedRequest = {
        httpMethod: req.method,
        rpcMethod: typeof body?.method === 'string' ? body.method : '',
        ...(body?.method === 'tools/call' && typeof body.params?.name === 'string' && { tool: body.params.name }),
        headers,
        ...(typeof sessionHeader === 'string' && { session: sessionHeader }),
        ...(req.socket instanceof TLSSocket && { clientCertSerial: req.socket.getPeerCertificate().serialNumber }),
      };
      spy.requests.push(record);
      let transport = typeof sessionHeader === 'string' ? spy.transports.get(sessionHeader) : undefined;
      if (!transport && req.method === 'POST' && isInitializeRequest(req.body)) {
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: randomUUID,
          onsessioninitialized: (id) => {
            record.session = id;
            spy.transports.set(id, created);
          },
          onsessionclosed: (id) => void spy.transports.delete(id),
        });
        await spy.mcpServer(options.surface ?? false).connect(created);
        transport = created;
      }
      if (!transport) {
        res.status(404).json({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
        return;
      }
      await transport.handleRequest(req, res, req.body);
    });
    server.on('request', app);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, LOOPBACK, () => resolve());
    });
    return spy;
  }

  private mcpServer(surface: boolean): McpServer {
    const server = new McpServer({ name: 'spy-tool-service', version: '1.0.0' }, surface ? { capabilities: { resources: { subscribe: true }, logging: {}, completions: {} } } : {});
    if (surface) {
      server.registerPrompt(SURFACE.prompt, { description: 'Greets someone.', argsSchema: { name: completable(z.string(), (value) => ['alice', 'bob'].filter((name) => name.startsWith(value))) } }, ({ name }) => ({
        messages: [{ role: 'user', content: { type: 'text', text: `hello ${name}` } }],
      }));
      server.registerResource('spy note', SURFACE.resource, { mimeType: 'text/plain' }, async (uri) => ({ contents: [{ uri: uri.href, text: 'a note' }] }));
      server.server.setRequestHandler(SubscribeRequestSchema, async () => ({}));
      server.server.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));
    }
    server.registerTool('echo', { description: 'Answers with its text.', inputSchema: { text: z.string() } }, ({ text }) => ({
      content: [{ type: 'text', text }],
    }));
    server.registerTool('hold', { description: 'Streams a progress notification (when asked for progress), then answers when the test releases it.' }, async (extra) => {
      const released = new Promise<void>((resolve) => this.releaseHeld.push(resolve));
      const progressToken = extra._meta?.progressToken;
      if (progressToken !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: 1, message: 'holding' } });
      await released;
      return { content: [{ type: 'text', text: 'released' }] };
    });
    return server;
  }

  /** Lets every `hold` call in flight answer. */
  release(): void {
    for (const resolve of this.releaseHeld.splice(0)) resolve();
  }

  /** `hold` calls waiting for release(). */
  get held(): number {
    return this.releaseHeld.length;
  }

  /** As a restart would: every session is unknown from now on (the next call renews its backend session). */
  forgetSessions(): void {
    this.transports.clear();
  }

  /** Closes the connections no request is using, so that the next requests come on new ones (new TLS handshakes). */
  closeIdleConnections(): void {
    this.server.closeIdleConnections();
  }

  /** Requests of one kind: by HTTP method, and for POSTs by JSON-RPC method. */
  of(kind: { httpMethod?: string; rpcMethod?: string; tool?: string }): SpiedRequest[] {
    return this.requests.filter(
      (request) =>
        (kind.httpMethod === undefined || request.httpMethod === kind.httpMethod) &&
        (kind.rpcMethod === undefined || request.rpcMethod === kind.rpcMethod) &&
        (kind.tool === undefined || request.tool === kind.tool),
    );
  }

  async stop(): Promise<void> {
    this.release();
    await closeServer(this.server);
  }
}
