import * as fs from 'node:fs';
import express from 'express';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { toolServiceIdOf } from '../ir/gateway-ir';
import { RegistryStatus } from '../registry/registry-controller';
import { rejectedRouteCount } from '../registry/validate';
import { projectPath } from '../shared/paths';
import { BackendCallHealth, HistoryView, NotableCall } from './call-history';
import { NodeStatus } from './xds-status';

/**
 * The operator dashboard (GET /dashboard): one read-only page, self-contained (its HTML, script and
 * style come from this admin server; the charts are inline SVG drawn by the script), that reads
 * GET /dashboard/data every few seconds. docs/observability.md describes what it shows.
 */

export interface DashboardSources {
  catalog(): CatalogSnapshotMessage;
  registry(): RegistryStatus;
  nodes(): NodeStatus[];
  /** Envoys whose latest answer to some resource type is a NACK. */
  rejectingNodes(): number;
  callHistory(): HistoryView;
}

/** How often the page reads its data again. */
export const DASHBOARD_REFRESH_SECONDS = 5;

/**
 * A backend's state in product language: `missing` (never listed: no tools), `stale` (listing fails;
 * its last good tools are served), `degraded` (listed, but its latest calls failed or fell back), `ok`.
 */
export type DashboardBackendState = 'ok' | 'degraded' | 'stale' | 'missing';

export interface DashboardBackend {
  name: string;
  /** The Tool Service id (the metrics' tool_service label). */
  toolService: string;
  cluster: string;
  state: DashboardBackendState;
  /** When the state other than ok began. */
  since?: string;
  lastError?: string;
  /** When its tools were last listed. */
  lastListedAt?: string;
  tools: number;
  exposedTools: number;
  deniedTools: number;
}

export interface DashboardData {
  generatedAt: string;
  refreshSeconds: number;
  summary: {
    routes: number;
    toolServices: number;
    exposedTools: number;
    envoys: number;
    /** Envoys whose latest answer to some resource is a NACK. */
    envoysRejecting: number;
    rejectedRoutes: number;
    registryRevision?: string;
    registryError?: string;
  };
  routes: { route: string; exposedTools: number; backends: DashboardBackend[] }[];
  history: Omit<HistoryView, 'notable'> & { notable: (NotableCall & { rule?: string })[] };
}

function backendView(backend: CatalogSnapshotMessage['routes'][number]['backends'][number], exposedTools: number, calls: BackendCallHealth | undefined): DashboardBackend {
  const common = {
    name: backend.name,
    toolService: toolServiceIdOf(backend.tool_service),
    cluster: backend.cluster,
    tools: backend.tools_json.length,
    exposedTools,
    deniedTools: backend.denied_tools.length,
    ...(backend.last_success_at && { lastListedAt: backend.last_success_at }),
  };
  if (backend.state !== 'ok') return { ...common, state: backend.state, since: backend.failing_since || undefined, lastError: backend.last_error || undefined };
  if (calls?.failingSince) return { ...common, state: 'degraded', since: calls.failingSince, lastError: calls.lastError };
  return { ...common, state: 'ok' };
}

/** Everything the page shows, from the same sources as /status and the call log. */
export function dashboardData(sources: DashboardSources): DashboardData {
  const catalog = sources.catalog();
  const registry = sources.registry();
  const history = sources.callHistory();
  const nodes = sources.nodes();
  const health = new Map(history.backends.map((calls) => [`${calls.route}\n${calls.backend}`, calls]));
  /** The policy rule of each denied tool, for the denials the page lists. */
  const rules = new Map(
    catalog.routes.flatMap((route) => route.backends.flatMap((backend) => backend.denied_tools.map((denied) => [`${route.route_key}\n${backend.name}\n${denied.tool}`, denied.rule] as const))),
  );
  const routes = catalog.routes.map((route) => {
    const exposed = new Map<string, number>();
    for (const tool of route.tools) exposed.set(tool.backend, (exposed.get(tool.backend) ?? 0) + 1);
    return {
      route: route.route_key,
      exposedTools: route.tools.length,
      backends: route.backends.map((backend) => backendView(backend, exposed.get(backend.name) ?? 0, health.get(`${route.route_key}\n${backend.name}`))),
    };
  });
  return {
    generatedAt: new Date().toISOString(),
    refreshSeconds: DASHBOARD_REFRESH_SECONDS,
    summary: {
      routes: routes.length,
      toolServices: new Set(routes.flatMap((route) => route.backends.map((backend) => backend.toolService))).size,
      exposedTools: routes.reduce((sum, route) => sum + route.exposedTools, 0),
      envoys: nodes.length,
      envoysRejecting: sources.rejectingNodes(),
      rejectedRoutes: rejectedRouteCount(registry.rejectedRoutes),
      ...(registry.revision && { registryRevision: registry.revision }),
      ...(registry.rejectedDocument && { registryError: registry.rejectedDocument.message }),
    },
    routes,
    history: {
      ...history,
      notable: history.notable.map((call) => {
        const rule = call.outcome === 'denied' ? rules.get(`${call.route}\n${call.backend}\n${call.tool}`) : undefined;
        return rule ? { ...call, rule } : call;
      }),
    },
  };
}

const ASSETS_DIR = projectPath('control-plane', 'admin', 'dashboard');
const ASSETS = [
  { path: '/dashboard', file: 'index.html', type: 'html' },
  { path: '/dashboard/dashboard.js', file: 'dashboard.js', type: 'js' },
  { path: '/dashboard/dashboard.css', file: 'dashboard.css', type: 'css' },
] as const;

/** Nothing but this admin server: the page cannot load anything from elsewhere. */
const CONTENT_SECURITY_POLICY = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'";

export function mountDashboard(app: express.Express, sources: DashboardSources): void {
  for (const asset of ASSETS) {
    const body = fs.readFileSync(`${ASSETS_DIR}/${asset.file}`, 'utf8');
    app.get(asset.path, (_req, res) => {
      res.set('content-security-policy', CONTENT_SECURITY_POLICY).set('cache-control', 'no-cache').type(asset.type).send(body);
    });
  }
  app.get('/dashboard/data', (_req, res) => {
    res.set('cache-control', 'no-store').json(dashboardData(sources));
  });
}
