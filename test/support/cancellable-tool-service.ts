import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

/**
 * A real stateful MCP SDK Tool Service in the test's own process. Its tool `wait` runs until its
 * request is cancelled: the service records which of its sessions started a call and which calls the
 * client's notifications/cancelled reached. Its tool `whoami` names the session it ran in. It answers
 * an unknown session with 404, as the spec says, and can forget all its sessions at once. Every
 * request must carry `Authorization: Bearer <one of the accepted tokens>` (401 otherwise), as a
 * backend that authenticates each request does.
 */
export class CancellableToolService extends LoopbackMcpService {
  readonly started: { session: string; requestId: string | number }[] = [];
  readonly cancelled: { session: string; requestId: string | number; reason: unknown }[] = [];
  /** Sessions a standalone GET stream was opened in (it reached the service while the session was known). */
  readonly listenedIn: string[] = [];
  /** Sessions ended by a client's DELETE. */
  readonly closedSessions: string[] = [];

  private readonly transports = new Map<string, StreamableHTTPServerTransport>();

  /** Requests refused for a missing or wrong bearer token. */
  unauthorized = 0;

  static async start(acceptedTokens: string[]): Promise<CancellableToolService> {
    const port = await freePort();
    const app = createMcpExpressApp({ host: LOOPBACK });
    const service = new CancellableToolService(port);
    mountStatefulMcp(app, service.transports, () => service.mcpServer(), {
      admit: (req, res) => {
        if (acceptedTokens.some((token) => req.headers.authorization === `Bearer ${token}`)) {
          const session = req.headers['mcp-session-id'];
          if (req.method === 'GET' && typeof session === 'string' && service.transports.has(session)) service.listenedIn.push(session);
          return true;
        }
        service.unauthorized++;
        res.status(401).json({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Unauthorized' } });
        return false;
      },
      closed: (id) => void service.closedSessions.push(id),
    });
    await service.listen(app);
    return service;
  }

  private mcpServer(): McpServer {
    const server = new McpServer({ name: 'cancellable-tool-service', version: '1.0.0' });
    server.registerTool('wait', { description: 'Runs until cancelled.' }, (extra) =>
      new Promise((resolve) => {
        const session = extra.sessionId ?? '';
        this.started.push({ session, requestId: extra.requestId });
        extra.signal.addEventListener('abort', () => {
          this.cancelled.push({ session, requestId: extra.requestId, reason: extra.signal.reason });
          resolve({ content: [{ type: 'text', text: 'cancelled' }] });
        });
      }),
    );
    server.registerTool('whoami', { description: 'Names the session it runs in.' }, (extra) => ({
      content: [{ type: 'text', text: extra.sessionId ?? '' }],
    }));
    return server;
  }

  /** As a restart would: every session the service had is unknown from now on. */
  forgetSessions(): void {
    this.transports.clear();
  }
}
