import { LastGoodStore } from '../../control-plane/state/last-good-store';
import { TestRedis } from '../support/redis-server';
import { testDir } from '../support/gateway-fixture';
import { quietLogger } from '../support/quiet-logger';

/** The control plane's last-good store against a real redis-server, also while Redis hangs. */
describe('Redis last-good store (real Redis)', () => {
  let redis: TestRedis;
  let store: LastGoodStore;
  const warnings: string[] = [];
  const log = { ...quietLogger, warn: (message: string) => void warnings.push(message) };
  const route = (key: string, port: number) => ({ key, toolServices: [{ id: 'svc', name: 'svc', url: `http://127.0.0.1:${port}/mcp` }] });

  beforeAll(async () => {
    redis = await TestRedis.start(testDir('last-good-store'));
    store = new LastGoodStore(redis.url, 'lg:', log);
    await store.connect();
  });

  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('writes the newest mapping and catalog of a route, and removes it', async () => {
    store.saveMapping(route('a', 1));
    store.saveMapping(route('a', 2));
    store.saveCatalog('a', [{ name: 'svc', tool_service: 'tool_service.svc', tools_json: ['{"name":"t"}'], last_success_at: '2026-01-01T00:00:00.000Z' }]);
    store.saveMapping(route('b', 3));
    await store.flush();
    const saved = await store.loadAll();
    expect(saved.map(({ key, mapping, catalog }) => [key, mapping?.toolServices[0].url, catalog?.length])).toEqual([
      ['a', 'http://127.0.0.1:2/mcp', 1],
      ['b', 'http://127.0.0.1:3/mcp', undefined],
    ]);
    store.removeRoute('b');
    await store.flush();
    expect((await store.loadAll()).map((entry) => entry.key)).toEqual(['a']);
  });

  it('never holds its caller while Redis hangs, says so once, and writes again once Redis is back', async () => {
    redis.freeze();
    try {
      for (let port = 10; port < 20; port++) store.saveMapping(route('c', port));
      // Coalesced: one write for the route, which fails on the command timeout instead of waiting for ever.
      await store.flush();
      expect(warnings).toEqual(['redis last-good store unavailable; serving from memory only']);
    } finally {
      redis.thaw();
    }
    store.saveMapping(route('c', 99));
    await store.flush();
    const saved = await store.loadAll();
    expect(saved.find((entry) => entry.key === 'c')?.mapping?.toolServices[0].url).toBe('http://127.0.0.1:99/mcp');
  });
});
