import { cpuSecondsOf } from './scenarios/cpu-time';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { RunResult, runClosedLoop, runFixedRate } from './load/load-runner';
import { McpHttpClient, echoOutcome, openSession } from './load/mcp-client';
import { LatencySummary, RepeatedValue, pairedAddedMedian, pairedRatioMedian, signedMicros, spreadOf, summarize } from './load/stats';
import { BenchSettings } from './settings';

/**
 * What a feature costs a tools/call: variants of one gateway (routes to the same bench backend, with
 * and without the feature) measured in the same run, interleaved, at fixed rates (p50/p99) and at
 * saturation, with Envoy's and the sidecar's CPU per call. bench/auth-cost.ts and bench/quota-cost.ts
 * are its scenarios.
 */

export interface VariantRun {
  variant: string;
  load: string;
  repetition: number;
  latencyMs: LatencySummary;
  throughput: number;
  errors: number;
  /**
   * CPU time per answered call (µs) of Envoy and of the sidecar, and of the control plane and Redis
   * where a scenario measures them: steadier than latency on a shared machine.
   */
  cpuUsPerCall: Partial<Record<keyof ProcessIds, number>> & { envoy: number; sidecar: number };
}

export interface ProcessIds {
  envoy: number;
  sidecar: number;
  /** Measured only where a feature puts work there (bench/quota-cost.ts: concurrency slots given back). */
  controlPlane?: number;
  redis?: number;
  /** The ratelimit service (envoyproxy/ratelimit) of shared limits (bench/quota-cost.ts). */
  rateLimit?: number;
}

/** The processes of ProcessIds, as the results tables name them. */
const PROCESS_LABELS: Record<keyof ProcessIds, string> = { envoy: 'Envoy', sidecar: 'sidecar', controlPlane: 'control plane', redis: 'Redis', rateLimit: 'ratelimit service' };

export interface Variant {
  name: string;
  url: string;
  /** Headers of every request (a bearer token). */
  headers?: Record<string, string>;
}

/** A process's CPU time so far (user + system, all threads), in µs, from /proc. */
export const cpuMicros = (pid: number) => cpuSecondsOf(pid) * 1_000_000;

/** tools/call bench__echo in `sessions` sessions of the variant's route, in turn. */
async function driver(variant: Variant, sessions: number, timeoutMs: number) {
  const client = new McpHttpClient(64);
  const opened: Record<string, string>[] = [];
  for (let index = 0; index < sessions; index++) opened.push(await openSession(client, variant.url, timeoutMs, variant.headers ?? {}));
  let turn = 0;
  const issue = async () => {
    const id = client.newId();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `bench__${ECHO_TOOL}`, arguments: { text: 'bench' } } });
    const answer = await client.post(variant.url, body, { headers: opened[turn++ % opened.length], timeoutMs });
    return echoOutcome(answer, id, 'bench');
  };
  return { issue, close: () => client.close() };
}

export type Driver = Awaited<ReturnType<typeof driver>>;

