import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { projectPath } from '../control-plane/shared/paths';
import { startAuthVariants } from './auth-setup';
import { startGroupWithIssuer } from './systems/issuer';
import { RepeatedValue } from './load/stats';
import { benchSettings } from './settings';
import { callgrindEnvoy, dumpedInstructions, instructionTable } from './systems/callgrind';
import { Driver, balancedOrder, callBlock, readyDriver } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * Envoy's instructions per tools/call of each identity variant (bench/auth-setup.ts), counted by
 * valgrind's callgrind around a fixed number of calls: unlike CPU time, the count does not grow when
 * other work shares the cores, so two builds measured at different times on a busy machine compare
 * (perf's hardware counters are not available in this VM). Envoy runs under callgrind (some 50× slower),
 * so this counts, it does not time. Counters are zeroed before and dumped after each variant's block of
 * calls; the blocks run in balancedOrder, and what a variant adds over `open` is paired by repetition.
 *   scripts/bench.sh auth-instructions [--quick]     (node dist/bench/auth-instructions.js [--quick])
 * Writes bench/results/auth-instructions.json and .md (a --quick run: auth-instructions-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'auth-instructions');
const PLAN = { full: { repetitions: 8, calls: 150, warmupCalls: 50 }, quick: { repetitions: 4, calls: 100, warmupCalls: 30 } };
/** Envoy under valgrind needs minutes, not seconds, to start on a busy machine. */
const ENVOY_START_TIMEOUT_MS = 300_000;
/** Calls in flight at once: the 8 sessions of a variant in turn, a few at a time (callgrind runs one thread at a time). */
const IN_FLIGHT = 4;

const log = (line: string) => process.stdout.write(`[bench auth-instructions] ${line}\n`);

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const plan = quick ? PLAN.quick : PLAN.full;
  // Slow Envoy: a call may take far longer than the load benches allow.
  const settings = { ...benchSettings(quick), requestTimeoutMs: 60_000 };
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const outDir = path.join(LOG_DIR, 'callgrind');
  fs.mkdirSync(outDir);
  process.env.ENVOY_BIN = callgrindEnvoy(outDir);
  const { group, issuer, stopAll } = await startGroupWithIssuer(LOG_DIR);
  const counted: Record<string, RepeatedValue[]> = {};
  try {
    const { variants, pids } = await startAuthVariants(group, issuer, LOG_DIR, { envoyStartTimeoutMs: ENVOY_START_TIMEOUT_MS });
    const drivers = new Map<string, Driver>();
    // Every path warmed up before instrumenting and again after (turning it on translates Envoy's code anew).
    for (const variant of variants) {
      drivers.set(variant.name, await readyDriver(variant, settings));
      await callBlock(drivers.get(variant.name)!, plan.warmupCalls, IN_FLIGHT, false);
      counted[variant.name] = [];
    }
    execFileSync('callgrind_control', ['--instr=on', String(pids.envoy)], { stdio: 'ignore' });
    for (const driver of drivers.values()) await callBlock(driver, plan.warmupCalls, IN_FLIGHT, false);
    for (let repetition = 1; repetition <= plan.repetitions; repetition++) {
      for (const name of balancedOrder([...drivers.keys()], repetition)) {
        execFileSync('callgrind_control', ['--zero', String(pids.envoy)], { stdio: 'ignore' });
        await callBlock(drivers.get(name)!, plan.calls, IN_FLIGHT);
        const perCall = (await dumpedInstructions(pids.envoy, outDir, 'callgrind.out')) / plan.calls;
        counted[name].push({ repetition, value: perCall });
        log(`${name} #${repetition}: ${(perCall / 1000).toFixed(1)} k instructions per call`);
      }
    }
    for (const open of drivers.values()) open.close();
  } finally {
    await stopAll();
  }
  const name = quick ? 'auth-instructions-quick' : 'auth-instructions';
  const context = { measuredAt: new Date().toISOString(), mode: quick ? 'quick' : 'full', load: os.loadavg().slice(0, 2), ...plan };
  const markdown = [
    '# Caller identity: Envoy instructions per tools/call',
    '',
    `Counted ${context.measuredAt} (${context.mode} run) by valgrind callgrind on Envoy (load average ${context.load.map((value) => value.toFixed(2)).join(' / ')}: the counts do not depend on it), by \`scripts/bench.sh auth-instructions\`.`,
    `The gateway of \`scripts/bench.sh auth\` (bench/auth-setup.ts); per variant and repetition, Envoy's instructions over ${plan.calls} tools/call \`bench__echo\` (${IN_FLIGHT} in flight, 8 sessions), after ${plan.warmupCalls} uncounted before instrumenting and as many after; ${plan.repetitions} repetitions in a balanced order.`,
    'Everything Envoy runs in that time is counted (its timers and stats flushes too, alike for every variant). Thousands of instructions per call: median (min–max), and added over `open`, the median of the differences within each repetition.',
    '',
    ...instructionTable(counted, 'open'),
    '',
  ].join('\n');
  writeBenchResults(name, { ...context, counted }, markdown, log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench auth-instructions] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
