import * as fs from 'node:fs';
import { ECHO_TOOL } from '../backends/bench-tool-service';
import { BenchSettings } from '../settings';
import { inRotation } from '../systems/systems';
import { RunResult, runClosedLoop, runFixedRate } from './load-runner';
import { McpHttpClient, echoOutcome, openSession } from './mcp-client';
import { LatencySummary, spreadOf, summarize } from './stats';

/**
 * Two variants of the gateway's tools/call path measured in the same run, in turn (which one goes
 * first rotates per repetition), at fixed rates (p50/p99) and at saturation, with the CPU time each
 * variant's processes spend per answered call: what `scripts/bench.sh auth` and `inside` share.
 */

export interface ComparisonRun<Variant extends string> {
  variant: Variant;
  load: string;
  repetition: number;
  latencyMs: LatencySummary;
  throughput: number;
  errors: number;
  /** CPU time per answered call (µs) of each measured process: steadier than latency on a shared machine. */
  cpuUsPerCall: Record<string, number>;
}

/** A process's CPU time so far (user + system, all threads), in µs, from /proc. */
function cpuMicros(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command; clock ticks of 10 ms.
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

export interface ToolCallDriver {
  /** One tools/call of the bench backend's echo tool, sessions taken in turn. */
  issue: () => Promise<{ endMs: number; error?: string }>;
  close: () => void;
}

async function openDriver(url: string, headers: Record<string, string>, sessions: number, timeoutMs: number): Promise<ToolCallDriver> {
  const client = new McpHttpClient(64);
  const opened: Record<string, string>[] = [];
  for (let index = 0; index < sessions; index++) opened.push(await openSession(client, url, timeoutMs, headers));
  let turn = 0;
  const issue = async () => {
    const id = client.newId();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `bench__${ECHO_TOOL}`, arguments: { text: 'bench' } } });
    const answer = await client.post(url, body, { headers: opened[turn++ % opened.length], timeoutMs });
    return echoOutcome(answer, id, 'bench');
  };
  return { issue, close: () => client.close() };
}

/** A driver whose first call was answered right, tried again for up to a minute while the gateway settles. */
export async function readyDriver(label: string, url: string, headers: Record<string, string>, settings: BenchSettings): Promise<ToolCallDriver> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const candidate = await openDriver(url, headers, settings.toolCall.sessions, settings.requestTimeoutMs);
      const first = await candidate.issue();
      if (!first.error) {
        await runFixedRate(candidate.issue, { ...settings.toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
        return candidate;
      }
      candidate.close();
      if (Date.now() > deadline) throw new Error(`${label}: ${first.error}`);
    } catch (error) {
      if (Date.now() > deadline) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * Every repetition: each fixed rate, then saturation, each variant in turn. `pids` names the processes
 * whose CPU time is charged to a variant's calls.
 */
export async function runComparison<Variant extends string>(options: {
  variants: Variant[];
  drivers: Map<Variant, ToolCallDriver>;
  pids: (variant: Variant) => Record<string, number>;
  settings: BenchSettings;
  log: (line: string) => void;
}): Promise<ComparisonRun<Variant>[]> {
  const { variants, drivers, settings, log } = options;
  const runs: ComparisonRun<Variant>[] = [];
  const measure = async (variant: Variant, load: string, repetition: number, run: () => Promise<RunResult>) => {
    const pids = options.pids(variant);
    const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMicros(pid)]));
    const result = await run();
    const cpuUsPerCall = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, (cpuMicros(pid) - before[name]) / Math.max(1, result.ok)]));
    const latencyMs = summarize(result.latenciesMs);
    runs.push({ variant, load, repetition, latencyMs, throughput: result.throughput, errors: result.sent - result.ok, cpuUsPerCall });
    const cpu = Object.entries(cpuUsPerCall).map(([name, micros]) => `${name} ${micros.toFixed(0)} µs`).join(', ');
    log(
      `${variant} ${load} #${repetition}: p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms, ${result.throughput.toFixed(0)} ok/s, ` +
        `CPU/call ${cpu}${result.sent - result.ok ? `, ${result.sent - result.ok} errors` : ''}`,
    );
  };
  for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
    for (const rate of settings.toolCall.ratesPerSecond) {
      for (const variant of inRotation(variants, repetition)) {
        const { issue } = drivers.get(variant)!;
        await runFixedRate(issue, { rate, durationMs: settings.toolCall.warmupMs, maxInFlight: settings.maxInFlight });
        await measure(variant, String(rate), repetition, () => runFixedRate(issue, { rate, durationMs: settings.toolCall.measureMs, maxInFlight: settings.maxInFlight }));
      }
    }
    for (const variant of inRotation(variants, repetition)) {
      const { issue } = drivers.get(variant)!;
      const { concurrency, warmupMs, measureMs } = settings.toolCall.saturation;
      await runClosedLoop(issue, { concurrency, durationMs: warmupMs });
      await measure(variant, 'saturation', repetition, () => runClosedLoop(issue, { concurrency, durationMs: measureMs }));
    }
  }
  return runs;
}

/**
 * The comparison as a Markdown table (medians over the repetitions; `base` / `other (ratio)`) and the
 * ratios the targets are checked on.
 */
export function comparisonTable<Variant extends string>(
  runs: ComparisonRun<Variant>[],
  base: Variant,
  other: Variant,
): { lines: string[]; p50Ratios: number[]; saturationRatio: number; errors: number } {
  const loads = [...new Set(runs.map((run) => run.load))];
  const processes = Object.keys(runs[0]?.cpuUsPerCall ?? {});
  const median = (variant: Variant, load: string, pick: (run: ComparisonRun<Variant>) => number) =>
    spreadOf(runs.filter((run) => run.variant === variant && run.load === load).map(pick)).median;
  const pair = (load: string, pick: (run: ComparisonRun<Variant>) => number, digits: number) => {
    const [a, b] = [median(base, load, pick), median(other, load, pick)];
    return `${a.toFixed(digits)} / ${b.toFixed(digits)} (${(b / a).toFixed(3)}×)`;
  };
  const rows = loads.map((load) => {
    const label = load === 'saturation' ? 'saturation (16 clients, closed loop)' : `${load} req/s`;
    const cpu = processes.map((name) => `${median(base, load, (run) => run.cpuUsPerCall[name]).toFixed(0)} / ${median(other, load, (run) => run.cpuUsPerCall[name]).toFixed(0)}`);
    return `| ${label} | ${pair(load, (run) => run.latencyMs.p50, 2)} | ${pair(load, (run) => run.latencyMs.p99, 2)} | ${pair(load, (run) => run.throughput, 0)} | ${cpu.join(' | ')} |`;
  });
  return {
    lines: [
      `| load | p50 | p99 | answers/s | ${processes.map((name) => `${name} CPU µs/call`).join(' | ')} |`,
      `| --- | --- | --- | --- | ${processes.map(() => '---').join(' | ')} |`,
      ...rows,
    ],
    p50Ratios: loads.filter((load) => load !== 'saturation').map((load) => median(other, load, (run) => run.latencyMs.p50) / median(base, load, (run) => run.latencyMs.p50)),
    saturationRatio: median(other, 'saturation', (run) => run.throughput) / median(base, 'saturation', (run) => run.throughput),
    errors: runs.reduce((sum, run) => sum + run.errors, 0),
  };
}
