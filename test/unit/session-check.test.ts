import { RequestHead } from '../../control-plane/sidecar/decision';
import { decideOnBody } from '../../control-plane/sidecar/mcp-gateway';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { StatelessCallSessions, checkCall, forgetLostSession } from '../../control-plane/sidecar/session-check';
import { CHECK_STATUS } from '../../control-plane/xds/translate/settings';
import { InFlightRequest, TakeResult } from '../../control-plane/quotas/concurrency-slots';
import { sidecarContext } from '../support/sidecar-context';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const views = buildRouteViews(
  catalogSnapshot([
    {
      route_key: 'demo',
      backends: [backendCatalog('jobs', ['echo']), backendCatalog('modern', ['shout'], { protocol_version: '2026-07-28', sessionful: false })],
    },
    { route_key: 'other', backends: [backendCatalog('jobs', ['echo'])] },
  ]),
);

/** What Envoy sends the session check for a call the call script placed on `backend`. */
const checkHead = (backend: string, extra: Record<string, string> = {}, route = 'demo'): RequestHead => ({
  method: 'POST',
  path: `/mcp/${route}`,
  headers: new Map(
    Object.entries({ 'x-mcpgw-route': route, 'x-mcpgw-backend': backend, 'x-mcpgw-tool': 'echo', 'x-mcpgw-rpc-id': '5', authorization: 'Bearer agent', ...extra }),
  ),
});

async function session(sessions = sidecarContext(views), route = 'demo') {
  const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: { sampling: {} }, clientInfo: { name: 'agent', version: '1' } } };
  const decision = await decideOnBody(
    { method: 'POST', path: `/mcp/${route}`, headers: new Map([['content-type', 'application/json'], ['accept', 'application/json, text/event-stream']]) },
    Buffer.from(JSON.stringify(initialize)),
    sessions.context,
  );
  if (decision.kind !== 'respond') throw new Error('initialize was not answered');
  return { ...sessions, pool: new StatelessCallSessions(sessions.context), sessionId: decision.headers['mcp-session-id'] };
}

