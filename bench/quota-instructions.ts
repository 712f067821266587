import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { projectPath } from '../control-plane/shared/paths';
import { RepeatedValue } from './load/stats';
import { leaseWorkersOf, startQuotaGateway } from './quota-setup';
import { benchSettings } from './settings';
import { callgrindEnvoy, dumpedInstructions, instructionTable } from './systems/callgrind';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { Driver, balancedOrder, callBlock, readyDriver } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * Envoy's instructions per tools/call with rate limiting off, per instance (local) and shared (global),
 * counted by valgrind's callgrind around a fixed number of calls (the gateway of bench/quota-cost.ts):
 * unlike CPU time, the count does not grow when other work shares the cores, so an exact run and a
 * leased one (--leased[=<n>], docs/adr/0016-quotas.md, "Leased shared limits") measured at different
 * times on a busy machine compare. Envoy only: the ratelimit service and Redis are not counted (their
 * CPU per call is in bench/results/quotas*.md). Under callgrind Envoy is some 50× slower, so a leased
 * run renews its leases about once per second per worker over far fewer calls than at full speed:
 * the leased count is an upper bound.
 *   node dist/bench/quota-instructions.js [--quick] [--leased[=<n>]]
 * Writes bench/results/quota-instructions[-leased[-<n>]].json and .md (a --quick run: …-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'quota-instructions');
const PLAN = { full: { repetitions: 6, calls: 150, warmupCalls: 50 }, quick: { repetitions: 2, calls: 100, warmupCalls: 30 } };
/** Envoy under valgrind needs minutes, not seconds, to start on a busy machine. */
const ENVOY_START_TIMEOUT_MS = 300_000;
/** Calls in flight at once (callgrind runs one thread at a time). */
const IN_FLIGHT = 4;
const VARIANTS = ['off', 'local', 'global'];

const log = (line: string) => process.stdout.write(`[bench quota-instructions] ${line}\n`);

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const leaseWorkers = leaseWorkersOf(process.argv);
  const plan = quick ? PLAN.quick : PLAN.full;
  const settings = { ...benchSettings(quick), requestTimeoutMs: 60_000 };
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const outDir = path.join(LOG_DIR, 'callgrind');
  fs.mkdirSync(outDir, { recursive: true });
  process.env.ENVOY_BIN = callgrindEnvoy(outDir);
  const group = new ProcessGroup(LOG_DIR, claimCpus());
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const counted: Record<string, RepeatedValue[]> = {};
  try {
    const stack = await startQuotaGateway(group, LOG_DIR, leaseWorkers, { envoyStartTimeoutMs: ENVOY_START_TIMEOUT_MS });
    const envoy = stack.processes.get('envoy')!.child.pid!;
    const drivers = new Map<string, Driver>();
    for (const name of VARIANTS) {
      drivers.set(name, await readyDriver({ name, url: stack.gatewayUrl(name) }, settings));
      await callBlock(drivers.get(name)!, plan.warmupCalls, IN_FLIGHT, false);
      counted[name] = [];
    }
    // Warmed up again once instrumented: turning it on translates Envoy's code anew.
    execFileSync('callgrind_control', ['--instr=on', String(envoy)], { stdio: 'ignore' });
    for (const driver of drivers.values()) await callBlock(driver, plan.warmupCalls, IN_FLIGHT, false);
    for (let repetition = 1; repetition <= plan.repetitions; repetition++) {
      for (const name of balancedOrder(VARIANTS, repetition)) {
        execFileSync('callgrind_control', ['--zero', String(envoy)], { stdio: 'ignore' });
        await callBlock(drivers.get(name)!, plan.calls, IN_FLIGHT);
        const perCall = (await dumpedInstructions(envoy, outDir, 'callgrind.out')) / plan.calls;
        counted[name].push({ repetition, value: perCall });
        log(`${name} #${repetition}: ${(perCall / 1000).toFixed(1)} k instructions per call`);
      }
    }
    for (const driver of drivers.values()) driver.close();
  } finally {
    await group.stopAll();
  }
  const suffix = leaseWorkers === undefined ? '' : `-leased${process.argv.includes('--leased') ? '' : `-${leaseWorkers}`}`;
  const name = `quota-instructions${suffix}${quick ? '-quick' : ''}`;
  const context = { measuredAt: new Date().toISOString(), mode: quick ? 'quick' : 'full', load: os.loadavg().slice(0, 2), ...plan, ...(leaseWorkers !== undefined && { leaseWorkers }) };
  const markdown = [
    `# Quotas: Envoy instructions per tools/call${leaseWorkers === undefined ? '' : `, shared limits leased (--shared-limit-lease-workers ${leaseWorkers})`}`,
    '',
    `Counted ${context.measuredAt} (${context.mode} run) by valgrind callgrind on Envoy (load average ${context.load.map((value) => value.toFixed(2)).join(' / ')}: the counts do not depend on it), by \`node dist/bench/quota-instructions.js${leaseWorkers === undefined ? '' : ' --leased'}\`.`,
    `The gateway of bench/quota-cost.ts: \`off\`, \`local\` (four local_ratelimit slots), \`global\` (three shared limits, ${leaseWorkers === undefined ? 'one gRPC check per call by Envoy\'s ratelimit filter' : 'leased per Envoy worker by the call script'}); per variant and repetition, Envoy's instructions over ${plan.calls} tools/call \`bench__echo\` (${IN_FLIGHT} in flight, 8 sessions), after ${plan.warmupCalls} uncounted before instrumenting and as many after; ${plan.repetitions} repetitions in a balanced order.`,
    'Everything Envoy runs in that time is counted (timers, stats flushes, a leased run\'s renewals). Thousands of instructions per call: median (min–max), and added over `off`, the median of the differences within each repetition.',
    '',
    ...instructionTable(counted, 'off'),
    '',
  ].join('\n');
  writeBenchResults(name, { ...context, counted }, markdown, log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench quota-instructions] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
