import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { CatalogSnapshotMessage } from '../../control-plane/catalog/catalog-store';
import { Decision, RequestHead } from '../../control-plane/sidecar/decision';
import { nestsDeeperThan } from '../../control-plane/sidecar/json-rpc';
import { decideOnBody, decideOnHead } from '../../control-plane/sidecar/mcp-gateway';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { CachedSessionStore, SessionEndings } from '../../control-plane/sidecar/sessions/session-cache';
import { MemorySessionStore } from '../../control-plane/sidecar/sessions/session-store';
import { ENVOY_UNKNOWN_ROUTE_HEADER } from '../../control-plane/xds/translate/settings';
import { quietLogger } from '../support/quiet-logger';
import { sidecarContext } from '../support/sidecar-context';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const snapshot: CatalogSnapshotMessage = catalogSnapshot([
  { route_key: 'demo', backends: [backendCatalog('weather', ['get_forecast']), backendCatalog('jobs', ['run_job', 'echo'])] },
]);
const views = buildRouteViews(snapshot);
const { context } = sidecarContext(views);

const POST_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const head = (method = 'POST', path = '/mcp/demo', headers: Record<string, string> = POST_HEADERS): RequestHead => ({
  method,
  path,
  headers: new Map(Object.entries(headers)),
});
const body = (message: unknown) => Buffer.from(typeof message === 'string' ? message : JSON.stringify(message));
const responded = async (pending: Decision | Promise<Decision>) => {
  const decision = await pending;
  if (decision.kind !== 'respond') throw new Error(`expected a response, got ${decision.kind}`);
  return { status: decision.status, message: decision.body.length ? JSON.parse(decision.body.toString()) : undefined };
};

const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: { sampling: {} }, clientInfo: { name: 'agent', version: '1' } } };
const call = (name: string) => body({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name, arguments: {} } });
const withSession = (id: string, method = 'POST', path = '/mcp/demo') => head(method, path, { ...POST_HEADERS, 'mcp-session-id': id });

async function open(sessions = sidecarContext(views)) {
  const decision = await decideOnBody(head(), body(initialize), sessions.context);
  if (decision.kind !== 'respond') throw new Error('initialize was not answered');
  return { ...sessions, sessionId: decision.headers['mcp-session-id'], decision };
}

describe('sidecar decisions on the request head', () => {
  it.each([
    ['/mcp without a route key', head('POST', '/mcp'), 400, -32600, 'route key is required: use /mcp/{routeKey}'],
    ['/mcp/ without a route key', head('POST', '/mcp/?x=1'), 400, -32600, 'route key is required: use /mcp/{routeKey}'],
    ['a route key Envoy has no route for', head('POST', '/mcp/other', { ...POST_HEADERS, [ENVOY_UNKNOWN_ROUTE_HEADER]: 'true' }), 404, -32600, 'unknown route key "other"'],
    ['a route key Envoy routed that the catalog has not yet', head('POST', '/mcp/other'), 503, -32603, 'route "other" is being added to the gateway: call again'],
    ['a path outside /mcp', head('POST', '/admin'), 404, -32600, 'not an MCP route: use /mcp/{routeKey}'],
    ['GET (no standalone SSE stream yet)', head('GET'), 405, -32600, 'method GET is not allowed on this endpoint'],
    ['a wrong Content-Type', head('POST', '/mcp/demo', { ...POST_HEADERS, 'content-type': 'text/plain' }), 415, -32600, 'Content-Type must be application/json'],
    ['a missing Accept', head('POST', '/mcp/demo', { 'content-type': 'application/json' }), 406, -32600, 'Accept must list both application/json and text/event-stream'],
  ])('answers %s itself', async (_case, request, status, code, message) => {
    expect(await responded(decideOnHead(request, context))).toEqual({ status, message: { jsonrpc: '2.0', id: null, error: { code, message } } });
  });

  it('asks a client to call again soon when Envoy knows a route before the catalog does', async () => {
    const decision = await decideOnHead(head('POST', '/mcp/other'), context);
    expect(decision.kind === 'respond' && decision.headers['retry-after']).toBe('1');
  });

  it('reads the body of a well-formed POST, with a query string or a charset', async () => {
    expect(await decideOnHead(head('POST', '/mcp/demo?trace=1', { ...POST_HEADERS, 'content-type': 'application/json; charset=utf-8' }), context)).toEqual({
      kind: 'read-body',
    });
  });
});

