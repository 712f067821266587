import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { z } from 'zod';
import { projectPath } from '../control-plane/shared/paths';
import { IssueRequest, runClosedLoop } from './load/load-runner';
import { spreadOf } from './load/stats';
import { benchSettings } from './settings';
import { contextSwitchesOf, cpuSecondsOf } from './scenarios/cpu-time';
import { callDriver, waitUntilCallsAnswer } from './scenarios/tool-call';
import { callgrindEnvoy, dumpedInstructions } from './systems/callgrind';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { gatewayRegistry, inRotation, startBackends, startMcpRouter } from './systems/systems';
import { HOST, RouteSpec, allRoutes, planTopology } from './systems/topology';
import { writeBenchResults } from './report/results-file';

/**
 * Does the full bench's registry cost the gateway more per tools/call than call-cost's (issue 10,
 * docs/adr/0008-data-path-lanes.md, "Session 8: the call-cost and full-bench gap")? Starts the full
 * bench's backends (bench/systems/topology.ts: the bench backend, 50 fleet backends of 100 tools, a
 * slow one) and two GatewayStacks with their defaults, side by side on the systems' core:
 *   call-cost  the registry of bench/call-cost.ts: one route, the bench backend once;
 *   full       the full bench's (bench/systems/systems.ts): the call route with the bench backend twice
 *              under two names, and the three 50-backend list routes (5,000 tools each, one backend
 *              down, one slow), refreshed every 30 s.
 * Both are called on their call route, 8 MCP sessions each, in alternating order.
 *   --instructions  Envoy runs under valgrind's callgrind: its instructions per call over a fixed
 *                   number of calls (independent of other work on the machine);
 *   otherwise       each process's CPU per answered call at saturation, with D (the full bench's
 *                   mcp_router, one listener per route) in the same environment.
 *   node dist/bench/call-conditions.js [--instructions] [--repetitions N]
 * Writes bench/results/call-conditions[-instructions].json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'call-conditions');
/** Calls per counted block, the uncounted ones before instrumenting and after, and how many in flight (callgrind runs one thread at a time). */
const COUNTED = { calls: 150, warmupCalls: 50, inFlight: 4 };
/** Envoy under valgrind needs minutes, not seconds, to start on a busy machine. */
const ENVOY_START_TIMEOUT_MS = 600_000;

const log = (line: string) => process.stdout.write(`[bench call-conditions] ${line}\n`);

const Options = z.object({ instructions: z.boolean().default(false), repetitions: z.coerce.number().int().min(1).max(50).default(6) });

interface Measured {
  name: string;
  pids: Record<string, number>;
  issue: IssueRequest;
  close(): void;
}

/** `calls` tools/call, COUNTED.inFlight at a time; returns how many were wrong or failed. */
async function callBlock(system: Measured, calls: number): Promise<number> {
  let left = calls;
  let failed = 0;
  const worker = async () => {
    while (left-- > 0) if ((await system.issue()).error) failed++;
  };
  await Promise.all(Array.from({ length: COUNTED.inFlight }, worker));
  return failed;
}

