import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

/**
 * A real stateful MCP SDK Tool Service in the test's own process, for the edge and isolation tests:
 * `hang` never answers (until the service stops), `headers` returns the request headers the call
 * reached it with, and its `initialize` can be made slow. It counts the sessions it opened.
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
