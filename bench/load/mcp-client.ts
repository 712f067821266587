import * as http from 'node:http';
import { MCP_POST_HEADERS, MCP_PROTOCOL_VERSION, JsonRpcMessage, jsonRpcMessagesOf, responseTo } from '../mcp/streamable-http';
import type { RequestOutcome } from './load-runner';

/**
 * The load generator's MCP client: raw JSON-RPC over Streamable HTTP on node:http with kept-alive
 * connections, so that it can take its timestamps where the bytes arrive (the SDK client hides them)
 * and stay cheap enough to drive hundreds of requests per second from one core.
 */
export interface HttpAnswer {
  status: number;
  contentType?: string;
  sessionId?: string;
  body: string;
  /** performance.now() when the last byte arrived. */
  endMs: number;
}

export interface PostOptions {
  headers?: Record<string, string>;
  timeoutMs: number;
  /** Called with each chunk as it arrives and the monotonic time (ns) it arrived at. */
  onChunk?: (chunk: string, arrivedNs: bigint) => void;
}

export class McpHttpClient {
  private readonly agent: http.Agent;
  private nextId = 1;

  constructor(maxSockets: number) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets });
  }

  /** A JSON-RPC id unique within this client, so no two requests in flight ever share one. */
  newId(): number {
    return this.nextId++;
  }

  post(url: string, body: string, options: PostOptions): Promise<HttpAnswer> {
    return new Promise((resolve, reject) => {
      const request = http.request(
        url,
        {
          method: 'POST',
          agent: this.agent,
          headers: { ...MCP_POST_HEADERS, ...options.headers, 'content-length': Buffer.byteLength(body) },
        },
        (response) => {
          response.setEncoding('utf8');
          let text = '';
          response.on('data', (chunk: string) => {
            text += chunk;
            options.onChunk?.(chunk, process.hrtime.bigint());
          });
          response.on('error', reject);
          response.on('end', () =>
            resolve({
              status: response.statusCode ?? 0,
              contentType: response.headers['content-type'],
              sessionId: response.headers['mcp-session-id'] as string | undefined,
              body: text,
              endMs: performance.now(),
            }),
          );
        },
      );
      request.setTimeout(options.timeoutMs, () => request.destroy(new Error('timeout')));
      request.on('error', reject);
      request.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** The JSON-RPC answer to `id` in an HTTP answer; throws a short reason when there is none. */
/** A tools/call of the bench backend's echo tool as the load runner counts it: its end, and what went wrong if anything did. */
export function echoOutcome(answer: HttpAnswer, id: number, text: string): RequestOutcome {
  try {
    const result = answerTo(answer, id).result as { content?: { text?: string }[] };
    return { endMs: answer.endMs, error: result.content?.[0]?.text === text ? undefined : 'wrong tool result' };
  } catch (error) {
    return { endMs: answer.endMs, error: (error as Error).message };
  }
}

export function answerTo(answer: HttpAnswer, id: number): JsonRpcMessage {
  if (answer.status !== 200) throw new Error(`HTTP ${answer.status}`);
  let message: JsonRpcMessage | undefined;
  try {
    message = responseTo(jsonRpcMessagesOf(answer.contentType, answer.body), id);
  } catch {
    throw new Error(`unparsable ${answer.contentType ?? 'untyped'} body`);
  }
  if (!message) throw new Error('no JSON-RPC response in the body');
  if (message.error) throw new Error(`JSON-RPC error ${message.error.code}`);
  return message;
}

/**
 * What the bench's client declares at initialize: sampling, elicitation and roots, as the clients
 * users run do (Inspector, Claude Code, the SDKs' example clients) — issue 10 measures with such a
 * client, since a gateway may treat a session differently by what its client can answer.
 */
export const CLIENT_CAPABILITIES = { sampling: {}, elicitation: {}, roots: { listChanged: true } };

/**
 * What an MCP client does before its first call: initialize, then notifications/initialized. The
 * headers it returns (protocol version, the session id when the path hands one out, and
 * `extraHeaders`, e.g. the bearer token) go on every later request of this session.
 */
export async function openSession(client: McpHttpClient, url: string, timeoutMs: number, extraHeaders: Record<string, string> = {}): Promise<Record<string, string>> {
  const id = client.newId();
  const initialize = {
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: MCP_PROTOCOL_VERSION, capabilities: CLIENT_CAPABILITIES, clientInfo: { name: 'mcpgw-bench', version: '1.0.0' } },
  };
  const answer = await client.post(url, JSON.stringify(initialize), { headers: extraHeaders, timeoutMs });
  const result = answerTo(answer, id).result as { protocolVersion?: string };
  const headers: Record<string, string> = { ...extraHeaders, 'mcp-protocol-version': result.protocolVersion ?? MCP_PROTOCOL_VERSION };
  if (answer.sessionId) headers['mcp-session-id'] = answer.sessionId;
  const initialized = await client.post(url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), { headers, timeoutMs });
  if (initialized.status !== 202 && initialized.status !== 200) throw new Error(`notifications/initialized answered HTTP ${initialized.status}`);
  return headers;
}
