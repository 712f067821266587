import express from 'express';
import { Registry as MetricsRegistry } from 'prom-client';
import { z } from 'zod';
import { CatalogSettings, CatalogSnapshotMessage, RouteCatalogMessage } from '../catalog/catalog-store';
import { ItemFinding } from '../catalog/surface-exposure';
import { ToolFinding } from '../catalog/tool-exposure';
import { SigningKeyStatus } from '../auth/signing-keys';
import { XdsResources } from '../xds/translate';
import { AUTHENTICATED, TokenFile, adminAccess } from '../shared/admin-access';
import { DashboardSources, mountDashboard } from './dashboard';

export interface AdminSources extends DashboardSources {
  catalog(): CatalogSnapshotMessage;
  catalogSettings: CatalogSettings;
  /** What the catalog rules reported for a route's tools in the current snapshot. */
  toolFindings(routeKey: string): ToolFinding[];
  /** What they reported for its prompts, resources and resource templates. */
  surfaceFindings(routeKey: string): ItemFinding[];
  /** Refreshes the Tool Services of one route, or all; false for an unknown route key. */
  refreshCatalog(routeKey?: string): Promise<boolean>;
  xdsResources(): XdsResources;
  /** The ratelimit service's configuration of the registry's shared limits, as its file holds it (docs/quotas.md). */
  rateLimitServiceConfig(): string;
  /** The issuers' signing keys the routes with auth are validated with. */
  signingKeys(): SigningKeyStatus[];
  metrics: MetricsRegistry;
}

/** Readiness (docs/adr/0000-portal-registry-decisions.md §8): ready when at least one route has a snapshot; detail names the rest. */
export function readiness(catalog: CatalogSnapshotMessage) {
  const readyRoutes: string[] = [];
  const routesWithoutSnapshot: string[] = [];
  for (const route of catalog.routes) {
    const hasSnapshot = route.backends.some((backend) => backend.state !== 'missing');
    (hasSnapshot ? readyRoutes : routesWithoutSnapshot).push(route.route_key);
  }
  return { status: readyRoutes.length > 0 ? 'UP' : 'DOWN', readyRoutes, routesWithoutSnapshot };
}

/** A route's catalog for operators: each backend's state, capabilities and counts, and every entry a rule reported. */
function routeCatalogStatus(route: RouteCatalogMessage, findings: ToolFinding[], itemFindings: ItemFinding[]) {
  const exposedByBackend = new Map<string, number>();
  for (const tool of route.tools) exposedByBackend.set(tool.backend, (exposedByBackend.get(tool.backend) ?? 0) + 1);
  return {
    route: route.route_key,
    exposed_tools: route.tools.length,
    exposed_prompts: route.prompts.length,
    exposed_resources: route.resources.length,
    exposed_resource_templates: route.resource_templates.length,
    backends: route.backends.map(({ tools_json, prompts_json, resources_json, resource_templates_json, capabilities_json, needs_json, ...backend }) => ({
      ...backend,
      tools: tools_json.length,
      exposed_tools: exposedByBackend.get(backend.name) ?? 0,
      prompts: prompts_json.length,
      resources: resources_json.length,
      resource_templates: resource_templates_json.length,
      capabilities: JSON.parse(capabilities_json || '{}') as unknown,
      needs: JSON.parse(needs_json || '{}') as unknown,
    })),
    reported_tools: findings,
    reported_items: itemFindings,
  };
}

function catalogStatus(sources: AdminSources, onlyRoute?: string) {
  const catalog = sources.catalog();
  return {
    version: catalog.version,
    settings: sources.catalogSettings,
    routes: catalog.routes
      .filter((route) => onlyRoute === undefined || route.route_key === onlyRoute)
      .map((route) => routeCatalogStatus(route, sources.toolFindings(route.route_key), sources.surfaceFindings(route.route_key))),
  };
}

const refreshQuerySchema = z.object({ route: z.string().min(1).optional() });
/** `?name=a&name=b`: only these metric families (a scrape of all costs tens of ms with thousands of Tool Services). */
const metricsQuerySchema = z.object({ name: z.union([z.string().min(1), z.array(z.string().min(1))]).optional() });

/** `tokenFile`: the bearer token every request but the probes' must carry (an admin port off loopback). */
export function createAdminApp(sources: AdminSources, tokenFile?: TokenFile): express.Express {
  const app = express();
  app.use(adminAccess(tokenFile));
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'UP' });
  });
  app.get('/readyz', (_req, res) => {
    const detail = readiness(sources.catalog());
    // Route keys are for operators, not for whoever can reach the port.
    res.status(detail.status === 'UP' ? 200 : 503).json(res.locals[AUTHENTICATED] ? detail : { status: detail.status });
  });
  app.get('/status', (_req, res) => {
    res.json({
      readiness: readiness(sources.catalog()),
      registry: sources.registry(),
      xds: { nodes: sources.nodes() },
      catalog: catalogStatus(sources),
      signingKeys: sources.signingKeys(),
    });
  });
  // Refreshes now instead of at the next interval, e.g. after fixing a backend; answers with the result.
  app.post('/catalog/refresh', async (req, res) => {
    const query = refreshQuerySchema.safeParse(req.query);
    if (!query.success) {
      res.status(400).json({ error: 'give at most one route key: POST /catalog/refresh[?route=KEY]' });
      return;
    }
    const routeKey = query.data.route;
    if (!(await sources.refreshCatalog(routeKey))) {
      res.status(404).json({ error: `unknown route key "${routeKey}"` });
      return;
    }
    res.json(catalogStatus(sources, routeKey));
  });
  app.get('/metrics', async (req, res) => {
    const query = metricsQuerySchema.safeParse(req.query);
    if (!query.success) {
      res.status(400).json({ error: 'give metric family names: GET /metrics[?name=NAME&name=…]' });
      return;
    }
    const names = [query.data.name ?? []].flat();
    const unknown = names.filter((name) => !sources.metrics.getSingleMetric(name));
    if (unknown.length > 0) {
      res.status(404).json({ error: `unknown metric families: ${unknown.join(', ')}` });
      return;
    }
    const text = names.length === 0 ? await sources.metrics.metrics() : (await Promise.all(names.map((name) => sources.metrics.getSingleMetricAsString(name)))).join('\n');
    res.type(sources.metrics.contentType).send(text);
  });
  app.get('/config/xds', (_req, res) => {
    res.json(sources.xdsResources());
  });
  // For a ratelimit service on another host than this control plane (an Envoy pod's, in the Helm
  // chart): `mcpgw ratelimit-config-sync` copies it into the service's runtime directory.
  app.get('/config/ratelimit', (_req, res) => {
    res.type('application/yaml').send(sources.rateLimitServiceConfig());
  });
  mountDashboard(app, sources);
  return app;
}
