import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { GatewayStack, StackOptions } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { threadsCpuNanosecondsOf } from './scenarios/cpu-time';
import { writeBenchResults } from './report/results-file';
import { runStreamingScenario, StreamingRun } from './scenarios/streaming';
import { benchSettings } from './settings';
import { baselineStart, revisionOf } from './systems/baseline';
import { claimCpus, ProcessGroup } from './systems/process-group';
import { startIssuer } from './systems/issuer';
import { gatewayRegistry, inRotation, startBackends, startMcpRouter, SystemUnderTest } from './systems/systems';
import { allRoutes, planTopology } from './systems/topology';

/**
 * Where a streamed frame's tail comes from on C (issue 10: added delay per frame over A ≤ 1 ms at p99;
 * docs/adr/0018-stream-relaying.md, "The streaming tail"): the streaming scenario (20 calls, 10 at a
 * time, 20 progress notifications 50 ms apart) against A, C as it is, C with one thing changed, and D,
 * interleaved in each repetition, with the full bench's backends and routes. Per repetition: each
 * system's later-frame p50/p99, and the CPU of each process its part may wake (its own, the backend).
 *   node dist/bench/stream-tail.js (--variant <name> | --baseline <worktree>) [--repetitions 12]
 * Variants: see VARIANTS; --baseline: another revision's gateway (its worktree built). Prints one
 * line per repetition; writes bench/results/stream-tail-<variant>.json and .md (-baseline with --baseline).
 */

const LOG_DIR = projectPath('.run', 'bench', 'stream-tail');
/** Control plane CPU in one system's window (≈2 s) above which the window counts as hit by a burst (a listing, a catalog rebuild). */
const BURST_MS = 50;

interface GatewayVariant {
  /** What differs from the gateway as the full bench runs it. */
  describe: string;
  options?: Partial<StackOptions>;
  /** The registry without the token and the per-tool rule (open routes). */
  open?: boolean;
  /** Done to the variant's stack once it runs. */
  started?: (stack: GatewayStack) => void;
}

const VARIANTS: Record<string, GatewayVariant> = {
  same: { describe: 'the same gateway twice (an A/A run: the spread of the method)' },
  'no-access-log': { describe: "Envoy's stdout access log off (--no-envoy-access-log)", options: { controlPlaneArgs: ['--no-envoy-access-log'] } },
  open: { describe: 'open routes: no token validated, no per-tool rule', open: true },
  'control-plane-yields': {
    describe: "the control plane at nice 0, below the bench's -10 of everything else: its background work (listings, catalog) yields to Envoy's frames",
    started: (stack) => os.setPriority(stack.processes.get('control-plane')!.child.pid!, 0),
  },
};

const loadAverage = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : sorted[Math.floor((sorted.length - 1) / 2)];
};

