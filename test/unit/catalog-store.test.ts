import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { CATALOG_DEFAULTS, CatalogSettings, CatalogSnapshotMessage, CatalogStore, RelistSettings } from '../../control-plane/catalog/catalog-store';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { quietLogger as quiet } from '../support/quiet-logger';

const tool = (name: string): Tool => ({ name, inputSchema: { type: 'object' } });
const url = (service: string) => `http://127.0.0.1:1/${service}`;

const ir = buildGatewayIR({
  routes: [
    {
      key: 'demo',
      toolServices: [
        { id: 'weather', name: 'weather', url: url('weather') },
        { id: 'jobs', name: 'jobs', url: url('jobs') },
      ],
    },
    { key: 'solo', toolServices: [{ id: 'solo', name: 'solo', url: url('solo') }] },
  ],
});

/** A store whose backends answer from `lists` (by URL); a missing entry is a backend that is down. */
function storeWith(lists: Record<string, Tool[]>, settings: Partial<CatalogSettings> = {}, relist?: RelistSettings) {
  const fetched: string[] = [];
  const store = new CatalogStore(
    async ({ url: target }) => {
      fetched.push(target);
      const tools = lists[target];
      if (!tools) throw new Error(`connect ECONNREFUSED ${target}`);
      return { tools, protocolVersion: '2025-11-25', sessionful: true };
    },
    { ...CATALOG_DEFAULTS, ...settings },
    quiet,
    relist,
  );
  store.setGateway(ir);
  return { store, fetched };
}

const route = (snapshot: CatalogSnapshotMessage, key: string) => snapshot.routes.find((candidate) => candidate.route_key === key)!;

