import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

/** What Express sends for a body over its parser's limit (in development mode): HTML with a stack trace. */
const EXPRESS_413_PAGE = [
  '<!DOCTYPE html>',
  '<html lang="en"><head><meta charset="utf-8"><title>Error</title></head>',
  '<body><pre>PayloadTooLargeError: request entity too large<br> &nbsp; &nbsp;at readStream (/srv/app/node_modules/raw-body/index.js:163:17)<br> &nbsp; &nbsp;at getRawBody (/srv/app/node_modules/raw-body/index.js:116:12)</pre></body>',
  '</html>',
].join('\n');

/**
 * A real stateful MCP SDK Tool Service in the test's own process, for the edge and isolation tests:
 * `hang` never answers (until the service stops), `headers` returns the request headers the call
 * reached it with, `request_path` the path and query string, `error_page` is answered by Express with
 * an HTML error page and a stack trace (as a body parser's 413 is), and its `initialize` can be made
 * slow. It counts the sessions it opened.
 */
export class EdgeToolService extends LoopbackMcpService {
  /** How long each initialize waits before it is answered. */
  initializeDelayMs = 0;
  /** Sessions opened (initialize answered), in order. */
  readonly sessions: string[] = [];
  /** Calls of `hang` waiting now. */
  hanging = 0;

  private readonly transports = new Map<string, StreamableHTTPServerTransport>();
  private readonly releaseHung: (() => void)[] = [];

  static async start(): Promise<EdgeToolService> {
    const service = new EdgeToolService(await freePort());
    const app = createMcpExpressApp({ host: LOOPBACK });
    mountStatefulMcp(app, service.transports, () => service.mcpServer(), {
      admit: (req, res) => {
        const request = req.body as { method?: string; params?: { name?: string } } | undefined;
        if (request?.method !== 'tools/call' || request.params?.name !== 'error_page') return true;
        res.status(413).type('text/html').send(EXPRESS_413_PAGE);
        return false;
      },
      beforeInitialize: () => new Promise((resolve) => setTimeout(resolve, service.initializeDelayMs)),
      opened: (id) => void service.sessions.push(id),
    });
    await service.listen(app);
    return service;
  }

  private mcpServer(): McpServer {
    const server = new McpServer({ name: 'edge-tool-service', version: '1.0.0' });
    server.registerTool('hang', { description: 'Never answers.' }, () => {
      this.hanging++;
      return new Promise((resolve) =>
        this.releaseHung.push(() => {
          this.hanging--;
          resolve({ content: [{ type: 'text', text: 'released' }] });
        }),
      );
    });
    server.registerTool('error_page', { description: 'Answered by an HTML error page, never by the tool.' }, () => ({ content: [] }));
    server.registerTool('request_path', { description: 'The path and query string this call arrived with.', annotations: { readOnlyHint: true } }, (extra) => ({
      content: [{ type: 'text', text: `${extra.requestInfo?.url?.pathname ?? ''}${extra.requestInfo?.url?.search ?? ''}` }],
    }));
    server.registerTool('headers', { description: 'The request headers this call arrived with.', annotations: { readOnlyHint: true } }, (extra) => ({
      content: [{ type: 'text', text: JSON.stringify(extra.requestInfo?.headers ?? {}) }],
    }));
    return server;
  }

  /** Answers every hung call, so that the service can stop. */
  releaseAll(): void {
    for (const release of this.releaseHung.splice(0)) release();
  }

  override async stop(): Promise<void> {
    this.releaseAll();
    await super.stop();
  }
}
