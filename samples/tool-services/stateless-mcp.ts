import type { Express } from 'express';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/**
 * Serves POST /mcp in the SDK's stateless mode: a fresh server and transport per request, as the SDK
 * recommends for servers without sessions. `jsonResponse` answers in one JSON body instead of SSE.
 */
export function mountStatelessMcp(app: Express, createServer: () => McpServer | Server, jsonResponse = false): void {
  app.post('/mcp', async (req, res) => {
    const server = createServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: jsonResponse });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  });
}