describe('catalog store: the route catalog sidecars serve', () => {
  it("points each served tool at its access rule: the first of its backend's rules whose pattern matches (docs/auth.md)", async () => {
    const guarded = buildGatewayIR({
      routes: [
        {
          key: 'guarded',
          auth: { issuer: 'https://idp.example', groupsClaim: ['realm_access', 'roles'] },
          toolServices: [
            {
              id: 'weather',
              name: 'weather',
              url: url('weather'),
              policy: {
                rules: [
                  { tools: ['get_*'], requiredScopes: ['tools:read'] },
                  { tools: ['*'], allowGroups: ['engineering'] },
                ],
              },
            },
            { id: 'jobs', name: 'jobs', url: url('jobs'), policy: { rules: [{ tools: ['run_*'], allowSubjects: ['alice'], allowClients: ['agent-cli'] }] } },
          ],
        },
      ],
    });
    const store = new CatalogStore(
      async ({ url: target }) => ({
        tools: target === url('weather') ? [tool('get_forecast'), tool('delete_city')] : [tool('run_job'), tool('echo')],
        protocolVersion: '2025-11-25',
        sessionful: true,
      }),
      CATALOG_DEFAULTS,
      quiet,
    );
    store.setGateway(guarded);
    await store.refresh();
    const catalog = route(store.current(), 'guarded');
    expect(catalog.groups_claim).toEqual(['realm_access', 'roles']);
    expect(catalog.access_rules).toEqual([
      { required_scopes: [], allow_subjects: ['alice'], allow_groups: [], allow_clients: ['agent-cli'] },
      { required_scopes: ['tools:read'], allow_subjects: [], allow_groups: [], allow_clients: [] },
      { required_scopes: [], allow_subjects: [], allow_groups: ['engineering'], allow_clients: [] },
    ]);
    expect(catalog.tools.map((exposed) => [exposed.name, exposed.access_rule])).toEqual([
      ['jobs__run_job', 1],
      ['jobs__echo', 0],
      ['weather__get_forecast', 2],
      ['weather__delete_city', 3],
    ]);
  });

  it('carries the separator, the page size and each route\'s served tools, decided once for every sidecar', async () => {
    const { store } = storeWith(
      { [url('weather')]: [tool('get_forecast'), tool('bad name')], [url('jobs')]: [tool('echo'), tool('echo')], [url('solo')]: [tool('ping')] },
      { toolNameSeparator: '.', toolNamePolicy: 'warn', toolsListPageSize: 7 },
    );
    await store.refresh();
    const snapshot = store.current();
    expect(snapshot.tool_name_separator).toBe('.');
    expect(snapshot.tools_list_page_size).toBe(7);
    const demo = route(snapshot, 'demo');
    expect(demo.backends.map((backend) => [backend.name, backend.tools_json.length])).toEqual([
      ['jobs', 2],
      ['weather', 2],
    ]);
    expect(demo.tools).toEqual([
      { name: 'jobs.echo', backend: 'jobs', tool_index: 0, access_rule: 0 },
      { name: 'weather.get_forecast', backend: 'weather', tool_index: 0, access_rule: 0 },
    ]);
    expect(demo.access_rules).toEqual([]);
    expect(demo.groups_claim).toEqual([]);
    expect(store.toolFindings('demo').map(({ tool: name, rule, action }) => [name, rule, action])).toEqual([
      ['jobs.echo', 'client-tool-name', 'kept'],
      ['jobs.echo', 'duplicate-name', 'dropped'],
      ['weather.get_forecast', 'client-tool-name', 'kept'],
      ['weather.bad name', 'mcp-tool-name', 'dropped'],
    ]);
    expect(store.toolFindings('solo')).toHaveLength(1);
  });

  it('applies the cap per route', async () => {
    const { store } = storeWith(
      { [url('weather')]: [tool('a'), tool('b')], [url('jobs')]: [tool('c'), tool('d')], [url('solo')]: [tool('e')] },
      { maxToolsPerRoute: 3 },
    );
    await store.refresh();
    expect(route(store.current(), 'demo').tools.map((exposed) => exposed.name)).toEqual(['jobs__c', 'jobs__d', 'weather__a']);
    expect(store.toolFindings('demo')).toEqual([
      { tool: 'weather__b', backend: 'weather', rule: 'route-tool-cap', action: 'dropped', reason: 'the route already serves 3 tools (the per-route cap)' },
    ]);
    expect(route(store.current(), 'solo').tools).toHaveLength(1);
  });

  it('keeps serving a failing backend\'s last-good tools, marked stale, under the same rules', async () => {
    const lists: Record<string, Tool[]> = { [url('weather')]: [tool('get_forecast')], [url('jobs')]: [tool('echo')], [url('solo')]: [] };
    const { store } = storeWith(lists);
    await store.refresh();
    delete lists[url('weather')];
    await store.refresh();
    const demo = route(store.current(), 'demo');
    expect(demo.backends.find((backend) => backend.name === 'weather')).toMatchObject({
      state: 'stale',
      last_error: `connect ECONNREFUSED ${url('weather')}`,
      failing_since: expect.stringMatching(/^\d{4}-/),
    });
    expect(demo.tools.map((exposed) => exposed.name)).toEqual(['jobs__echo', 'weather__get_forecast']);
  });

  it('refreshes one route on demand, and says so for an unknown route', async () => {
    const { store, fetched } = storeWith({ [url('weather')]: [], [url('jobs')]: [], [url('solo')]: [tool('ping')] });
    expect(await store.refreshNow('solo')).toBe(true);
    expect(fetched).toEqual([url('solo')]);
    expect(route(store.current(), 'solo').backends[0].state).toBe('ok');
    expect(await store.refreshNow('nope')).toBe(false);
    expect(fetched).toEqual([url('solo')]);
    expect(await store.refreshNow()).toBe(true);
    expect(fetched.sort()).toEqual([url('jobs'), url('solo'), url('solo'), url('weather')]);
  });

  it('lets a refresh asked for while a fetch runs join it, so an older answer never lands after a newer one', async () => {
    let release!: () => void;
    let calls = 0;
    const store = new CatalogStore(
      async () => {
        calls++;
        await new Promise<void>((resolve) => (release = resolve));
        return { tools: [tool('ping')], protocolVersion: '2025-11-25', sessionful: true };
      },
      CATALOG_DEFAULTS,
      quiet,
    );
    store.setGateway(ir);
    const periodic = store.refreshNow('solo');
    const onDemand = store.refreshNow('solo');
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await Promise.all([periodic, onDemand]);
    expect(calls).toBe(1);
    expect(route(store.current(), 'solo').tools.map((exposed) => exposed.name)).toEqual(['solo__ping']);
  });

  it('changes the version when the settings change what is served, not on a repeated success', async () => {
    const lists = { [url('weather')]: [tool('get_forecast')], [url('jobs')]: [], [url('solo')]: [] };
    const first = storeWith(lists);
    await first.store.refresh();
    const version = first.store.current().version;
    await first.store.refresh();
    expect(first.store.current().version).toBe(version);
    const other = storeWith(lists, { toolNameSeparator: '-' });
    await other.store.refresh();
    expect(other.store.current().version).not.toBe(version);
  });
});

