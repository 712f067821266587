import * as client from 'prom-client';

/**
 * How often the event loop lag is sampled (ms). prom-client's default, 10 ms, is a repeating timer that
 * wakes an idle control plane or sidecar 100 times a second: on the core Envoy and the backends share,
 * 200 wake-ups a second between a low-rate gateway's calls, each evicting some of the data path's
 * cache (docs/adr/0008-data-path-lanes.md, "Session 9: the low-rate path"). At 100 ms a stall of
 * 100 ms or more is still always seen; shorter ones are seen when a sample falls inside them.
 */
export const EVENT_LOOP_LAG_SAMPLE_MS = 100;

/** Node's process metrics (CPU, memory, GC, event loop lag) on `registry`, each name prefixed. */
export function collectProcessMetrics(registry: client.Registry, prefix: string): void {
  client.collectDefaultMetrics({ register: registry, prefix, eventLoopMonitoringPrecision: EVENT_LOOP_LAG_SAMPLE_MS });
}
