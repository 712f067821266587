import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { mountStatelessMcp } from '../../samples/tool-services/stateless-mcp';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A real MCP SDK Tool Service (JSON responses, stateless) whose tools can be made to fail at the HTTP
 * level — a 503 before the tool runs — to see which calls the gateway retries. It counts every
 * tools/call request it receives, per tool.
 */
export class FlakyToolService extends LoopbackMcpService {
  readonly received = new Map<string, number>();
  private readonly failNext = new Set<string>();

  static async start(): Promise<FlakyToolService> {
    const port = await freePort();
    const app = createMcpExpressApp({ host: LOOPBACK });
    const service = new FlakyToolService(port);
    app.post('/mcp', (req, res, next) => {
      const tool = req.body?.method === 'tools/call' ? String(req.body.params?.name) : undefined;
      if (tool) service.received.set(tool, (service.received.get(tool) ?? 0) + 1);
      if (tool && service.failNext.delete(tool)) {
        res.status(503).json({ jsonrpc: '2.0', id: req.body.id, error: { code: -32000, message: 'temporarily unavailable' } });
        return;
      }
      next();
    });
    mountStatelessMcp(app, () => service.mcpServer(), true);
    await service.listen(app);
    return service;
  }

  /** The next tools/call of this tool gets a 503 before it runs. */
  failNextCall(tool: string): void {
    this.failNext.add(tool);
  }

  private mcpServer(): McpServer {
    const server = new McpServer({ name: 'flaky-tool-service', version: '1.0.0' });
    const answer = (text: string) => async () => ({ content: [{ type: 'text' as const, text }] });
    server.registerTool('read_report', { description: 'Reads a report.', annotations: { readOnlyHint: true } }, answer('report'));
    server.registerTool('put_setting', { description: 'Sets a value.', annotations: { readOnlyHint: false, idempotentHint: true } }, answer('set'));
    server.registerTool('send_email', { description: 'Sends an email.', annotations: { readOnlyHint: false, destructiveHint: true } }, answer('sent'));
    server.registerTool(
      'slow_read',
      { description: 'Takes a second; asks the gateway for a 300 ms deadline.', annotations: { readOnlyHint: false, idempotentHint: true }, _meta: { 'mcpgw/timeoutMs': 300 } },
      async () => {
        await sleep(1000);
        return { content: [{ type: 'text' as const, text: 'too late' }] };
      },
    );
    return server;
  }
}
