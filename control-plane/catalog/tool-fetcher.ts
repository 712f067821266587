import * as fs from 'node:fs/promises';
import { Client as StatelessClient, StreamableHTTPClientTransport as StatelessTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, LATEST_PROTOCOL_VERSION, Tool } from '@modelcontextprotocol/sdk/types.js';
import { ToolServiceIR } from '../ir/gateway-ir';
import { MODERN_PROTOCOL_VERSION } from '../sidecar/modern-era';
import { ToolList } from './catalog-store';
import { backendFetch } from '../shared/backend-fetch';

export const GATEWAY_CLIENT_INFO = { name: 'mcp-federation-gateway', version: '0.1.0' };

/**
 * The catalog lists tools for a client that can do everything a gateway client may do: some servers
 * offer a tool only to clients that declare sampling, elicitation or roots. A call from a client that
 * cannot is answered by the backend, in the session the gateway opened with the client's own
 * capabilities.
 */
const CATALOG_CLIENT_CAPABILITIES = { sampling: {}, elicitation: {}, roots: {} };

async function readToken(file: string): Promise<string> {
  try {
    const token = (await fs.readFile(file, 'utf8')).trim();
    if (token) return token;
    throw new Error('the file is empty');
  } catch (error) {
    throw new Error(`cannot read transport.catalogBearerTokenFile ${file}: ${(error as Error).message}`);
  }
}

/** Bounds on one Tool Service's tools/list (docs/hardening.md); past them the backend is degraded and its last good copy served. */
export interface ToolListLimits {
  /** The whole listing (initialize and every page). */
  timeoutMs: number;
  /** Bytes of response bodies the listing may read, over all its pages: the fetch stops reading there. */
  maxBytes: number;
  /** Tools the listing may declare, over all its pages. */
  maxTools: number;
}

/**
 * 10 MiB and 5,000 tools: the largest real Tool Services list a few hundred tools in well under 1 MiB,
 * and one backend cannot usefully declare more tools than a route serves (--max-tools-per-route).
 */
export const TOOL_LIST_DEFAULTS: ToolListLimits = { timeoutMs: 5000, maxBytes: 10 * 1024 * 1024, maxTools: 5000 };

/** "10 MiB", "512 KiB", "1000 bytes": a limit as an operator would set it. */
export function formatBytes(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/** A listing past its bounds: the backend is degraded with this reason, its last good tools kept. */
export class ToolListTooLargeError extends Error {}

/**
 * What one listing may still read. Past the bound it aborts the whole listing and errors the body
 * being read, so the connection is closed and nothing more is buffered.
 */
class ListingBudget {
  private readBytes = 0;
  readonly abort = new AbortController();
  exceeded?: ToolListTooLargeError;

  constructor(private readonly limits: ToolListLimits) {}

  private fail(reason: string): never {
    this.exceeded ??= new ToolListTooLargeError(reason);
    this.abort.abort(this.exceeded);
    throw this.exceeded;
  }

  spend(bytes: number): void {
    this.readBytes += bytes;
    if (this.readBytes > this.limits.maxBytes) this.fail(`tools/list exceeded ${formatBytes(this.limits.maxBytes)}`);
  }

  countTools(tools: number): void {
    if (tools > this.limits.maxTools) this.fail(`tools/list exceeded ${this.limits.maxTools} tools`);
  }

  /** A fetch whose response bodies count against this budget. */
  meter(inner: typeof fetch): typeof fetch {
    return async (input, init) => {
      const response = await inner(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, this.abort.signal]) : this.abort.signal });
      if (!response.body) return response;
      const counted = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform: (chunk, controller) => {
            this.spend(chunk.byteLength);
            controller.enqueue(chunk);
          },
        }),
      );
      return new Response(counted, { status: response.status, statusText: response.statusText, headers: response.headers });
    };
  }
}

/** The whole tools/list, following nextCursor to the end, with either SDK's client. */
async function listAllTools(listTools: (cursor?: string) => Promise<{ tools: Tool[]; nextCursor?: string }>, budget: ListingBudget): Promise<Tool[]> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await listTools(cursor);
    tools.push(...page.tools);
    budget.countTools(tools.length);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

/** `traceHeaders`: the trace context of the listing's span, so that the Tool Service's spans hang under it. */
async function transportOptions(service: ToolServiceIR, budget: ListingBudget, traceHeaders: Record<string, string>) {
  const authorization = service.catalogBearerTokenFile && { authorization: `Bearer ${await readToken(service.catalogBearerTokenFile)}` };
  return {
    fetch: budget.meter(backendFetch(service.endpoint.tls)),
    requestInit: { headers: { ...traceHeaders, ...authorization } },
  };
}

/** A listing's own outcome: past its bounds, that is the reason, whatever error the SDK surfaced for the cut. */
async function bounded<T>(budget: ListingBudget, listing: Promise<T>): Promise<T> {
  try {
    return await listing;
  } catch (error) {
    throw budget.exceeded ?? error;
  }
}

const requestOptions = (limits: ToolListLimits, budget: ListingBudget) => ({
  timeout: limits.timeoutMs,
  signal: AbortSignal.any([AbortSignal.timeout(limits.timeoutMs), budget.abort.signal]),
});

