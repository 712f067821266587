import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { z } from 'zod';
import type { GatewayStack } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { runFixedRate } from './load/load-runner';
import { pairedRatioMedian, spreadOf, summarize } from './load/stats';
import { benchSettings } from './settings';
import { contextSwitchesOf, cpuSecondsOf } from './scenarios/cpu-time';
import { callDriver } from './scenarios/tool-call';
import { startGroupWithIssuer } from './systems/issuer';
import { baselineStart, revisionOf } from './systems/baseline';
import { gatewayRegistry, inRotation, startMcpRouter, startSingleBackendRoute } from './systems/systems';
import { RouteSpec } from './systems/topology';
import { writeBenchResults } from './report/results-file';

/**
 * Low-rate tools/call latency, C against D only (issue 10's 100 and 250 req/s targets,
 * docs/adr/0008-data-path-lanes.md, "Session 9: the low-rate path"): the full bench's C as users run
 * it (every route validates the agent's RS256 token, every Tool Service has a per-tool rule; the call
 * route's two names of one stateless bench backend) and D (Envoy 1.40's mcp_router), side by side,
 * tools/call at fixed rates in 8 sessions each, interleaved, with every process's CPU per answered call.
 * The smallest run of the full bench's tools/call comparison at fixed rates (no A, B, E, no saturation,
 * no other scenario): minutes, not a quarter of an hour. With --baseline <worktree, built>, that
 * worktree's gateway runs beside this tree's as `C base`, so a change's before and after are measured
 * against the same D in one run; with --variant-args="<control plane options>" (with "=": they start with dashes), a second gateway of this
 * tree with those options runs beside it as `C variant` (one piece toggled, e.g. --no-envoy-access-log).
 * Before the runs, every process's CPU and context switches with nothing sent (its timers).
 *   scripts/bench.sh low-rate [--rates 100,250] [--repetitions N] [--measure-ms MS] [--baseline DIR] [--variant-args=ARGS] [--name NAME]
 * Writes bench/results/<name>.json and .md (name: low-rate).
 */

const LOG_DIR = projectPath('.run', 'bench', 'low-rate');

/** How long every process is watched with nothing sent, before the measured runs. */
const IDLE_WINDOW_MS = 10_000;

const log = (line: string) => process.stdout.write(`[bench low-rate] ${line}\n`);

const Options = z.object({
  rates: z
    .string()
    .default('100,250')
    .transform((text) => text.split(',').map(Number))
    .pipe(z.array(z.number().int().min(1).max(5_000)).min(1)),
  repetitions: z.coerce.number().int().min(1).max(50).default(6),
  'measure-ms': z.coerce.number().int().min(1_000).max(600_000).default(6_000),
  name: z
    .string()
    .regex(/^[a-z0-9-]+$/)
    .default('low-rate'),
  baseline: z.string().min(1).optional(),
  'variant-args': z
    .string()
    .min(1)
    .transform((text) => text.split(' ').filter(Boolean))
    .optional(),
});

const USAGE = 'usage: node dist/bench/low-rate.js [--rates 100,250] [--repetitions N] [--measure-ms MS] [--baseline DIR] [--variant-args=ARGS] [--name NAME]';

/** This tree's gateway, the baseline worktree's (--baseline), this tree's with other options (--variant-args), Envoy's mcp_router. */
type SystemName = 'C' | 'C base' | 'C variant' | 'D';

interface Run {
  system: SystemName;
  rate: number;
  repetition: number;
  p50: number;
  p99: number;
  ok: number;
  errors: number;
  /** CPU µs per answered call by process. */
  cpuUsPerCall: Record<string, number>;
  /** Context switches (every thread's) per answered call by process: how often each was woken or preempted. */
  switchesPerCall: Record<string, number>;
}

