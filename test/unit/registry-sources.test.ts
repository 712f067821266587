import * as fs from 'node:fs';
import { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { FileRegistrySource } from '../../control-plane/registry/file-source';
import { PortalRegistrySource } from '../../control-plane/registry/portal-source';
import { RegistryController, RegistryPollResult } from '../../control-plane/registry/registry-controller';
import { mergeRegistry } from '../../control-plane/registry/registry-state';
import { RegistryDocument, RegistryDocumentError, RegistrySource } from '../../control-plane/registry/source';
import { validateRegistry } from '../../control-plane/registry/validate';
import { closeServer } from '../../control-plane/shared/http-listen';
import { quietLogger as quiet } from '../support/quiet-logger';
import { DevPortal, startDevPortal } from '../../samples/dev-portal/dev-portal';

const route = (key: string, name = 'svc', port = 9000) => ({ key, toolServices: [{ name, url: `http://127.0.0.1:${port}/mcp` }] });
const serve = (routes: unknown[]) => mergeRegistry({ routes: [] }, validateRegistry({ routes })).registry;

describe('mergeRegistry (per-route isolation, docs/adr/0000-portal-registry-decisions.md §4)', () => {
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

  it('keeps the last good registry when a document is not a registry at all, and says so until a good one comes', async () => {
    const source = new ScriptedSource();
    const controller = new RegistryController(source, { refreshIntervalMs: 1000 }, quiet);
    const polls: RegistryPollResult[] = [];
    controller.on('poll', (result: RegistryPollResult) => polls.push(result));
    source.answers.push(
      { revision: '1', body: { routes: [route('a'), route('b')] } },
      { revision: '2', body: {} },
      { revision: '3', body: { routes: null } },
      { revision: '4', body: null },
      new RegistryDocumentError('syntax', 'Portal sent a registry document that is not JSON', '5'),
      { revision: '6', body: { routes: [route('a')] } },
    );
    expect(await controller.pollOnce()).toBe('changed');
    expect(await controller.pollOnce()).toBe('rejected');
    const firstRejection = controller.currentStatus().rejectedDocument!;
    expect(firstRejection).toMatchObject({ reason: 'not-a-registry', revision: '2', message: expect.stringContaining('routes') });
    expect(await controller.pollOnce()).toBe('rejected');
    expect(await controller.pollOnce()).toBe('rejected');
    expect(await controller.pollOnce()).toBe('rejected');
    expect(controller.current().routes.map((r) => r.key)).toEqual(['a', 'b']);
    expect(controller.currentStatus()).toMatchObject({
      revision: '1',
      rejectedDocument: { reason: 'syntax', revision: '5', since: firstRejection.since },
      lastError: { message: 'Portal sent a registry document that is not JSON' },
    });
    expect(polls.map((poll) => poll.rejection)).toEqual([undefined, 'not-a-registry', 'not-a-registry', 'empty', 'syntax']);
    expect(await controller.pollOnce()).toBe('changed');
    expect(controller.current().routes.map((r) => r.key)).toEqual(['a']);
    expect(controller.currentStatus().rejectedDocument).toBeUndefined();
  });

  it('reports the steps of a changed document (reading it when the source measured that, validating, merging), and none for others', async () => {
    const source = new ScriptedSource();
    const controller = new RegistryController(source, { refreshIntervalMs: 1000 }, quiet);
    const polls: RegistryPollResult[] = [];
    controller.on('poll', (result: RegistryPollResult) => polls.push(result));
    source.answers.push({ revision: '1', body: { routes: [route('a')] }, readMs: 7 }, { revision: '2', body: { routes: [route('b')] } }, { revision: '3', body: {} });
    expect(await controller.pollOnce()).toBe('changed');
    expect(await controller.pollOnce()).toBe('changed');
    expect(await controller.pollOnce()).toBe('rejected');
    expect(polls[0].stepsMs).toEqual({ read: 7, validate: expect.any(Number), merge: expect.any(Number) });
    expect(Object.keys(polls[1].stepsMs!)).toEqual(['validate', 'merge']);
    expect(polls[2].stepsMs).toBeUndefined();
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
    // Reading the answer, not the long-poll's wait (200 ms here): the first step of a registry update.
    expect(next.readMs).toBeGreaterThanOrEqual(0);
    expect(next.readMs).toBeLessThan(200);
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

describe('static registry file source', () => {
  const abort = new AbortController();
  const yamlOf = (key: string) => `routes:\n  - key: ${key}\n    toolServices:\n      - name: svc\n        url: http://127.0.0.1:9000/mcp\n`;
  afterAll(() => abort.abort());

  it('follows a Kubernetes ConfigMap update: the `..data` symlink swapped to a new timestamped directory', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-configmap-'));
    try {
      // The layout the kubelet writes: registry.yaml -> ..data/registry.yaml, ..data -> ..<timestamp>
      const version = (name: string, key: string) => {
        fs.mkdirSync(path.join(dir, name));
        fs.writeFileSync(path.join(dir, name, 'registry.yaml'), yamlOf(key));
      };
      version('..2026_01_01_00_00_00.1', 'before');
      fs.symlinkSync('..2026_01_01_00_00_00.1', path.join(dir, '..data'));
      fs.symlinkSync('..data/registry.yaml', path.join(dir, 'registry.yaml'));
      const source = new FileRegistrySource(path.join(dir, 'registry.yaml'), 100);
      const first = (await source.poll(undefined, 0, abort.signal)) as RegistryDocument;
      expect(first.body).toMatchObject({ routes: [{ key: 'before' }] });

      const waiting = source.poll(first.revision, 20_000, abort.signal);
      version('..2026_01_01_00_01_00.2', 'after');
      fs.symlinkSync('..2026_01_01_00_01_00.2', path.join(dir, '..data_tmp'));
      fs.renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
      fs.rmSync(path.join(dir, '..2026_01_01_00_00_00.1'), { recursive: true });
      expect(((await waiting) as RegistryDocument).body).toMatchObject({ routes: [{ key: 'after' }] });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a file that is not YAML with its revision, so the next poll waits for the file to change', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-syntax-'));
    try {
      const file = path.join(dir, 'registry.yaml');
      fs.writeFileSync(file, 'routes: [\n');
      const source = new FileRegistrySource(file, 100);
      const refused = await source.poll(undefined, 0, abort.signal).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(RegistryDocumentError);
      expect(refused).toMatchObject({ reason: 'syntax', revision: expect.any(String), message: expect.stringContaining(file) });
      expect(await source.poll((refused as RegistryDocumentError).revision, 300, abort.signal)).toBe('unchanged');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
