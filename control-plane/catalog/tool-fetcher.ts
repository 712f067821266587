import { Client as StatelessClient, StreamableHTTPClientTransport as StatelessTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, LATEST_PROTOCOL_VERSION, Prompt, Resource, ResourceTemplate, ServerCapabilities, Tool } from '@modelcontextprotocol/sdk/types.js';
import { ToolServiceIR } from '../ir/gateway-ir';
import { MODERN_PROTOCOL_VERSION } from '../sidecar/modern-era';
import { ToolList } from './catalog-store';
import { CatalogAccess, CatalogConnection } from './catalog-access';
import { ALL_OF, CLIENT_NEEDS, capabilitiesFor } from './client-needs';

export const GATEWAY_CLIENT_INFO = { name: 'mcp-federation-gateway', version: '0.1.0' };

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

  /** Items of one list (tools, prompts, resources or templates), over all its pages. */
  countItems(method: ListMethod, items: number): void {
    if (items > this.limits.maxTools) this.fail(`${method} exceeded ${this.limits.maxTools} ${LIST_KEYS[method]}`);
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

/** The list methods the catalog reads, and the member of each answer that holds the items. */
const LIST_KEYS = { 'tools/list': 'tools', 'prompts/list': 'prompts', 'resources/list': 'resources', 'resources/templates/list': 'resourceTemplates' } as const;
type ListMethod = keyof typeof LIST_KEYS;
type Page = { nextCursor?: string } & Record<string, unknown>;

/**
 * One listing session with a Tool Service, in either revision: what the server declared, and one page
 * of a list at a time.
 */
interface ListingSession {
  capabilities: ServerCapabilities;
  protocolVersion: string;
  sessionful: boolean;
  page(method: ListMethod, cursor: string | undefined): Promise<Page>;
}

/** A whole list, following nextCursor to the end, within the listing's bounds. */
async function listAll<T>(session: ListingSession, method: ListMethod, budget: ListingBudget): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  do {
    const page = await session.page(method, cursor);
    items.push(...((page[LIST_KEYS[method]] as T[] | undefined) ?? []));
    budget.countItems(method, items.length);
    cursor = page.nextCursor;
  } while (cursor);
  return items;
}

/** What one listing session read: every list the server's capabilities say it serves. */
interface Listed {
  tools: Tool[];
  prompts: Prompt[];
  resources: Resource[];
  resourceTemplates: ResourceTemplate[];
  capabilities: ServerCapabilities;
  protocolVersion: string;
  sessionful: boolean;
}

async function listEverything(session: ListingSession, budget: ListingBudget, scope: 'all' | 'callables'): Promise<Listed> {
  const { capabilities } = session;
  // Prompts and resources are listed only where the server declares them (a server without them may answer -32601).
  const prompts = capabilities.prompts ? await listAll<Prompt>(session, 'prompts/list', budget) : [];
  const withResources = scope === 'all' && capabilities.resources !== undefined;
  // A server that declares prompts or resources but no tools has none to list (it may answer tools/list -32601).
  const withTools = capabilities.tools !== undefined || (capabilities.prompts === undefined && capabilities.resources === undefined);
  return {
    tools: withTools ? await listAll<Tool>(session, 'tools/list', budget) : [],
    prompts,
    resources: withResources ? await listAll<Resource>(session, 'resources/list', budget) : [],
    resourceTemplates: withResources ? await listAll<ResourceTemplate>(session, 'resources/templates/list', budget) : [],
    capabilities,
    protocolVersion: session.protocolVersion,
    sessionful: session.sessionful,
  };
}

