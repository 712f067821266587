import * as path from 'node:path';
import { projectPath } from '../control-plane/shared/paths';
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
 */

const VARIANTS = [
  'off',
  'tracer, not sampled',
  '+ MCP attributes (HCM and route)',
  '+ span ids filter, every request (before)',
  '+ span ids filter, skipped without traceparent (after)',
  'all (before), every span kept',
  'all (after), every span kept',
] as const;
type Variant = (typeof VARIANTS)[number];

const REQUESTS = Number(process.env.REQUESTS ?? 400);
const WARMUP = Number(process.env.WARMUP ?? 200);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const IN_FLIGHT = 4;

const log = (line: string) => process.stdout.write(`[tracing-pieces] ${line}\n`);

/** A listener of the same Envoy that answers every request 200 (the check's server, the upstream). */
const answering = (name: string, port: number) =>
  listener(name, port, [{ match: { prefix: '/' }, direct_response: { status: 200, body: { inline_string: '{"ok":true}' } } }], [
    { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
  ]);

function bootstrap(variant: Variant, ports: { admin: number; listener: number; check: number; upstream: number }, otlpEndpoint: string) {
  const index = VARIANTS.indexOf(variant);
  const sampled = variant.startsWith('all');
  const after = variant.includes('after');
  const tracing = { otlpEndpoint, samplingRatio: sampled ? 1 : 0, serviceName: 'bench-tracing-pieces' };
  const hcmTracing = connectionManagerTracing(tracing);
  const withTags = index >= 2;
  // Before: the wrapped header_mutation filter alone, run for every request.
  const oldSpanIds = (spanIdsFilter() as unknown as { typed_config: { extension_config: unknown } }).typed_config.extension_config;
  const spanIds = index >= 3 ? [after ? spanIdsFilter() : oldSpanIds] : [];
  const { '@type': _type, ...collector } = collectorCluster(tracing);
  return {
    admin: { address: { socket_address: { address: HOST, port_value: ports.admin } } },
    layered_runtime: { layers: [{ name: 'static', static_layer: { 'tracing.opentelemetry.min_flush_spans': 512, 'tracing.opentelemetry.flush_interval_ms': 1000 } }] },
    static_resources: {
      listeners: [
        listener(
          'agents',
          ports.listener,
          [
            {
              match: { prefix: '/' },
              route: { cluster: 'upstream' },
              ...(index >= 1 && (withTags ? routeTracing(GATEWAY_SPANS.forward, 'bench', 'bench') : { decorator: { operation: GATEWAY_SPANS.forward, propagate: false } })),
            },
          ],
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
          index >= 1 ? { tracing: withTags ? hcmTracing : { ...hcmTracing, custom_tags: [] } } : {},
        ),
        answering('check', ports.check),
        answering('upstream', ports.upstream),
      ],
      clusters: [staticCluster({ id: 'check', port: ports.check }), staticCluster({ id: 'upstream', port: ports.upstream }), ...(index >= 1 ? [collector] : [])],
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
    const portsOf = VARIANTS.map((_, index) => ({ admin: base + index * 4, listener: base + index * 4 + 1, check: base + index * 4 + 2, upstream: base + index * 4 + 3 }));
    const envoys = await Promise.all(
      VARIANTS.map(async (variant, index) => {
        const ports = portsOf[index];
        const envoy = await startEnvoy(group, `envoy-${index}`, bootstrap(variant, ports, jaeger.otlpHttpUrl), ports.admin, [ports.listener]);
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