describe('the session check of the call lane', () => {
  it("opens the backend's session on the first call only, on the client's behalf, and sends each call in it", async () => {
    const { context, opened, pool, sessionId } = await session();
    for (let call = 0; call < 2; call++) {
      expect(await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool)).toEqual({
        status: CHECK_STATUS.ALLOW,
        headers: { 'mcp-session-id': 'backend-session-1', 'x-mcpgw-backend-session': 'backend-session-1', 'x-mcpgw-gateway-session': sessionId },
        body: '',
      });
    }
    expect(opened).toEqual(['http://127.0.0.1:9/jobs/mcp']);
  });

  it('opens nothing at a session-era backend that hands out no sessions (as its listing found), and sends the call without one', async () => {
    const sessionless = buildRouteViews(catalogSnapshot([{ route_key: 'demo', backends: [backendCatalog('plain', ['echo'], { sessionful: false })] }]));
    const { context, opened, pool, sessionId } = await session(sidecarContext(sessionless));
    for (let call = 0; call < 2; call++) {
      expect(await checkCall(checkHead('plain', { 'mcp-session-id': sessionId }), context, pool)).toEqual({
        status: CHECK_STATUS.ALLOW,
        headers: { 'x-envoy-auth-headers-to-remove': 'mcp-session-id', 'x-mcpgw-gateway-session': sessionId },
        body: '',
      });
    }
    expect(opened).toEqual([]);
  });

  it("opens the backend's session once for a session's first calls that arrive together, and sends them all in it", async () => {
    let opening = 0;
    const slowOpen = async () => {
      opening++;
      await new Promise((resolve) => setTimeout(resolve, 20));
      return `backend-session-${opening}`;
    };
    const { context, opened, closed, pool, sessionId } = await session(sidecarContext(views, slowOpen));
    const answers = await Promise.all(Array.from({ length: 10 }, () => checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool)));
    expect(answers.map((answer) => answer.headers['x-mcpgw-backend-session'])).toEqual(Array(10).fill('backend-session-1'));
    expect(opened).toEqual(['http://127.0.0.1:9/jobs/mcp']);
    expect(closed).toEqual([]);
  });

  it.each([
    ['an unknown session id', () => 'x'.repeat(32), 'demo'],
    ['a forged session id', () => 'forged', 'demo'],
  ])('answers %s with 404 and -32001 for the call', async (_case, id, route) => {
    const { context, pool } = await session();
    const answer = await checkCall(checkHead('jobs', { 'mcp-session-id': id() }, route), context, pool);
    expect(answer.status).toBe(404);
    expect(JSON.parse(answer.body)).toMatchObject({ id: 5, error: { code: -32001 } });
  });

  it("does not let a session of another route call this route's backends", async () => {
    const sessions = sidecarContext(views);
    const { context, pool, sessionId } = await session(sessions, 'other');
    expect((await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool)).status).toBe(404);
  });

  it('answers a backend that cannot open a session with -32004 naming it, for the client (status 200 after Envoy)', async () => {
    const { context, pool, sessionId } = await session(sidecarContext(views, async () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:9'))));
    const answer = await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool);
    expect(answer.status).toBe(CHECK_STATUS.JSON_RPC_ERROR);
    expect(JSON.parse(answer.body)).toMatchObject({
      id: 5,
      error: {
        code: -32004,
        message: 'backend jobs could not open a session: tools/call echo failed (connect ECONNREFUSED 127.0.0.1:9)',
        data: { outcome: 'failed', backend: 'jobs', tool: 'echo', attempts: 0, fallback_used: false, last_error: 'connect ECONNREFUSED 127.0.0.1:9' },
      },
    });
  });

  it('answers a call whose gateway session ended while its backend session was opening as an unknown session, and ends that backend session', async () => {
    let sessions!: ReturnType<typeof sidecarContext>;
    let gatewaySession = '';
    sessions = sidecarContext(views, async () => {
      await sessions.context.sessions.remove(gatewaySession);
      return 'late';
    });
    const { context, closed, pool, sessionId } = await session(sessions);
    gatewaySession = sessionId;
    expect((await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool)).status).toBe(404);
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toEqual(['http://127.0.0.1:9/jobs/mcp late']);
  });

  it("sends a call for a stateless backend without the client's gateway session id", async () => {
    const { context, opened, pool, sessionId } = await session();
    expect(await checkCall(checkHead('modern', { 'mcp-session-id': sessionId }), context, pool)).toEqual({
      status: CHECK_STATUS.ALLOW,
      headers: { 'x-envoy-auth-headers-to-remove': 'mcp-session-id', 'x-mcpgw-gateway-session': sessionId },
      body: '',
    });
    expect(opened).toEqual([]);
  });

  it("gives stateless clients' calls for a backend that needs a session one pooled backend session, replaced once lost", async () => {
    const sessions = sidecarContext(views);
    const pool = new StatelessCallSessions(sessions.context);
    const first = await checkCall(checkHead('jobs'), sessions.context, pool);
    const second = await checkCall(checkHead('jobs'), sessions.context, pool);
    expect(first).toEqual(second);
    expect(first.headers).toMatchObject({ 'mcp-session-id': 'backend-session-1', 'x-mcpgw-gateway-session': '' });
    expect(sessions.opened).toHaveLength(1);
    await forgetLostSession({ route: 'demo', backend: 'jobs', backendSessionId: 'backend-session-1', gatewaySessionId: '' }, sessions.context, pool);
    await checkCall(checkHead('jobs'), sessions.context, pool);
    expect(sessions.opened).toHaveLength(2);
  });

  it("forgets a gateway session's lost backend session, so that the next call opens a new one", async () => {
    const { context, opened, pool, sessionId } = await session();
    await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool);
    await forgetLostSession({ route: 'demo', backend: 'jobs', backendSessionId: 'backend-session-1', gatewaySessionId: sessionId }, context, pool);
    await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId }), context, pool);
    expect(opened).toHaveLength(2);
  });

  it('refuses a check without the call script headers (nothing but Envoy may ask)', async () => {
    const { context, pool } = await session();
    const answer = await checkCall({ method: 'POST', path: '/mcp/demo', headers: new Map() }, context, pool);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).error.message).toMatch(/session check: x-mcpgw-route/);
  });
});

describe("the session check's deadline (Envoy's --session-check-timeout-ms less the margin)", () => {
  it('names a backend too slow to open its session, before Envoy would give up on the check', async () => {
    const slow = sidecarContext(views, () => new Promise((resolve) => setTimeout(() => resolve('late-session'), 300)));
    const { context, pool, sessionId } = await session(slow);
    const startedAt = performance.now();
    const answer = await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId, 'x-mcpgw-check-deadline-ms': '100' }), context, pool);
    expect(performance.now() - startedAt).toBeLessThan(280);
    expect(answer.status).toBe(CHECK_STATUS.JSON_RPC_ERROR);
    expect(JSON.parse(answer.body)).toMatchObject({
      id: 5,
      error: { code: -32004, message: expect.stringContaining('backend jobs could not open a session in time: tools/call echo failed'), data: { outcome: 'failed', backend: 'jobs' } },
    });
    // The session opened late is kept for the next call, not leaked.
    await new Promise((resolve) => setTimeout(resolve, 350));
    expect((await context.sessions.get(sessionId))?.backends.jobs).toBe('late-session');
  });

  it('lets a call through whose backend opens its session within the deadline', async () => {
    const slowish = sidecarContext(views, () => new Promise((resolve) => setTimeout(() => resolve('session-in-time'), 50)));
    const { context, pool, sessionId } = await session(slowish);
    const answer = await checkCall(checkHead('jobs', { 'mcp-session-id': sessionId, 'x-mcpgw-check-deadline-ms': '1000' }), context, pool);
    expect(answer).toMatchObject({ status: CHECK_STATUS.ALLOW, headers: { 'mcp-session-id': 'session-in-time' } });
  });
});

