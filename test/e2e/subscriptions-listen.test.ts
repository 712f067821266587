import { EventSourceMessage, createParser } from 'eventsource-parser';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, connectClient, listedTools, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { ModernToolService } from '../support/modern-tool-service';
import { SubscribableToolService } from '../support/subscribable-tool-service';

/**
 * Change notifications for clients of both eras (docs/adr/0015-federated-resources-and-prompts.md):
 * a 2026-07-28 client's subscriptions/listen, answered by the gateway from its catalog and from the
 * backends its resource subscriptions name (one of each revision), and a 2025-11-25 client's
 * resources/subscribe; real Envoy, sidecar, control plane, Redis and MCP SDK v1 and v2 backends.
 */

interface Listening {
  events: EventSourceMessage[];
  messages: { method?: string; id?: unknown; params?: Record<string, any>; result?: unknown }[];
  stop(): void;
}

/** A raw subscriptions/listen of the stateless revision, its SSE read as the spec says. */
async function listen(url: string, id: number | string, notifications: Record<string, unknown>): Promise<Listening> {
  const abort = new AbortController();
  const response = await fetch(url, {
    method: 'POST',
    headers: { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'subscriptions/listen' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'subscriptions/listen',
      params: { notifications, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
    }),
    signal: abort.signal,
  });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toContain('text/event-stream');
  const listening: Listening = { events: [], messages: [], stop: () => abort.abort() };
  const parser = createParser({
    onEvent: (event) => {
      listening.events.push(event);
      listening.messages.push(JSON.parse(event.data));
    },
  });
  void (async () => {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of response.body!) parser.feed(decoder.decode(chunk, { stream: true }));
    } catch {
      // stopped
    }
  })();
  return listening;
}

const withMethod = (listening: Listening, method: string) => listening.messages.filter((message) => message.method === method);

