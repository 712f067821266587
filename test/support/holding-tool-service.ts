import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

/**
 * A real stateful MCP SDK Tool Service in the test's own process whose tool `hold` answers only when
 * the test releases it (or its request ends): calls in flight for as long as a test wants;
 * `hold_briefly` the same, with a deadline of 500 ms the gateway enforces. `echo` answers at once.
 */
export class HoldingToolService extends LoopbackMcpService {
  private readonly transports = new Map<string, StreamableHTTPServerTransport>();
  private readonly held = new Set<() => void>();

  static async start(): Promise<HoldingToolService> {
    const service = new HoldingToolService(await freePort());
    const app = createMcpExpressApp({ host: LOOPBACK });
    mountStatefulMcp(app, service.transports, () => service.mcpServer());
    await service.listen(app);
    return service;
  }

  /** Calls of `hold` the service has begun. */
  started = 0;

  /** Every held call answers. */
  releaseAll(): void {
    for (const release of [...this.held]) release();
  }

  private mcpServer(): McpServer {
    const server = new McpServer({ name: 'holding-tool-service', version: '1.0.0' });
    const hold = ({ tag }: { tag: string }, extra: { signal: AbortSignal }) =>
      new Promise<{ content: { type: 'text'; text: string }[] }>((resolve) => {
        const release = () => {
          this.held.delete(release);
          resolve({ content: [{ type: 'text', text: `released ${tag}` }] });
        };
        this.held.add(release);
        this.started++;
        extra.signal.addEventListener('abort', release);
      });
    server.registerTool('hold', { description: 'Answers when the test releases it.', inputSchema: { tag: z.string() } }, hold);
    // The gateway gives up on it after 500 ms (its deadline: docs/catalog.md).
    server.registerTool('hold_briefly', { description: 'As hold; asks the gateway for a 500 ms deadline.', inputSchema: { tag: z.string() }, _meta: { 'mcpgw/timeoutMs': 500 } }, hold);
    server.registerTool('echo', { description: 'Answers its text at once.', inputSchema: { text: z.string() } }, ({ text }) => ({ content: [{ type: 'text', text }] }));
    return server;
  }
}