describe('sidecar decisions on the JSON-RPC body', () => {
  it.each([
    ['malformed JSON', '{"jsonrpc":', 400, -32700],
    ['a batch', [{ jsonrpc: '2.0', id: 1, method: 'ping' }], 400, -32600],
    ['a non-JSON-RPC object', { id: 1, method: 'ping' }, 400, -32600],
  ])('rejects %s', async (_case, message, status, code) => {
    const { status: actual, message: reply } = await responded(decideOnBody(head(), body(message), context));
    expect(actual).toBe(status);
    expect(reply.error.code).toBe(code);
  });

  it('accepts notifications with 202 and no body', async () => {
    expect(await responded(decideOnBody(head(), body({ jsonrpc: '2.0', method: 'notifications/initialized' }), context))).toEqual({
      status: 202,
      message: undefined,
    });
  });

  it.each([
    ['2025-06-18', '2025-06-18'],
    ['2025-11-25', '2025-11-25'],
    ['1999-01-01', '2025-11-25'],
  ])('answers initialize for protocol %s with %s', async (requested, negotiated) => {
    const { message } = await responded(
      decideOnBody(head(), body({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: requested } }), context),
    );
    expect(message.result.protocolVersion).toBe(negotiated);
    expect(message.result.capabilities).toEqual({ tools: { listChanged: true } });
  });

  it('answers tools/list from memory, prefixed and ordered by backend', async () => {
    const { status, message } = await responded(decideOnBody(head(), body({ jsonrpc: '2.0', id: 'a', method: 'tools/list' }), context));
    expect(status).toBe(200);
    expect(message.id).toBe('a');
    expect(message.result.tools.map((tool: { name: string }) => tool.name)).toEqual(['jobs__run_job', 'jobs__echo', 'weather__get_forecast']);
  });

  it('answers a tools/call the call lane could not place yet (Envoy behind the catalog) with a clear, retryable error', async () => {
    const { status, message } = await responded(decideOnBody(head(), call('jobs__run_job'), context));
    expect(status).toBe(200);
    expect(message.error).toMatchObject({ code: -32603, message: 'tool "jobs__run_job" is being added to the gateway\'s routes: call it again' });
  });

  it.each([
    ['an unprefixed name', 'get_forecast', 'tool "get_forecast" has no backend prefix: call it as <backend>__<tool>'],
    ['an unknown backend', 'ghost__get_forecast', 'unknown backend "ghost" on route "demo" (tool "ghost__get_forecast")'],
    ['an unknown tool', 'weather__get_rain', 'backend "weather" has no tool "get_rain" on route "demo"'],
  ])('rejects tools/call with %s as invalid params', async (_case, name, text) => {
    const { status, message } = await responded(
      decideOnBody(head(), body({ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name } }), context),
    );
    expect(status).toBe(200);
    expect(message).toEqual({ jsonrpc: '2.0', id: 4, error: { code: -32602, message: text } });
  });

  it("answers a call of a tool the route's policy denies with the denied outcome, and never lists it", async () => {
    const guarded = buildRouteViews(
      catalogSnapshot([
        { route_key: 'ops', backends: [backendCatalog('jobs', ['echo', 'delete_job'], { denied_tools: [{ tool: 'delete_job', rule: 'denyTools "delete_*"' }] })] },
      ]),
    );
    const { context: guardedContext } = sidecarContext(guarded);
    const listed = await responded(decideOnBody(head('POST', '/mcp/ops'), body({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), guardedContext));
    expect(listed.message.result.tools.map((tool: { name: string }) => tool.name)).toEqual(['jobs__echo']);
    const decision = await decideOnBody(
      head('POST', '/mcp/ops'),
      body({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'jobs__delete_job', arguments: {} } }),
      guardedContext,
    );
    expect(decision).toMatchObject({ kind: 'respond', status: 200, metadata: { route: 'ops', backend: 'jobs', tool: 'delete_job', outcome: 'denied' } });
    expect(JSON.parse((decision as { body: string }).body)).toEqual({
      jsonrpc: '2.0',
      id: 6,
      error: {
        code: -32003,
        message: 'tool "jobs__delete_job" is denied on route "ops" by policy (denyTools "delete_*")',
        data: { outcome: 'denied', backend: 'jobs', tool: 'delete_job', attempts: 0, elapsed_ms: 0, fallback_used: false, rule: 'denyTools "delete_*"' },
      },
    });
  });

  it('answers methods it does not serve with method-not-found', async () => {
    const { message } = await responded(decideOnBody(head(), body({ jsonrpc: '2.0', id: 5, method: 'resources/list' }), context));
    expect(message.error.code).toBe(-32601);
  });
});

