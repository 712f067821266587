import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { createParser } from 'eventsource-parser';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { POOLED_LANE_HEADER, SIDECAR_STREAMS_CLUSTER_NAME } from '../../control-plane/xds/translate/settings';
import { startEverythingServer } from '../support/everything-server';
import { MCP_POST_HEADERS, listedTools, metricValue, postJsonRpc, startGateway, testDir } from '../support/gateway-fixture';
import { ModernToolService } from '../support/modern-tool-service';
import { ServerRequestsService } from '../support/server-requests-service';

/**
 * Streams through the gateway (issue 13, findings 1, 2, 4 and 5; ADR-0018): real Envoy 1.40, two
 * sidecar replicas, control plane and Redis; an SDK v1 backend that asks its clients things outside
 * calls and keeps its streams' events, server-everything, and an SDK v2 backend of both revisions;
 * SDK v1 and v2 clients.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const ROOTS_ANSWER = { roots: [{ uri: 'file:///work', name: 'work' }] };
const SAMPLED = { role: 'assistant' as const, content: { type: 'text' as const, text: 'sampled by the client' }, model: 'test-model' };

/** An SDK v1 session client that answers sampling, elicitation and roots/list. */
async function answeringClient(url: string): Promise<Client> {
  const client = new Client({ name: 'stream-test', version: '1.0.0' }, { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } });
  client.setRequestHandler(CreateMessageRequestSchema, async () => SAMPLED);
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept' as const, content: { name: 'Ada' } }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ROOTS_ANSWER);
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/**
 * How long after a session's notifications/initialized the eager backend asks its client for roots:
 * well before the follower's 1 s look (seen failing at 100 ms before the fix), well after the gateway's
 * GET now comes (40–84 ms at load average 12–16; 2–18 ms directly).
 */
const EAGER_ASK_MS = 250;

/** One of Envoy's counters of its egress listener, where the sidecars reach backends. */
async function egressStat(stack: GatewayStack, name: 'downstream_rq_active' | 'downstream_rq_total'): Promise<number> {
  const text = await (await fetch(`${stack.envoyAdminUrl}/stats?filter=^http\\.mcp_egress\\.${name}$`)).text();
  return Number(/: (\d+)/.exec(text)?.[1] ?? NaN);
}

/** Requests Envoy sent to the sidecars' stream cluster (held streams, resumes, the pooled-call lane). */
async function sidecarStreamRequests(stack: GatewayStack): Promise<number> {
  const name = `cluster.${SIDECAR_STREAMS_CLUSTER_NAME}.upstream_rq_total`;
  const text = await (await fetch(`${stack.envoyAdminUrl}/stats?filter=^${name.replace(/\./g, '\\.')}$`)).text();
  const count = /: (\d+)/.exec(text)?.[1];
  if (count === undefined) throw new Error(`Envoy has no ${name}: ${text}`);
  return Number(count);
}

/** A 2026-07-28 tools/call of asker__steps, as a raw body. */
const modernStepsCall = (id: number, args: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'asker__steps', arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 'p' } },
});

const textOf = (result: unknown) => (((result as { content?: { text: string }[] }).content) ?? [])[0]?.text;

