import * as http from 'node:http';
import { Counter, Registry as MetricsRegistry } from 'prom-client';
import { AdminSources, createAdminApp } from '../../control-plane/admin/admin-server';
import { listen } from '../../control-plane/shared/http-listen';
import { CallHistory } from '../../control-plane/admin/call-history';
import { CATALOG_DEFAULTS, CatalogSnapshotMessage } from '../../control-plane/catalog/catalog-store';
import { ToolFinding } from '../../control-plane/catalog/tool-exposure';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const finding: ToolFinding = {
  tool: 'weather__bad name',
  backend: 'weather',
  rule: 'mcp-tool-name',
  action: 'dropped',
  reason: 'contains " "; MCP allows A-Z a-z 0-9 _ . -',
};

interface CatalogStatus {
  version: string;
  settings: unknown;
  routes: { route: string }[];
}
const catalogStatusOf = async (response: Response) => (await response.json()) as CatalogStatus;

describe('control plane admin: catalog status and on-demand refresh', () => {
  let server: http.Server;
  let base: string;
  let catalog: CatalogSnapshotMessage;
  const refreshed: (string | undefined)[] = [];
  const metrics = new MetricsRegistry();
  new Counter({ name: 'test_acks_total', help: 'acks', registers: [metrics] }).inc(3);
  new Counter({ name: 'test_pushes_total', help: 'pushes', registers: [metrics] }).inc(4);
  new Counter({ name: 'test_nacks_total', help: 'nacks', registers: [metrics] }).inc(1);

  beforeAll(async () => {
    catalog = catalogSnapshot([
      {
        route_key: 'demo',
        backends: [
          backendCatalog('jobs', ['echo']),
          backendCatalog('weather', ['get_forecast', 'bad name'], { state: 'stale', last_error: 'timed out', failing_since: '2026-12-01T10:00:00.000Z' }),
        ],
      },
      { route_key: 'solo', backends: [backendCatalog('jobs', ['echo'])] },
    ]);
    const sources: AdminSources = {
      catalog: () => catalog,
      catalogSettings: CATALOG_DEFAULTS,
      toolFindings: (routeKey) => (routeKey === 'demo' ? [finding] : []),
      surfaceFindings: () => [],
      refreshCatalog: async (routeKey) => {
        refreshed.push(routeKey);
        return routeKey === undefined || catalog.routes.some((route) => route.route_key === routeKey);
      },
      xdsResources: () => ({}),
      rateLimitServiceConfig: () => '',
      nodes: () => [],
      signingKeys: () => [],
      rejectingNodes: () => 0,
      callHistory: () => new CallHistory().view(),
      registry: () => ({ source: 'test', rejectedRoutes: [], origin: 'source' }),
      metrics,
    };
    server = await listen(createAdminApp(sources), '127.0.0.1', 0);
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const demoStatus = {
    route: 'demo',
    exposed_tools: 2,
    backends: [
      { name: 'jobs', tool_service: 'tool_service.jobs', cluster: 'backend_jobs', state: 'ok', tools: 1, exposed_tools: 1 },
      { name: 'weather', tool_service: 'tool_service.weather', cluster: 'backend_weather', state: 'stale', last_error: 'timed out', tools: 2, exposed_tools: 1 },
    ],
    reported_tools: [finding],
  };

  it('shows per route the served and declared tool counts, the settings and every tool a rule reported', async () => {
    const status = (await (await fetch(`${base}/status`)).json()) as { catalog: CatalogStatus };
    expect(status.catalog.settings).toEqual({ toolNameSeparator: '__', toolNamePolicy: 'drop', maxToolsPerRoute: 5000, toolsListPageSize: 0 });
    expect(status.catalog.routes).toHaveLength(2);
    expect(status.catalog.routes[0]).toMatchObject(demoStatus);
  });

  it('refreshes one route on POST /catalog/refresh?route=KEY and answers with its backends\' state', async () => {
    const response = await fetch(`${base}/catalog/refresh?route=demo`, { method: 'POST' });
    expect(response.status).toBe(200);
    const body = await catalogStatusOf(response);
    expect(refreshed.at(-1)).toBe('demo');
    expect(body.version).toBe(catalog.version);
    expect(body.routes).toHaveLength(1);
    expect(body.routes[0]).toMatchObject(demoStatus);
  });

  it('refreshes every route without ?route', async () => {
    const body = await catalogStatusOf(await fetch(`${base}/catalog/refresh`, { method: 'POST' }));
    expect(refreshed.at(-1)).toBeUndefined();
    expect(body.routes.map((route) => route.route)).toEqual(['demo', 'solo']);
  });

  it('answers 404 for an unknown route and 400 for a repeated route parameter', async () => {
    const unknown = await fetch(`${base}/catalog/refresh?route=nope`, { method: 'POST' });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'unknown route key "nope"' });
    const repeated = await fetch(`${base}/catalog/refresh?route=a&route=b`, { method: 'POST' });
    expect(repeated.status).toBe(400);
  });

  it('does not refresh on GET', async () => {
    expect((await fetch(`${base}/catalog/refresh`)).status).toBe(404);
  });

  it('answers GET /metrics with every family, or with only those named by ?name=', async () => {
    const all = await (await fetch(`${base}/metrics`)).text();
    expect(all).toMatch(/^test_nacks_total 1$/m);
    const some = await fetch(`${base}/metrics?name=test_acks_total&name=test_pushes_total`);
    expect(some.status).toBe(200);
    const lines = (await some.text()).split('\n').filter((line) => line && !line.startsWith('#'));
    expect(lines).toEqual(['test_acks_total 3', 'test_pushes_total 4']);
  });

  it('answers 404 naming the metric families it does not have', async () => {
    const unknown = await fetch(`${base}/metrics?name=test_acks_total&name=nope_total`);
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'unknown metric families: nope_total' });
  });
});