async function main() {
  const { values } = parseArgs({ options: { variant: { type: 'string', default: 'same' }, baseline: { type: 'string' }, repetitions: { type: 'string', default: '12' } } });
  // --baseline <worktree>: the variant is that revision's gateway (built), the rest as is.
  const variant: GatewayVariant | undefined = values.baseline ? { describe: `the gateway of ${revisionOf(path.resolve(values.baseline))}` } : VARIANTS[values.variant!];
  if (values.baseline) values.variant = 'baseline';
  if (!variant) throw new Error(`--variant: one of ${Object.keys(VARIANTS).join(', ')}, or --baseline <worktree>`);
  const full = benchSettings(false);
  const settings = { ...full, repetitions: Number(values.repetitions) };
  const group = new ProcessGroup(LOG_DIR, claimCpus());
  const log = (line: string) => process.stdout.write(`[stream-tail] ${line}\n`);
  try {
    const topology = await planTopology(settings.toolList.fleet);
    const backendsOf = startBackends(group, topology);
    await backendsOf;
    const issuer = await startIssuer();
    group.adoptBeside('issuer', undefined, issuer.stop);
    const routes = allRoutes(topology);
    const startGateway = async (name: string, gateway: GatewayVariant, start?: (options: StackOptions) => Promise<GatewayStack>) => {
      const dir = path.join(LOG_DIR, name);
      fs.mkdirSync(dir, { recursive: true });
      const registryFile = path.join(dir, 'registry.yaml');
      fs.writeFileSync(registryFile, stringify(gatewayRegistry(routes, gateway.open ? undefined : issuer), { aliasDuplicateObjects: false }));
      return group.startGateway(name, { registryFile, logDir: dir, ...gateway.options }, start);
    };
    const asIs = await startGateway('gateway', { describe: 'as is' });
    const changed = await startGateway('variant', variant, values.baseline ? baselineStart(path.resolve(values.baseline)) : undefined);
    variant.started?.(changed);
    const { router, routerPort } = await startMcpRouter(group, routes);
    const call = topology.callRoute;
    const headers = (stack: GatewayStack) => ({ authorization: `Bearer ${issuer.token(stack.gatewayUrl(call.key))}` });
    const prefix = `${call.backends[0].name}__`;
    const systems: SystemUnderTest[] = [
      { id: 'A', name: 'backend direct', callUrl: call.backends[0].endpoint.url, toolPrefix: '', list: { unsupported: '' }, requestHeaders: headers(asIs) },
      { id: 'C', name: 'C as is', callUrl: asIs.gatewayUrl(call.key), toolPrefix: prefix, list: { unsupported: '' }, requestHeaders: headers(asIs) },
      // The scenario names systems by id; the variant is told apart by its name below.
      { id: 'E', name: `C ${values.variant}`, callUrl: changed.gatewayUrl(call.key), toolPrefix: prefix, list: { unsupported: '' }, requestHeaders: headers(changed) },
      { id: 'D', name: 'Envoy mcp_router', callUrl: `http://127.0.0.1:${routerPort.get(call.key)}/mcp/${call.key}`, toolPrefix: prefix, list: { unsupported: '' }, requestHeaders: headers(asIs) },
    ];
    const backends = await backendsOf;
    // The processes on the systems' core each system's repetition may wake: its own, and the backend.
    const processesOf = (stack: GatewayStack) => Object.fromEntries([...stack.processes].map(([name, member]) => [name, member.child.pid!]));
    const measured: Record<string, Record<string, number>> = {
      A: { backend: backends.call.child.pid! },
      C: { ...processesOf(asIs), backend: backends.call.child.pid! },
      E: { ...processesOf(changed), backend: backends.call.child.pid! },
      D: { envoy: router.child.pid!, backend: backends.call.child.pid! },
    };
    // Settle: the stacks' first catalog pushes and listings are done before anything is measured.
    await new Promise((resolve) => setTimeout(resolve, 20_000));
    const startedAt = new Date().toISOString();
    const loadBefore = loadAverage();
    log(`variant ${values.variant}: ${variant.describe}; load average ${loadBefore}`);
    const rows: Record<string, { run: StreamingRun; cpuMs: Record<string, number> }>[] = [];
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      const row: (typeof rows)[number] = {};
      for (const system of inRotation(systems, repetition)) {
        const pids = measured[system.id];
        const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, threadsCpuNanosecondsOf(pid)]));
        const { runs } = await runStreamingScenario([system], { ...settings, repetitions: 1 }, () => {});
        const cpuMs = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, (threadsCpuNanosecondsOf(pid) - before[name]) / 1e6]));
        row[system.id] = { run: runs[0], cpuMs };
      }
      rows.push(row);
      const p = (id: string) => `${row[id].run.laterFramesMs.p50.toFixed(2)}/${row[id].run.laterFramesMs.p99.toFixed(2)}`;
      const cpu = (id: string) => Object.entries(row[id].cpuMs).map(([name, ms]) => `${name} ${ms.toFixed(1)}`).join(', ');
      log(`#${repetition} load ${loadAverage().split(' ')[0]}: later p50/p99 A ${p('A')} C ${p('C')} variant ${p('E')} D ${p('D')}`);
      log(`   CPU ms  C: ${cpu('C')} | variant: ${cpu('E')} | D: ${cpu('D')}`);
    }
    const added = (id: string, key: 'p50' | 'p99') => median(rows.map((row) => row[id].run.laterFramesMs[key] - row.A.run.laterFramesMs[key]));
    const addedFirst = (id: string) => median(rows.map((row) => row[id].run.firstFrameMs.p99 - row.A.run.firstFrameMs.p99));
    const cpuMedians = (id: string) => Object.fromEntries(Object.keys(measured[id]).map((process) => [process, median(rows.map((row) => row[id].cpuMs[process]))]));
    const labels: [string, string][] = [['C', 'C as is'], ['E', `C ${values.variant}`], ['D', 'D Envoy mcp_router']];
    const summary = labels.map(([id, name]) => ({ system: name, addedP50Ms: added(id, 'p50'), addedP99Ms: added(id, 'p99'), addedFirstP99Ms: addedFirst(id), cpuMsPerRepetition: cpuMedians(id) }));
    const loadAfter = loadAverage();
    const markdown = [
      '# Streaming tail: C as is against one variant (diagnostic)',
      '',
      `Run ${startedAt} → ${new Date().toISOString()}, \`node dist/bench/stream-tail.js ${values.baseline ? `--baseline ${values.baseline}` : `--variant ${values.variant}`} --repetitions ${rows.length}\`: ${variant.describe}. The streaming scenario (${settings.streaming.callsPerRepetition} calls, ${settings.streaming.concurrency} at a time, ${settings.streaming.notifications} progress notifications ${settings.streaming.intervalMs} ms apart) against A, C, the variant and D in turn, the full bench's backends and routes; load average ${loadBefore} at the start, ${loadAfter} at the end (2 cores, shared). Added over A: median over repetitions of the difference to A in the same repetition. CPU: every thread's time on a CPU (schedstat) during that system's part of a repetition.`,
      '',
      '| system | added p50 ms | added p99 ms | first frame added p99 ms | CPU ms per repetition (median) |',
      '| --- | --- | --- | --- | --- |',
      ...summary.map((row) => `| ${row.system} | ${row.addedP50Ms.toFixed(2)} | ${row.addedP99Ms.toFixed(2)} | ${row.addedFirstP99Ms.toFixed(2)} | ${Object.entries(row.cpuMsPerRepetition).map(([process, ms]) => `${process} ${ms.toFixed(1)}`).join(', ')} |`),
      '',
      `Variant − as is, later-frame p99 per repetition (ms): ${rows.map((row) => (row.E.run.laterFramesMs.p99 - row.C.run.laterFramesMs.p99).toFixed(2)).join(', ')}.`,
      '',
      ...labels.slice(0, 2).map(([id, name]) => {
        const split = (burst: boolean) => rows.filter((row) => row[id].cpuMs['control-plane'] > BURST_MS === burst).map((row) => row[id].run.laterFramesMs.p99 - row.A.run.laterFramesMs.p99);
        const withBurst = split(true);
        const without = split(false);
        return `${name}: added p99 (median) in windows where its control plane spent more than ${BURST_MS} ms ${withBurst.length ? median(withBurst).toFixed(2) : '–'} ms (${withBurst.length} windows), in the others ${without.length ? median(without).toFixed(2) : '–'} ms (${without.length}).`;
      }),
      '',
      `Control plane CPU (ms) in each repetition's window, as is / variant: ${rows.map((row) => `${row.C.cpuMs['control-plane'].toFixed(0)}/${row.E.cpuMs['control-plane'].toFixed(0)}`).join(', ')}.`,
      '',
    ].join('\n');
    writeBenchResults(`stream-tail-${values.variant}`, { variant: values.variant, describe: variant.describe, loadBefore, loadAfter, summary, repetitions: rows }, markdown, log);
  } finally {
    await group.stopAll();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`[stream-tail] failed: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
