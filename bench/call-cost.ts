import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { z } from 'zod';
import { GatewayStack } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { IssueRequest, RunResult, runClosedLoop, runFixedRate } from './load/load-runner';
import { spreadOf } from './load/stats';
import { benchSettings } from './settings';
import { coreMicros, cpuSecondsOf } from './scenarios/cpu-time';
import { callDriver } from './scenarios/tool-call';
import { nativeMcpRouterBootstrap } from './systems/envoy-bootstraps';
import { allocatePort } from './systems/ports';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { inRotation, startEnvoy, startSingleBackendRoute } from './systems/systems';
import { HOST } from './systems/topology';
import { writeBenchResults } from './report/results-file';

/**
 * Where a tools/call's CPU goes, every process counted (issue 10, docs/adr/0008-data-path-lanes.md,
 * "where the remaining time goes"): A (the bench backend direct), C (this gateway, GatewayStack with
 * its defaults: audit on, closed inside, stdout access log) and D (Envoy 1.40's mcp_router) on one
 * stateless bench backend, tools/call at saturation in interleaved repetitions. Per answered call:
 * the CPU of each process of the system (Envoy, control plane, sidecar, Redis, dev Portal, backend),
 * of the load generator (this process), and the kernel's softirq time on the systems' cores (loopback
 * delivery, charged to no process). Saturation answers/s on a shared core are noisy; CPU per call
 * is steadier, and what the saturation ratio is made of.
 *   node dist/bench/call-cost.js [--quick]      (scripts/bench.sh call-cost)
 * Writes bench/results/call-cost.json and .md (a --quick run: call-cost-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'call-cost');
const REPETITIONS = { full: 8, quick: 2 };
/** Below every system's saturation on a quiet machine (on a loaded one C may fall short: its answers/s row says so). */
const FIXED_RATE = 300;

const log = (line: string) => process.stdout.write(`[bench call-cost] ${line}\n`);

/** A process's CPU time so far (user + system, every thread, also ended ones), in µs. */
const processCpuMicros = (pid: number) => cpuSecondsOf(pid) * 1_000_000;

interface SystemRun {
  system: string;
  /** 'saturation' or the fixed rate. */
  load: string;
  repetition: number;
  throughput: number;
  ok: number;
  errors: number;
  /** CPU µs per answered call, by process, plus `load generator` and `softirq`. */
  cpuUsPerCall: Record<string, number>;
  /**
   * The systems' cores per answered call (µs): busy with anything (also what no row counts, and on a
   * shared machine other work), and idle. On a quiet machine busy less the counted rows is what nobody
   * counted, and idle at saturation says the systems were not CPU-bound.
   */
  core: { busy: number; idle: number };
}

interface MeasuredSystem {
  name: string;
  callUrl: string;
  toolPrefix: string;
  /** The system's own processes by name (the backend is added to every system). */
  pids: Record<string, number>;
}

const Arguments = z.array(z.literal('--quick')).max(1);

async function main(): Promise<void> {
  const parsed = Arguments.safeParse(process.argv.slice(2));
  if (!parsed.success) {
    process.stderr.write('usage: node dist/bench/call-cost.js [--quick]\n');
    process.exit(2);
  }
  const quick = parsed.data.length > 0;
  const base = benchSettings(quick);
  const repetitions = quick ? REPETITIONS.quick : REPETITIONS.full;
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  const systemCores = cpuPlan.pinned ? Array.from({ length: Math.max(1, cores - 1) }, (_, index) => index) : Array.from({ length: cores }, (_, index) => index);
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const loadBefore = os.loadavg().slice(0, 2);
  const runs: SystemRun[] = [];
  const drivers: { system: MeasuredSystem; driver: Awaited<ReturnType<typeof callDriver>> }[] = [];
  try {
    const { registryFile, backendUrl, backendPid } = await startSingleBackendRoute(group, LOG_DIR);
    const gateway: GatewayStack = await group.startGateway('gateway', { registryFile, logDir: path.join(LOG_DIR, 'gateway') });
    const routerAdmin = await allocatePort();
    const routerPort = await allocatePort();
    const port = Number(new URL(backendUrl).port);
    // Two servers, as the main bench's call route: with one, mcp_router does not prefix tool names.
    const endpoint = { id: 'bench', port, url: backendUrl };
    const route = { key: 'bench', backends: [{ name: 'bench', endpoint }, { name: 'spare', endpoint: { ...endpoint, id: 'bench_spare' } }] };
    const router = await startEnvoy(group, 'envoy-mcp-router', nativeMcpRouterBootstrap(routerAdmin, [{ port: routerPort, route }]), routerAdmin, [routerPort]);
    const gatewayPids = Object.fromEntries([...gateway.processes].map(([name, member]) => [name, member.child.pid!]));
    const systems: MeasuredSystem[] = [
      { name: 'A backend direct', callUrl: backendUrl, toolPrefix: '', pids: {} },
      { name: 'C this gateway', callUrl: gateway.gatewayUrl('bench'), toolPrefix: 'bench__', pids: gatewayPids },
      { name: 'D Envoy mcp_router', callUrl: `http://${HOST}:${routerPort}/mcp/bench`, toolPrefix: 'bench__', pids: { envoy: router.child.pid! } },
    ];
    for (const system of systems) {
      system.pids.backend = backendPid;
      const driver = await callDriver(system, base);
      drivers.push({ system, driver });
      await runClosedLoop(driver.issue, { concurrency: base.toolCall.saturation.concurrency, durationMs: base.toolCall.saturation.warmupMs * 3 });
    }
    const { concurrency, warmupMs, measureMs } = base.toolCall.saturation;
    const loads: { name: string; run: (issue: IssueRequest, durationMs: number) => Promise<RunResult> }[] = [
      { name: 'saturation', run: (issue, durationMs) => runClosedLoop(issue, { concurrency, durationMs }) },
      // A rate every system serves on a loaded machine: each process's work per call without the batching saturation brings.
      { name: `${FIXED_RATE} req/s`, run: (issue, durationMs) => runFixedRate(issue, { rate: FIXED_RATE, durationMs, maxInFlight: base.maxInFlight }) },
    ];
    for (let repetition = 1; repetition <= repetitions; repetition++) {
      for (const load of loads) {
        for (const { system, driver } of inRotation(drivers, repetition)) {
          await load.run(driver.issue, warmupMs);
          const counters = () => {
            const core = coreMicros(systemCores);
            const processes: Record<string, number> = { ...snapshot(system.pids), 'load generator': processCpuMicros(process.pid), softirq: core.softirq };
            return { processes, core };
          };
          const before = counters();
          const result = await load.run(driver.issue, measureMs);
          const after = counters();
          const answered = Math.max(1, result.ok);
          const perCall = Object.fromEntries(Object.keys(before.processes).map((name) => [name, (after.processes[name] - before.processes[name]) / answered]));
          const core = { busy: (after.core.busy - before.core.busy) / answered, idle: (after.core.idle - before.core.idle) / answered };
          runs.push({ system: system.name, load: load.name, repetition, throughput: result.throughput, ok: result.ok, errors: result.sent - result.ok, cpuUsPerCall: perCall, core });
          log(`${system.name} ${load.name} #${repetition}: ${result.throughput.toFixed(0)} ok/s, ${Object.entries(perCall).map(([name, us]) => `${name} ${us.toFixed(0)}`).join(', ')} µs/call`);
        }
      }
    }
  } finally {
    for (const { driver } of drivers) driver.close();
    await group.stopAll();
  }
  const loadAfter = os.loadavg().slice(0, 2);
  const markdown = report(runs, { loadBefore, loadAfter, repetitions, cores, pinned: cpuPlan.pinned });
  const name = quick ? 'call-cost-quick' : 'call-cost';
  writeBenchResults(name, { measuredAt: new Date().toISOString(), load: { before: loadBefore, after: loadAfter }, repetitions, runs }, markdown, log);
}

