import * as path from 'node:path';
import { projectPath } from '../control-plane/shared/paths';
import { OTEL_COLLECTOR_CLUSTER_NAME } from '../control-plane/xds/translate/settings';
import { GATEWAY_SPANS, collectorCluster, connectionManagerTracing, routeTracing, spanIdsFilter } from '../control-plane/xds/translate/tracing';
import { TYPE_URL } from '../control-plane/xds/translate/type-urls';
import { startJaeger } from '../test/support/jaeger';
import { McpHttpClient } from './load/mcp-client';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { listener, staticCluster } from './systems/envoy-bootstraps';
import { startEnvoy } from './systems/systems';
import { runningInstructions, zeroInstructions } from './systems/callgrind';
import { HOST } from './systems/topology';

/**
 * Envoy's instructions per request for each piece of the gateway's tracing, counted under Valgrind's
 * callgrind (not timed: the machine's load does not move them). Envoy alone, with a static
 * bootstrap, but a request takes the call's path through Envoy's tracing: the agents' listener with
 * the tracer, an ext_authz check over HTTP (its own child span, as the session check's), the router
 * to an upstream (traceparent injected), each answered by another listener of the same Envoy. Each
 * variant adds one piece; the spans go to a real Jaeger.
 *   node dist/bench/tracing-pieces-instructions.js <callgrind wrapper script>
 *   KEPT=1 node dist/bench/tracing-pieces-instructions.js <callgrind wrapper script>   (what a kept span's cost depends on)
 */

/** One Envoy's tracing: which pieces of the gateway's tracing it has, and how its spans leave. */
interface Pieces {
  tracer: boolean;
  /** Every span kept and exported (sampling 1), or none (sampling 0). */
  sampled: boolean;
  /** The MCP attributes (HCM's custom tags, the route's literals and tool). */
  attributes: boolean;
  /** The span ids filter: none, on every request (before session 7), or skipped without traceparent (now). */
  spanIds: 'none' | 'every request' | 'with traceparent';
  /** OTLP over HTTP (as built) or over gRPC (Envoy's gRPC client, HTTP/2). */
  exportOver: 'http' | 'grpc';
  /** Spans a worker buffers before it exports (runtime tracing.opentelemetry.min_flush_spans). */
  flushSpans: number;
}

const AS_BUILT: Pieces = { tracer: true, sampled: false, attributes: true, spanIds: 'with traceparent', exportOver: 'http', flushSpans: 512 };
const KEPT: Pieces = { ...AS_BUILT, sampled: true };

/**
 * The pieces one by one (default), or with `KEPT=1` what a kept span's cost depends on: its MCP
 * attributes, the export's transport and its batch size (issue 15, session 9).
 */
const VARIANTS: Record<string, Pieces> =
  process.env.KEPT === '1'
    ? {
        'tracer, not sampled (as built)': AS_BUILT,
        'every span kept, as built (OTLP/HTTP, 512 per export)': KEPT,
        'every span kept, no MCP attributes': { ...KEPT, attributes: false },
        'every span kept, OTLP/gRPC': { ...KEPT, exportOver: 'grpc' },
        'every span kept, 64 per export': { ...KEPT, flushSpans: 64 },
      }
    : {
        off: { ...AS_BUILT, tracer: false, attributes: false, spanIds: 'none' },
        'tracer, not sampled': { ...AS_BUILT, attributes: false, spanIds: 'none' },
        '+ MCP attributes (HCM and route)': { ...AS_BUILT, spanIds: 'none' },
        '+ span ids filter, every request (before)': { ...AS_BUILT, spanIds: 'every request' },
        '+ span ids filter, skipped without traceparent (after)': AS_BUILT,
        'all (before), every span kept': { ...KEPT, spanIds: 'every request' },
        'all (after), every span kept': KEPT,
      };
type Variant = string;

const REQUESTS = Number(process.env.REQUESTS ?? 400);
const WARMUP = Number(process.env.WARMUP ?? 200);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const IN_FLIGHT = 4;
/** How long an Envoy under Valgrind may take to be ready (minutes on a loaded machine). */
const VALGRIND_START_MS = 300_000;

const log = (line: string) => process.stdout.write(`[tracing-pieces] ${line}\n`);

/** A listener of the same Envoy that answers every request 200 (the check's server, the upstream). */
const answering = (name: string, port: number) =>
  listener(name, port, [{ match: { prefix: '/' }, direct_response: { status: 200, body: { inline_string: '{"ok":true}' } } }], [
    { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
  ]);

/** The HCM's tracing of a variant: the gateway's own, its export moved to gRPC if asked. */
function hcmTracingOf(pieces: Pieces, otlpEndpoint: string) {
  const tracing = connectionManagerTracing({ otlpEndpoint, samplingRatio: pieces.sampled ? 1 : 0, serviceName: 'bench-tracing-pieces' });
  const custom_tags = pieces.attributes ? tracing.custom_tags : [];
  if (pieces.exportOver === 'http') return { ...tracing, custom_tags };
  const { http_service: _http, ...rest } = tracing.provider.typed_config;
  return {
    ...tracing,
    custom_tags,
    provider: { ...tracing.provider, typed_config: { ...rest, grpc_service: { envoy_grpc: { cluster_name: OTEL_COLLECTOR_CLUSTER_NAME }, timeout: '5s' } } },
  };
}

/** The collector cluster; for gRPC, Jaeger's OTLP/gRPC port over HTTP/2. */
function collectorOf(pieces: Pieces, jaeger: { otlpHttpUrl: string; otlpGrpcAddress: string }) {
  if (pieces.exportOver === 'http') {
    const { '@type': _type, ...cluster } = collectorCluster({ otlpEndpoint: jaeger.otlpHttpUrl, samplingRatio: 1, serviceName: 'bench-tracing-pieces' });
    return cluster;
  }
  const port = Number(jaeger.otlpGrpcAddress.split(':').pop());
  return {
    ...staticCluster({ id: OTEL_COLLECTOR_CLUSTER_NAME, port }),
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': { '@type': TYPE_URL.httpProtocolOptions, explicit_http_config: { http2_protocol_options: {} } },
    },
  };
}

