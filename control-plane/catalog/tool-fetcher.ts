import * as fs from 'node:fs/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { ToolServiceIR } from '../ir/gateway-ir';
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

/** The whole tools/list of one Tool Service, following nextCursor to the end. */
export async function fetchToolList(service: ToolServiceIR, timeoutMs: number): Promise<Tool[]> {
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities: CATALOG_CLIENT_CAPABILITIES });
  const transport = new StreamableHTTPClientTransport(new URL(service.url), {
    fetch: backendFetch(service.endpoint.tls),
    ...(service.catalogBearerTokenFile && { requestInit: { headers: { authorization: `Bearer ${await readToken(service.catalogBearerTokenFile)}` } } }),
  });
  const options = { timeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs) };
  try {
    await client.connect(transport, options);
    const tools: Tool[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : {}, options);
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    // A stateful backend opened a session for this listing only: end it rather than leave it to expire.
    await transport.terminateSession().catch(() => undefined);
    return tools;
  } finally {
    await client.close().catch(() => undefined);
  }
}
