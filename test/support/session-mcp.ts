import { randomUUID } from 'node:crypto';
import type { Express, Request, Response } from 'express';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport, StreamableHTTPServerTransportOptions } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

/** How a stateful in-test Tool Service serves its sessions (serveSessions). */
export interface SessionServing {
  /** A new MCP server for a session being opened. */
  newServer(): McpServer;
  /** More options for a new session's transport (an event store of its own, a retry hint). */
  transportOptions?(): Omit<StreamableHTTPServerTransportOptions, 'sessionIdGenerator' | 'onsessioninitialized' | 'onsessionclosed'>;
  /** Runs first on every request: false when it answered the request itself (a 401, say). */
  admit?(req: Request, res: Response): boolean;
  opened?(sessionId: string, server: McpServer): void;
  closed?(sessionId: string): void;
}

/**
 * An MCP SDK v1 server per session at /mcp, as MCP 2025-11-25 has it: initialize opens a session, a
 * request of an unknown session is answered 404. Returns the open sessions' transports (a test may
 * forget them all, as a restart would).
 */
export function serveSessions(app: Express, serving: SessionServing): Map<string, StreamableHTTPServerTransport> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  app.all('/mcp', async (req, res) => {
    if (serving.admit && !serving.admit(req, res)) return;
    const sessionId = req.headers['mcp-session-id'];
    let transport = typeof sessionId === 'string' ? transports.get(sessionId) : undefined;
    if (!transport && req.method === 'POST' && isInitializeRequest(req.body)) {
      const server = serving.newServer();
      const created = new StreamableHTTPServerTransport({
        ...serving.transportOptions?.(),
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => {
          transports.set(id, created);
          serving.opened?.(id, server);
        },
        onsessionclosed: (id) => {
          transports.delete(id);
          serving.closed?.(id);
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
  return transports;
}
