import { CallHistory } from '../../control-plane/admin/call-history';
import { CallRecord } from '../../control-plane/admin/call-log';
import { dashboardData } from '../../control-plane/admin/dashboard';
import { callRecord } from './call-fixtures';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

/** What the operator dashboard's page gets: backend states in product language, from the catalog and the calls. */
describe("the dashboard's data", () => {

  const catalog = catalogSnapshot([
    {
      route_key: 'demo',
      backends: [
        backendCatalog('jobs', ['echo', 'whoami'], { denied_tools: [{ tool: 'whoami', rule: 'denyTools "whoami"' }] }),
        backendCatalog('reports', ['read']),
        backendCatalog('weather', ['get_forecast'], { state: 'stale', last_error: 'fetch failed', failing_since: '2026-11-30T10:00:00.000Z' }),
        backendCatalog('vault', [], { state: 'missing', last_success_at: '', last_error: 'connect ECONNREFUSED', failing_since: '2026-11-30T09:00:00.000Z' }),
      ],
    },
  ]);

  function data(calls: Partial<CallRecord>[]) {
    const history = new CallHistory();
    for (const one of calls) history.record(callRecord(one));
    return dashboardData({
      catalog: () => catalog,
      registry: () => ({ source: 'test', rejectedRoutes: [{ route: 'bad', field: 'routes[1].key', path: ['routes', 1, 'key'], message: 'x' }], origin: 'source' }),
      nodes: () => [],
      rejectingNodes: () => 1,
      callHistory: () => history.view(),
    });
  }

  it('says ok, degraded (latest calls failing), stale and missing, with since when and the last error', () => {
    const failedAt = Date.now() - 1000;
    const { routes } = data([
      { backend: 'reports', tool: 'read', toolLabel: 'read', outcome: 'failed', endedAt: failedAt, detail: 'upstream_reset_before_response_started{connection_refused}' },
      // Failing calls do not hide a failing listing.
      { backend: 'weather', tool: 'get_forecast', toolLabel: 'get_forecast', outcome: 'failed' },
    ]);
    expect(routes[0].backends.map(({ name, state, since, lastError }) => ({ name, state, since, lastError }))).toEqual([
      { name: 'jobs', state: 'ok', since: undefined, lastError: undefined },
      { name: 'reports', state: 'degraded', since: new Date(failedAt).toISOString(), lastError: 'failed: upstream_reset_before_response_started{connection_refused}' },
      { name: 'weather', state: 'stale', since: '2026-11-30T10:00:00.000Z', lastError: 'fetch failed' },
      { name: 'vault', state: 'missing', since: '2026-11-30T09:00:00.000Z', lastError: 'connect ECONNREFUSED' },
    ]);
    expect(routes[0].backends[0]).toMatchObject({ toolService: 'jobs', cluster: 'backend_jobs', tools: 2, exposedTools: 1, deniedTools: 1 });
  });

  it('sums up the gateway, and names the policy rule of each denial', () => {
    const { summary, history } = data([{ outcome: 'denied', tool: 'whoami', toolLabel: 'whoami', attempts: 0 }]);
    expect(summary).toMatchObject({ routes: 1, toolServices: 4, exposedTools: 3, envoys: 0, envoysRejecting: 1, rejectedRoutes: 1 });
    expect(history.notable).toEqual([expect.objectContaining({ tool: 'whoami', outcome: 'denied', rule: 'denyTools "whoami"' })]);
  });
});
