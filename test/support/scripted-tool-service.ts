import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { mountStatelessMcp } from '../../samples/tool-services/stateless-mcp';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';

/**
 * A real MCP SDK Tool Service, in the test's own process, declaring whatever tool names the test
 * sets: many, badly named or listed twice. It uses the SDK's low-level Server because McpServer
 * refuses a second tool of the same name. Its tools/list is paginated (`pageSize` per page), so the
 * control plane must follow nextCursor; every tool answers "called <name>".
 */
export class ScriptedToolService extends LoopbackMcpService {
  private constructor(
    port: number,
    private toolNames: string[],
    private readonly pageSize: number,
  ) {
    super(port);
  }

  /** On `port` when given (to bring back a backend the gateway already knows), else on a free one. */
  static async start(toolNames: string[], pageSize = 50, port?: number): Promise<ScriptedToolService> {
    const app = createMcpExpressApp({ host: LOOPBACK });
    const service = new ScriptedToolService(port ?? (await freePort()), toolNames, pageSize);
    mountStatelessMcp(app, () => service.mcpServer());
    await service.listen(app);
    return service;
  }

  private descriptionBytes = 0;
  /** The names of the tools called so far, in order: what reached this backend. */
  readonly calls: string[] = [];
  /** The request header names of each call, in the same order. */
  readonly callHeaderNames: string[][] = [];

  /** What the next tools/list declares. */
  setTools(toolNames: string[]): void {
    this.toolNames = toolNames;
  }

  /** Pads every tool's description to about this many bytes (0: the short default), for huge tools/list answers. */
  setDescriptionBytes(bytes: number): void {
    this.descriptionBytes = bytes;
  }

  private mcpServer(): Server {
    const server = new Server({ name: 'scripted-tool-service', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
      const start = Number(request.params?.cursor ?? 0);
      const end = start + this.pageSize;
      return {
        tools: this.toolNames.slice(start, end).map((name) => ({
          name,
          description: this.descriptionBytes > 0 ? `Scripted tool ${name}. `.padEnd(this.descriptionBytes, 'x') : `Scripted tool ${name}.`,
          inputSchema: { type: 'object' as const },
        })),
        ...(end < this.toolNames.length && { nextCursor: String(end) }),
      };
    });
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      this.calls.push(request.params.name);
      this.callHeaderNames.push(Object.keys(extra.requestInfo?.headers ?? {}));
      return { content: [{ type: 'text', text: `called ${request.params.name}` }] };
    });
    return server;
  }
}