function bootstrap(pieces: Pieces, ports: { admin: number; listener: number; check: number; upstream: number }, jaeger: { otlpHttpUrl: string; otlpGrpcAddress: string }) {
  // Before: the wrapped header_mutation filter alone, run for every request.
  const oldSpanIds = (spanIdsFilter() as unknown as { typed_config: { extension_config: unknown } }).typed_config.extension_config;
  const spanIds = { none: [], 'every request': [oldSpanIds], 'with traceparent': [spanIdsFilter()] }[pieces.spanIds];
  const decorations = pieces.attributes ? routeTracing(GATEWAY_SPANS.forward, 'bench', 'bench') : { decorator: { operation: GATEWAY_SPANS.forward, propagate: false } };
  return {
    admin: { address: { socket_address: { address: HOST, port_value: ports.admin } } },
    layered_runtime: {
      layers: [{ name: 'static', static_layer: { 'tracing.opentelemetry.min_flush_spans': pieces.flushSpans, 'tracing.opentelemetry.flush_interval_ms': 1000 } }],
    },
    static_resources: {
      listeners: [
        listener(
          'agents',
          ports.listener,
          [{ match: { prefix: '/' }, route: { cluster: 'upstream' }, ...(pieces.tracer && decorations) }],
          [
            ...spanIds,
            {
              name: 'envoy.filters.http.ext_authz',
              typed_config: {
                '@type': TYPE_URL.extAuthz,
                transport_api_version: 'V3',
                http_service: { server_uri: { uri: `http://check`, cluster: 'check', timeout: '60s' }, path_prefix: '/check' },
              },
            },
            { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
          ],
          pieces.tracer ? { tracing: hcmTracingOf(pieces, jaeger.otlpHttpUrl) } : {},
        ),
        answering('check', ports.check),
        answering('upstream', ports.upstream),
      ],
      clusters: [staticCluster({ id: 'check', port: ports.check }), staticCluster({ id: 'upstream', port: ports.upstream }), ...(pieces.tracer ? [collectorOf(pieces, jaeger)] : [])],
    },
  };
}

async function main() {
  const [wrapper] = process.argv.slice(2);
  process.env.ENVOY_BIN = wrapper;
  const group = new ProcessGroup(projectPath('.run', 'bench', 'tracing-pieces'), claimCpus());
  const jaeger = await startJaeger(path.join(group.logDir, 'jaeger'));
  group.adoptBeside('jaeger', jaeger.pid, () => jaeger.stop());
  try {
    // Above the kernel's ephemeral range and away from the bench allocator's: Envoy takes minutes to
    // bind under Valgrind, long enough for a port merely free now to be taken by someone else.
    const base = 61_000 + Math.floor(Math.random() * 4_000);
    const variants = Object.entries(VARIANTS);
    const portsOf = variants.map((_, index) => ({ admin: base + index * 4, listener: base + index * 4 + 1, check: base + index * 4 + 2, upstream: base + index * 4 + 3 }));
    const envoys = await Promise.all(
      variants.map(async ([variant, pieces], index) => {
        const ports = portsOf[index];
        const envoy = await startEnvoy(group, `envoy-${index}`, bootstrap(pieces, ports, jaeger), ports.admin, [ports.listener], { timeoutMs: VALGRIND_START_MS });
        return { variant, pid: envoy.child.pid!, url: `http://${HOST}:${ports.listener}/mcp` };
      }),
    );
    const client = new McpHttpClient(IN_FLIGHT * envoys.length);
    /** Requests not answered 200, by listener (a check slower than its timeout under Valgrind). */
    const failures = new Map<string, number>();
    const send = async (url: string, count: number) => {
      let left = count;
      await Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (left-- > 0) {
            const answer = await client.post(url, '{"jsonrpc":"2.0","id":1,"method":"tools/call"}', { timeoutMs: 60_000 });
            if (answer.status !== 200) failures.set(url, (failures.get(url) ?? 0) + 1);
          }
        }),
      );
    };
    log('every Envoy up');
    await Promise.all(envoys.map((envoy) => send(envoy.url, WARMUP)));
    const results = new Map<Variant, number[]>();
    for (let round = 0; round < ROUNDS; round++) {
      await Promise.all(
        envoys.map(async (envoy) => {
          zeroInstructions(envoy.pid);
          const started = Date.now();
          await send(envoy.url, REQUESTS);
          const busy = runningInstructions(envoy.pid);
          const wallMs = Date.now() - started;
          zeroInstructions(envoy.pid);
          await new Promise((resolve) => setTimeout(resolve, wallMs));
          const idle = runningInstructions(envoy.pid);
          results.set(envoy.variant, [...(results.get(envoy.variant) ?? []), (busy - idle) / REQUESTS]);
          log(`round ${round} ${envoy.variant}: ${((busy - idle) / REQUESTS / 1000).toFixed(1)}k per request (idle ${(idle / REQUESTS / 1000).toFixed(1)}k, ${wallMs} ms)`);
        }),
      );
    }
    client.close();
    log(`not answered 200: ${JSON.stringify(Object.fromEntries(failures))}`);
    for (const [variant, perRequest] of results) log(`RESULT ${variant}: ${perRequest.map((value) => `${(value / 1000).toFixed(1)}k`).join(' / ')}`);
  } finally {
    await group.stopAll();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`${error.stack}\n`);
  process.exit(1);
});