function snapshot(pids: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processCpuMicros(pid)]));
}

/** Medians over repetitions of each process's CPU per call, one table row per process, a column per system. */
function report(runs: SystemRun[], context: { loadBefore: number[]; loadAfter: number[]; repetitions: number; cores: number; pinned: boolean }): string {
  const systems = [...new Set(runs.map((run) => run.system))];
  const processes = [...new Set(runs.flatMap((run) => Object.keys(run.cpuUsPerCall)))];
  const onSystemsCores = (run: SystemRun) => Object.entries(run.cpuUsPerCall).filter(([name]) => name !== 'load generator').reduce((sum, [, us]) => sum + us, 0);
  const cell = (value: number | undefined) => (value === undefined ? '–' : value.toFixed(0));
  const table = (load: string) => {
    const median = (system: string, pick: (run: SystemRun) => number | undefined) => {
      const values = runs.filter((run) => run.system === system && run.load === load).map(pick).filter((value): value is number => value !== undefined);
      return values.length ? spreadOf(values).median : undefined;
    };
    return [
      `### ${load}`,
      '',
      `| process | ${systems.join(' | ')} |`,
      `| --- | ${systems.map(() => '---').join(' | ')} |`,
      ...processes.map((name) => `| ${name} | ${systems.map((system) => cell(median(system, (run) => run.cpuUsPerCall[name]))).join(' | ')} |`),
      `| **sum on the systems' cores** | ${systems.map((system) => cell(median(system, onSystemsCores))).join(' | ')} |`,
      `| systems' cores busy, anything (/proc/stat) | ${systems.map((system) => cell(median(system, (run) => run.core.busy))).join(' | ')} |`,
      `| of that, in no row (busy − sum) | ${systems.map((system) => cell(median(system, (run) => run.core.busy - onSystemsCores(run)))).join(' | ')} |`,
      `| systems' cores idle | ${systems.map((system) => cell(median(system, (run) => run.core.idle))).join(' | ')} |`,
      `| answers/s | ${systems.map((system) => cell(median(system, (run) => run.throughput))).join(' | ')} |`,
      `| wrong or failed answers | ${systems.map((system) => String(runs.filter((run) => run.system === system && run.load === load).reduce((sum, run) => sum + run.errors, 0))).join(' | ')} |`,
      '',
    ];
  };
  return [
    "# Where a tools/call's CPU goes, every process counted",
    '',
    `Measured ${new Date().toISOString()} by \`node dist/bench/call-cost.js\` (${context.repetitions} interleaved repetitions; saturation is 16 clients in a closed loop) on ${context.cores} cores, ` +
      `load average ${context.loadBefore.map((value) => value.toFixed(2)).join(' / ')} before and ${context.loadAfter.map((value) => value.toFixed(2)).join(' / ')} after (1 / 5 min)` +
      `${context.pinned ? '; load generator on the last core, the systems on the others' : ''}. One stateless bench backend; C is GatewayStack with its defaults (audit on, closed inside, stdout access log), ` +
      "8 MCP sessions per system. CPU µs per answered call, medians over repetitions; softirq is the systems' cores' (loopback delivery, charged to no process). " +
      "The cores' busy and idle rows are read from /proc/stat: on a shared machine busy includes other work, on a quiet one busy − sum is what no process row counts.",
    '',
    ...[...new Set(runs.map((run) => run.load))].flatMap(table),
  ].join('\n');
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench call-cost] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
