import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { SpiedRequest, SpyToolService } from './spy-tool-service';

/**
 * One client session through the gateway, authenticated with `callerToken`, that makes the spy see
 * every request kind the gateway sends a backend: session open (initialize, initialized), a call, a
 * relayed notification, a renewal (the backend forgot the session; the next call opens a new one) and
 * the DELETE that ends the session.
 */
export async function everyRequestKind(url: string, spy: SpyToolService, backend: string, callerToken: string, fetch?: typeof globalThis.fetch): Promise<void> {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${callerToken}` } }, ...(fetch && { fetch }) });
  const client = new Client({ name: 'credentials-test', version: '1.0.0' }, { capabilities: { roots: { listChanged: true } } });
  await client.connect(transport);
  try {
    expect((await client.callTool({ name: `${backend}__echo`, arguments: { text: 'one' } })).content).toEqual([{ type: 'text', text: 'one' }]);
    const notified = spy.of({ rpcMethod: 'notifications/roots/list_changed' }).length;
    await client.sendRootsListChanged();
    await waitFor('the relayed notification at the backend', async () => (spy.of({ rpcMethod: 'notifications/roots/list_changed' }).length > notified ? true : undefined));
    spy.forgetSessions();
    await expect(client.callTool({ name: `${backend}__echo`, arguments: { text: 'lost' } })).rejects.toThrow(/call again/);
    expect((await client.callTool({ name: `${backend}__echo`, arguments: { text: 'renewed' } })).content).toEqual([{ type: 'text', text: 'renewed' }]);
    const deletes = spy.of({ httpMethod: 'DELETE' }).length;
    await transport.terminateSession();
    await waitFor('the DELETE at the backend', async () => (spy.of({ httpMethod: 'DELETE' }).length > deletes ? true : undefined));
  } finally {
    await client.close();
  }
}

/** The request kinds everyRequestKind makes the spy see on the client's behalf, each at least once. */
export function expectEveryKind(requests: SpiedRequest[]): void {
  const kinds = new Set(requests.map((request) => (request.httpMethod === 'POST' ? request.rpcMethod : request.httpMethod)));
  for (const kind of ['initialize', 'notifications/initialized', 'tools/call', 'notifications/roots/list_changed', 'DELETE']) expect(kinds).toContain(kind);
  // The renewal: a second initialize after the backend forgot its sessions.
  expect(requests.filter((request) => request.rpcMethod === 'initialize').length).toBeGreaterThanOrEqual(2);
}