describe('sidecar sessions', () => {
  it('answers initialize with a session id of its own and the negotiated version', async () => {
    const { sessionId, decision } = await open();
    expect(sessionId).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(JSON.parse((decision as { body: string }).body).result.protocolVersion).toBe('2025-06-18');
  });

  it.each([
    ['an unknown session id', () => 'x'.repeat(32), '/mcp/demo'],
    ['a forged session id', () => 'not-a-session', '/mcp/demo'],
  ])('answers %s with 404 and -32001', async (_case, id, path) => {
    const { status, message } = await responded(decideOnBody(withSession(id(), 'POST', path), body({ jsonrpc: '2.0', id: 5, method: 'tools/list' }), context));
    expect(status).toBe(404);
    expect(message.error.code).toBe(-32001);
  });

  it('does not accept a session on another route than its own', async () => {
    const other = new Map([...views, ['second', { ...views.get('demo')!, key: 'second' }]]);
    const sessions = sidecarContext(other);
    const { sessionId } = await open(sessions);
    const { status } = await responded(decideOnBody(withSession(sessionId, 'POST', '/mcp/second'), body({ jsonrpc: '2.0', id: 5, method: 'ping' }), sessions.context));
    expect(status).toBe(404);
  });

  /** A gateway session whose call to jobs went in backend session backend-session-1 (as the session check records it). */
  async function withJobsSession() {
    const opened = await open();
    await opened.context.sessions.claimBackend(opened.sessionId, 'jobs', 'backend-session-1');
    return opened;
  }

  it('ends the backend sessions and the gateway session on DELETE', async () => {
    const { context, closed, sessionId } = await withJobsSession();
    expect(await responded(decideOnHead(withSession(sessionId, 'DELETE'), context))).toEqual({ status: 204, message: undefined });
    expect(closed).toEqual(['http://127.0.0.1:9/jobs/mcp backend-session-1']);
    expect((await responded(decideOnBody(withSession(sessionId), body({ jsonrpc: '2.0', id: 5, method: 'ping' }), context))).status).toBe(404);
  });

  it("routes the client's answer to a backend's request back to that backend, in its session, under the backend's own id, once", async () => {
    const { context, sessionId } = await withJobsSession();
    // The call script records the request as it passes to the client.
    await context.sessions.expectAnswer(sessionId, 'jobs', '0');
    const answer = { jsonrpc: '2.0', id: 'mcpgw:jobs:0', result: { role: 'assistant', content: { type: 'text', text: 'hi' } } };
    expect(await decideOnBody(withSession(sessionId), body(answer), context)).toMatchObject({
      kind: 'relay',
      backend: { name: 'jobs' },
      onBehalf: { backendSessionId: 'backend-session-1', protocolVersion: '2025-06-18' },
      body: JSON.stringify({ ...answer, id: 0 }),
    });
    expect((await responded(decideOnBody(withSession(sessionId), body(answer), context))).status).toBe(400);
  });

  it('routes the answer in the backend session another replica opened, though this replica’s copy of the session predates it (ADR-0018)', async () => {
    const shared = new MemorySessionStore(60);
    const endings = (): SessionEndings => ({ publish: async () => undefined, onEnded: () => undefined, close: async () => undefined });
    const replica = () => new CachedSessionStore(shared, endings(), { freshMs: 60_000, maxEntries: 10, staleOnErrorMs: 0 }, quietLogger);
    const here = sidecarContext(views);
    here.context.sessions = replica();
    const { sessionId } = await open(here);
    // The replica holding the client's GET stream opened the session with jobs: this one's copy lacks it.
    await replica().claimBackend(sessionId, 'jobs', 'opened-elsewhere');
    await shared.expectAnswer(sessionId, 'jobs', '0');
    const answer = { jsonrpc: '2.0', id: 'mcpgw:jobs:0', result: { roots: [] } };
    expect(await decideOnBody(withSession(sessionId), body(answer), here.context)).toMatchObject({ kind: 'relay', onBehalf: { backendSessionId: 'opened-elsewhere' } });
  });

  it('resumes a stream at the backend an event id names, with the backend’s own id (ADR-0018)', async () => {
    const { context, sessionId } = await withJobsSession();
    const resume = (lastEventId: string) => decideOnHead(head('GET', '/mcp/demo', { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'last-event-id': lastEventId }), context);
    const other = await resume('mcpgw:jobs:stream-1_42');
    expect(other).toMatchObject({ kind: 'resume', backend: { name: 'jobs' }, resumption: { lastEventId: 'stream-1_42' } });
    expect(other.kind === 'resume' && other.resumption.eventIdFor('stream-1_43')).toBe('mcpgw:jobs:stream-1_43');
    expect(other.kind === 'resume' && other.resumption.unresumable).toBeUndefined();
    // A call's: named by the call's resume token; the call's error if the backend cannot resume.
    const token = Buffer.from(JSON.stringify({ b: 'jobs', t: 'run_job', i: 5 })).toString('base64');
    const call = await resume(`mcpgw-call.${token}.stream-2_7`);
    expect(call).toMatchObject({ kind: 'resume', backend: { name: 'jobs' }, resumption: { lastEventId: 'stream-2_7' } });
    expect(call.kind === 'resume' && call.resumption.eventIdFor('stream-2_8')).toBe(`mcpgw-call.${token}.stream-2_8`);
    expect(call.kind === 'resume' && call.resumption.unresumable?.body).toMatch(/"id":5,"error":\{"code":-32004/);
    for (const foreign of ['stream-1_42', 'mcpgw:ghost:1']) {
      const { status, message } = await responded(resume(foreign));
      expect(status).toBe(400);
      expect(message.error.message).toMatch(/names no stream this gateway can resume/);
    }
  });

  it.each([
    ['an id the gateway never handed out', 7],
    ['a scoped id of a backend the route does not have', 'mcpgw:ghost:1'],
    ['a request the backend never sent (a forged answer)', 'mcpgw:jobs:5'],
  ])('rejects an answer to %s with 400', async (_case, id) => {
    const { context, sessionId } = await withJobsSession();
    await context.sessions.expectAnswer(sessionId, 'jobs', '0');
    const { status, message } = await responded(decideOnBody(withSession(sessionId), body({ jsonrpc: '2.0', id, result: {} }), context));
    expect(status).toBe(400);
    expect(message.error).toMatchObject({ code: -32600, message: expect.stringContaining('which no backend of route "demo" sent') });
  });

  it('rejects an answer outside any session with 400 (there is nowhere it was asked)', async () => {
    const { context } = await withJobsSession();
    const { status } = await responded(decideOnBody(head(), body({ jsonrpc: '2.0', id: 'mcpgw:jobs:0', result: {} }), context));
    expect(status).toBe(400);
  });

  it('passes client notifications to every backend session of the gateway session, but keeps initialized', async () => {
    const { context, posted, sessionId } = await withJobsSession();
    const cancelled = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 5, reason: 'user' } };
    for (const notification of [cancelled, { jsonrpc: '2.0', method: 'notifications/initialized' }]) {
      expect(await responded(decideOnBody(withSession(sessionId), body(notification), context))).toEqual({ status: 202, message: undefined });
    }
    expect(posted).toEqual([{ url: 'http://127.0.0.1:9/jobs/mcp', backendSessionId: 'backend-session-1', message: cancelled }]);
  });

  it('rejects an unsupported MCP-Protocol-Version with 400, on the head of a DELETE and on the body of a POST', async () => {
    const unsupported = { ...POST_HEADERS, 'mcp-protocol-version': '1999-01-01' };
    const deleted = await responded(decideOnHead(head('DELETE', '/mcp/demo', unsupported), context));
    const posted = await responded(decideOnBody(head('POST', '/mcp/demo', unsupported), call('jobs__echo'), context));
    for (const { status, message } of [deleted, posted]) {
      expect(status).toBe(400);
      expect(message.error).toMatchObject({ code: -32600, message: expect.stringMatching(/unsupported MCP-Protocol-Version "1999-01-01"/) });
    }
  });
});

