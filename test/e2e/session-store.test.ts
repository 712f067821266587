import Redis from 'ioredis';
import { waitFor } from '../../control-plane/devstack/processes';
import {
  ClientFieldsTooLargeError,
  GatewaySession,
  MemorySessionStore,
  RedisSessionStore,
  SESSION_DEFAULTS,
  SessionGoneError,
  SessionStore,
} from '../../control-plane/sidecar/sessions/session-store';
import { claimOpenedBackendSession } from '../../control-plane/sidecar/sessions/backend-session-claim';
import { BackendRequests } from '../../control-plane/sidecar/sessions/backend-sessions';
import { BackendView } from '../../control-plane/sidecar/route-catalog';
import { CancellableToolService } from '../support/cancellable-tool-service';
import { TestRedis } from '../support/redis-server';
import { testDir } from '../support/gateway-fixture';
import { quietLogger } from '../support/quiet-logger';

/** The sidecar's session store against a real redis-server: expiry races, size bounds, a frozen Redis. */
describe('Redis session store (real Redis)', () => {
  let redis: TestRedis;
  let inspect: Redis;
  let store: RedisSessionStore;
  const prefix = 'test:';
  const fields = { route: 'demo', protocolVersion: '2025-11-25', clientInfo: { name: 'agent', version: '1' }, clientCapabilities: {} };

  beforeAll(async () => {
    redis = await TestRedis.start(testDir('session-store'));
    inspect = redis.client();
    store = new RedisSessionStore({ url: redis.url, prefix, idleTtlSeconds: 60 });
    expect(await store.connected(5000)).toBe(true);
  });

  afterAll(async () => {
    await store?.close();
    inspect?.disconnect();
    await redis?.stop();
  });

  it('records a backend session and pushes the idle expiry back', async () => {
    const session = await store.create(fields);
    await inspect.expire(`${prefix}session:${session.id}`, 5);
    expect(await store.claimBackend(session.id, 'jobs', 'backend-1')).toBe('backend-1');
    expect(await store.claimBackend(session.id, 'jobs', 'backend-2')).toBe('backend-1');
    expect(await inspect.ttl(`${prefix}session:${session.id}`)).toBeGreaterThan(5);
  });

  it('leaves no key behind when the session ended (DELETE or expiry) while a backend session was being opened', async () => {
    const session = await store.create(fields);
    const seen = await store.get(session.id);
    expect(seen).toBeDefined();
    // The client's DELETE lands between the call's session lookup and the recording of the backend session it opened.
    await store.remove(session.id);
    await expect(store.claimBackend(session.id, 'jobs', 'backend-opened-meanwhile')).rejects.toBeInstanceOf(SessionGoneError);
    expect(await inspect.exists(`${prefix}session:${session.id}`)).toBe(0);
    expect(await store.get(session.id)).toBeUndefined();
  });

  it('refuses an initialize whose clientInfo and capabilities exceed the limit, naming it, and stores nothing', async () => {
    const before = await inspect.dbsize();
    const huge = { ...fields, clientInfo: { name: 'agent', version: '1', padding: 'x'.repeat(SESSION_DEFAULTS.maxClientFieldsBytes) } };
    const refused = store.create(huge);
    await expect(refused).rejects.toBeInstanceOf(ClientFieldsTooLargeError);
    await expect(refused).rejects.toThrow(`at most ${SESSION_DEFAULTS.maxClientFieldsBytes} bytes`);
    expect(await inspect.dbsize()).toBe(before);
  });

  it('counts capabilities with clientInfo, and accepts what fits under a lower limit set by the operator', async () => {
    const small = new RedisSessionStore({ url: redis.url, prefix, idleTtlSeconds: 60, maxClientFieldsBytes: 200 });
    try {
      expect(await small.connected(5000)).toBe(true);
      await expect(small.create({ ...fields, clientCapabilities: { experimental: { blob: 'y'.repeat(200) } } })).rejects.toThrow('at most 200 bytes');
      await expect(small.create(fields)).resolves.toMatchObject({ route: 'demo' });
    } finally {
      await small.close();
    }
  });

  // Last: it freezes Redis.
  it('fails fast with an error naming Redis when Redis hangs (SIGSTOP), instead of waiting for it', async () => {
    const session = await store.create(fields);
    redis.freeze();
    try {
      const hanging = Symbol('still waiting');
      // A bound far above the command timeout (500 ms): this checks that the call ends, not how fast.
      const outcome = await Promise.race([
        store.get(session.id).then(
          () => 'answered',
          (error: Error) => error,
        ),
        new Promise((resolve) => setTimeout(() => resolve(hanging), 5000)),
      ]);
      expect(outcome).toBeInstanceOf(Error);
      expect((outcome as Error).message).toMatch(/session store \(Redis\) unavailable: .*timed out/);
    } finally {
      redis.thaw();
    }
  });
});

