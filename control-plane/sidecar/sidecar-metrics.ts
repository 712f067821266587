import * as http from 'node:http';
import express from 'express';
import { CallOutcomeName } from './call-response';
import { listenAt } from '../shared/http-listen';
import * as client from 'prom-client';


/** What the ext_proc server reports as it works; the sidecar's metrics are one implementation. */
export interface SidecarObserver {
  /** Every request the sidecar decided on: answered here (by reason) or forwarded. */
  decided(route: string, decision: string): void;
  /** A tools/call whose outcome the gateway knows: answered by the backend, by Envoy's failure replies, or denied. */
  toolCallFinished(route: string, backend: string, outcome: CallOutcomeName, seconds: number): void;
}

/** The sidecar's Prometheus metrics, on a registry of its own (GET /metrics of its admin port). */
export class SidecarMetrics implements SidecarObserver {
  readonly registry = new client.Registry();

  private readonly decisions = new client.Counter({
    name: 'mcpgw_sidecar_decisions_total',
    help: 'Requests the sidecar decided on, by route and decision (forward, or the reason it answered itself)',
    labelNames: ['route', 'decision'] as const,
    registers: [this.registry],
  });
  private readonly toolCalls = new client.Counter({
    name: 'mcpgw_tool_calls_total',
    help: 'tools/call by route, backend and outcome (ok, failed, degraded, denied)',
    labelNames: ['route', 'backend', 'outcome'] as const,
    registers: [this.registry],
  });
  private readonly toolCallSeconds = new client.Histogram({
    name: 'mcpgw_tool_call_duration_seconds',
    help: 'tools/call time in the gateway, from the request to the final message, by route, backend and outcome',
    labelNames: ['route', 'backend', 'outcome'] as const,
    buckets: [0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120],
    registers: [this.registry],
  });

  constructor() {
    client.collectDefaultMetrics({ register: this.registry, prefix: 'mcpgw_sidecar_' });
  }

  decided(route: string, decision: string): void {
    this.decisions.inc({ route, decision });
  }

  toolCallFinished(route: string, backend: string, outcome: CallOutcomeName, seconds: number): void {
    this.toolCalls.inc({ route, backend, outcome });
    this.toolCallSeconds.observe({ route, backend, outcome }, seconds);
  }
}

/** GET /metrics and GET /healthz on the sidecar's admin address. */
export async function startSidecarAdmin(address: string, metrics: SidecarMetrics, catalogVersion: () => string): Promise<http.Server> {
  const app = express();
  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  app.get('/healthz', (_req, res) => {
    const version = catalogVersion();
    res.status(version ? 200 : 503).json({ status: version ? 'UP' : 'WAITING_FOR_CATALOG', catalogVersion: version });
  });
  return listenAt(app, address);
}
