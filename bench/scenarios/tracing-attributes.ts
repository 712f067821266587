import { GATEWAY_SPANS, collectorCluster, connectionManagerTracing, routeTracing, spanIdsFilter } from '../../control-plane/xds/translate/tracing';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { runClosedLoop } from '../load/load-runner';
import { McpHttpClient } from '../load/mcp-client';
import { BenchSettings } from '../settings';
import { listener } from '../systems/envoy-bootstraps';
import { allocatePort } from '../systems/ports';
import { ProcessGroup } from '../systems/process-group';
import { inRotation, startEnvoy } from '../systems/systems';
import { HOST } from '../systems/topology';
import { cpuSecondsOf } from './cpu-time';

/**
 * Part of scenario 5: what each piece of Envoy's tracing costs by itself. Envoy alone answers every
 * request directly (no MCP filters, no upstream), so its CPU time per request is the tracing's and
 * little else; each variant adds one piece, built by the gateway's own translation
 * (control-plane/xds/translate/tracing.ts), to the one before.
 */

export const ATTRIBUTE_VARIANTS = [
  /** No tracer at all (the gateway without tracing settings). */
  'off',
  /** The tracer and its sampler, every span sampled and exported, with Envoy's own attributes only. */
  'tracer',
  /** + the MCP attributes of every span (the HCM's custom tags). */
  'MCP attributes',
  /** + the filter that hands the span's ids to the call script (skipped: the load sends no traceparent). */
  'span ids filter',
  /** + a route's span name and attributes. */
  'route span name and attributes',
  /** All of it, sampling 0: the cost of a span that is not kept (most calls at 1 %). */
  'all, not sampled',
] as const;
export type AttributeVariant = (typeof ATTRIBUTE_VARIANTS)[number];

export interface AttributeCostRun {
  variant: AttributeVariant;
  repetition: number;
  /** Envoy's CPU time per answered request, µs. */
  envoyMicrosPerRequest: number;
  throughput: number;
}

const CLIENTS = 8;
const WARMUP_MS = 1_000;
const MEASURE_MS = 4_000;

function bootstrap(variant: AttributeVariant, adminPort: number, listenerPort: number, otlpEndpoint: string) {
  const index = ATTRIBUTE_VARIANTS.indexOf(variant);
  const tracing = { otlpEndpoint, samplingRatio: variant === 'all, not sampled' ? 0 : 1, serviceName: 'bench-tracing-attributes' };
  const hcmTracing = connectionManagerTracing(tracing);
  const { '@type': _type, ...collector } = collectorCluster(tracing);
  return {
    admin: { address: { socket_address: { address: HOST, port_value: adminPort } } },
    // As envoy/bootstrap.yaml: exports batched.
    layered_runtime: { layers: [{ name: 'static', static_layer: { 'tracing.opentelemetry.min_flush_spans': 512, 'tracing.opentelemetry.flush_interval_ms': 1000 } }] },
    static_resources: {
      listeners: [
        listener(
          'attributes',
          listenerPort,
          [
            {
              match: { prefix: '/' },
              direct_response: { status: 200, body: { inline_string: 'ok' } },
              ...(index >= 4 && routeTracing(GATEWAY_SPANS.forward, 'bench', 'bench')),
            },
          ],
          [...(index >= 3 ? [spanIdsFilter()] : []), { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } }],
          index >= 1 ? { tracing: index >= 2 ? hcmTracing : { ...hcmTracing, custom_tags: [] } } : {},
        ),
      ],
      clusters: [collector],
    },
  };
}

/** Every variant at once (each its own Envoy on the systems' cores), measured in rotation. */
export async function runAttributeCosts(group: ProcessGroup, otlpEndpoint: string, settings: BenchSettings, log: (line: string) => void): Promise<AttributeCostRun[]> {
  const envoys = [];
  for (const variant of ATTRIBUTE_VARIANTS) {
    const [adminPort, listenerPort] = [await allocatePort(), await allocatePort()];
    const name = `envoy-tracing-${ATTRIBUTE_VARIANTS.indexOf(variant)}`;
    const process = await startEnvoy(group, name, bootstrap(variant, adminPort, listenerPort, otlpEndpoint), adminPort, [listenerPort]);
    envoys.push({ variant, pid: process.child.pid!, url: `http://${HOST}:${listenerPort}/` });
  }
  const client = new McpHttpClient(CLIENTS);
  const runs: AttributeCostRun[] = [];
  try {
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      for (const envoy of inRotation(envoys, repetition)) {
        const issue = async () => {
          const answer = await client.post(envoy.url, '{}', { timeoutMs: settings.requestTimeoutMs });
          return { endMs: answer.endMs, error: answer.status === 200 ? undefined : `HTTP ${answer.status}` };
        };
        await runClosedLoop(issue, { concurrency: CLIENTS, durationMs: WARMUP_MS });
        const before = cpuSecondsOf(envoy.pid);
        const result = await runClosedLoop(issue, { concurrency: CLIENTS, durationMs: MEASURE_MS });
        const envoyMicrosPerRequest = ((cpuSecondsOf(envoy.pid) - before) * 1e6) / Math.max(1, result.ok);
        runs.push({ variant: envoy.variant, repetition, envoyMicrosPerRequest, throughput: result.throughput });
        log(`tracing cost, ${envoy.variant} #${repetition}: Envoy ${envoyMicrosPerRequest.toFixed(1)} µs per request, ${result.throughput.toFixed(0)} requests/s`);
      }
    }
  } finally {
    client.close();
  }
  return runs;
}
