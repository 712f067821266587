import { text as readText } from 'node:stream/consumers';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { z } from 'zod';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CallToolResult,
  ErrorCode,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  Prompt,
  Resource,
  Tool,
} from '@modelcontextprotocol/sdk/types.js';

/**
 * MCP backends for the bench: real SDK servers on StreamableHTTPServerTransport (stateless, SSE
 * answers, a fresh server and transport per request as the SDK recommends), with what the
 * scenarios need:
 * - `echo`: the small tools/call result;
 * - `stream_progress`: N progress notifications M ms apart, each stamped with the monotonic clock
 *   (process.hrtime: one CLOCK_MONOTONIC for every process on the machine) just before it is sent,
 *   so a client can tell how long each frame spent on the way;
 * - `hang`: never answers (until its client goes away): the stuck backend of the isolation bench;
 * - filler tools, so that a backend lists e.g. 100 tools;
 * - a delay on tools/list: the slow backend of the tools/list scenario;
 * - prompts and resources, for the prompts/list and resources/list of the same scenario; a read of
 *   `bench://<port>/size/<n>` answers n bytes of text (bench/resource-read-lanes.ts).
 *
 * Why the SDK's low-level Server and not McpServer (as samples/tool-services uses): McpServer turns
 * every tool's zod schema into JSON Schema on every tools/list and registers every tool on every
 * request, about 15 ms for 100 tools. Fifty such backends share one core here, so a fanned-out
 * tools/list would measure that conversion fifty times over instead of the paths under test. The
 * tool definitions are converted once, at start, with the same zod.
 */
export interface BenchToolServiceSpec {
  port: number;
  /** Tools besides echo and stream_progress. */
  fillerTools: number;
  /** How long tools/list waits before answering (0: at once). */
  listDelayMs: number;
  /** Serves https, asking every client for a certificate issued by clientCaFile (mTLS). PEM files. */
  tls?: { certFile: string; keyFile: string; clientCaFile: string };
  /** Prompts and resources it lists (0: it declares none). */
  prompts: number;
  resources: number;
}

export const ECHO_TOOL = 'echo';
export const STREAM_TOOL = 'stream_progress';
export const HANG_TOOL = 'hang';
/** Tools every bench backend has besides its fillers. */
export const BASE_TOOL_COUNT = 3;
/** Prefix of the progress message; the rest is the send time in nanoseconds of process.hrtime. */
export const SENT_AT_PREFIX = 'sent_at_ns=';

type ToolExtra = { sendNotification: (notification: { method: 'notifications/progress'; params: Record<string, unknown> }) => Promise<void> };

interface BenchTool {
  definition: Tool;
  input: z.ZodObject;
  run(args: Record<string, unknown>, progressToken: string | number | undefined, extra: ToolExtra): Promise<CallToolResult>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (value: string): CallToolResult => ({ content: [{ type: 'text', text: value }] });

function tool(name: string, description: string, input: z.ZodObject, run: BenchTool['run'], annotations?: Tool['annotations']): BenchTool {
  return { definition: { name, description, inputSchema: z.toJSONSchema(input) as Tool['inputSchema'], ...(annotations && { annotations }) }, input, run };
}

function benchTools(spec: BenchToolServiceSpec): Map<string, BenchTool> {
  const tools = [
    tool(
      ECHO_TOOL,
      'Echoes its input (the small tools/call result).',
      z.object({ text: z.string() }),
      async (args) => text(String(args.text)),
      { readOnlyHint: true },
    ),
    tool(
      STREAM_TOOL,
      'Sends `count` progress notifications `interval_ms` apart, each stamped with its send time.',
      z.object({ count: z.number().int().min(1).max(1000), interval_ms: z.number().int().min(0).max(10_000) }),
      async (args, progressToken, extra) => {
        const count = args.count as number;
        for (let progress = 1; progress <= count; progress++) {
          await sleep(args.interval_ms as number);
          if (progressToken === undefined) continue;
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress, total: count, message: `${SENT_AT_PREFIX}${process.hrtime.bigint()}` },
          });
        }
        return text(`sent ${count} notifications`);
      },
    ),
    tool(HANG_TOOL, 'Never answers.', z.object({}), () => new Promise<CallToolResult>(() => undefined)),
  ];
  const fillerInput = z.object({
    query: z.string().describe('What to look up'),
    limit: z.number().int().min(1).max(100).optional().describe('How many results at most'),
  });
  for (let index = 0; index < spec.fillerTools; index++) {
    const description = `Filler tool ${index} of bench backend ${spec.port}; returns its query.`;
    tools.push(tool(`tool_${String(index).padStart(3, '0')}`, description, fillerInput, async (args) => text(String(args.query)), { readOnlyHint: true }));
  }
  return new Map(tools.map((entry) => [entry.definition.name, entry]));
}

