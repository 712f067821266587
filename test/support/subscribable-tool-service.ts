import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { SubscribeRequestSchema, UnsubscribeRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

/**
 * A real stateful MCP SDK v1 Tool Service whose resources (`note://<name>`) take subscriptions: the
 * test changes a note with `touch`, and every session subscribed to it gets
 * notifications/resources/updated on its standalone GET stream, as MCP 2025-11-25 says.
 */
export class SubscribableToolService extends LoopbackMcpService {
  private readonly servers = new Map<string, McpServer>();
  /** Session id → the URIs it subscribed to. */
  readonly subscriptions = new Map<string, Set<string>>();

  static async start(notes: string[]): Promise<SubscribableToolService> {
    const port = await freePort();
    const app = createMcpExpressApp({ host: LOOPBACK });
    const service = new SubscribableToolService(port);
    mountStatefulMcp(app, new Map(), () => service.mcpServer(notes), {
      opened: (id, server) => void service.servers.set(id, server),
      closed: (id) => {
        service.servers.delete(id);
        service.subscriptions.delete(id);
      },
    });
    await service.listen(app);
    return service;
  }

  /** The note changed: every session subscribed to it is told. */
  async touch(uri: string): Promise<void> {
    for (const [session, uris] of this.subscriptions) {
      if (uris.has(uri)) await this.servers.get(session)?.server.notification({ method: 'notifications/resources/updated', params: { uri } });
    }
  }

  private mcpServer(notes: string[]): McpServer {
    const server = new McpServer({ name: 'subscribable-tool-service', version: '1.0.0' }, { capabilities: { resources: { subscribe: true, listChanged: true } } });
    for (const note of notes) {
      server.registerResource(note, `note://${note}`, { mimeType: 'text/plain' }, async (uri) => ({ contents: [{ uri: uri.href, text: `note ${note}` }] }));
    }
    server.server.setRequestHandler(SubscribeRequestSchema, async (request, extra) => {
      const uris = this.subscriptions.get(extra.sessionId ?? '') ?? new Set<string>();
      uris.add(request.params.uri);
      this.subscriptions.set(extra.sessionId ?? '', uris);
      return {};
    });
    server.server.setRequestHandler(UnsubscribeRequestSchema, async (request, extra) => {
      this.subscriptions.get(extra.sessionId ?? '')?.delete(request.params.uri);
      return {};
    });
    return server;
  }
}