async function main(): Promise<void> {
  let options: z.infer<typeof Options>;
  try {
    const strings = ['rates', 'repetitions', 'measure-ms', 'name', 'baseline', 'variant-args'] as const;
    const { values } = parseArgs({ options: Object.fromEntries(strings.map((name) => [name, { type: 'string' as const }])), strict: true, allowPositionals: false });
    options = Options.parse(values);
  } catch (error) {
    process.stderr.write(`${USAGE}\n${(error as Error).message}\n`);
    process.exit(2);
  }
  const settings = benchSettings(false);
  const baseline = options.baseline && path.resolve(options.baseline);
  const startBaseline = baseline ? baselineStart(baseline) : undefined;
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const { group, issuer, stopAll } = await startGroupWithIssuer(LOG_DIR);
  const loadBefore = os.loadavg().slice(0, 2);
  const runs: Run[] = [];
  const idle: Record<string, { cpuMsPerSecond: number; switchesPerSecond: number }> = {};
  const drivers: { id: SystemName; pids: Record<string, number>; driver: Awaited<ReturnType<typeof callDriver>> }[] = [];
  try {
    const { backendUrl, backendPid } = await startSingleBackendRoute(group, LOG_DIR);
    const endpoint = { id: 'bench', port: Number(new URL(backendUrl).port), url: backendUrl };
    // The full bench's call route: the bench backend under two names, so both paths multiplex.
    const route: RouteSpec = { key: 'call', backends: [{ name: 'bench', endpoint }, { name: 'spare', endpoint: { ...endpoint, id: 'bench_spare' } }] };
    const registryFile = path.join(LOG_DIR, 'registry-authed.yaml');
    fs.writeFileSync(registryFile, stringify(gatewayRegistry([route], issuer), { aliasDuplicateObjects: false }));
    const gateways: { id: SystemName; stack: GatewayStack }[] = [{ id: 'C', stack: await group.startGateway('gateway', { registryFile, logDir: path.join(LOG_DIR, 'gateway') }) }];
    const variantArgs = options['variant-args'];
    if (variantArgs) gateways.push({ id: 'C variant', stack: await group.startGateway('variant', { registryFile, logDir: path.join(LOG_DIR, 'variant'), extraArgs: { controlPlane: variantArgs } }) });
    if (startBaseline) gateways.push({ id: 'C base', stack: await group.startGateway('baseline', { registryFile, logDir: path.join(LOG_DIR, 'baseline') }, startBaseline) });
    const { router, routerPort } = await startMcpRouter(group, [route]);
    const systems: { id: SystemName; callUrl: string; pids: Record<string, number> }[] = [
      ...gateways.map(({ id, stack }) => ({
        id,
        callUrl: stack.gatewayUrl(route.key),
        pids: { ...Object.fromEntries([...stack.processes].map(([name, member]) => [name, member.child.pid!])), backend: backendPid },
      })),
      { id: 'D', callUrl: `http://127.0.0.1:${routerPort.get(route.key)!}/mcp/${route.key}`, pids: { envoy: router.child.pid!, backend: backendPid } },
    ];
    for (const system of systems) {
      // The token's audience is the gateway's URL of the route; D and the baseline ignore or accept it alike.
      const requestHeaders = { authorization: `Bearer ${issuer.token(system.id === 'D' ? gateways[0].stack.gatewayUrl(route.key) : system.callUrl)}` };
      const driver = await callDriver({ callUrl: system.callUrl, toolPrefix: 'bench__', requestHeaders }, settings);
      for (let attempt = 0; (await driver.issue()).error; attempt++) {
        if (attempt > 600) throw new Error(`${system.id} does not answer tools/call`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      drivers.push({ id: system.id, pids: system.pids, driver });
      await runFixedRate(driver.issue, { ...settings.toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
    }
    // What each process spends with nothing sent: at a low rate its timers and wake-ups share the core with the calls.
    const everyProcess = drivers.flatMap(({ id, pids }) => Object.entries(pids).filter(([name]) => id !== 'D' || name !== 'backend').map(([name, pid]) => ({ label: `${id} ${name}`, pid })));
    const idleBefore = everyProcess.map(({ pid }) => ({ cpu: cpuSecondsOf(pid), switches: contextSwitchesOf(pid) }));
    await new Promise((resolve) => setTimeout(resolve, IDLE_WINDOW_MS));
    everyProcess.forEach(({ label, pid }, index) => {
      idle[label] = { cpuMsPerSecond: ((cpuSecondsOf(pid) - idleBefore[index].cpu) * 1e3) / (IDLE_WINDOW_MS / 1e3), switchesPerSecond: (contextSwitchesOf(pid) - idleBefore[index].switches) / (IDLE_WINDOW_MS / 1e3) };
    });
    log(`idle, CPU ms/s and context switches/s: ${Object.entries(idle).map(([name, use]) => `${name} ${use.cpuMsPerSecond.toFixed(1)} / ${use.switchesPerSecond.toFixed(0)}`).join(', ')}`);
    for (let repetition = 1; repetition <= options.repetitions; repetition++) {
      for (const rate of options.rates) {
        for (const { id, pids, driver } of inRotation(drivers, repetition)) {
          await runFixedRate(driver.issue, { rate, durationMs: settings.toolCall.warmupMs, maxInFlight: settings.maxInFlight });
          const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, { cpu: cpuSecondsOf(pid), switches: contextSwitchesOf(pid) }]));
          const result = await runFixedRate(driver.issue, { rate, durationMs: options['measure-ms'], maxInFlight: settings.maxInFlight });
          const answered = Math.max(1, result.ok);
          const cpuUsPerCall = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, ((cpuSecondsOf(pid) - before[name].cpu) * 1e6) / answered]));
          const switchesPerCall = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, (contextSwitchesOf(pid) - before[name].switches) / answered]));
          const latency = summarize(result.latenciesMs);
          runs.push({ system: id, rate, repetition, p50: latency.p50, p99: latency.p99, ok: result.ok, errors: result.sent - result.ok, cpuUsPerCall, switchesPerCall });
          log(`${id} ${rate} req/s #${repetition}: p50 ${latency.p50.toFixed(3)} ms, p99 ${latency.p99.toFixed(3)} ms; ${Object.entries(cpuUsPerCall).map(([name, us]) => `${name} ${us.toFixed(0)}`).join(', ')} µs/call; switches/call ${Object.entries(switchesPerCall).map(([name, count]) => `${name} ${count.toFixed(2)}`).join(', ')}`);
        }
      }
    }
  } finally {
    for (const { driver } of drivers) driver.close();
    await stopAll();
  }
  const loadAfter = os.loadavg().slice(0, 2);
  const context = { measuredAt: new Date().toISOString(), load: { before: loadBefore, after: loadAfter }, repetitions: options.repetitions, measureMs: options['measure-ms'], idle, revisions: { C: revisionOf(projectPath()), ...(baseline && { 'C base': revisionOf(baseline) }), ...(options['variant-args'] && { 'C variant': `this tree with ${options['variant-args'].join(' ')}` }) } };
  writeBenchResults(options.name, { ...context, runs }, report(runs, context), log);
}