/** What a backend lists besides tools: prompts with two arguments, documents under bench://<port>/. */
function benchSurface(spec: BenchToolServiceSpec): { prompts: Prompt[]; resources: Resource[] } {
  const numbered = (count: number) => Array.from({ length: count }, (_, index) => String(index).padStart(3, '0'));
  return {
    prompts: numbered(spec.prompts).map((index) => ({
      name: `prompt_${index}`,
      description: `Filler prompt ${index} of bench backend ${spec.port}.`,
      arguments: [
        { name: 'topic', description: 'What the prompt is about', required: true },
        { name: 'tone', description: 'How it should sound' },
      ],
    })),
    resources: numbered(spec.resources).map((index) => ({ uri: `bench://${spec.port}/doc/${index}`, name: `doc_${index}`, mimeType: 'text/plain', description: `Filler document ${index}.` })),
  };
}

function buildServer(spec: BenchToolServiceSpec, tools: Map<string, BenchTool>, definitions: Tool[], surface: ReturnType<typeof benchSurface>): Server {
  const capabilities = { tools: {}, ...(spec.prompts > 0 && { prompts: {} }), ...(spec.resources > 0 && { resources: {} }) };
  const server = new Server({ name: `bench-backend-${spec.port}`, version: '1.0.0' }, { capabilities });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: definitions }));
  if (spec.prompts > 0) server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: surface.prompts }));
  if (spec.resources > 0) {
    server.setRequestHandler(ListResourcesRequestSchema, () => ({ resources: surface.resources }));
    server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({ resourceTemplates: [] }));
    server.setRequestHandler(ReadResourceRequestSchema, (request) => {
      const size = /\/size\/(\d+)$/.exec(request.params.uri);
      if (!size) throw new McpError(ErrorCode.InvalidParams, `no resource "${request.params.uri}"`);
      return { contents: [{ uri: request.params.uri, mimeType: 'text/plain', text: 'x'.repeat(Math.min(Number(size[1]), 16 * 1024 * 1024)) }] };
    });
  }
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const called = tools.get(request.params.name);
    if (!called) throw new McpError(ErrorCode.InvalidParams, `unknown tool "${request.params.name}"`);
    const args = called.input.safeParse(request.params.arguments ?? {});
    if (!args.success) return { isError: true, content: [{ type: 'text', text: args.error.message }] };
    return called.run(args.data as Record<string, unknown>, request.params._meta?.progressToken, extra as unknown as ToolExtra);
  });
  return server;
}


function answerJson(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/** Serves one bench backend at http(s)://host:port/mcp until the returned server is closed. */
export function startBenchToolService(spec: BenchToolServiceSpec, host: string): Promise<http.Server> {
  const tools = benchTools(spec);
  const definitions = [...tools.values()].map((entry) => entry.definition);
  const surface = benchSurface(spec);
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (req.method !== 'POST') {
      answerJson(res, 405, { jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null });
      return;
    }
    // The body is read here (not by the transport) to see the method before answering.
    let message: { method?: unknown };
    try {
      message = JSON.parse(await readText(req)) as { method?: unknown };
    } catch {
      answerJson(res, 400, { jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null });
      return;
    }
    if (message.method === 'tools/list' && spec.listDelayMs > 0) await sleep(spec.listDelayMs);
    const server = buildServer(spec, tools, definitions, surface);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, message);
  };
  const tls = spec.tls;
  const server = tls
    ? https.createServer({ cert: fs.readFileSync(tls.certFile), key: fs.readFileSync(tls.keyFile), ca: fs.readFileSync(tls.clientCaFile), requestCert: true, rejectUnauthorized: true })
    : http.createServer();
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    handle(req, res).catch((error: Error) => {
      if (!res.headersSent) answerJson(res, 500, { jsonrpc: '2.0', error: { code: -32603, message: error.message }, id: null });
      else res.destroy(error);
    });
  });
  // Clients keep connections open between requests; Node's 5 s default would close pooled ones.
  server.keepAliveTimeout = 120_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(spec.port, host, () => resolve(server));
  });
}