describe('sidecar decisions for MCP 2026-07-28 (stateless)', () => {
  const envelope = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 4 };
  const modernHead = (method: string, name?: string) =>
    head('POST', '/mcp/demo', { ...POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(name && { 'mcp-name': name }) });
  const request = (method: string, params: Record<string, unknown> = {}) => body({ jsonrpc: '2.0', id: 9, method, params: { ...params, _meta: envelope } });

  it('answers server/discover with its versions, capabilities and server info', async () => {
    const { status, message } = await responded(decideOnBody(modernHead('server/discover'), request('server/discover'), context));
    expect(status).toBe(200);
    expect(message.result).toMatchObject({
      resultType: 'complete',
      supportedVersions: ['2026-07-28', ...SUPPORTED_PROTOCOL_VERSIONS],
      capabilities: { tools: { listChanged: true } },
      cacheScope: 'public',
      _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'mcp-federation-gateway' } },
    });
  });

  it('answers tools/list as a complete, uncacheable result', async () => {
    const { message } = await responded(decideOnBody(modernHead('tools/list'), request('tools/list'), context));
    expect(message.result).toMatchObject({ resultType: 'complete', ttlMs: 0, cacheScope: 'public', tools: expect.any(Array) });
    expect(message.result._meta).toHaveProperty('mcpgw/federation');
  });

  it.each<[string, RequestHead, Buffer, number, number]>([
    ['Mcp-Name unlike the body', modernHead('tools/call', 'jobs__run_job'), request('tools/call', { name: 'jobs__echo' }), 400, -32020],
    ['no Mcp-Method', head('POST', '/mcp/demo', { ...POST_HEADERS, 'mcp-protocol-version': '2026-07-28' }), request('tools/list'), 400, -32020],
    ['a base64 Mcp-Name that decodes to another tool', modernHead('tools/call', `=?base64?${Buffer.from('jobs__run_job').toString('base64')}?=`), request('tools/call', { name: 'jobs__echo' }), 400, -32020],
    [
      'no client capabilities',
      modernHead('tools/list'),
      body({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } }),
      400,
      -32602,
    ],
    ['the modern header without the _meta claim', modernHead('tools/list'), body({ jsonrpc: '2.0', id: 9, method: 'tools/list' }), 400, -32602],
    ['a removed method', modernHead('logging/setLevel'), request('logging/setLevel', { level: 'info' }), 404, -32601],
  ])('rejects %s', async (_case, requestHead, requestBody, status, code) => {
    const { status: actual, message } = await responded(decideOnBody(requestHead, requestBody, context));
    expect(actual).toBe(status);
    expect(message.error.code).toBe(code);
  });

  it('names the versions it serves when a request claims another', async () => {
    const claimed = body({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: { _meta: { ...envelope, 'io.modelcontextprotocol/protocolVersion': '2027-01-01' } } });
    const { status, message } = await responded(decideOnBody(modernHead('tools/list'), claimed, context));
    expect(status).toBe(400);
    expect(message.error).toMatchObject({ code: -32022, data: { supported: ['2026-07-28'], requested: '2027-01-01' } });
  });
});

