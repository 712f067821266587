import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import express from 'express';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { LoopbackMcpService } from './loopback-mcp-service';

/**
 * A real MCP SDK v2 Tool Service that speaks only the stateless revision (2026-07-28): the SDK's own
 * handler with `legacy: 'reject'`, so a 2025-style request (initialize, no `_meta` claim) is refused.
 * Its tool `shout` upper-cases its text; its resource `memo://today` takes subscriptions (through
 * subscriptions/listen), and `touch` tells its listeners it changed. It records the protocol version
 * header of every request. Started with `legacy: 'stateless'` it speaks both revisions (the SDK's
 * default): 2025-era requests are answered statelessly, without a session.
 */
export class ModernToolService extends LoopbackMcpService {
  readonly protocolVersions: string[] = [];
  private notify?: { resourceUpdated(uri: string): void };

  /** memo://today changed: every subscriptions/listen that subscribed to it is told. */
  touch(uri: string): void {
    this.notify?.resourceUpdated(uri);
  }

  static async start(legacy: 'reject' | 'stateless' = 'reject'): Promise<ModernToolService> {
    const service = new ModernToolService(await freePort());
    const handler = createMcpHandler(
      () => {
        const server = new McpServer({ name: 'modern-tool-service', version: '1.0.0' }, { capabilities: { resources: { subscribe: true, listChanged: true } } });
        server.registerResource('today', 'memo://today', { mimeType: 'text/plain' }, async (uri) => ({ contents: [{ uri: uri.href, text: 'a memo' }] }));
        server.registerTool('shout', { description: 'Upper-cases its text.', inputSchema: z.object({ text: z.string() }) }, async ({ text }) => ({
          content: [{ type: 'text' as const, text: text.toUpperCase() }],
        }));
        return server;
      },
      { legacy },
    );
    service.notify = handler.notify;
    const app = express();
    const serve = toNodeHandler(handler);
    app.all('/mcp', (req, res) => {
      service.protocolVersions.push(String(req.headers['mcp-protocol-version'] ?? ''));
      void serve(req, res);
    });
    await service.listen(app);
    return service;
  }
}
