import * as http from 'node:http';
import express from 'express';
import { listenAt } from '../shared/http-listen';
import { TokenFile, adminAccess } from '../shared/admin-access';
import * as client from 'prom-client';


/**
 * What the gateway lane reports as it works; the sidecar's metrics are one implementation. Calls are
 * counted from Envoy's call log on the control plane (control-plane/admin/call-log.ts).
 */
export interface SidecarObserver {
  /** Every request of the gateway lane: answered here (by reason), held as a stream, or relayed. */
  decided(route: string, decision: string): void;
}

/** The sidecar's Prometheus metrics, on a registry of its own (GET /metrics of its admin port). */
export class SidecarMetrics implements SidecarObserver {
  readonly registry = new client.Registry();

  private readonly decisions = new client.Counter({
    name: 'mcpgw_sidecar_decisions_total',
    help: 'Requests of the gateway lane, by route and decision (the reason it answered itself, stream, or relay)',
    labelNames: ['route', 'decision'] as const,
    registers: [this.registry],
  });

  constructor() {
    client.collectDefaultMetrics({ register: this.registry, prefix: 'mcpgw_sidecar_' });
  }

  decided(route: string, decision: string): void {
    this.decisions.inc({ route, decision });
  }
}

/** GET /metrics and GET /healthz on the sidecar's admin address. */
export async function startSidecarAdmin(address: string, metrics: SidecarMetrics, catalogVersion: () => string, tokenFile?: TokenFile): Promise<http.Server> {
  const app = express();
  app.use(adminAccess(tokenFile));
  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  app.get('/healthz', (_req, res) => {
    const version = catalogVersion();
    res.status(version ? 200 : 503).json({ status: version ? 'UP' : 'WAITING_FOR_CATALOG', catalogVersion: version });
  });
  return listenAt(app, address);
}