describe('request bounds of the gateway lane', () => {
  it.each([
    ['an object', { a: 1 }],
    ['an array', [1]],
    ['a fraction', 1.5],
    ['true', true],
    ['a number JSON cannot keep exactly', 2 ** 53],
    ['a string over 256 bytes', 'x'.repeat(257)],
  ])('refuses a request whose id is %s with 400 and -32600', async (_case, id) => {
    const { status, message } = await responded(decideOnBody(head(), body({ jsonrpc: '2.0', id, method: 'tools/list' }), context));
    expect(status).toBe(400);
    expect(message).toMatchObject({ id: null, error: { code: -32600, message: 'id must be a string of at most 256 bytes or an integer' } });
  });

  it('refuses a 5,000-digit id with 400 and -32600', async () => {
    const raw = Buffer.from(`{"jsonrpc":"2.0","id":${'9'.repeat(5000)},"method":"tools/list"}`);
    expect((await responded(decideOnBody(head(), raw, context))).message.error.code).toBe(-32600);
  });

  it.each([['an integer', 12], ['a string', 'req-1'], ['a negative integer', -3]])('takes %s as an id', async (_case, id) => {
    const { status, message } = await responded(decideOnBody(head(), body({ jsonrpc: '2.0', id, method: 'ping' }), context));
    expect(status).toBe(200);
    expect(message.id).toBe(id);
  });

  it('refuses JSON nested deeper than Envoy parses (100 levels) with 400 and -32700, without running out of stack', async () => {
    const deep = Buffer.from(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`);
    const { status, message } = await responded(decideOnBody(head(), deep, context));
    expect(status).toBe(400);
    expect(message.error).toMatchObject({ code: -32700, message: 'Parse error: JSON nested more than 100 levels deep' });
  });

  it('counts brackets inside strings as text, not nesting', () => {
    expect(nestsDeeperThan(`{"a":"${'['.repeat(200)}"}`, 100)).toBe(false);
    expect(nestsDeeperThan(`{"a":"\\"${'['.repeat(200)}"}`, 100)).toBe(false);
    expect(nestsDeeperThan(`${'['.repeat(101)}${']'.repeat(101)}`, 100)).toBe(true);
  });
});

describe('a client resuming the stream of a call (Last-Event-ID)', () => {
  const resumeId = (token: unknown) => `mcpgw-call.${Buffer.from(JSON.stringify(token)).toString('base64')}`;
  const get = (lastEventId: string) => head('GET', '/mcp/demo', { accept: 'text/event-stream', 'last-event-id': lastEventId });

  it('answers the call with the JSON-RPC error its broken stream could not carry, then marks the stream done', async () => {
    const decision = await decideOnHead(get(resumeId({ b: 'jobs', t: 'run_job', i: 7 })), context);
    expect(decision).toMatchObject({ kind: 'respond', status: 200, headers: { 'content-type': 'text/event-stream' } });
    const body = (decision as { body: string }).body;
    expect(body.startsWith('id: mcpgw-done\nevent: message\ndata: ')).toBe(true);
    expect(JSON.parse(body.split('\n')[2].slice('data: '.length))).toMatchObject({
      jsonrpc: '2.0',
      id: 7,
      error: { code: -32004, message: 'backend jobs ended the stream of tools/call run_job before its answer: the call may or may not have run', data: { outcome: 'failed', backend: 'jobs', tool: 'run_job' } },
    });
  });

  it('answers a resumption after the final answer with 405, which ends it', async () => {
    expect((await responded(decideOnHead(get('mcpgw-done'), context))).status).toBe(405);
  });

  it('treats any other Last-Event-ID as none', async () => {
    expect((await responded(decideOnHead(get('mcpgw-call.not-base64-json'), context))).status).toBe(405);
  });
});
