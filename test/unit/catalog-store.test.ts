import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { CATALOG_DEFAULTS, CatalogSettings, CatalogSnapshotMessage, CatalogStore, RelistSettings } from '../../control-plane/catalog/catalog-store';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { callLaneCatalogOf } from '../../control-plane/xds/translate/call-lane';
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

describe('catalog store: a route is made again only when what it is made of changed', () => {
  // Each listing answers with new objects, as a real fetch does.
  const lists: Record<string, Tool[]> = {};
  const store = new CatalogStore(
    async ({ url: target }) => {
      if (!lists[target]) throw new Error(`connect ECONNREFUSED ${target}`);
      return { tools: lists[target].map((listed) => ({ ...listed })), protocolVersion: '2025-11-25', sessionful: true };
    },
    CATALOG_DEFAULTS,
    quiet,
  );
  afterAll(() => store.close());

  it("keeps a route whose backends listed what they listed before, or kept failing alike, as it was, while another route's change is served", async () => {
    Object.assign(lists, { [url('weather')]: [tool('get_forecast')], [url('solo')]: [tool('ping')] });
    store.setGateway(ir);
    await store.refresh();
    const before = route(store.current(), 'demo');
    lists[url('solo')] = [tool('ping'), tool('pong')];
    await store.refresh();
    const after = route(store.current(), 'demo');
    expect(route(store.current(), 'solo').tools.map((exposed) => exposed.name)).toEqual(['solo__ping', 'solo__pong']);
    // jobs is down, weather answered the same: nothing of demo was made again.
    expect(after.tools).toBe(before.tools);
    expect(after.backends.find((backend) => backend.name === 'jobs')).toBe(before.backends.find((backend) => backend.name === 'jobs'));
    // When weather was last listed is fresh all the same.
    expect(after.backends.find((backend) => backend.name === 'weather')!.last_success_at >= before.backends.find((backend) => backend.name === 'weather')!.last_success_at).toBe(true);
  });

  it('makes the route again when a backend of it changed state, and serves it as a fresh store would', async () => {
    const before = route(store.current(), 'demo');
    lists[url('jobs')] = [tool('echo')];
    await store.refresh();
    const after = route(store.current(), 'demo');
    expect(after.tools).not.toBe(before.tools);
    expect(after.tools.map((exposed) => exposed.name)).toEqual(['jobs__echo', 'weather__get_forecast']);
    expect(after.backends.map((backend) => backend.state)).toEqual(['ok', 'ok']);
    const fresh = storeWith(lists);
    await fresh.store.refresh();
    expect(fresh.store.current().version).toBe(store.current().version);
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

describe('catalog store: Tool Service ids on one backend share its listing (issue 10)', () => {
  const ROUTES = 40;
  const fast: RelistSettings = { retryMinMs: 20, retryMaxMs: 80 };
  const shared = url('shared');
  /** ROUTES routes, each with a Tool Service id of its own on the same backend, under the same TLS-less transport and no credentials. */
  const manyRoutes = buildGatewayIR({
    routes: Array.from({ length: ROUTES }, (_, index) => ({
      key: `r${index}`,
      toolServices: [{ id: `r${index}-svc`, name: 'svc', url: shared, ...(index === 0 && { policy: { denyTools: ['drop_*'] } }) }],
    })),
  });
  const sharedStore = (lists: Record<string, Tool[]>) => {
    const fetched: string[] = [];
    const refreshes: number[] = [];
    const store = new CatalogStore(
      async ({ url: target }) => {
        fetched.push(target);
        if (!lists[target]) throw new Error(`connect ECONNREFUSED ${target}`);
        return { tools: lists[target], protocolVersion: '2025-11-25', sessionful: true };
      },
      CATALOG_DEFAULTS,
      quiet,
      fast,
    );
    store.on('refresh', (_outcome: string, toolServices: number) => refreshes.push(toolServices));
    return { store, fetched, refreshes, fetchNow: store.setGateway(manyRoutes) };
  };
  const until = async (what: string, check: () => boolean) => {
    for (let waited = 0; !check(); waited += 10) {
      if (waited > 10_000) throw new Error(`never: ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  const states = (store: CatalogStore) => new Set(store.current().routes.map((entry) => entry.backends[0].state));

  it('lists a backend once per refresh however many routes map it, and applies each route\'s policy to that one listing', async () => {
    const { store, fetched, refreshes, fetchNow } = sharedStore({ [shared]: [tool('echo'), tool('drop_table')] });
    expect(fetchNow).toHaveLength(ROUTES);
    await store.refresh(fetchNow);
    expect(fetched).toEqual([shared]);
    // The refresh counter still counts Tool Services: one listing served all of them.
    expect(refreshes).toEqual([ROUTES]);
    await store.refresh();
    expect(fetched).toEqual([shared, shared]);
    expect(route(store.current(), 'r0').tools.map((exposed) => exposed.name)).toEqual(['svc__echo']);
    expect(route(store.current(), 'r1').tools.map((exposed) => exposed.name)).toEqual(['svc__echo', 'svc__drop_table']);
    expect(route(store.current(), `r${ROUTES - 1}`).backends[0]).toMatchObject({ tool_service: `tool_service.r${ROUTES - 1}-svc`, state: 'ok' });
  });

  it("writes a listing's tools as JSON once for every route it serves, and anew once a refresh brings other tools, which the call lane then reads", async () => {
    const lists: Record<string, Tool[]> = { [shared]: [tool('echo')] };
    const { store, fetchNow } = sharedStore(lists);
    await store.refresh(fetchNow);
    const before = store.current();
    expect(route(before, 'r2').backends[0].tools_json).toBe(route(before, 'r1').backends[0].tools_json);
    const callLaneTools = (snapshot: CatalogSnapshotMessage, key: string) => [...callLaneCatalogOf(snapshot).routes.get(key)!.backends.get('svc')!.tools.keys()];
    expect(callLaneTools(before, 'r1')).toEqual(['echo']);
    lists[shared] = [tool('echo'), tool('forecast')];
    await store.refresh();
    const after = store.current();
    expect(after.version).not.toBe(before.version);
    for (const key of ['r1', 'r2']) {
      expect(route(after, key).backends[0].tools_json.map((json) => (JSON.parse(json) as Tool).name)).toEqual(['echo', 'forecast']);
      expect(callLaneTools(after, key)).toEqual(['echo', 'forecast']);
    }
    expect(callLaneTools(before, 'r1')).toEqual(['echo']);
  });

  it('has one degraded state and one re-listing schedule per backend, not one per route', async () => {
    const lists: Record<string, Tool[]> = { [shared]: [tool('echo')] };
    const { store, fetched, fetchNow } = sharedStore(lists);
    try {
      await store.refresh(fetchNow);
      delete lists[shared];
      expect(store.markDegraded({ toolServiceId: 'r7-svc', reason: 'tools/call echo: connection refused', route: 'r7' })).toBe(true);
      // Every route that maps the backend serves it stale at once, with the reason.
      expect(states(store)).toEqual(new Set(['stale']));
      expect(route(store.current(), 'r3').backends[0].last_error).toBe('tools/call echo: connection refused');
      await until('three re-listings', () => fetched.length >= 4);
      lists[shared] = [tool('echo')];
      await until('the backend to be ok again on every route', () => states(store).size === 1 && states(store).has('ok'));
      const listings = fetched.length;
      // Backoff of 20–80 ms: one schedule makes a handful of listings in this time, one per route would make dozens.
      expect(listings).toBeLessThan(10);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(fetched).toHaveLength(listings);
    } finally {
      store.close();
    }
  });

  it('joins list_changed reports of every route\'s id on the backend into one listing', async () => {
    const { store, fetched, fetchNow } = sharedStore({ [shared]: [tool('echo')] });
    try {
      await store.refresh(fetchNow);
      for (let index = 0; index < ROUTES; index++) expect(store.relistSoon(`tool_service.r${index}-svc`)).toBe(true);
      await until('the re-listing', () => fetched.length === 2);
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(fetched).toHaveLength(2);
    } finally {
      store.close();
    }
  });

  it('lists the same URL apart when what the listing authenticates with differs', async () => {
    const twoCredentials = buildGatewayIR({
      routes: [
        { key: 'a', toolServices: [{ id: 'a', name: 'svc', url: shared }] },
        { key: 'b', toolServices: [{ id: 'b', name: 'svc', url: shared, credentials: { mode: 'serviceAccount', tokenFile: '/run/token-b' } }] },
        { key: 'c', toolServices: [{ id: 'c', name: 'svc', url: shared, credentials: { mode: 'serviceAccount', tokenFile: '/run/token-b' } }] },
      ],
    });
    const fetched: string[] = [];
    const store = new CatalogStore(
      async ({ id }) => {
        fetched.push(id);
        return { tools: [tool('echo')], protocolVersion: '2025-11-25', sessionful: true };
      },
      CATALOG_DEFAULTS,
      quiet,
    );
    await store.refresh(store.setGateway(twoCredentials));
    expect(fetched.sort()).toEqual(['a', 'b']);
  });
});