/** Per rate and gateway: medians over repetitions of p50/p99 beside D's, the paired ratios to D, and CPU per call by process. */
function report(runs: Run[], context: { measuredAt: string; load: { before: number[]; after: number[] }; repetitions: number; measureMs: number; idle: Record<string, { cpuMsPerSecond: number; switchesPerSecond: number }>; revisions: Partial<Record<SystemName, string>> }): string {
  const rates = [...new Set(runs.map((run) => run.rate))];
  const gateways = [...new Set(runs.map((run) => run.system))].filter((system) => system !== 'D');
  const of = (system: SystemName, rate: number) => runs.filter((run) => run.system === system && run.rate === rate);
  const median = (values: number[]) => spreadOf(values).median;
  const fixed = (value: number, digits = 2) => value.toFixed(digits);
  const rows = rates.flatMap((rate) =>
    gateways.map((gateway) => {
      const [c, d] = [of(gateway, rate), of('D', rate)];
      const paired = (pick: (run: Run) => number) => (system: Run[]) => system.map((run) => ({ repetition: run.repetition, value: pick(run) }));
      const ratio = (pick: (run: Run) => number) => pairedRatioMedian(paired(pick)(d), paired(pick)(c)) ?? Number.NaN;
      const cpu = (system: Run[], name: string) => median(system.map((run) => run.cpuUsPerCall[name] ?? 0));
      const gatewayCpu = Object.keys(c[0]?.cpuUsPerCall ?? {})
        .map((name) => `${name} ${fixed(cpu(c, name), 0)}`)
        .join(', ');
      const switches = (system: Run[], names: string[]) => fixed(median(system.map((run) => names.reduce((sum, name) => sum + (run.switchesPerCall[name] ?? 0), 0))));
      const gatewayProcesses = Object.keys(c[0]?.switchesPerCall ?? {}).filter((name) => name !== 'backend');
      return `| ${rate} req/s | ${gateway} | ${fixed(median(c.map((run) => run.p50)))} / ${fixed(median(d.map((run) => run.p50)))} | **${fixed(ratio((run) => run.p50))}×** | ${fixed(median(c.map((run) => run.p99)))} / ${fixed(median(d.map((run) => run.p99)))} | ${fixed(ratio((run) => run.p99))}× | ${gatewayCpu} | ${fixed(cpu(d, 'envoy'), 0)}, backend ${fixed(cpu(d, 'backend'), 0)} | ${switches(c, gatewayProcesses)} / ${switches(d, ['envoy'])} | ${c.reduce((sum, run) => sum + run.errors, 0)} |`;
    }),
  );
  return [
    '# Low-rate tools/call: the gateway (authed, per-tool rule) against D, paired',
    '',
    `Measured ${context.measuredAt} by \`node dist/bench/low-rate.js\`, ${context.repetitions} interleaved repetitions of ${context.measureMs / 1000} s per system and rate, ` +
      `load average ${context.load.before.map((value) => fixed(value)).join(' / ')} before and ${context.load.after.map((value) => fixed(value)).join(' / ')} after (1 / 5 min). ` +
      `${Object.entries(context.revisions).map(([system, revision]) => `${system}: ${revision}`).join('; ')}. ` +
      "The gateway validates the agent's RS256 token and applies a per-tool rule (as in the full bench); one stateless bench backend under two names, 8 MCP sessions per system. " +
      "Latency medians over repetitions (ms, gateway / D); ratios are medians of the per-repetition ratios to D; CPU µs per answered call, medians (the backend's row is the shared backend's, while that system was measured).",
    '',
    '| load | gateway | p50 gateway / D | p50 ratio to D | p99 gateway / D | p99 ratio to D | gateway CPU µs/call | D CPU µs/call (Envoy, backend) | context switches per call, gateway (all but the backend) / D Envoy | wrong or failed |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Idle (nothing sent for ${IDLE_WINDOW_MS / 1000} s, after the first warm-up), CPU ms per second / context switches per second: ${Object.entries(context.idle).map(([name, use]) => `${name} ${fixed(use.cpuMsPerSecond, 1)} / ${fixed(use.switchesPerSecond, 0)}`).join(', ')}.`,
  ].join('\n');
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench low-rate] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
