import { AddressInfo } from 'node:net';
import { PortalRegistrySource } from '../../control-plane/registry/portal-source';
import { RegistryController } from '../../control-plane/registry/registry-controller';
import { mergeRegistry } from '../../control-plane/registry/registry-state';
import { RegistryDocument, RegistrySource } from '../../control-plane/registry/source';
import { validateRegistry } from '../../control-plane/registry/validate';
import { closeServer } from '../../control-plane/shared/http-listen';
import { quietLogger as quiet } from '../support/quiet-logger';
import { DevPortal, startDevPortal } from '../../samples/dev-portal/dev-portal';

const route = (key: string, name = 'svc', port = 9000) => ({ key, toolServices: [{ name, url: `http://127.0.0.1:${port}/mcp` }] });
const serve = (routes: unknown[]) => mergeRegistry({ routes: [] }, validateRegistry({ routes })).registry;

describe('mergeRegistry (ADR-0013 per-route isolation)', () => {
  const current = serve([route('a'), route('b'), route('c')]);

  it('replaces valid routes, adds new ones and removes only undeclared ones', () => {
    const merge = mergeRegistry(current, validateRegistry({ routes: [route('a', 'other', 9001), route('b'), route('d')] }));
    expect(merge.registry.routes.map((r) => r.key)).toEqual(['a', 'b', 'd']);
    expect(merge).toMatchObject({ added: ['d'], removed: ['c'], changed: ['a'], rejected: [] });
  });

  it('keeps the previous state of a declared route that is now invalid', () => {
    const merge = mergeRegistry(current, validateRegistry({ routes: [{ key: 'a', toolServices: [{ name: 'Bad', url: 'x' }] }, route('b'), route('c')] }));
    expect(merge.registry.routes.find((r) => r.key === 'a')).toEqual(current.routes[0]);
    expect(merge.removed).toEqual([]);
    expect(merge.rejected.map((problem) => problem.route)).toEqual(['a', 'a']);
  });

  it('does not serve a new route that is invalid', () => {
    const merge = mergeRegistry(current, validateRegistry({ routes: [route('a'), route('b'), route('c'), { key: 'n', toolServices: [] }] }));
    expect(merge.registry.routes.map((r) => r.key)).toEqual(['a', 'b', 'c']);
    expect(merge.added).toEqual([]);
  });

  it('keeps a route whose previous state clashes with a new route, and rejects the newcomer', () => {
    const withId = (key: string, port: number) => ({ key, toolServices: [{ id: 'shared', name: 'svc', url: `http://127.0.0.1:${port}/mcp` }] });
    const before = serve([withId('a', 1)]);
    // 'a' turns invalid (kept at port 1) while new route 'b' claims the same id with port 2.
    const merge = mergeRegistry(before, validateRegistry({ routes: [{ key: 'a', toolServices: [] }, withId('b', 2)] }));
    expect(merge.registry.routes.map((r) => r.key)).toEqual(['a']);
    expect(merge.rejected.some((problem) => problem.route === 'b')).toBe(true);
  });
});

class ScriptedSource implements RegistrySource {
  readonly description = 'scripted';
  readonly answers: (RegistryDocument | 'unchanged' | Error)[] = [];
  async poll(): Promise<RegistryDocument | 'unchanged'> {
    const next = this.answers.shift() ?? 'unchanged';
    if (next instanceof Error) throw next;
    return next;
  }
}

describe('RegistryController', () => {
  it('keeps serving what it has while the source fails, and reports the failure', async () => {
    const source = new ScriptedSource();
    const controller = new RegistryController(source, { refreshIntervalMs: 1000 }, quiet);
    const updates: string[][] = [];
    controller.on('update', (registry) => updates.push(registry.routes.map((r: { key: string }) => r.key)));
    source.answers.push({ revision: '1', body: { routes: [route('a')] } }, new Error('Portal answered 503'), { revision: '2', body: { routes: [] } });
    expect(await controller.pollOnce()).toBe('changed');
    expect(await controller.pollOnce()).toBe('failed');
    expect(controller.current().routes.map((r) => r.key)).toEqual(['a']);
    expect(controller.currentStatus().lastError?.message).toBe('Portal answered 503');
    expect(await controller.pollOnce()).toBe('changed');
    expect(updates).toEqual([['a'], []]);
  });

  it('restores Redis last-good routes only on a cold start, and the source wins once it answers', async () => {
    const source = new ScriptedSource();
    const controller = new RegistryController(source, { refreshIntervalMs: 1000 }, quiet);
    source.answers.push(new Error('unreachable'));
    expect(await controller.pollOnce()).toBe('failed');
    controller.restore(serve([route('saved')]).routes);
    expect(controller.currentStatus().origin).toBe('redis-last-good');
    controller.restore(serve([route('other')]).routes);
    expect(controller.current().routes.map((r) => r.key)).toEqual(['saved']);
    source.answers.push({ revision: '1', body: { routes: [route('live')] } });
    await controller.pollOnce();
    expect(controller.current().routes.map((r) => r.key)).toEqual(['live']);
    expect(controller.currentStatus().origin).toBe('source');
  });
});

describe('Portal client against the dev Portal', () => {
  let portal: DevPortal;
  let source: PortalRegistrySource;
  const abort = new AbortController();

  beforeAll(async () => {
    portal = await startDevPortal({ host: '127.0.0.1', port: 0, token: 's3cret' });
    portal.setDocument({ routes: [route('a')] });
    const { port } = portal.server.address() as AddressInfo;
    source = new PortalRegistrySource({ baseUrl: `http://127.0.0.1:${port}`, token: 's3cret' });
  });
  afterAll(async () => {
    abort.abort();
    await closeServer(portal.server);
  });

  it('fetches the document with its revision, then long-polls until it changes', async () => {
    const first = await source.poll(undefined, 0, abort.signal);
    expect(first).not.toBe('unchanged');
    const { revision, body } = first as RegistryDocument;
    expect(body).toMatchObject({ routes: [route('a')] });

    const started = Date.now();
    const waiting = source.poll(revision, 10_000, abort.signal);
    setTimeout(() => portal.setDocument({ routes: [route('b')] }), 200);
    const next = (await waiting) as RegistryDocument;
    expect(next.body).toMatchObject({ routes: [route('b')] });
    expect(next.revision).not.toBe(revision);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('answers unchanged when nothing changed within the wait', async () => {
    const { revision } = (await source.poll(undefined, 0, abort.signal)) as RegistryDocument;
    expect(await source.poll(revision, 1000, abort.signal)).toBe('unchanged');
  });

  it('rejects on error statuses and bad credentials, naming the status', async () => {
    const { port } = portal.server.address() as AddressInfo;
    const anonymous = new PortalRegistrySource({ baseUrl: `http://127.0.0.1:${port}` });
    await expect(anonymous.poll(undefined, 0, abort.signal)).rejects.toThrow(/Portal answered 401/);
  });

  it('rejects when the Portal is unreachable', async () => {
    const closed = new PortalRegistrySource({ baseUrl: 'http://127.0.0.1:1', requestTimeoutMs: 1000 });
    await expect(closed.poll(undefined, 0, abort.signal)).rejects.toThrow(/Portal unreachable at http:\/\/127.0.0.1:1/);
  });
});