describe('in-memory session store', () => {
  const fields = { route: 'demo', protocolVersion: '2025-11-25', clientInfo: { name: 'agent', version: '1' }, clientCapabilities: {} };

  it('applies the same bound and the same answer for a session that ended', async () => {
    const store: SessionStore = new MemorySessionStore(60, { maxClientFieldsBytes: 100 });
    await expect(store.create({ ...fields, clientInfo: { name: 'a'.repeat(100) } })).rejects.toBeInstanceOf(ClientFieldsTooLargeError);
    const session: GatewaySession = await store.create(fields);
    await store.remove(session.id);
    await expect(store.claimBackend(session.id, 'jobs', 'backend-1')).rejects.toBeInstanceOf(SessionGoneError);
  });
});

/** A backend session opened for a gateway session that ended meanwhile is ended at the backend too. */
describe('claiming a backend session just opened (real Redis, real stateful MCP SDK backend)', () => {
  let redis: TestRedis;
  let store: RedisSessionStore;
  let backendService: CancellableToolService;
  let backend: BackendView;
  const warnings: unknown[] = [];
  const fields = { route: 'demo', protocolVersion: '2025-11-25', clientInfo: { name: 'agent', version: '1' }, clientCapabilities: {} };
  const caller = { headers: {}, authorization: 'Bearer agent-token' };
  // Straight to the backend (what is tested is the claim, not the way there), with the agent's token as its credential.
  const requests = new BackendRequests(() => fetch, { authorizationFor: async (_backend, authorization) => authorization }, 5000);

  const context = () => ({
    sessions: store,
    backendSessions: requests,
    log: { ...quietLogger, warn: (...args: unknown[]) => void warnings.push(args) },
  });

  beforeAll(async () => {
    redis = await TestRedis.start(testDir('backend-session-claim'));
    store = new RedisSessionStore({ url: redis.url, prefix: 'claim:', idleTtlSeconds: 60 });
    expect(await store.connected(5000)).toBe(true);
    backendService = await CancellableToolService.start(['agent-token']);
    backend = {
      name: 'cancellable', toolService: 'tool_service.cancellable', state: 'ok', toolNames: new Set(['wait', 'whoami']),
      lastSuccessAt: '', lastError: '', failingSince: '', url: backendService.url, fallbackText: '', deniedTools: new Map(), protocolVersion: '2025-11-25',
      sessionful: true, alsoModern: false, cluster: 'unused', credentials: { mode: 'none', audience: '', resource: '', scopes: [] }, capabilities: {}, schemeName: 'cancellable',
    };
  });

  afterAll(async () => {
    await backendService?.stop();
    await store?.close();
    await redis?.stop();
  });

  const openFor = async (session: GatewaySession) => ({
    backendSessionId: await requests.open(backend, session, caller),
    protocolVersion: session.protocolVersion,
    caller,
  });

  it('keeps the backend session it opened when the gateway session is still there', async () => {
    const session = await store.create(fields);
    const opened = await openFor(session);
    expect(await claimOpenedBackendSession(context(), backend, session, opened)).toEqual({ kind: 'claimed', backendSessionId: opened.backendSessionId });
    expect((await store.get(session.id))?.backends).toEqual({ cancellable: opened.backendSessionId });
    expect(backendService.closedSessions).not.toContain(opened.backendSessionId);
  });

  it('ends the backend session at the backend when the gateway session was deleted while it was being opened', async () => {
    const session = await store.create(fields);
    const opened = await openFor(session);
    await store.remove(session.id);
    expect(await claimOpenedBackendSession(context(), backend, session, opened)).toEqual({ kind: 'session-gone' });
    await waitFor('the backend to see the DELETE', async () => (backendService.closedSessions.includes(opened.backendSessionId) ? true : undefined), { timeoutMs: 5000 });
  });

  it('ends its own surplus backend session when another replica recorded one first, and answers with that one', async () => {
    const session = await store.create(fields);
    const first = await openFor(session);
    const second = await openFor(session);
    await claimOpenedBackendSession(context(), backend, session, first);
    expect(await claimOpenedBackendSession(context(), backend, session, second)).toEqual({ kind: 'claimed', backendSessionId: first.backendSessionId });
    await waitFor('the backend to see the DELETE', async () => (backendService.closedSessions.includes(second.backendSessionId) ? true : undefined), { timeoutMs: 5000 });
    expect(backendService.closedSessions).not.toContain(first.backendSessionId);
  });
});