describe('streams through the gateway: backend requests outside calls, resumable calls, both revisions', () => {
  let stack: GatewayStack;
  let asker: ServerRequestsService;
  let eager: ServerRequestsService;
  let everything: ManagedProcess;
  let dual: ModernToolService;
  let dir: string;

  beforeAll(async () => {
    asker = await ServerRequestsService.start();
    eager = await ServerRequestsService.start({ rootsAfterInitializedMs: EAGER_ASK_MS });
    dual = await ModernToolService.start('stateless');
    const everythingPort = await freePort();
    everything = await startEverythingServer(everythingPort, path.join(testDir('stream-relaying-everything'), 'everything.log'));
    ({ stack, dir } = await startGateway(
      'stream-relaying',
      () => ({
        routes: [
          {
            key: 'asks',
            toolServices: [
              // Opted in to the pooled-call lane; the same backend as "plain" on route "direct" is not.
              { name: 'asker', url: asker.url, transport: { resumeCutPooledCalls: true } },
              { name: 'every', url: `http://127.0.0.1:${everythingPort}/mcp` },
            ],
          },
          { key: 'dual', toolServices: [{ name: 'both', url: dual.url }] },
          { key: 'eager', toolServices: [{ name: 'eager', url: eager.url }] },
          { key: 'direct', toolServices: [{ name: 'plain', url: asker.url }] },
        ],
      }),
      { sidecars: 2, catalogRefreshMs: 600_000 },
    ));
    await waitFor('both backends of "asks" in the catalog', async () => {
      const tools = (await listedTools(stack.gatewayUrl('asks'))) ?? [];
      return tools.includes('asker__steps') && tools.some((name) => name.startsWith('every__')) ? true : undefined;
    });
    await waitFor('the eager backend in the catalog', async () => (((await listedTools(stack.gatewayUrl('eager'))) ?? []).includes('eager__steps') ? true : undefined));
    await waitFor('the backend without the pooled-call lane in the catalog', async () => (((await listedTools(stack.gatewayUrl('direct'))) ?? []).includes('plain__steps') ? true : undefined));
        await waitFor('the dual-era backend in the catalog', async () => (((await listedTools(stack.gatewayUrl('dual'))) ?? []).includes('both__shout') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await asker?.stop();
    await eager?.stop();
    await everything?.stop();
    await dual?.stop();
  });

  it('finding 1: sampling, elicitation and roots/list a backend sends on its standalone stream reach the client, and the answers reach the backend through either sidecar', async () => {
    const client = await answeringClient(stack.gatewayUrl('asks'));
    const relayedBy = () =>
      Promise.all(stack.sidecarPorts.map(({ admin }) => metricValue(stack, 'mcpgw_sidecar_decisions_total', { route: 'asks', decision: 'relay' }, `http://127.0.0.1:${admin}`)));
    const relayedBefore = await relayedBy();
    try {
      // The client holds its GET stream (the SDK opens it after initialize); the sidecar holding it
      // listens on the backend's once a request opened the client's session with it (within about a
      // second, on any replica: the first round asks later than that). Each round's answer is a POST
      // that either replica may take.
      const kinds = ['sampling', 'elicitation', 'roots', 'sampling', 'elicitation', 'roots'] as const;
      for (const [round, kind] of kinds.entries()) {
        const before = asker.answers.length;
        expect(textOf(await client.callTool({ name: 'asker__ask_later', arguments: { kind, delay_ms: round === 0 ? 2500 : 50 } }))).toBe(`will ask for ${kind}`);
        await waitFor(`the client's answer to ${kind} at the backend`, async () => (asker.answers.length > before ? true : undefined), { timeoutMs: 10_000 });
        expect(asker.answers[before]).toEqual({
          kind,
          answer:
            kind === 'sampling' ? SAMPLED : kind === 'elicitation' ? { action: 'accept', content: { name: 'Ada' } } : ROOTS_ANSWER,
        });
      }
      // Each replica relayed some of the answers: the one holding the stream, and the other.
      const relayed = (await relayedBy()).map((count, replica) => count - relayedBefore[replica]);
      expect(relayed.every((count) => count > 0)).toBe(true);
    } finally {
      await client.close();
    }
  }, 90_000);

  it('finding 1: server-everything asks for the roots again when the client says they changed, and logs what it got', async () => {
    const client = await answeringClient(stack.gatewayUrl('asks'));
    const logs: string[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => void logs.push(`${notification.params.logger}: ${String(notification.params.data)}`));
    try {
      // A call opens the client's session with server-everything; its GET stream is listened to.
      await client.callTool({ name: 'every__echo', arguments: { message: 'hi' } });
      await sleep(1500);
      await client.sendRootsListChanged();
      await waitFor('server-everything to log the roots it got', async () => (logs.some((line) => /every\/everything-server: Roots updated: 1 root/.test(line)) ? true : undefined), { timeoutMs: 15_000 });
    } finally {
      await client.close();
    }
  }, 60_000);

  it('finding 2: a backend that closes the call’s stream mid-call (SEP-1699) completes it through the gateway, the client resuming by Last-Event-ID', async () => {
    const client = await answeringClient(stack.gatewayUrl('asks'));
    const resumedBefore = asker.resumedFrom.length;
    try {
      const progress: number[] = [];
      // The reconnect (retry: 200 ms) falls between two steps: the SDK v1 server loses an event stored
      // while it replays and re-registers a stream (seen directly too, 1 call in 10, with 100 ms steps).
      const result = await client.callTool({ name: 'asker__steps', arguments: { steps: 4, interval_ms: 300, close_after: 1 } }, undefined, {
        onprogress: ({ progress: step }) => progress.push(step),
        timeout: 20_000,
      });
      expect(textOf(result)).toBe('done after 4 steps');
      expect(progress).toEqual([1, 2, 3, 4]);
      // The result came on the resumed stream, and carries the call's outcome as a direct one does.
      const outcome = result._meta?.['mcpgw/outcome'] as { elapsed_ms: number } | undefined;
      expect(outcome).toMatchObject({ outcome: 'ok', backend: 'asker', tool: 'steps', attempts: 1, fallback_used: false });
      // Counted from the call's start, not from the resume: four steps of 300 ms.
      expect(outcome!.elapsed_ms).toBeGreaterThanOrEqual(1200);
    } finally {
      await client.close();
    }
    // The backend was asked with its own event id, not the one the client was given.
    const resumed = asker.resumedFrom.slice(resumedBefore);
    expect(resumed.length).toBeGreaterThan(0);
    for (const id of resumed) expect(id).not.toMatch(/^mcpgw/);
  }, 60_000);

  it('finding 2: a call resumed after the client drops its connection, on the other sidecar replica too', async () => {
    const url = stack.gatewayUrl('asks');
    const first = await answeringClient(url);
    const sessionId = (first.transport as StreamableHTTPClientTransport).sessionId!;
    let token: string | undefined;
    const call = first.request({ method: 'tools/call', params: { name: 'asker__steps', arguments: { steps: 30, interval_ms: 100 } } }, CallToolResultSchema, {
      onresumptiontoken: (received) => void (token = received),
      // A progress notification per step: events to resume after.
      onprogress: () => undefined,
      timeout: 30_000,
    });
    call.catch(() => undefined);
    // The gateway's priming id names the call; each of the backend's own ids follows it, after a '.'.
    const backendEventId = /^mcpgw-call\.[^.]+\..+/;
    await waitFor('one of the backend’s event ids on the call’s stream', async () => (token && backendEventId.test(token) ? true : undefined), { timeoutMs: 5000 });
    // The client goes away mid-call, as a dropped connection would.
    await first.close();

    // Resumes each replica logged so far, and which replicas resumed since `before`.
    const resumesLogged = () =>
      ['sidecar', 'sidecar-2'].map((name) => fs.readFileSync(path.join(dir, `${name}.log`), 'utf8').match(/resuming a stream of backend asker/g)?.length ?? 0);
    const before = resumesLogged();
    const resumedLog = () => ['sidecar', 'sidecar-2'].filter((_name, replica) => resumesLogged()[replica] > before[replica]);

    // First resume on whichever replica Envoy picks, read for a few events, then dropped again.
    const resumed = await fetch(url, {
      headers: { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-11-25', 'last-event-id': token! },
    });
    expect(resumed.status).toBe(200);
    const ids: string[] = [];
    const parser = createParser({ onEvent: (event) => void (event.id && ids.push(event.id)) });
    const reader = resumed.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = '';
    while (ids.length < 3) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the resumed stream ended after ${JSON.stringify(seen)}`);
      seen += value;
      parser.feed(value);
    }
    await reader.cancel();
    for (const id of ids) expect(id).toMatch(backendEventId);
    const servedFirst = resumedLog();
    expect(servedFirst).toHaveLength(1);

    // That replica is gone: the other one must resume the call, for an SDK client this time.
    stack.processes.get(servedFirst[0])!.child.kill('SIGKILL');
    const client = new Client({ name: 'stream-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { sessionId }));
    try {
      const result = await client.request({ method: 'tools/call', params: { name: 'asker__steps', arguments: {} } }, CallToolResultSchema, { resumptionToken: ids.at(-1), timeout: 30_000 });
      expect(textOf(result)).toBe('done after 30 steps');
    } finally {
      await client.close();
    }
    expect(resumedLog()).toHaveLength(2);
  }, 90_000);

  it('finding 2: a 2026-07-28 client is never handed an event id, nor a retry hint', async () => {
    const response = await fetch(stack.gatewayUrl('asks'), {
      method: 'POST',
      headers: { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: {
          name: 'asker__steps',
          arguments: { steps: 2, interval_ms: 20, close_after: 1 },
          _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 'p' },
        },
      }),
    });
    const text = await response.text();
    expect(text).toContain('done after 2 steps');
    expect(text).not.toMatch(/^(id|retry):/m);
  }, 30_000);

  // Such a client cannot resume (its revision has no event ids): the gateway does, in the sidecar's
  // pooled-call lane (docs/adr/0018-stream-relaying.md, "Gaps closed later", 1). Seen failing before it:
  // the call's -32004 "backend asker ended the stream of tools/call steps before its answer".
  it('a 2026-07-28 client whose backend closes the pooled session’s stream mid-call anyway gets the tool’s result, its progress streamed as it happens', async () => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new V2Transport(new URL(stack.gatewayUrl('asks'))));
    const resumesBefore = asker.resumedFrom.length;
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const started = performance.now();
      const progress: { step: number; at: number }[] = [];
      const result = await client.callTool(
        { name: 'asker__steps', arguments: { steps: 3, interval_ms: 300, close_after: 1, close_anyway: true } },
        { onprogress: ({ progress: step }) => progress.push({ step, at: performance.now() - started }), timeout: 8000 },
      );
      const resultAt = performance.now() - started;
      expect(textOf(result)).toBe('done after 3 steps');
      expect(progress.map(({ step }) => step)).toEqual([1, 2, 3]);
      // As they happened (300 ms apart at the backend), not bunched at the end.
      expect(progress[2].at - progress[0].at).toBeGreaterThan(400);
      expect(resultAt - progress[0].at).toBeGreaterThan(400);
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'asker', tool: 'steps', attempts: 1 });
      // The rest came from the backend's own events, resumed once.
      expect(asker.resumedFrom.length).toBe(resumesBefore + 1);
    } finally {
      await client.close();
    }
  }, 30_000);

  it('a 2026-07-28 client whose backend answered before the sidecar resumed gets the answer from the replay, and the stream ends there', async () => {
    // The answer comes 1 ms after the close: it is among the events the resume replays, on a GET the
    // backend keeps open afterwards.
    const response = await postJsonRpc(
      stack.gatewayUrl('asks'),
      modernStepsCall(9, { steps: 2, interval_ms: 1, close_after: 1, close_anyway: true }),
      { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' },
    );
    expect(response.text).toContain('done after 2 steps');
    expect(response.text).toContain('"outcome":"ok"');
  }, 20_000);

  it('a 2026-07-28 client whose backend closes the pooled session’s stream and cannot resume it gets the call’s -32004, failed', async () => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new V2Transport(new URL(stack.gatewayUrl('asks'))));
    asker.refuseResumes = true;
    try {
      const call = client.callTool(
        { name: 'asker__steps', arguments: { steps: 3, interval_ms: 300, close_after: 1, close_anyway: true } },
        { timeout: 8000 },
      );
      await expect(call).rejects.toMatchObject({
        code: -32004,
        message: expect.stringContaining('backend asker ended the stream of tools/call steps before its answer'),
        data: expect.objectContaining({ outcome: 'failed', backend: 'asker', tool: 'steps' }),
      });
    } finally {
      asker.refuseResumes = false;
      await client.close();
    }
  }, 30_000);

  // The lane costs a sidecar's CPU on every such call and makes the call depend on a sidecar, for a
  // backend that breaks its pooled session's revision: a Tool Service opts in (transport.resumeCutPooledCalls).
  // Seen failing before the opt-in: the call went through the lane and was resumed (its result, no -32004).
  it('a 2026-07-28 client’s pooled call to a Tool Service that did not opt in goes straight to the backend, and a cut stream is its -32004, failed', async () => {
    const url = stack.gatewayUrl('direct');
    const modernHeaders = { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'plain__steps' };
    const call = modernStepsCall(2, { steps: 3, interval_ms: 100, close_after: 1, close_anyway: true });
    const before = await sidecarStreamRequests(stack);
    const resumesBefore = asker.resumedFrom.length;
    const cut = await postJsonRpc(url, { ...call, params: { ...call.params, name: 'plain__steps' } }, modernHeaders);
    expect(cut.text).toContain('-32004');
    expect(cut.text).toContain('backend plain ended the stream of tools/call steps before its answer');
    expect(cut.text).toContain('"outcome":"failed"');
    expect(cut.text).not.toContain('done after 3 steps');
    // Nothing to the sidecars' stream cluster, where the lane's route sends a call; nothing resumed.
    expect(await sidecarStreamRequests(stack)).toBe(before);
    expect(asker.resumedFrom.length).toBe(resumesBefore);
  }, 30_000);

  it('a 2026-07-28 client leaving a resumed pooled call ends the sidecar’s stream to the backend', async () => {
    const baseline = await egressStat(stack, 'downstream_rq_active');
    const leaving = new AbortController();
    const response = await fetch(stack.gatewayUrl('asks'), {
      method: 'POST',
      signal: leaving.signal,
      headers: { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' },
      body: JSON.stringify(modernStepsCall(8, { steps: 50, interval_ms: 200, close_after: 1, close_anyway: true })),
    });
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = '';
    // Step 2 comes on the resumed stream.
    while (!seen.includes('"progress":2')) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the call's stream ended after ${JSON.stringify(seen)}`);
      seen += value;
    }
    expect(await egressStat(stack, 'downstream_rq_active')).toBeGreaterThan(baseline);
    leaving.abort();
    // The backend's stream would go on for about 10 s more.
    await waitFor('the sidecar’s resumed stream ended', async () => ((await egressStat(stack, 'downstream_rq_active')) === baseline ? true : undefined), { timeoutMs: 5000 });
  }, 30_000);

  it('a client cannot choose the sidecar’s pooled-call lane: its own lane header is dropped at the edge', async () => {
    const url = stack.gatewayUrl('asks');
    const opened = await postJsonRpc(url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'lane-picker', version: '1.0.0' } } });
    const inSession = { ...MCP_POST_HEADERS, 'mcp-session-id': opened.headers.get('mcp-session-id')!, 'mcp-protocol-version': '2025-11-25' };
    await postJsonRpc(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, inSession);
    const sessionCall = (id: number) =>
      postJsonRpc(url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'asker__steps', arguments: { steps: 1, interval_ms: 1 } } }, { ...inSession, [POOLED_LANE_HEADER]: 'pooled' });
    // The first call opens the client's session with the backend (through the egress listener).
    expect((await sessionCall(2)).text).toContain('done after 1 steps');
    const before = await egressStat(stack, 'downstream_rq_total');
    expect((await sessionCall(3)).text).toContain('done after 1 steps');
    // Straight to the backend: nothing through the sidecar's lane, which reaches it through the egress listener.
    expect(await egressStat(stack, 'downstream_rq_total')).toBe(before);
    // A stateless client's call to the same backend does take that lane (the count sees it).
    const pooled = await postJsonRpc(url, modernStepsCall(4, { steps: 1, interval_ms: 1 }), { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' });
    expect(pooled.text).toContain('done after 1 steps');
    expect(await egressStat(stack, 'downstream_rq_total')).toBeGreaterThan(before);
  }, 30_000);

  it('a request a backend sends on its standalone stream right after its session opened reaches the client', async () => {
    const answered = () => eager.answers.filter((answer) => answer.answer !== undefined).length;
    // Directly, the SDK client holds its GET stream by then and answers.
    const direct = await answeringClient(eager.url);
    try {
      await waitFor('the direct client’s answer', async () => (answered() > 0 ? true : undefined), { timeoutMs: 5000 });
    } finally {
      await direct.close();
    }
    const before = answered();
    const client = await answeringClient(stack.gatewayUrl('eager'));
    try {
      // The client holds its GET stream (the SDK opens it after initialize); its first call opens the
      // backend session, which asks for the roots EAGER_ASK_MS after notifications/initialized.
      await sleep(500);
      expect(textOf(await client.callTool({ name: 'eager__steps', arguments: { steps: 1, interval_ms: 1 } }))).toBe('done after 1 steps');
      await waitFor('the client’s answer at the eager backend', async () => (answered() > before ? true : undefined), { timeoutMs: 5000 });
      expect(eager.answers.filter((answer) => answer.answer !== undefined).at(-1)).toEqual({ kind: 'roots', answer: ROOTS_ANSWER });
    } finally {
      await client.close();
    }
  }, 30_000);

  it('finding 4: a 2026-07-28 v2 client in auto mode streams progress from a 2025 stateful backend, frame by frame, with one backend attempt', async () => {
    const client = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new V2Transport(new URL(stack.gatewayUrl('asks'))));
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const started = performance.now();
      const progressAt: number[] = [];
      const result = await client.callTool({ name: 'asker__steps', arguments: { steps: 4, interval_ms: 400 } }, { onprogress: () => progressAt.push(performance.now() - started) });
      const resultAt = performance.now() - started;
      expect(textOf(result)).toBe('done after 4 steps');
      expect(progressAt).toHaveLength(4);
      // Frame by frame: the first step came about 1.2 s before the result, not with it.
      expect(resultAt - progressAt[0]).toBeGreaterThan(800);
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'asker', attempts: 1 });

      // The same from server-everything (a third-party 2025 stateful backend).
      const everyStarted = performance.now();
      const everyProgressAt: number[] = [];
      const long = await client.callTool({ name: 'every__trigger-long-running-operation', arguments: { duration: 2, steps: 4 } }, { onprogress: () => everyProgressAt.push(performance.now() - everyStarted) });
      expect(everyProgressAt).toHaveLength(4);
      expect(performance.now() - everyStarted - everyProgressAt[0]).toBeGreaterThan(800);
      expect(long._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'every', attempts: 1 });
    } finally {
      await client.close();
    }
  }, 30_000);

  it('finding 5: a backend of both revisions is spoken to in the client’s own', async () => {
    const url = stack.gatewayUrl('dual');
    const modern = new V2Client({ name: 'v2-agent', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await modern.connect(new V2Transport(new URL(url)));
    const before = dual.protocolVersions.length;
    try {
      const shouted = await modern.callTool({ name: 'both__shout', arguments: { text: 'modern' } });
      expect(textOf(shouted)).toBe('MODERN');
    } finally {
      await modern.close();
    }
    expect(dual.protocolVersions.slice(before)).toEqual(['2026-07-28']);

    const raw = await postJsonRpc(
      url,
      {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/call',
        params: { name: 'both__shout', arguments: { text: 'json' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
      },
      { ...MCP_POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'both__shout' },
    );
    // The backend's own JSON answer and result fields, not a 2025 SSE stream.
    expect(raw.contentType).toMatch(/^application\/json/);
    expect(raw.json().result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'JSON' }] });

    const session = new Client({ name: 'stream-test', version: '1.0.0' });
    await session.connect(new StreamableHTTPClientTransport(new URL(url)));
    const sessionBefore = dual.protocolVersions.length;
    try {
      expect(textOf(await session.callTool({ name: 'both__shout', arguments: { text: 'session' } }))).toBe('SESSION');
    } finally {
      await session.close();
    }
    expect(dual.protocolVersions.slice(sessionBefore).filter((version) => version !== '')).not.toContain('2026-07-28');
  }, 30_000);
});
