import { CachedSessionStore, SessionEndings } from '../../control-plane/sidecar/sessions/session-cache';
import { MemorySessionStore } from '../../control-plane/sidecar/sessions/session-store';
import { quietLogger } from '../support/quiet-logger';

/** Two replicas' caches over one shared store, told of endings as Redis pub/sub would tell them. */
function replicas(freshMs = 60_000, staleOnErrorMs = 60_000) {
  const shared = new MemorySessionStore(3600);
  const listeners: ((id: string) => void)[] = [];
  let reads = 0;
  let redisDown = false;
  const counted = Object.assign(Object.create(shared) as MemorySessionStore, {
    get: (id: string) => {
      reads++;
      if (redisDown) return Promise.reject(new Error('session store (Redis) unavailable: Connection is closed.'));
      return shared.get(id);
    },
  });
  const endings = (): SessionEndings => ({
    publish: async (id) => listeners.forEach((listener) => listener(id)),
    onEnded: (listener) => listeners.push(listener),
    close: async () => undefined,
  });
  const options = { freshMs, maxEntries: 2, staleOnErrorMs };
  return {
    a: new CachedSessionStore(counted, endings(), options, quietLogger),
    b: new CachedSessionStore(counted, endings(), options, quietLogger),
    shared,
    reads: () => reads,
    setRedisDown: (down: boolean) => (redisDown = down),
  };
}

const fields = { route: 'demo', protocolVersion: '2025-11-25', clientInfo: {}, clientCapabilities: {} };

describe('sessions cached in the sidecar, Redis the source of truth', () => {
  it('reads a session once while it is fresh', async () => {
    const { a, reads } = replicas();
    const session = await a.create(fields);
    for (let call = 0; call < 3; call++) expect((await a.get(session.id))?.route).toBe('demo');
    expect(reads()).toBe(0);
  });

  it('reads it again once it is no longer fresh (which pushes its idle expiry back)', async () => {
    const { a, reads } = replicas(0);
    const session = await a.create(fields);
    await a.get(session.id);
    await a.get(session.id);
    expect(reads()).toBe(2);
  });

  it('forgets a session on every replica the moment any replica ends it', async () => {
    const { a, b } = replicas();
    const session = await a.create(fields);
    expect(await b.get(session.id)).toBeDefined();
    await a.remove(session.id);
    expect(await b.get(session.id)).toBeUndefined();
    expect(await a.get(session.id)).toBeUndefined();
  });

  it('keeps its copy of the backend sessions in step with claims and renewals', async () => {
    const { a } = replicas();
    const session = await a.create(fields);
    expect(await a.claimBackend(session.id, 'jobs', 'one')).toBe('one');
    expect((await a.get(session.id))?.backends).toEqual({ jobs: 'one' });
    await a.forgetBackend(session.id, 'jobs', 'one');
    expect((await a.get(session.id))?.backends).toEqual({});
  });

  it('drops every replica’s copy when any replica records or forgets a backend session: the next read sees it (ADR-0018)', async () => {
    const { a, b } = replicas();
    const session = await a.create(fields);
    expect((await b.get(session.id))?.backends).toEqual({});
    await a.claimBackend(session.id, 'jobs', 'opened-by-a');
    expect((await b.get(session.id))?.backends).toEqual({ jobs: 'opened-by-a' });
    await a.forgetBackend(session.id, 'jobs', 'opened-by-a');
    expect((await b.get(session.id))?.backends).toEqual({});
  });

  it('reads a fresh copy when asked: a backend session recorded while the replicas were not told is seen at once', async () => {
    const { a, shared } = replicas();
    const session = await a.create(fields);
    // Recorded in Redis, its message lost.
    await shared.claimBackend(session.id, 'jobs', 'opened-by-b');
    expect((await a.get(session.id))?.backends).toEqual({});
    expect((await a.get(session.id, { fresh: true }))?.backends).toEqual({ jobs: 'opened-by-b' });
    expect((await a.get(session.id))?.backends).toEqual({ jobs: 'opened-by-b' });
  });

  it('tells its listeners of a backend session another replica recorded, after dropping its copy (a held stream listens there at once)', async () => {
    const { a, b } = replicas();
    const session = await a.create(fields);
    await b.get(session.id);
    const seen: (string | undefined)[] = [];
    b.onChanged((id) => void b.get(id).then((read) => seen.push(read?.backends.jobs)));
    await a.claimBackend(session.id, 'jobs', 'backend-1');
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen).toEqual(['backend-1']);
  });

  it('hands out copies, so a caller cannot change the cached session', async () => {
    const { a } = replicas();
    const session = await a.create(fields);
    (await a.get(session.id))!.backends.jobs = 'forged';
    expect((await a.get(session.id))?.backends).toEqual({});
  });

  it('holds at most maxEntries sessions, dropping the oldest', async () => {
    const { a, reads } = replicas();
    const [first, second, third] = [await a.create(fields), await a.create(fields), await a.create(fields)];
    await a.get(second.id);
    await a.get(third.id);
    expect(reads()).toBe(0);
    await a.get(first.id);
    expect(reads()).toBe(1);
  });

  it('serves a session it read recently while Redis cannot be read (a failover), and fails once that copy is too old', async () => {
    const { a, b, setRedisDown } = replicas(0, 60_000);
    const session = await a.create(fields);
    setRedisDown(true);
    expect((await a.get(session.id))?.route).toBe('demo');
    // b never read it: nothing to serve, the failure is the caller's.
    await expect(b.get(session.id)).rejects.toThrow('Redis');
    setRedisDown(false);
    const { a: strict, setRedisDown: setStrictDown } = replicas(0, 0);
    const other = await strict.create(fields);
    setStrictDown(true);
    await expect(strict.get(other.id)).rejects.toThrow('Redis');
  });
});
