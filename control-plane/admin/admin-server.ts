import * as http from 'node:http';
import express from 'express';
import { Registry as MetricsRegistry } from 'prom-client';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { RegistryStatus } from '../registry/registry-controller';
import { XdsResources } from '../xds/translate';
import { NodeStatus } from './xds-status';

export interface AdminSources {
  catalog(): CatalogSnapshotMessage;
  xdsResources(): XdsResources;
  nodes(): NodeStatus[];
  registry(): RegistryStatus;
  metrics: MetricsRegistry;
}

/** Readiness per ADR-0013: ready when at least one route has a snapshot; detail names the rest. */
export function readiness(catalog: CatalogSnapshotMessage) {
  const readyRoutes: string[] = [];
  const routesWithoutSnapshot: string[] = [];
  for (const route of catalog.routes) {
    const hasSnapshot = route.backends.some((backend) => backend.state !== 'missing');
    (hasSnapshot ? readyRoutes : routesWithoutSnapshot).push(route.route_key);
  }
  return { status: readyRoutes.length > 0 ? 'UP' : 'DOWN', readyRoutes, routesWithoutSnapshot };
}

export function createAdminApp(sources: AdminSources): express.Express {
  const app = express();
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'UP' });
  });
  app.get('/readyz', (_req, res) => {
    const detail = readiness(sources.catalog());
    res.status(detail.status === 'UP' ? 200 : 503).json(detail);
  });
  app.get('/status', (_req, res) => {
    const catalog = sources.catalog();
    res.json({
      readiness: readiness(catalog),
      registry: sources.registry(),
      xds: { nodes: sources.nodes() },
      catalog: {
        version: catalog.version,
        routes: catalog.routes.map((route) => ({
          route: route.route_key,
          backends: route.backends.map(({ tools_json, ...backend }) => ({ ...backend, tools: tools_json.length })),
        })),
      },
    });
  });
  app.get('/metrics', async (_req, res) => {
    res.type(sources.metrics.contentType).send(await sources.metrics.metrics());
  });
  app.get('/config/xds', (_req, res) => {
    res.json(sources.xdsResources());
  });
  return app;
}

export function listen(app: express.Express, host: string, port: number): Promise<http.Server> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(app);
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
