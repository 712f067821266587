import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { schemeNameOf } from '../../control-plane/catalog/resource-naming';
import { waitFor } from '../../control-plane/devstack/processes';
import { MCP_POST_HEADERS } from './gateway-fixture';
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

/**
 * The requests the gateway forwards to one backend by the prompt name or resource URI they carry
 * (docs/adr/0015-federated-resources-and-prompts.md), and the sidecar's logging/setLevel: from a session
 * client (SDK v1) — every one of them, the first opening the backend session — and from a stateless
 * (2026-07-28, SDK v2) client, whose requests go in the pooled backend session; then a stateless
 * client's subscriptions/listen, which the sidecar follows in a backend session of the listen's own
 * (open, resources/subscribe, its GET stream, DELETE when the listen ends). The spy must run with `surface`.
 */
export async function everySurfaceKind(url: string, spy: SpyToolService, backend: string, callerToken: string): Promise<void> {
  const prompt = `${backend}__${SpyToolService.SURFACE.prompt}`;
  const uri = `${schemeNameOf(backend)}+${SpyToolService.SURFACE.resource}`;
  const headers = { authorization: `Bearer ${callerToken}` };
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: 'credentials-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    expect((await client.getPrompt({ name: prompt, arguments: { name: 'alice' } })).messages[0].content).toEqual({ type: 'text', text: 'hello alice' });
    expect((await client.complete({ ref: { type: 'ref/prompt', name: prompt }, argument: { name: 'name', value: 'b' } })).completion.values).toEqual(['bob']);
    expect((await client.readResource({ uri })).contents[0]).toMatchObject({ uri, text: 'a note' });
    await client.subscribeResource({ uri });
    await client.unsubscribeResource({ uri });
    await client.setLoggingLevel('warning');
    await transport.terminateSession();
  } finally {
    await client.close();
  }
  const stateless = new V2Client({ name: 'credentials-test-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await stateless.connect(new V2Transport(new URL(url), { requestInit: { headers } }));
  try {
    expect((await stateless.getPrompt({ name: prompt, arguments: { name: 'bob' } })).messages[0].content).toEqual({ type: 'text', text: 'hello bob' });
    expect((await stateless.complete({ ref: { type: 'ref/prompt', name: prompt }, argument: { name: 'name', value: 'a' } })).completion.values).toEqual(['alice']);
    expect((await stateless.readResource({ uri })).contents[0]).toMatchObject({ uri, text: 'a note' });
  } finally {
    await stateless.close();
  }
  const [streams, deletes] = [spy.of({ httpMethod: 'GET' }).length, spy.of({ httpMethod: 'DELETE' }).length];
  const listen = new AbortController();
  const listening = await fetch(url, {
    method: 'POST',
    headers: { ...MCP_POST_HEADERS, ...headers, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'subscriptions/listen' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'subscriptions/listen',
      params: { notifications: { resourceSubscriptions: [uri] }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
    }),
    signal: listen.signal,
  });
  try {
    expect(listening.status).toBe(200);
    await waitFor('the listen following the resource at the backend', async () => (spy.of({ httpMethod: 'GET' }).length > streams ? true : undefined));
  } finally {
    listen.abort();
  }
  await waitFor('the listen’s backend session ended with it', async () => (spy.of({ httpMethod: 'DELETE' }).length > deletes ? true : undefined));
}

/** The request kinds everySurfaceKind makes the spy see on the client's behalf. */
export const SURFACE_KINDS = ['prompts/get', 'completion/complete', 'resources/read', 'resources/subscribe', 'resources/unsubscribe', 'logging/setLevel'];

export function expectEverySurfaceKind(requests: SpiedRequest[]): void {
  const kinds = new Set(requests.map((request) => request.rpcMethod));
  for (const kind of SURFACE_KINDS) expect(kinds).toContain(kind);
  // Both clients' prompts/get: the session client's and the stateless one's (in a pooled backend session).
  expect(requests.filter((request) => request.rpcMethod === 'prompts/get').length).toBeGreaterThanOrEqual(2);
  // The session client's subscribe and the listen's, whose backend stream is a GET.
  expect(requests.filter((request) => request.rpcMethod === 'resources/subscribe').length).toBeGreaterThanOrEqual(2);
  expect(requests.filter((request) => request.httpMethod === 'GET').length).toBeGreaterThan(0);
}
