import * as http from 'node:http';
import express from 'express';
import { listenAt } from '../shared/http-listen';
import { TokenFile, adminAccess } from '../shared/admin-access';
import * as client from 'prom-client';
import { collectProcessMetrics } from '../shared/process-metrics';
import type { TokenCacheObserver } from '../credentials/token-cache';


/**
 * What the gateway lane reports as it works; the sidecar's metrics are one implementation. Calls are
 * counted from Envoy's call log on the control plane (control-plane/admin/call-log.ts).
 */
export interface SidecarObserver {
  /** Every request of the gateway lane: answered here (by reason), held as a stream, or relayed. */
  decided(route: string, decision: string): void;
}

/** The sidecar's Prometheus metrics, on a registry of its own (GET /metrics of its admin port). */
export class SidecarMetrics implements SidecarObserver, TokenCacheObserver {
  readonly registry = new client.Registry();

  private readonly decisions = new client.Counter({
    name: 'mcpgw_sidecar_decisions_total',
    help: 'Requests of the gateway lane, by route and decision (the reason it answered itself, stream, or relay)',
    labelNames: ['route', 'decision'] as const,
    registers: [this.registry],
  });

  private readonly tokenLookups = new client.Counter({
    name: 'mcpgw_sidecar_token_cache_lookups_total',
    help: 'Backend tokens asked of the token-exchange cache: hit (no request to the IdP for it: cached, or another request for the same key was under way) or miss (exchanged)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  private readonly tokenRequests = new client.Histogram({
    name: 'mcpgw_sidecar_token_exchange_seconds',
    help: "Token exchanges at the identity provider (RFC 8693), by outcome: ok, refused (the IdP said no) or unavailable (it could not be asked)",
    labelNames: ['outcome'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });

  constructor() {
    collectProcessMetrics(this.registry, 'mcpgw_sidecar_');
    // Every series from the start, so a rate over them is defined before the first exchange.
    for (const result of ['hit', 'miss'] as const) this.tokenLookups.inc({ result }, 0);
    for (const outcome of ['ok', 'refused', 'unavailable'] as const) this.tokenRequests.zero({ outcome });
  }

  decided(route: string, decision: string): void {
    this.decisions.inc({ route, decision });
  }

  lookup(result: 'hit' | 'miss'): void {
    this.tokenLookups.inc({ result });
  }

  issued(outcome: 'ok' | 'refused' | 'unavailable', seconds: number): void {
    this.tokenRequests.observe({ outcome }, seconds);
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
