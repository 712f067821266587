import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { waitFor } from '../control-plane/devstack/processes';
import { envoyBinary } from '../control-plane/devstack/envoy';
import { projectPath } from '../control-plane/shared/paths';
import { startAuthVariants } from './auth-setup';
import { startGroupWithIssuer } from './systems/issuer';
import { RepeatedValue, pairedAddedMedian, spreadOf } from './load/stats';
import { allocatePort } from './systems/ports';
import { HOST } from './systems/topology';
import { benchSettings } from './settings';
import { Driver, balancedOrder, readyDriver } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * Where Envoy's instructions per tools/call go, piece by piece (issue 10: C's Envoy share). The
 * gateway of bench/auth-setup.ts runs as usual; its Envoy's whole configuration (config_dump: the
 * agents' listener, its routes, its clusters, the jwt_authn config it got by ECDS) is copied into static
 * bootstraps, one per variant, each with one piece taken out, and each run by an Envoy of its own under
 * Valgrind's callgrind, beside the gateway's: same sidecars, backend, Redis and control plane (the call
 * log goes to it). Per variant and round, Envoy's instructions over a fixed number of calls on the
 * `open` and `authed` routes, minus what the same Envoy runs idle for as long (timers, stats flushes),
 * per call; rounds in a balanced order, each variant's difference to `full` paired by round.
 *   node dist/bench/envoy-pieces-instructions.js [--quick]
 * Writes bench/results/envoy-pieces-instructions.json and .md (--quick: envoy-pieces-instructions-quick.*).
 * The Lua piece compares this tree's call script with the one in OLD_CALL_SCRIPT (a file; default: none).
 */

const LOG_DIR = projectPath('.run', 'bench', 'envoy-pieces');
const PLAN = { full: { rounds: 6, calls: 200, warmupCalls: 60 }, quick: { rounds: 2, calls: 100, warmupCalls: 30 } };
const ENVOY_START_TIMEOUT_MS = 600_000;
const IN_FLIGHT = 4;
/** The six local quota slots and the two shared-limit filters (control-plane/xds/translate/quotas.ts). */
const isQuotaFilter = (name: string) => name.startsWith('mcpgw.quota.');

const log = (line: string) => process.stdout.write(`[bench envoy-pieces] ${line}\n`);

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** One piece taken out of the gateway's configuration (or, for the call script, swapped). */
interface Piece {
  name: string;
  change: (listener: Json, hcm: Json) => void;
}

const withoutFilters = (leftOut: (name: string) => boolean) => (_listener: Json, hcm: Json) => {
  hcm.http_filters = hcm.http_filters.filter((filter: Json) => !leftOut(filter.name));
};
const withoutAccessLog = (name: string) => (_listener: Json, hcm: Json) => {
  hcm.access_log = hcm.access_log.filter((logger: Json) => logger.name !== name);
};

function pieces(oldCallScript: string | undefined): Piece[] {
  const list: Piece[] = [
    { name: 'full (as the gateway)', change: () => undefined },
    { name: '− stdout access log', change: withoutAccessLog('envoy.access_loggers.stdout') },
    { name: '− call log (fluentd)', change: withoutAccessLog('envoy.access_loggers.fluentd') },
    { name: '− cors', change: withoutFilters((name) => name === 'envoy.filters.http.cors') },
    { name: '− origin check (rbac)', change: withoutFilters((name) => name === 'envoy.filters.http.rbac') },
    { name: '− six local quota slots + two shared-limit filters', change: withoutFilters(isQuotaFilter) },
  ];
  if (oldCallScript) {
    list.push({
      name: 'call script of OLD_CALL_SCRIPT',
      change: (_listener, hcm) => {
        const lua = hcm.http_filters.find((filter: Json) => filter.name === 'envoy.filters.http.lua');
        // Inline, or in a TypedStruct as the control plane sends it.
        const config = lua.typed_config.value ?? lua.typed_config;
        const source = config.default_source_code.inline_string as string;
        // The prelude (first line up to the script's own first comment) is this tree's; the rest is the old script.
        const prelude = source.slice(0, source.indexOf('-- The call lane'));
        config.default_source_code.inline_string = prelude + fs.readFileSync(oldCallScript, 'utf8');
      },
    });
  }
  return list;
}