async function main(): Promise<void> {
  let options: z.infer<typeof Options>;
  try {
    const { values } = parseArgs({ options: { instructions: { type: 'boolean' }, repetitions: { type: 'string' } }, strict: true, allowPositionals: false });
    options = Options.parse(values);
  } catch (error) {
    process.stderr.write(`usage: node dist/bench/call-conditions.js [--instructions] [--repetitions N]\n${(error as Error).message}\n`);
    process.exit(2);
  }
  // Under callgrind a call takes far longer than the load benches allow.
  const settings = { ...benchSettings(false), ...(options.instructions && { requestTimeoutMs: 60_000 }) };
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  if (options.instructions) process.env.ENVOY_BIN = callgrindEnvoy(LOG_DIR, path.join(LOG_DIR, 'callgrind.out.%p'));
  const group = new ProcessGroup(LOG_DIR, claimCpus());
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const loadBefore = os.loadavg().slice(0, 2);
  /** Per system, per row (a process's CPU µs per call, answers/s, k instructions per call): one value per repetition. */
  const results: Record<string, Record<string, number[]>> = {};
  const systems: Measured[] = [];
  try {
    const topology = await planTopology(settings.toolList.fleet);
    const { call: callBackend } = await startBackends(group, topology);
    const call = topology.callRoute;
    const toolPrefix = `${call.backends[0].name}__`;
    if (!options.instructions) {
      const { router, routerPort } = await startMcpRouter(group, allRoutes(topology));
      const driver = await callDriver({ callUrl: `http://${HOST}:${routerPort.get(call.key)}/mcp/${call.key}`, toolPrefix }, settings);
      systems.push({ name: 'D Envoy mcp_router', pids: { envoy: router.child.pid! }, ...driver });
    }
    const registries: { name: string; routes: RouteSpec[] }[] = [
      { name: 'C, call-cost registry', routes: [{ key: call.key, backends: [call.backends[0]] }] },
      { name: 'C, full bench registry', routes: allRoutes(topology) },
    ];
    for (const [index, registry] of registries.entries()) {
      const dir = path.join(LOG_DIR, `gateway-${index + 1}`);
      fs.mkdirSync(dir, { recursive: true });
      const registryFile = path.join(dir, 'registry.yaml');
      fs.writeFileSync(registryFile, stringify(gatewayRegistry(registry.routes)));
      const stack = await group.startGateway(`gateway-${index + 1}`, { registryFile, logDir: dir, envoyStartTimeoutMs: ENVOY_START_TIMEOUT_MS });
      const system = { name: registry.name, callUrl: stack.gatewayUrl(call.key), toolPrefix };
      // The full registry's gateway lists 5,000 tools × 3 before its call route has its rules.
      await waitUntilCallsAnswer([system], settings, ENVOY_START_TIMEOUT_MS);
      const pids = Object.fromEntries([...stack.processes].map(([name, member]) => [name, member.child.pid!]));
      systems.push({ name: registry.name, pids, ...(await callDriver(system, settings)) });
    }
    for (const system of systems) {
      results[system.name] = {};
      // The backend every system's calls reach: counted with each in the /proc mode (its share grows as a path's rate falls).
      if (!options.instructions) system.pids.backend = callBackend.child.pid!;
    }
    const note = (system: Measured, row: string, value: number) => (results[system.name][row] ??= []).push(value);
    if (options.instructions) {
      // Every path warmed up before instrumenting and again after (turning it on translates Envoy's code anew).
      for (const system of systems) {
        await callBlock(system, COUNTED.warmupCalls);
        execFileSync('callgrind_control', ['--instr=on', String(system.pids.envoy)], { stdio: 'ignore' });
        await callBlock(system, COUNTED.warmupCalls);
      }
      for (let repetition = 1; repetition <= options.repetitions; repetition++) {
        for (const system of inRotation(systems, repetition)) {
          execFileSync('callgrind_control', ['--zero', String(system.pids.envoy)], { stdio: 'ignore' });
          const failed = await callBlock(system, COUNTED.calls);
          if (failed > 0) throw new Error(`${system.name}: ${failed} wrong answers under callgrind`);
          const perCall = (await dumpedInstructions(system.pids.envoy, LOG_DIR, `callgrind.out.${system.pids.envoy}`)) / COUNTED.calls;
          note(system, 'Envoy k instructions per call', perCall / 1000);
          log(`${system.name} #${repetition}: ${(perCall / 1000).toFixed(1)} k instructions per call`);
        }
      }
    } else {
      const { concurrency, warmupMs, measureMs } = settings.toolCall.saturation;
      for (const system of systems) await runClosedLoop(system.issue, { concurrency, durationMs: warmupMs * 3 });
      for (let repetition = 1; repetition <= options.repetitions; repetition++) {
        for (const system of inRotation(systems, repetition)) {
          await runClosedLoop(system.issue, { concurrency, durationMs: warmupMs });
          const before = Object.fromEntries(Object.entries(system.pids).map(([name, pid]) => [name, { cpu: cpuSecondsOf(pid), switches: contextSwitchesOf(pid) }]));
          const result = await runClosedLoop(system.issue, { concurrency, durationMs: measureMs });
          const answered = Math.max(1, result.ok);
          note(system, 'answers/s', result.throughput);
          note(system, 'wrong or failed', result.sent - result.ok);
          for (const [name, pid] of Object.entries(system.pids)) {
            note(system, `${name} CPU µs per call`, ((cpuSecondsOf(pid) - before[name].cpu) * 1e6) / answered);
            note(system, `${name} context switches per call`, (contextSwitchesOf(pid) - before[name].switches) / answered);
          }
          log(`${system.name} #${repetition}: ${result.throughput.toFixed(0)} ok/s, ${Object.entries(results[system.name]).map(([row, values]) => `${row} ${values.at(-1)!.toFixed(1)}`).join(', ')}`);
        }
      }
    }
  } finally {
    for (const system of systems) system.close();
    await group.stopAll();
  }
  const loadAfter = os.loadavg().slice(0, 2);
  const name = options.instructions ? 'call-conditions-instructions' : 'call-conditions';
  const markdown = report(results, { instructions: options.instructions, repetitions: options.repetitions, loadBefore, loadAfter });
  writeBenchResults(name, { measuredAt: new Date().toISOString(), load: { before: loadBefore, after: loadAfter }, results }, markdown, log);
}

