import { randomUUID } from 'node:crypto';
import type { Express, Request, Response } from 'express';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport, StreamableHTTPServerTransportOptions } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

/** What an in-test stateful Tool Service adds to the SDK's session handling. */
export interface StatefulMcpHooks {
  /** Before anything else: false when the request was refused (and answered) here. */
  admit?(req: Request, res: Response): boolean;
  /** Before an initialize is handled (a slow backend waits here). */
  beforeInitialize?(): Promise<void>;
  /** More options for a new session's transport (an event store of its own, a retry hint). */
  transportOptions?(): Omit<StreamableHTTPServerTransportOptions, 'sessionIdGenerator' | 'onsessioninitialized' | 'onsessionclosed'>;
  opened?(sessionId: string, server: McpServer): void;
  /** A session ended by its client's DELETE. */
  closed?(sessionId: string): void;
}

/**
 * A stateful MCP endpoint at /mcp, as the SDK's examples build one: a server and transport per
 * session, opened by initialize; an unknown session gets 404 (as the spec says). `transports` holds
 * the open sessions, so that a test can make the service forget them.
 */
export function mountStatefulMcp(app: Express, transports: Map<string, StreamableHTTPServerTransport>, newServer: () => McpServer, hooks: StatefulMcpHooks = {}): void {
  app.all('/mcp', async (req, res) => {
    if (hooks.admit && !hooks.admit(req, res)) return;
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? transports.get(sessionId) : undefined;
    if (!transport && req.method === 'POST' && isInitializeRequest(req.body)) {
      await hooks.beforeInitialize?.();
      const server = newServer();
      const created = new StreamableHTTPServerTransport({
        ...hooks.transportOptions?.(),
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => {
          transports.set(id, created);
          hooks.opened?.(id, server);
        },
        onsessionclosed: (id) => {
          transports.delete(id);
          hooks.closed?.(id);
        },
      });
      await server.connect(created);
      transport = created;
    }
    if (!transport) {
      res.status(404).json({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
      return;
    }
    await transport.handleRequest(req, res, req.body);
  });
}
