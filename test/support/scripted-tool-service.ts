import * as http from 'node:http';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { mountStatelessMcp } from '../../samples/tool-services/stateless-mcp';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { freePort } from '../../control-plane/devstack/processes';

const HOST = '127.0.0.1';

/**
 * A real MCP SDK Tool Service, in the test's own process, declaring whatever tool names the test
 * sets: many, badly named or listed twice. It uses the SDK's low-level Server because McpServer
 * refuses a second tool of the same name. Its tools/list is paginated (`pageSize` per page), so the
 * control plane must follow nextCursor; every tool answers "called <name>".
 */
export class ScriptedToolService {
  private constructor(
    private readonly server: http.Server,
    readonly port: number,
    private toolNames: string[],
    private readonly pageSize: number,
  ) {}

  static async start(toolNames: string[], pageSize = 50): Promise<ScriptedToolService> {
    const listenPort = await freePort();
    const app = createMcpExpressApp({ host: HOST });
    const server = http.createServer(app);
    const service = new ScriptedToolService(server, listenPort, toolNames, pageSize);
    mountStatelessMcp(app, () => service.mcpServer());
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listenPort, HOST, () => resolve());
    });
    return service;
  }

  get url(): string {
    return `http://${HOST}:${this.port}/mcp`;
  }

  /** What the next tools/list declares. */
  setTools(toolNames: string[]): void {
    this.toolNames = toolNames;
  }

  private mcpServer(): Server {
    const server = new Server({ name: 'scripted-tool-service', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
      const start = Number(request.params?.cursor ?? 0);
      const end = start + this.pageSize;
      return {
        tools: this.toolNames.slice(start, end).map((name) => ({ name, description: `Scripted tool ${name}.`, inputSchema: { type: 'object' as const } })),
        ...(end < this.toolNames.length && { nextCursor: String(end) }),
      };
    });
    server.setRequestHandler(CallToolRequestSchema, async (request) => ({ content: [{ type: 'text', text: `called ${request.params.name}` }] }));
    return server;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
