import { Agent, fetch as undiciFetch } from 'undici';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * Callers of a route without auth, told apart by their address (docs/quotas.md): any of 127.0.0.0/8
 * on Linux, one per caller.
 */

type FetchLike = NonNullable<ConstructorParameters<typeof StreamableHTTPClientTransport>[1]>['fetch'];

/** A fetch whose connections leave from `address` (any of 127.0.0.0/8 on Linux). */
export function fetchFrom(address: string): { fetch: FetchLike; close: () => Promise<void>; cut: () => Promise<void> } {
  const dispatcher = new Agent({ localAddress: address });
  return {
    fetch: ((url: string | URL, init?: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher })) as unknown as FetchLike,
    close: () => dispatcher.close(),
    /** Every connection cut at once, requests in flight included: a client gone mid-call. */
    cut: () => dispatcher.destroy(),
  };
}

/** An MCP SDK client of the route, connecting from `address`. */
export async function clientFrom(url: string, address: string): Promise<{ client: Client; close: () => Promise<void>; cut: () => Promise<void> }> {
  const { fetch, close, cut } = fetchFrom(address);
  const client = new Client({ name: `quota-test-${address}`, version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch }));
  return {
    client,
    close: async () => {
      await client.close();
      await close();
    },
    cut,
  };
}

/** What the SDK client throws for an HTTP error answer: its status and the body it read. */
export async function refusal(call: Promise<unknown>): Promise<{ status: number; error: { code: number; message: string; data: Record<string, unknown> } }> {
  const error = (await call.then(
    () => {
      throw new Error('the call was not refused');
    },
    (thrown: Error) => thrown,
  )) as Error & { code?: number };
  const body = /(\{.*\})\s*$/s.exec(error.message);
  if (!body) throw error;
  return { status: error.code ?? 0, error: JSON.parse(body[1]).error };
}
