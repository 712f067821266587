import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';
import { mountStatefulMcp } from './stateful-mcp';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What a client answered a request the service sent it outside any call. */
export interface ServerRequestAnswer {
  kind: 'sampling' | 'elicitation' | 'roots';
  answer?: unknown;
  error?: string;
}

/**
 * A real stateful MCP SDK v1 Tool Service (2025-11-25) that keeps the events of its streams
 * (the SDK's InMemoryEventStore: every SSE event has an id, and a GET with Last-Event-ID replays a
 * stream) and asks its clients things outside any call:
 * - `ask_later {kind, delay_ms}` answers at once, then after the delay sends sampling/createMessage,
 *   elicitation/create or roots/list on the session's standalone GET stream; the client's answer is
 *   kept in `answers` (and returned by the tool `answers`);
 * - `steps {steps, interval_ms, close_after?}` sends a progress notification per step and then its
 *   result; with `close_after` it closes the call's SSE stream after that many steps and goes on,
 *   expecting the client to reconnect with Last-Event-ID (SEP-1699; `retry:` 200 ms). It closes the
 *   stream only for clients of 2025-11-25 or later: those got the priming event that makes a stream
 *   resumable, as the SDK sends it; with `close_anyway` also for older clients (a backend that does
 *   not follow the revision it negotiated: docs/adr/0018-stream-relaying.md, the pooled session);
 * - with `rootsAfterInitializedMs`, each session's client is asked `roots/list` on the standalone
 *   stream that long after its `notifications/initialized` (a backend that asks at once);
 * - while `refuseResumes` is set, a GET with Last-Event-ID is answered 500 (a backend that closes a
 *   call's stream and then cannot give the rest).
 */
export class ServerRequestsService extends LoopbackMcpService {
  readonly answers: ServerRequestAnswer[] = [];
  /** Every request's Last-Event-ID header (GETs that resume a stream). */
  readonly resumedFrom: string[] = [];
  /** Calls of `steps` that ran to their end. */
  stepsCompleted = 0;
  /** Refuse every resume (a GET with Last-Event-ID) with 500. */
  refuseResumes = false;

  private constructor(
    port: number,
    private readonly rootsAfterInitializedMs?: number,
  ) {
    super(port);
  }

  static async start(options: { rootsAfterInitializedMs?: number } = {}): Promise<ServerRequestsService> {
    const service = new ServerRequestsService(await freePort(), options.rootsAfterInitializedMs);
    const app = createMcpExpressApp({ host: LOOPBACK });
    mountStatefulMcp(app, new Map(), () => service.mcpServer(), {
      transportOptions: () => ({ eventStore: new InMemoryEventStore(), retryInterval: 200 }),
      admit: (req, res) => {
        const lastEventId = req.headers['last-event-id'];
        if (typeof lastEventId !== 'string') return true;
        service.resumedFrom.push(lastEventId);
        if (!service.refuseResumes) return true;
        res.status(500).send('this backend lost the events of its streams');
        return false;
      },
    });
    await service.listen(app);
    return service;
  }

  private mcpServer(): McpServer {
    const server = new McpServer({ name: 'server-requests-service', version: '1.0.0' }, { capabilities: { logging: {} } });
    const ask = async (kind: ServerRequestAnswer['kind']) => {
      try {
        const answer =
          kind === 'sampling'
            ? await server.server.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: 'a question outside any call' } }], maxTokens: 10 })
            : kind === 'elicitation'
              ? await server.server.elicitInput({ message: 'your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } })
              : await server.server.listRoots();
        this.answers.push({ kind, answer });
      } catch (error) {
        this.answers.push({ kind, error: (error as Error).message });
      }
    };
    const askAfterInitialized = this.rootsAfterInitializedMs;
    if (askAfterInitialized !== undefined) server.server.oninitialized = () => void setTimeout(() => void ask('roots'), askAfterInitialized);
    server.registerTool('ask_later', { inputSchema: { kind: z.enum(['sampling', 'elicitation', 'roots']), delay_ms: z.number().default(100) } }, async ({ kind, delay_ms }) => {
      setTimeout(() => void ask(kind), delay_ms);
      return { content: [{ type: 'text', text: `will ask for ${kind}` }] };
    });
    server.registerTool('answers', {}, async () => ({ content: [{ type: 'text', text: JSON.stringify(this.answers) }] }));
    server.registerTool(
      'steps',
      { inputSchema: { steps: z.number(), interval_ms: z.number(), close_after: z.number().optional(), close_anyway: z.boolean().optional() } },
      async ({ steps, interval_ms, close_after, close_anyway }, extra) => {
        const progressToken = extra._meta?.progressToken;
        const resumable = (server.server.getClientVersion() && (extra.requestInfo?.headers['mcp-protocol-version'] ?? '') >= '2025-11-25') === true;
        for (let step = 1; step <= steps; step++) {
          await sleep(interval_ms);
          if (progressToken !== undefined) {
            await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: step, total: steps } });
          }
          if (step === close_after && resumable) extra.closeSSEStream?.();
          // The SDK offers closeSSEStream only to 2025-11-25 clients; a backend may close the stream anyway.
          else if (step === close_after && close_anyway) (server.server.transport as StreamableHTTPServerTransport).closeSSEStream(extra.requestId);
        }
        this.stepsCompleted++;
        return { content: [{ type: 'text', text: `done after ${steps} steps` }] };
      },
    );
    return server;
  }
}