/** In a session-based revision (2025-11-25 and before): what almost every Tool Service speaks. */
async function fetchInSession(service: ToolServiceIR, limits: ToolListLimits, traceHeaders: Record<string, string>): Promise<ToolList> {
  const budget = new ListingBudget(limits);
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities: CATALOG_CLIENT_CAPABILITIES });
  const transport = new StreamableHTTPClientTransport(new URL(service.url), await transportOptions(service, budget, traceHeaders));
  const options = requestOptions(limits, budget);
  try {
    return await bounded(
      budget,
      (async () => {
        await client.connect(transport, options);
        const tools = await listAllTools((cursor) => client.listTools(cursor ? { cursor } : {}, options), budget);
        const sessionful = transport.sessionId !== undefined;
        // A stateful backend opened a session for this listing only: end it rather than leave it to expire.
        if (sessionful) await transport.terminateSession().catch(() => undefined);
        return { tools, protocolVersion: transport.protocolVersion ?? LATEST_PROTOCOL_VERSION, sessionful };
      })(),
    );
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** In the stateless revision (2026-07-28), with the MCP SDK v2 client pinned to it. */
async function fetchStateless(service: ToolServiceIR, limits: ToolListLimits, traceHeaders: Record<string, string>): Promise<ToolList> {
  const budget = new ListingBudget(limits);
  const client = new StatelessClient(GATEWAY_CLIENT_INFO, { versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } });
  const options = requestOptions(limits, budget);
  try {
    return await bounded(
      budget,
      (async () => {
        await client.connect(new StatelessTransport(new URL(service.url), await transportOptions(service, budget, traceHeaders)), options);
        const tools = await listAllTools(
          (cursor) => client.listTools(cursor ? { cursor } : {}, options) as Promise<{ tools: Tool[]; nextCursor?: string }>,
          budget,
        );
        return { tools, protocolVersion: MODERN_PROTOCOL_VERSION, sessionful: false };
      })(),
    );
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** Error codes of Node's sockets and undici, as an operator reads them. */
const NETWORK_CAUSES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the Tool Service',
  EPIPE: 'connection closed by the Tool Service',
  UND_ERR_SOCKET: 'connection closed by the Tool Service',
  ENOTFOUND: 'DNS name not found',
  EAI_AGAIN: 'DNS lookup failed (try again)',
  ETIMEDOUT: 'connect timed out',
  UND_ERR_CONNECT_TIMEOUT: 'connect timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
};
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH|EPROTO$)/;
const MAX_BODY_EXCERPT = 200;

type ErrorWithCode = Error & { code?: unknown; address?: string; port?: number };

/** The error and its causes; by shape, not instanceof: fetch's errors may come from another realm (Node's own undici). */
function causes(error: unknown): ErrorWithCode[] {
  const chain: ErrorWithCode[] = [];
  for (let current = error; typeof current === 'object' && current !== null && 'message' in current && chain.length < 5; current = (current as Error).cause) {
    chain.push(current as ErrorWithCode);
  }
  return chain;
}

/**
 * Why a listing failed, named by its cause (docs/tools-list.md `lastError`): connection refused, a
 * timeout, a TLS error, an HTTP status, a JSON-RPC error. Never just "fetch failed"; a backend's own
 * text is cut to a bounded excerpt on one line.
 */
export function describeListingFailure(error: unknown, timeoutMs: number): string {
  const chain = causes(error);
  if (chain.length === 0) return String(error);
  if (chain[0] instanceof ToolListTooLargeError) return chain[0].message;
  for (const cause of chain) {
    if (typeof cause.code !== 'string') continue;
    const where = cause.address ? ` (${cause.address}${cause.port ? `:${cause.port}` : ''})` : '';
    if (NETWORK_CAUSES[cause.code]) return `${NETWORK_CAUSES[cause.code]}${where}`;
    if (TLS_CODE.test(cause.code)) return `TLS error: ${cause.code}: ${cause.message}`;
  }
  const top = chain[0];
  if (top.name === 'TimeoutError' || (top.name === 'McpError' && top.code === ErrorCode.RequestTimeout)) return `timed out after ${timeoutMs} ms`;
  if (top instanceof StreamableHTTPError && typeof top.code === 'number') {
    const body = top.message.replace(/^Streamable HTTP error: Error POSTing to endpoint: ?/, '').replace(/\s+/g, ' ').trim();
    return `HTTP ${top.code}${body ? `: ${body.slice(0, MAX_BODY_EXCERPT)}` : ''}`;
  }
  if (typeof top.code === 'number') return `JSON-RPC error ${top.code}: ${top.message.replace(/^MCP error -?\d+: /, '').slice(0, MAX_BODY_EXCERPT)}`;
  return top.message.slice(0, MAX_BODY_EXCERPT);
}

/**
 * The whole tools/list of one Tool Service, and the revision it speaks: in a session first; a Tool
 * Service that answers that with an HTTP 4xx (a server of the stateless revision only refuses
 * `initialize`) is asked again in the stateless revision. If that fails too, the first error counts,
 * unless the second went past the listing's bounds. Fails with the cause named (describeListingFailure).
 */
export async function fetchToolList(service: ToolServiceIR, limits: ToolListLimits = TOOL_LIST_DEFAULTS, traceHeaders: Record<string, string> = {}): Promise<ToolList> {
  try {
    try {
      return await fetchInSession(service, limits, traceHeaders);
    } catch (error) {
      const status = error instanceof StreamableHTTPError ? error.code : undefined;
      if (status === undefined || status < 400 || status >= 500) throw error;
      return await fetchStateless(service, limits, traceHeaders).catch((second: unknown) => {
        throw second instanceof ToolListTooLargeError ? second : error;
      });
    }
  } catch (error) {
    throw new Error(describeListingFailure(error, limits.timeoutMs), { cause: error });
  }
}
