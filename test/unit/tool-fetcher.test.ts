import * as fs from 'node:fs';
import * as https from 'node:https';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import express from 'express';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { CatalogAccess, directCatalogAccess } from '../../control-plane/catalog/catalog-access';
import { TOOL_LIST_DEFAULTS, ToolListLimits, fetchToolList } from '../../control-plane/catalog/tool-fetcher';
import { freePort } from '../../control-plane/devstack/processes';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { closeServer, listen } from '../../control-plane/shared/http-listen';
import { mountStatelessMcp } from '../../samples/tool-services/stateless-mcp';
import { ScriptedToolService } from '../support/scripted-tool-service';
import { makeTestPki } from '../support/test-pki';

/** tools/list of one Tool Service against real loopback servers: why a listing failed, and its bounds. */

const serviceAt = (url: string) => buildGatewayIR({ routes: [{ key: 'r', toolServices: [{ id: 's', name: 's', url }] }] }).toolServices[0];
const limits = (overrides: Partial<ToolListLimits> = {}): ToolListLimits => ({ ...TOOL_LIST_DEFAULTS, timeoutMs: 1000, ...overrides });
/** Tool Services without credentials: the control plane's own way to them. */
const direct: CatalogAccess = directCatalogAccess({ authorizationFor: async () => undefined });
const failureOf = (url: string, overrides?: Partial<ToolListLimits>) =>
  fetchToolList(serviceAt(url), direct, limits(overrides)).then(
    () => 'listed',
    (error: Error) => error.message,
  );

describe('a failed tools/list names its cause', () => {
  const closers: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const close of closers) await close();
  });

  it('connection refused', async () => {
    const port = await freePort();
    expect(await failureOf(`http://127.0.0.1:${port}/mcp`)).toBe(`connection refused (127.0.0.1:${port})`);
  });

  it('a Tool Service that accepts the connection and never answers: timed out', async () => {
    const silent = net.createServer(() => undefined);
    const sockets = new Set<net.Socket>();
    silent.on('connection', (socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    closers.push(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    });
    expect(await failureOf(`http://127.0.0.1:${(silent.address() as net.AddressInfo).port}/mcp`, { timeoutMs: 300 })).toBe('timed out after 300 ms');
  });

  it('a certificate the gateway does not trust: a TLS error with its code', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-pki-'));
    const pki = makeTestPki(dir, 'localhost');
    const server = https.createServer({ cert: fs.readFileSync(pki.certFile), key: fs.readFileSync(pki.keyFile) }, (_req, res) => res.end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(async () => {
      await closeServer(server);
      fs.rmSync(dir, { recursive: true, force: true });
    });
    expect(await failureOf(`https://localhost:${(server.address() as net.AddressInfo).port}/mcp`)).toMatch(/^TLS error: [A-Z_]+: /);
  });

  it('an HTTP error status, with a bounded one-line excerpt of the body', async () => {
    const app = express();
    app.post('/mcp', (_req, res) => {
      res.status(503).type('text/html').send(`<html>\n<body>maintenance</body>\n${'x'.repeat(5000)}</html>`);
    });
    const server = await listen(app, '127.0.0.1', 0);
    closers.push(() => closeServer(server));
    const message = await failureOf(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/mcp`);
    expect(message).toMatch(/^HTTP 503: <html> <body>maintenance<\/body> x+$/);
    expect(message.length).toBeLessThan(220);
  });

  it('a JSON-RPC error from the Tool Service', async () => {
    const app = createMcpExpressApp({ host: '127.0.0.1' });
    // A real SDK server that offers no tools: it answers tools/list with "Method not found".
    mountStatelessMcp(app, () => new Server({ name: 'no-tools', version: '1.0.0' }, { capabilities: {} }));
    const server = await listen(app, '127.0.0.1', 0);
    closers.push(() => closeServer(server));
    expect(await failureOf(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/mcp`)).toBe('JSON-RPC error -32601: Method not found');
  });
});

describe('tools/list bounds', () => {
  let service: ScriptedToolService;
  const names = (count: number) => Array.from({ length: count }, (_, index) => `tool_${index}`);

  beforeAll(async () => {
    service = await ScriptedToolService.start(names(120), 50);
  });
  afterAll(async () => {
    await service?.stop();
  });

  it('lists every page within the bounds', async () => {
    service.setDescriptionBytes(1000);
    const { tools } = await fetchToolList(serviceAt(service.url), direct, limits({ maxBytes: 200_000, maxTools: 120 }));
    expect(tools).toHaveLength(120);
  });

  it('stops at the byte bound, counted over all pages, and says so', async () => {
    service.setDescriptionBytes(1000);
    // Each page is about 50 KB: the third one crosses 120 KiB.
    expect(await failureOf(service.url, { maxBytes: 120 * 1024 })).toBe('tools/list exceeded 120 KiB');
  });

  it('stops at the tool-count bound', async () => {
    service.setDescriptionBytes(0);
    expect(await failureOf(service.url, { maxTools: 100 })).toBe('tools/list exceeded 100 tools');
  });
});