describe('subscriptions/listen and resources/subscribe through the gateway', () => {
  let stack: GatewayStack;
  let notes: SubscribableToolService;
  let modern: ModernToolService;
  let jobsUrl: string;

  beforeAll(async () => {
    notes = await SubscribableToolService.start(['a', 'b']);
    modern = await ModernToolService.start();
    let backends;
    ({ stack, backends } = await startGateway(
      'subscriptions-listen',
      () => ({ routes: [{ key: 'notes', toolServices: [{ name: 'notes', url: notes.url }, { name: 'modern_memo', url: modern.url }] }] }),
      { catalogRefreshMs: 600_000 },
    ));
    jobsUrl = backends.jobs;
    await waitFor('both backends in the catalog', async () => (((await listedTools(stack.gatewayUrl('notes'))) ?? []).includes('modern_memo__shout') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await notes?.stop();
    await modern?.stop();
  });

  it('acknowledges what the route can deliver, and relays resource updates of backends of both revisions under the exposed URIs', async () => {
    const listening = await listen(stack.gatewayUrl('notes'), 41, {
      toolsListChanged: true,
      promptsListChanged: true,
      resourceSubscriptions: ['notes+note://a', 'modern-memo+memo://today', 'nobody+note://a'],
    });
    try {
      await waitFor('the acknowledgement', async () => (listening.messages.length > 0 ? true : undefined));
      // No backend of this route serves prompts; no backend is called "nobody".
      expect(listening.messages[0]).toEqual({
        jsonrpc: '2.0',
        method: 'notifications/subscriptions/acknowledged',
        params: {
          notifications: { toolsListChanged: true, resourceSubscriptions: ['notes+note://a', 'modern-memo+memo://today'] },
          _meta: { 'io.modelcontextprotocol/subscriptionId': 41 },
        },
      });
      await waitFor('the session-era backend’s update', async () => {
        await notes.touch('note://a');
        return withMethod(listening, 'notifications/resources/updated').some((message) => message.params?.uri === 'notes+note://a') ? true : undefined;
      }, { timeoutMs: 10_000, intervalMs: 300 });
      await waitFor('the stateless backend’s update', async () => {
        modern.touch('memo://today');
        return withMethod(listening, 'notifications/resources/updated').some((message) => message.params?.uri === 'modern-memo+memo://today') ? true : undefined;
      }, { timeoutMs: 10_000, intervalMs: 300 });
      for (const update of withMethod(listening, 'notifications/resources/updated')) expect(update.params?._meta).toEqual({ 'io.modelcontextprotocol/subscriptionId': 41 });
      // A 2026-07-28 client is never handed an event id.
      expect(listening.events.every((event) => event.id === undefined)).toBe(true);
      // The listen subscribed in a backend session of its own.
      expect([...notes.subscriptions.values()].filter((uris) => uris.has('note://a'))).toHaveLength(1);
    } finally {
      listening.stop();
    }
    await waitFor('the listen’s backend session ended with it', async () => ([...notes.subscriptions.values()].some((uris) => uris.has('note://a')) ? undefined : true));
  });

  it('answers a filter it cannot deliver with the acknowledgement and a graceful end', async () => {
    const listening = await listen(stack.gatewayUrl('notes'), 'quiet', { promptsListChanged: true });
    await waitFor('the end of the listen', async () => (listening.messages.length === 2 ? true : undefined));
    expect(listening.messages[0]).toMatchObject({ method: 'notifications/subscriptions/acknowledged', params: { notifications: {} } });
    expect(listening.messages[1]).toMatchObject({ id: 'quiet', result: { resultType: 'complete', _meta: { 'io.modelcontextprotocol/subscriptionId': 'quiet' } } });
    listening.stop();
  });

  it('subscribes a session client at a session-era backend and relays the update on its GET stream; a stateless backend’s subscriptions are refused with the reason', async () => {
    const client = await connectClient(stack.gatewayUrl('notes'));
    const updated: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (notification) => {
      updated.push(notification.params.uri);
    });
    try {
      await client.subscribeResource({ uri: 'notes+note://b' });
      await waitFor('the update on the client’s GET stream', async () => {
        await notes.touch('note://b');
        return updated.includes('notes+note://b') ? true : undefined;
      }, { timeoutMs: 10_000, intervalMs: 300 });
      await expect(client.subscribeResource({ uri: 'modern-memo+memo://today' })).rejects.toThrow(/speaks MCP 2026-07-28.*subscriptions\/listen/);
    } finally {
      await client.close();
    }
  });

  it('answers a stateless client’s resources/subscribe, which its revision does not have, 404 -32601', async () => {
    const response = await postJsonRpc(
      stack.gatewayUrl('notes'),
      {
        jsonrpc: '2.0',
        id: 5,
        method: 'resources/subscribe',
        params: { uri: 'notes+note://a', _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
      },
      { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'resources/subscribe' },
    );
    expect(response.status).toBe(404);
    expect(response.json().error).toMatchObject({ code: -32601, message: expect.stringContaining('use subscriptions/listen') });
  });

  it('tells a listener that the route’s tools and resources changed', async () => {
    const listening = await listen(stack.gatewayUrl('notes'), 42, { toolsListChanged: true, resourcesListChanged: true });
    try {
      await waitFor('the acknowledgement', async () => (listening.messages.length > 0 ? true : undefined));
      await stack.setPortalRegistry({ routes: [{ key: 'notes', toolServices: [{ name: 'notes', url: notes.url }, { name: 'jobs', url: jobsUrl }] }] });
      await waitFor('both list changes', async () =>
        withMethod(listening, 'notifications/tools/list_changed').length > 0 && withMethod(listening, 'notifications/resources/list_changed').length > 0 ? true : undefined,
      { timeoutMs: 15_000 });
      expect(withMethod(listening, 'notifications/tools/list_changed')[0].params?._meta).toEqual({ 'io.modelcontextprotocol/subscriptionId': 42 });
    } finally {
      listening.stop();
    }
  });
});