/** Envoy under callgrind, not instrumented until told; its counters read with callgrind_control. */
function callgrindWrapper(dir: string): string {
  const wrapper = path.join(dir, 'envoy-under-callgrind.sh');
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=${dir}/callgrind.%p.out --instr-atstart=no --dump-line=no "${envoyBinary()}" "$@"\n`, {
    mode: 0o755,
  });
  return wrapper;
}

function instructions(pid: number): number {
  const out = execFileSync('callgrind_control', ['-e', 'Ir', String(pid)], { encoding: 'utf8' });
  return [...out.matchAll(/^\s*Th\s+\d+\s+([\d,]+)\s*$/gm)].reduce((sum, match) => sum + Number(match[1].replace(/,/g, '')), 0);
}
const zero = (pid: number) => execFileSync('callgrind_control', ['-z', String(pid)], { stdio: 'ignore' });

/**
 * A static bootstrap holding the gateway Envoy's dynamic configuration as it is now: the agents'
 * listener on `port` with its routes inline and its ECDS filters inline, every cluster static.
 */
function staticBootstrap(dump: Json, gatewayPort: number, port: number, adminPort: number, piece: Piece): Json {
  const configs: Json[] = dump.configs;
  const of = (kind: string) => configs.find((config) => String(config['@type']).endsWith(`.${kind}`)) ?? {};
  const listeners = (of('ListenersConfigDump').dynamic_listeners ?? []).map((entry: Json) => entry.active_state.listener);
  const agents = structuredClone(listeners.find((candidate: Json) => candidate.address.socket_address.port_value === gatewayPort));
  if (!agents) throw new Error('the agents listener is not in the config dump');
  const routeConfigs = (of('RoutesConfigDump').dynamic_route_configs ?? []).map((entry: Json) => entry.route_config);
  const ecds = new Map<string, Json>(
    (of('EcdsConfigDump').ecds_filters ?? []).map((entry: Json) => [entry.ecds_filter.name, entry.ecds_filter.typed_config]),
  );
  const clusters = [...(of('ClustersConfigDump').static_clusters ?? []), ...(of('ClustersConfigDump').dynamic_active_clusters ?? [])].map((entry: Json) => {
    const cluster = structuredClone(entry.cluster);
    delete cluster.eds_cluster_config;
    if (cluster.type === 'EDS') cluster.type = 'STATIC';
    return cluster;
  });
  const endpoints = (of('EndpointsConfigDump').dynamic_endpoint_configs ?? []).map((entry: Json) => entry.endpoint_config);
  for (const cluster of clusters) {
    if (cluster.load_assignment) continue;
    const assignment = endpoints.find((endpoint: Json) => endpoint.cluster_name === cluster.name);
    if (assignment) cluster.load_assignment = { cluster_name: cluster.name, endpoints: assignment.endpoints };
  }
  // The inside's certificates came by ADS: as static secrets here, read from the directory Envoy watches.
  const secrets = (of('SecretsConfigDump').dynamic_active_secrets ?? [])
    .filter((entry: Json) => String(entry.name).startsWith('mcpgw_'))
    .map((entry: Json) => {
      const { name, tls_certificate: certificate, validation_context: validation } = entry.secret;
      const directory = (certificate ?? validation).watched_directory.path;
      return certificate
        ? { name, tls_certificate: { certificate_chain: { filename: `${directory}/tls.crt` }, private_key: { filename: `${directory}/tls.key` } } }
        : { name, validation_context: { trusted_ca: { filename: `${directory}/ca.crt` } } };
    });
  agents.name = 'agents';
  agents.address.socket_address.port_value = port;
  const hcm = agents.filter_chains[0].filters[0].typed_config;
  const routeName = hcm.rds.route_config_name;
  delete hcm.rds;
  const { '@type': _routeType, ...routeConfig } = routeConfigs.find((config: Json) => config.name === routeName);
  hcm.route_config = routeConfig;
  hcm.http_filters = hcm.http_filters.map((filter: Json) => {
    if (!filter.config_discovery) return filter;
    const typed = ecds.get(filter.name);
    if (!typed) throw new Error(`no ECDS config for ${filter.name}`);
    return { name: filter.name, typed_config: typed };
  });
  piece.change(agents, hcm);
  return asStatic({
    // File-based SDS (the call log's cluster) wants a node.
    node: { id: `envoy-pieces-${port}`, cluster: 'bench' },
    admin: { address: { socket_address: { address: HOST, port_value: adminPort } } },
    static_resources: { listeners: [agents], clusters, secrets },
  });
}

/** A resource of the dump as a bootstrap takes it: no `@type` on a top-level resource, a secret named without ADS. */
function asStatic(value: unknown): Json {
  const walk = (node: unknown, topLevel: boolean): unknown => {
    if (Array.isArray(node)) return node.map((item) => walk(item, topLevel));
    if (typeof node !== 'object' || node === null) return node;
    const entries = Object.entries(node as Json).filter(([key]) => !(topLevel && key === '@type'));
    const object: Json = Object.fromEntries(entries.map(([key, inner]) => [key, walk(inner, key === 'listeners' || key === 'clusters')]));
    if (object.sds_config?.ads !== undefined) delete object.sds_config;
    return object;
  };
  return walk(value, false) as Json;
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const plan = quick ? PLAN.quick : PLAN.full;
  const settings = { ...benchSettings(quick), requestTimeoutMs: 60_000 };
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(path.join(LOG_DIR, 'callgrind'), { recursive: true });
  const { group, issuer, stopAll } = await startGroupWithIssuer(LOG_DIR);
  const counted: Record<string, RepeatedValue[]> = {};
  const variantsMeasured = ['open', 'authed'];
  try {
    const { variants, stack } = await startAuthVariants(group, issuer, LOG_DIR);
    for (const variant of variants.filter((candidate) => variantsMeasured.includes(candidate.name))) (await readyDriver(variant, settings)).close();
    const dump = (await (await fetch(`${stack.envoyAdminUrl}/config_dump?include_eds`)).json()) as Json;
    fs.writeFileSync(path.join(LOG_DIR, 'config_dump.json'), JSON.stringify(dump, null, 1));
    const gatewayPort = Number(new URL(stack.gatewayUrl('open')).port);
    const wrapper = callgrindWrapper(path.join(LOG_DIR, 'callgrind'));
    const envoys = await Promise.all(
      pieces(process.env.OLD_CALL_SCRIPT).map(async (piece, index) => {
        const port = await allocatePort();
        const adminPort = await allocatePort();
        const file = path.join(LOG_DIR, `envoy-${index}.yaml`);
        fs.writeFileSync(file, JSON.stringify(staticBootstrap(dump, gatewayPort, port, adminPort, piece), null, 1));
        // A bootstrap Envoy refuses is found in a second, not after minutes under Valgrind.
        execFileSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { stdio: 'pipe' });
        const envoy = group.spawn(`envoy-${index}`, wrapper, ['-c', file, '--use-dynamic-base-id', '--log-level', 'warn', '--concurrency', '2']);
        await waitFor(`envoy-${index} to be ready`, async () => ((await fetch(`http://${HOST}:${adminPort}/ready`).catch(() => undefined))?.ok ? true : undefined), {
          timeoutMs: ENVOY_START_TIMEOUT_MS,
          intervalMs: 1000,
        });
        const url = (route: string) => stack.gatewayUrl(route).replace(`:${gatewayPort}/`, `:${port}/`);
        const drivers = new Map<string, Driver>();
        for (const variant of variants.filter((candidate) => variantsMeasured.includes(candidate.name))) {
          // The Host the gateway's host check and the tokens' audience name (the gateway's own address).
          const headers = { ...variant.headers, host: `${HOST}:${gatewayPort}` };
          drivers.set(variant.name, await readyDriver({ ...variant, headers, url: url(new URL(variant.url).pathname.split('/').pop()!) }, settings));
        }
        log(`${piece.name}: up (pid ${envoy.child.pid})`);
        return { piece: piece.name, pid: envoy.child.pid!, drivers };
      }),
    );
    /** Calls not answered right, by variant: counted, not thrown (a session check slower than its timeout under Valgrind on a loaded machine). */
    const wrong = new Map<string, number>();
    const block = async (piece: string, drivers: Map<string, Driver>, calls: number) => {
      for (const driver of drivers.values()) {
        let left = calls;
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async () => {
            while (left-- > 0) {
              const outcome = await driver.issue();
              if (outcome.error) wrong.set(piece, (wrong.get(piece) ?? 0) + 1);
            }
          }),
        );
      }
    };
    for (const envoy of envoys) {
      await block('warm-up', envoy.drivers, plan.warmupCalls);
      execFileSync('callgrind_control', ['--instr=on', String(envoy.pid)], { stdio: 'ignore' });
      await block('warm-up', envoy.drivers, plan.warmupCalls);
      counted[envoy.piece] = [];
    }
    const byName = new Map(envoys.map((envoy) => [envoy.piece, envoy]));
    for (let round = 1; round <= plan.rounds; round++) {
      for (const name of balancedOrder([...byName.keys()], round)) {
        const envoy = byName.get(name)!;
        zero(envoy.pid);
        const started = Date.now();
        await block(name, envoy.drivers, plan.calls);
        const busy = instructions(envoy.pid);
        const wallMs = Date.now() - started;
        zero(envoy.pid);
        await new Promise((resolve) => setTimeout(resolve, wallMs));
        const idle = instructions(envoy.pid);
        const perCall = (busy - idle) / (plan.calls * envoy.drivers.size);
        counted[name].push({ repetition: round, value: perCall });
        log(`round ${round} ${name}: ${(perCall / 1000).toFixed(1)}k per call (idle ${(idle / 1000 / plan.calls / envoy.drivers.size).toFixed(1)}k, ${wallMs} ms)`);
      }
    }
    for (const envoy of envoys) for (const driver of envoy.drivers.values()) driver.close();
    log(`not answered right: ${JSON.stringify(Object.fromEntries(wrong))}`);
  } finally {
    await stopAll();
  }
  const name = quick ? 'envoy-pieces-instructions-quick' : 'envoy-pieces-instructions';
  const context = { measuredAt: new Date().toISOString(), mode: quick ? 'quick' : 'full', load: os.loadavg().slice(0, 2), ...plan };
  const full = counted['full (as the gateway)'];
  const rows = Object.entries(counted).map(([piece, values]) => {
    const spread = spreadOf(values.map((entry) => entry.value));
    const added = pairedAddedMedian(full, values) ?? Number.NaN;
    return `| ${piece} | ${(spread.median / 1000).toFixed(1)} (${(spread.min / 1000).toFixed(1)}–${(spread.max / 1000).toFixed(1)}) | ${values === full ? '' : `${added >= 0 ? '+' : ''}${(added / 1000).toFixed(1)}`} |`;
  });
  const markdown = [
    "# Envoy's instructions per tools/call, piece by piece",
    '',
    `Counted ${context.measuredAt} (${context.mode} run) by valgrind callgrind (load average ${context.load.map((value) => value.toFixed(2)).join(' / ')}: the counts do not depend on it), by \`node dist/bench/envoy-pieces-instructions.js\`.`,
    `The gateway of bench/auth-setup.ts; its Envoy's configuration copied into one static Envoy per variant (one piece out), all beside it on its sidecar, backend and control plane. Per variant and round: ${plan.calls} tools/call on the \`open\` route and as many on \`authed\` (jwt_authn and a tool rule), ${IN_FLIGHT} in flight, 8 sessions each, after ${plan.warmupCalls} uncounted; minus the same Envoy idle for as long; ${plan.rounds} rounds in a balanced order.`,
    'Thousands of instructions per call: median (min–max), and the difference to `full`, the median of the differences within each round.',
    '',
    '| variant | k instructions per call | vs full (paired) |',
    '| --- | --- | --- |',
    ...rows,
    '',
  ].join('\n');
  writeBenchResults(name, { ...context, counted }, markdown, log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench envoy-pieces] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