/** The lease header as the check wrote it (base64url JSON). */
const leaseOfHeader = (header: string | undefined) => header && JSON.parse(Buffer.from(header, 'base64url').toString('utf8'));

describe('per-caller concurrency in the session check (docs/quotas.md)', () => {
  const limits = { 'x-mcpgw-concurrency': '30000;2=route:demo/concurrency/per-caller', 'x-mcpgw-client-address': '10.1.2.3' };
  /** Slots as the check sees them: a fake that answers `result` and records what it was asked. */
  const slotsAnswering = (result: () => Promise<TakeResult>) => {
    const asked: { caller: string; request: InFlightRequest }[] = [];
    return { asked, slots: { take: (caller: string, request: InFlightRequest) => (asked.push({ caller, request }), result()) } };
  };

  it("takes the call's slots for the client's address once the call may go, and hands Envoy the lease", async () => {
    const { context, pool } = await session();
    const { asked, slots } = slotsAnswering(async () => ({ taken: true, lease: { id: 'lease-1', keys: ['k'] } }));
    const answer = await checkCall(checkHead('modern', limits), { ...context, concurrency: slots }, pool);
    expect(answer.status).toBe(CHECK_STATUS.ALLOW);
    expect(leaseOfHeader(answer.headers['x-mcpgw-concurrency-lease'])).toEqual({ id: 'lease-1', keys: ['k'] });
    expect(asked).toEqual([{ caller: 'address 10.1.2.3', request: { deadlineMs: 30000, limits: [{ name: 'route:demo/concurrency/per-caller', inFlight: 2 }] } }]);
  });

  it("counts a caller of a route with auth by its token's issuer and subject, wherever it calls from", async () => {
    const signedIn = buildRouteViews(
      catalogSnapshot([{ route_key: 'signed', backends: [backendCatalog('modern', ['shout'], { protocol_version: '2026-07-28', sessionful: false })], access: { rules: [], ruleOf: () => 0 } }]),
    );
    const { context } = sidecarContext(signedIn);
    const { asked, slots } = slotsAnswering(async () => ({ taken: true, lease: { id: 'lease-2', keys: ['k'] } }));
    const head = checkHead('modern', { ...limits, 'x-mcpgw-claim-iss': 'https://idp.example.com', 'x-mcpgw-claim-sub': 'alice' }, 'signed');
    expect((await checkCall(head, { ...context, concurrency: slots }, new StatelessCallSessions(context))).status).toBe(CHECK_STATUS.ALLOW);
    expect(asked.map(({ caller }) => caller)).toEqual(['subject https://idp.example.com alice']);
  });

  it('refuses a call over a limit with 429, Retry-After and -32029 naming the limit', async () => {
    const { context, pool } = await session();
    const limit = { name: 'route:demo/concurrency/per-caller', inFlight: 2 };
    const { slots } = slotsAnswering(async () => ({ taken: false, limit }));
    const answer = await checkCall(checkHead('modern', limits), { ...context, concurrency: slots }, pool);
    expect(answer.status).toBe(429);
    expect(answer.headers).toMatchObject({ 'retry-after': '1', 'x-mcpgw-limit': limit.name });
    expect(JSON.parse(answer.body)).toMatchObject({ id: 5, error: { code: -32029, data: { outcome: 'limited', limit: limit.name, in_flight_limit: 2, backend: 'modern', tool: 'echo' } } });
  });

  it('takes no slot for a call the check refuses otherwise', async () => {
    const { context, pool } = await session();
    const { asked, slots } = slotsAnswering(async () => ({ taken: true, lease: { id: 'x', keys: ['k'] } }));
    expect((await checkCall(checkHead('jobs', { ...limits, 'mcp-session-id': 'forged' }), { ...context, concurrency: slots }, pool)).status).toBe(404);
    expect(asked).toEqual([]);
  });

  it('lets the call go uncounted when Redis cannot be asked (fail open)', async () => {
    const { context, pool } = await session();
    const { slots } = slotsAnswering(async () => {
      throw new Error('Connection is closed.');
    });
    const answer = await checkCall(checkHead('modern', limits), { ...context, concurrency: slots }, pool);
    expect(answer.status).toBe(CHECK_STATUS.ALLOW);
    expect(answer.headers['x-mcpgw-concurrency-lease']).toBeUndefined();
  });

  it('refuses limits the call script would never write (nothing but Envoy may ask)', async () => {
    const { context, pool } = await session();
    const answer = await checkCall(checkHead('modern', { 'x-mcpgw-concurrency': '30000;lots' }), context, pool);
    expect(answer.status).toBe(400);
  });
});