describe('catalog store: failing backends are listed again soon', () => {
  const fast: RelistSettings = { retryMinMs: 20, retryMaxMs: 80 };
  const stateOf = (store: CatalogStore, backend: string) => route(store.current(), 'demo').backends.find((candidate) => candidate.name === backend)!;
  const until = async (what: string, check: () => boolean) => {
    for (let waited = 0; !check(); waited += 10) {
      if (waited > 10_000) throw new Error(`never: ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  it('lists a backend that never answered again and again, and serves it once it answers, pushing the change', async () => {
    const lists: Record<string, Tool[]> = { [url('jobs')]: [tool('echo')], [url('solo')]: [] };
    const { store, fetched } = storeWith(lists, {}, fast);
    const changes: string[] = [];
    store.on('change', (snapshot: CatalogSnapshotMessage) => changes.push(snapshot.version));
    try {
      await store.refresh();
      expect(stateOf(store, 'weather').state).toBe('missing');
      await until('three more attempts', () => fetched.filter((target) => target === url('weather')).length >= 4);
      lists[url('weather')] = [tool('get_forecast')];
      await until('the backend to be served', () => stateOf(store, 'weather').state === 'ok');
      expect(route(store.current(), 'demo').tools.map((exposed) => exposed.name)).toEqual(['jobs__echo', 'weather__get_forecast']);
      expect(changes.at(-1)).toBe(store.current().version);
      const attempts = fetched.filter((target) => target === url('weather')).length;
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(fetched.filter((target) => target === url('weather')).length).toBe(attempts);
    } finally {
      store.close();
    }
  });

  it('serves a backend a sidecar reported failing as stale with the reason, and puts it back to ok when it lists again', async () => {
    const lists: Record<string, Tool[]> = { [url('weather')]: [tool('get_forecast')], [url('jobs')]: [tool('echo')], [url('solo')]: [] };
    const { store, fetched } = storeWith(lists, {}, fast);
    try {
      await store.refresh();
      delete lists[url('weather')];
      expect(store.markDegraded({ toolServiceId: 'weather', reason: 'tools/call get_forecast: connection refused', route: 'demo' })).toBe(true);
      expect(stateOf(store, 'weather')).toMatchObject({ state: 'stale', last_error: 'tools/call get_forecast: connection refused', failing_since: expect.stringMatching(/^\d{4}-/) });
      expect(route(store.current(), 'demo').tools.map((exposed) => exposed.name)).toEqual(['jobs__echo', 'weather__get_forecast']);
      await until('the re-listing to fail with its own cause', () => stateOf(store, 'weather').last_error.startsWith('connect ECONNREFUSED'));
      lists[url('weather')] = [tool('get_forecast')];
      await until('the backend to be ok again', () => stateOf(store, 'weather').state === 'ok');
      expect(fetched.filter((target) => target === url('jobs'))).toHaveLength(1);
      expect(store.markDegraded({ toolServiceId: 'nope', reason: 'x' })).toBe(false);
    } finally {
      store.close();
    }
  });

  it('lists nothing again once closed', async () => {
    const { store, fetched } = storeWith({ [url('jobs')]: [], [url('solo')]: [] }, {}, fast);
    await store.refresh();
    store.close();
    const attempts = fetched.length;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(fetched).toHaveLength(attempts);
  });
});