/** One row per measured figure, a column per system: median over repetitions (min–max). */
function report(results: Record<string, Record<string, number[]>>, context: { instructions: boolean; repetitions: number; loadBefore: number[]; loadAfter: number[] }): string {
  const systems = Object.keys(results);
  const rows = [...new Set(systems.flatMap((system) => Object.keys(results[system])))];
  const cell = (row: string, values: number[] | undefined) => {
    if (!values?.length) return '–';
    const spread = spreadOf(values);
    const digits = context.instructions || row.includes('context switches') ? 1 : 0;
    return `${spread.median.toFixed(digits)} (${spread.min.toFixed(digits)}–${spread.max.toFixed(digits)})`;
  };
  const load = (values: number[]) => values.map((value) => value.toFixed(2)).join(' / ');
  return [
    `# The gateway's cost per tools/call: call-cost's registry against the full bench's${context.instructions ? ' (Envoy instructions)' : ''}`,
    '',
    `Measured ${new Date().toISOString()} by \`node dist/bench/call-conditions.js${context.instructions ? ' --instructions' : ''}\`, ${context.repetitions} repetitions in alternating order, ` +
      `load average ${load(context.loadBefore)} before and ${load(context.loadAfter)} after (1 / 5 min). The full bench's backends run beside both gateways; ` +
      'each gateway is called on its call route (`bench__echo`), 8 MCP sessions. ' +
      (context.instructions
        ? `Envoy under valgrind's callgrind: instructions over ${COUNTED.calls} calls (${COUNTED.inFlight} in flight), thousands per call; the count does not depend on other work on the machine. Everything Envoy ran in a block is counted (timers, and the catalog refresh's requests when one lands in it).`
        : "Each process's CPU and context switches (its live threads', voluntary or not) per answered call at saturation (16 clients, closed loop), from /proc; on a shared machine the CPU grows with other work, alike for the systems measured in turn."),
    '',
    `| | ${systems.join(' | ')} |`,
    `| --- | ${systems.map(() => '---').join(' | ')} |`,
    ...rows.map((row) => `| ${row} | ${systems.map((system) => cell(row, results[system][row])).join(' | ')} |`),
    '',
  ].join('\n');
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench call-conditions] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
