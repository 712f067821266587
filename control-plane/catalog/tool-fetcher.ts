import * as fs from 'node:fs/promises';
import { Client as StatelessClient, StreamableHTTPClientTransport as StatelessTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION, Tool } from '@modelcontextprotocol/sdk/types.js';
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

/** The whole tools/list, following nextCursor to the end, with either SDK's client. */
async function listAllTools(listTools: (cursor?: string) => Promise<{ tools: Tool[]; nextCursor?: string }>): Promise<Tool[]> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await listTools(cursor);
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

async function transportOptions(service: ToolServiceIR) {
  return {
    fetch: backendFetch(service.endpoint.tls),
    ...(service.catalogBearerTokenFile && { requestInit: { headers: { authorization: `Bearer ${await readToken(service.catalogBearerTokenFile)}` } } }),
  };
}

/** In a session-based revision (2025-11-25 and before): what almost every Tool Service speaks. */
async function fetchInSession(service: ToolServiceIR, timeoutMs: number): Promise<ToolList> {
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities: CATALOG_CLIENT_CAPABILITIES });
  const transport = new StreamableHTTPClientTransport(new URL(service.url), await transportOptions(service));
  const options = { timeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) };
  try {
    await client.connect(transport, options);
    const tools = await listAllTools((cursor) => client.listTools(cursor ? { cursor } : {}, options));
    const sessionful = transport.sessionId !== undefined;
    // A stateful backend opened a session for this listing only: end it rather than leave it to expire.
    if (sessionful) await transport.terminateSession().catch(() => undefined);
    return { tools, protocolVersion: transport.protocolVersion ?? LATEST_PROTOCOL_VERSION, sessionful };
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** In the stateless revision (2026-07-28), with the MCP SDK v2 client pinned to it. */
async function fetchStateless(service: ToolServiceIR, timeoutMs: number): Promise<ToolList> {
  const client = new StatelessClient(GATEWAY_CLIENT_INFO, { versionNegotiation: { mode: { pin: MODERN_PROTOCOL_VERSION } } });
  const options = { timeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) };
  try {
    await client.connect(new StatelessTransport(new URL(service.url), await transportOptions(service)), options);
    const tools = await listAllTools((cursor) => client.listTools(cursor ? { cursor } : {}, options) as Promise<{ tools: Tool[]; nextCursor?: string }>);
    return { tools, protocolVersion: MODERN_PROTOCOL_VERSION, sessionful: false };
  } finally {
    await client.close().catch(() => undefined);
  }
}

/**
 * The whole tools/list of one Tool Service, and the revision it speaks: in a session first; a Tool
 * Service that answers that with an HTTP 4xx (a server of the stateless revision only refuses
 * `initialize`) is asked again in the stateless revision. If that fails too, the first error counts.
 */
export async function fetchToolList(service: ToolServiceIR, timeoutMs: number): Promise<ToolList> {
  try {
    return await fetchInSession(service, timeoutMs);
  } catch (error) {
    const status = error instanceof StreamableHTTPError ? error.code : undefined;
    if (status === undefined || status < 400 || status >= 500) throw error;
    return await fetchStateless(service, timeoutMs).catch(() => {
      throw error;
    });
  }
}