/** A driver whose first call is answered right, retried while the gateway comes up (routes, keys, catalog). */
export async function readyDriver(variant: Variant, settings: BenchSettings): Promise<Driver> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const candidate = await driver(variant, settings.toolCall.sessions, settings.requestTimeoutMs);
      const first = await candidate.issue();
      if (!first.error) return candidate;
      candidate.close();
      if (Date.now() > deadline) throw new Error(`${variant.name}: ${first.error}`);
    } catch (error) {
      if (Date.now() > deadline) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * The order repetition `repetition` (from 1) measures the variants in: rows of a Williams design, so
 * that over every `variants.length` repetitions (twice that for an odd count) each variant is measured
 * in each position equally often and right after each other variant equally often. A plain rotation
 * keeps every variant's predecessor the same (`token` always after `open`), so whatever a run leaves
 * behind for the next (a backlog, a hot or cold cache) always lands on the same variant.
 */
export function balancedOrder<T>(variants: T[], repetition: number): T[] {
  const count = variants.length;
  const row = (repetition - 1) % (count % 2 === 0 ? count : 2 * count);
  // Column j of row 0 is 0, 1, n-1, 2, n-2, …; row r adds r to each (mod n); odd counts add the rows reversed.
  const offsets = Array.from({ length: count }, (_, column) => (column % 2 === 1 ? (column + 1) / 2 : (count - column / 2) % count));
  const order = offsets.map((offset) => variants[(offset + row) % count]);
  return row < count ? order : order.reverse();
}

/**
 * Every variant at every rate of settings.toolCall.ratesPerSecond, then at saturation, each
 * repetition in another order of the variants (balancedOrder); `log` gets a line per measured run.
 */
export async function measureVariants(
  variants: Variant[],
  settings: BenchSettings,
  /** Envoy's and the sidecar's process ids: one gateway's for every variant, or each variant's own gateway's. */
  processIds: ProcessIds | ((variant: string) => ProcessIds),
  log: (line: string) => void,
): Promise<VariantRun[]> {
  const runs: VariantRun[] = [];
  const drivers = new Map<string, Driver>();
  try {
    for (const variant of variants) {
      drivers.set(variant.name, await readyDriver(variant, settings));
      await runFixedRate(drivers.get(variant.name)!.issue, { ...settings.toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
    }
    const measured = async (variant: string, run: () => Promise<RunResult>) => {
      const pids = typeof processIds === 'function' ? processIds(variant) : processIds;
      const measuredPids = Object.entries(pids).filter((entry): entry is [keyof ProcessIds, number] => entry[1] !== undefined);
      const before = new Map(measuredPids.map(([name, pid]) => [name, cpuMicros(pid)]));
      const result = await run();
      const perCall = Object.fromEntries(measuredPids.map(([name, pid]) => [name, (cpuMicros(pid) - before.get(name)!) / Math.max(1, result.ok)]));
      return { result, cpuUsPerCall: perCall as VariantRun['cpuUsPerCall'] };
    };
    const record = (variant: string, load: string, repetition: number, { result, cpuUsPerCall }: Awaited<ReturnType<typeof measured>>) => {
      const latencyMs = summarize(result.latenciesMs);
      runs.push({ variant, load, repetition, latencyMs, throughput: result.throughput, errors: result.sent - result.ok, cpuUsPerCall });
      log(
        `${variant} ${load} #${repetition}: p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms, ${result.throughput.toFixed(0)} ok/s, ` +
          `CPU/call ${Object.entries(cpuUsPerCall).map(([name, us]) => `${PROCESS_LABELS[name as keyof ProcessIds]} ${us.toFixed(0)} µs`).join(', ')}${result.sent - result.ok ? `, ${result.sent - result.ok} errors` : ''}`,
      );
    };
    const names = variants.map((variant) => variant.name);
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      for (const rate of settings.toolCall.ratesPerSecond) {
        for (const name of balancedOrder(names, repetition)) {
          const { issue } = drivers.get(name)!;
          await runFixedRate(issue, { rate, durationMs: settings.toolCall.warmupMs, maxInFlight: settings.maxInFlight });
          record(name, String(rate), repetition, await measured(name, () => runFixedRate(issue, { rate, durationMs: settings.toolCall.measureMs, maxInFlight: settings.maxInFlight })));
        }
      }
      for (const name of balancedOrder(names, repetition)) {
        const { issue } = drivers.get(name)!;
        const { concurrency, warmupMs, measureMs } = settings.toolCall.saturation;
        await runClosedLoop(issue, { concurrency, durationMs: warmupMs });
        record(name, 'saturation', repetition, await measured(name, () => runClosedLoop(issue, { concurrency, durationMs: measureMs })));
      }
    }
  } finally {
    for (const open of drivers.values()) open.close();
  }
  return runs;
}

/** The median over repetitions of one figure of a variant at a load. */
export const medianOf = (runs: VariantRun[], variant: string, load: string, pick: (run: VariantRun) => number) =>
  spreadOf(runs.filter((run) => run.variant === variant && run.load === load).map(pick)).median;

/** One figure of a variant at a load, per repetition. */
const repeatedValues = (runs: VariantRun[], variant: string, load: string, pick: (run: VariantRun) => number): RepeatedValue[] =>
  runs.filter((run) => run.variant === variant && run.load === load).map((run) => ({ repetition: run.repetition, value: pick(run) }));

/** A variant's figure as a multiple of the baseline's at a load, paired by repetition (pairedRatioMedian). */
export const pairedRatioOf = (runs: VariantRun[], baseline: string, variant: string, load: string, pick: (run: VariantRun) => number) =>
  pairedRatioMedian(repeatedValues(runs, baseline, load, pick), repeatedValues(runs, variant, load, pick)) ?? Number.NaN;

/**
 * A markdown table of each variant against the baseline, per load: p50, p99, answers/s (medians) with
 * the variant's ratio to the baseline paired by repetition, CPU per call, and Envoy's CPU per call each
 * variant adds (pairedAddedMedian).
 */
export function variantTable(runs: VariantRun[], baseline: string, others: string[]): string[] {
  const loads = [...new Set(runs.map((run) => run.load))];
  const all = [baseline, ...others];
  const cell = (load: string, pick: (run: VariantRun) => number, digits: number, withRatio: boolean) => {
    const values = all.map((variant) => medianOf(runs, variant, load, pick));
    const ratios = others.map((variant) => pairedRatioOf(runs, baseline, variant, load, pick).toFixed(3));
    return `${values.map((value) => value.toFixed(digits)).join(' / ')}${withRatio ? ` (${ratios.join(', ')}×)` : ''}`;
  };
  const processes = (Object.keys(PROCESS_LABELS) as (keyof ProcessIds)[]).filter((name) => runs.every((run) => run.cpuUsPerCall[name] !== undefined));
  const envoyCpu = (variant: string, load: string) => repeatedValues(runs, variant, load, (run) => run.cpuUsPerCall.envoy);
  const envoyAdded = (load: string) => others.map((variant) => signedMicros(pairedAddedMedian(envoyCpu(baseline, load), envoyCpu(variant, load)))).join(', ');
  // Envoy's CPU column is followed by what each variant adds to it, paired per repetition (steadier on a shared machine).
  const cpuColumns = processes.flatMap((name) => [
    { header: `${PROCESS_LABELS[name]} CPU µs/call`, value: (load: string) => cell(load, (run) => run.cpuUsPerCall[name]!, 0, false) },
    ...(name === 'envoy' ? [{ header: `Envoy CPU µs/call added over ${baseline} (paired)`, value: envoyAdded }] : []),
  ]);
  const rows = loads.map((load) => {
    const label = load === 'saturation' ? 'saturation (closed loop)' : `${load} req/s`;
    return (
      `| ${label} | ${cell(load, (run) => run.latencyMs.p50, 2, true)} | ${cell(load, (run) => run.latencyMs.p99, 2, true)} | ${cell(load, (run) => run.throughput, 0, true)} ` +
      `| ${cpuColumns.map((column) => column.value(load)).join(' | ')} |`
    );
  });
  return [
    `| load | p50 | p99 | answers/s | ${cpuColumns.map((column) => column.header).join(' | ')} |`,
    `| --- | --- | --- | --- | ${cpuColumns.map(() => '---').join(' | ')} |`,
    ...rows,
  ];
}

/** Targets of a variant against its baseline: p50 at every fixed rate, answers/s at saturation. */
export interface CostTargets {
  p50Ratio: number;
  saturationRatio: number;
}

/**
 * The results file's verdict line: the variant's p50 ratio at each fixed rate and its saturation
 * ratio against the baseline (each paired by repetition), each met or not, and the wrong or failed
 * answers of the whole run.
 */
export function targetsVerdict(runs: VariantRun[], baseline: string, variant: string, targets: CostTargets, label = 'Targets'): string {
  const loads = [...new Set(runs.map((run) => run.load))].filter((load) => load !== 'saturation');
  const p50Ratios = loads.map((load) => pairedRatioOf(runs, baseline, variant, load, (run) => run.latencyMs.p50));
  const saturationRatio = pairedRatioOf(runs, baseline, variant, 'saturation', (run) => run.throughput);
  const errors = runs.reduce((sum, run) => sum + run.errors, 0);
  const verdict = (met: boolean) => (met ? 'met' : 'NOT met');
  return (
    `${label}: p50 ≤ ${targets.p50Ratio}× of ${baseline} at every fixed rate (measured ${p50Ratios.map((ratio) => ratio.toFixed(3)).join(', ')}: ` +
    `${verdict(p50Ratios.every((ratio) => ratio <= targets.p50Ratio))}); saturation ≥ ${targets.saturationRatio}× ` +
    `(measured ${saturationRatio.toFixed(3)}: ${verdict(saturationRatio >= targets.saturationRatio)}). Wrong or failed answers: ${errors}.`
  );
}

/**
 * `calls` tools/call of one driver, `inFlight` at a time, for the instruction counts (bench/*-instructions.ts).
 * A counted block throws on a wrong answer (it would count something else); an uncounted warm-up block
 * lets one pass (the session check may time out while valgrind translates Envoy's code).
 */
export async function callBlock(driver: Driver, calls: number, inFlight: number, counted = true): Promise<void> {
  let left = calls;
  const worker = async () => {
    while (left-- > 0) {
      const outcome = await driver.issue();
      if (outcome.error && counted) throw new Error(`wrong answer under callgrind: ${outcome.error}`);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
}