/** `traceHeaders`: the trace context of the listing's span, so that the Tool Service's spans hang under it. */
function transportOptions(connection: CatalogConnection, budget: ListingBudget, traceHeaders: Record<string, string>) {
  return {
    fetch: budget.meter(connection.fetch),
    requestInit: { headers: { ...traceHeaders, ...(connection.authorization !== undefined && { authorization: connection.authorization }) } },
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

type Era = 'session' | 'stateless';

/** The list methods both SDKs' clients have, by the same names. */
type ListingClient<Options> = Record<'listTools' | 'listPrompts' | 'listResources' | 'listResourceTemplates', (params: { cursor?: string }, options: Options) => Promise<unknown>>;
const LIST_CALLS = {
  'tools/list': 'listTools',
  'prompts/list': 'listPrompts',
  'resources/list': 'listResources',
  'resources/templates/list': 'listResourceTemplates',
} as const;

/** One page of a list, by either SDK's client. */
function pageOf<Options>(client: ListingClient<Options>, method: keyof typeof LIST_CALLS, cursor: string | undefined, options: Options): Promise<Page> {
  return client[LIST_CALLS[method]](cursor ? { cursor } : {}, options) as Promise<Page>;
}

/**
 * One listing in a session-based revision (2025-11-25 and before: what almost every Tool Service
 * speaks) or in the stateless revision (2026-07-28, the MCP SDK v2 client pinned to it), as a client
 * declaring `capabilities`.
 */
async function listAs(
  era: Era,
  service: ToolServiceIR,
  limits: ToolListLimits,
  capabilities: Record<string, unknown>,
  scope: 'all' | 'callables',
  connection: CatalogConnection,
  traceHeaders: Record<string, string>,
): Promise<Listed> {
  const budget = new ListingBudget(limits);
  const options = requestOptions(limits, budget);
  const transport = transportOptions(connection, budget, traceHeaders);
  if (era === 'session') {
    const client = new Client(GATEWAY_CLIENT_INFO, { capabilities });
    const sessionTransport = new StreamableHTTPClientTransport(new URL(service.url), transport);
    try {
      return await bounded(
        budget,
        (async () => {
          await client.connect(sessionTransport, options);
          const sessionful = sessionTransport.sessionId !== undefined;
          const listed = await listEverything(
            {
              capabilities: client.getServerCapabilities() ?? {},
              protocolVersion: sessionTransport.protocolVersion ?? LATEST_PROTOCOL_VERSION,
              sessionful,
              page: (method, cursor) => pageOf(client, method, cursor, options),
            },
            budget,
            scope,
          );
          // A stateful backend opened a session for this listing only: end it rather than leave it to expire.
          if (sessionful) await sessionTransport.terminateSession().catch(() => undefined);
          return listed;
        })(),
      );
    } finally {
      await client.close().catch(() => undefined);
    }
  }
  const client = new StatelessClient(GATEWAY_CLIENT_INFO, { capabilities, versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } });
  try {
    return await bounded(
      budget,
      (async () => {
        await client.connect(new StatelessTransport(new URL(service.url), transport), options);
        return listEverything(
          {
            capabilities: (client.getServerCapabilities() ?? {}) as ServerCapabilities,
            protocolVersion: MODERN_PROTOCOL_VERSION,
            sessionful: false,
            page: (method, cursor) => pageOf(client, method, cursor, options),
          },
          budget,
          scope,
        );
      })(),
    );
  } finally {
    await client.close().catch(() => undefined);
  }
}

const offeredNames = (listed: Listed) => [...listed.tools.map((tool) => `tool:${tool.name}`), ...listed.prompts.map((prompt) => `prompt:${prompt.name}`)];

/**
 * Which client capabilities each tool and prompt needs (docs/catalog.md): some servers offer a tool
 * only to clients that declare sampling, elicitation (form or URL) or roots. The catalog is listed as a
 * client that declares every one of them; when a client declaring none is offered less, each
 * capability is tried on its own: a tool offered with any one of them needs that one (any of them,
 * when several each bring it), and one offered only with all together needs all.
 */
async function probeNeeds(era: Era, service: ToolServiceIR, limits: ToolListLimits, full: Listed, connection: CatalogConnection, traceHeaders: Record<string, string>): Promise<Record<string, string[]>> {
  const bare = new Set(offeredNames(await listAs(era, service, limits, {}, 'callables', connection, traceHeaders)));
  const conditional = offeredNames(full).filter((key) => !bare.has(key));
  if (conditional.length === 0) return {};
  // One listing per capability, side by side: each is a session of its own.
  const offeredWith = await Promise.all(CLIENT_NEEDS.map(async (need) => new Set(offeredNames(await listAs(era, service, limits, capabilitiesFor([need]), 'callables', connection, traceHeaders)))));
  return Object.fromEntries(
    conditional.map((key) => {
      const broughtBy = CLIENT_NEEDS.filter((_need, index) => offeredWith[index].has(key));
      return [key, broughtBy.length > 0 ? broughtBy : [CLIENT_NEEDS.join(ALL_OF)]];
    }),
  );
}

/** A listing as a client that declares every capability, with what each tool and prompt needs of its clients. */
async function fetchAs(era: Era, service: ToolServiceIR, limits: ToolListLimits, connection: CatalogConnection, traceHeaders: Record<string, string>): Promise<ToolList> {
  const full = await listAs(era, service, limits, capabilitiesFor(CLIENT_NEEDS), 'all', connection, traceHeaders);
  const needs = await probeNeeds(era, service, limits, full, connection, traceHeaders);
  const needsOf = (kind: 'tool' | 'prompt') =>
    Object.fromEntries(Object.entries(needs).flatMap(([key, value]) => (key.startsWith(`${kind}:`) ? [[key.slice(kind.length + 1), value]] : [])));
  return { ...full, toolNeeds: needsOf('tool'), promptNeeds: needsOf('prompt') };
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
 * Whether a Tool Service listed in a session-based revision also answers the stateless one (the MCP
 * SDK v2 server does by default): one server/discover, in the stateless revision. Any failure: no.
 */
async function answersModern(service: ToolServiceIR, limits: ToolListLimits, connection: CatalogConnection, traceHeaders: Record<string, string>): Promise<boolean> {
  const budget = new ListingBudget(limits);
  const client = new StatelessClient(GATEWAY_CLIENT_INFO, { versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } });
  try {
    await client.connect(new StatelessTransport(new URL(service.url), transportOptions(connection, budget, traceHeaders)), requestOptions(limits, budget));
    return client.getNegotiatedProtocolVersion() === MODERN_PROTOCOL_VERSION;
  } catch {
    return false;
  } finally {
    await client.close().catch(() => undefined);
  }
}

/**
 * The whole tools/list of one Tool Service, and the revision it speaks: in a session first; a Tool
 * Service that answers that with an HTTP 4xx (a server of the stateless revision only refuses
 * `initialize`) is asked again in the stateless revision. If that fails too, the first error counts,
 * unless the second went past the listing's bounds. Fails with the cause named (describeListingFailure).
 */
export async function fetchToolList(
  service: ToolServiceIR,
  access: CatalogAccess,
  limits: ToolListLimits = TOOL_LIST_DEFAULTS,
  traceHeaders: Record<string, string> = {},
): Promise<ToolList> {
  let connection: CatalogConnection | undefined;
  try {
    const opened = (connection = await access.connect(service));
    try {
      const listed = await fetchAs('session', service, limits, opened, traceHeaders);
      return { ...listed, alsoModern: await answersModern(service, limits, opened, traceHeaders) };
    } catch (error) {
      const status = error instanceof StreamableHTTPError ? error.code : undefined;
      if (status === undefined || status < 400 || status >= 500) throw error;
      return await fetchAs('stateless', service, limits, opened, traceHeaders).catch((second: unknown) => {
        throw second instanceof ToolListTooLargeError ? second : error;
      });
    }
  } catch (error) {
    throw new Error(describeListingFailure(error, limits.timeoutMs), { cause: error });
  } finally {
    await connection?.close();
  }
}
