import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { z } from 'zod';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { startJaeger } from '../../test/support/jaeger';
import { runClosedLoop, runFixedRate } from '../load/load-runner';
import { BenchSettings } from '../settings';
import { ProcessGroup } from '../systems/process-group';
import { inRotation } from '../systems/systems';
import { Topology } from '../systems/topology';
import { coreMicros, coresOfList, cpuSecondsOf, runQueueWaitMicrosOf, threadTimes, uncountedThreadMicros } from './cpu-time';
import { AttributeCostRun, runAttributeCosts } from './tracing-attributes';
import { MeasuredRun, SATURATION, callDriver, measuredRun, runLine, waitUntilCallsAnswer } from './tool-call';

/**
 * Scenario 5 (issue 15): tools/call through gateways that differ only in their tracing settings — off,
 * and each sampling ratio, every span exported over OTLP/HTTP to a real Jaeger — measured in the same
 * run, interleaved, at a fixed rate and at saturation. The load sends no traceparent, so the ratio
 * decides which calls are traced. Jaeger runs on the load generator's core: the cost measured is the
 * gateway's own (tracer, attributes, export), not the collector's.
 *
 * Every run also says where both cores went, per answered call (issue 15, session 8): each process on
 * the systems' core (the gateway's, the backend), their softirq (the spans' export over loopback is
 * delivered there), what no process row counts, and idle; on the load generator's core the load
 * generator, Jaeger, idle, and how long the load generator waited for its core. A saturation ratio
 * worse than the systems' CPU per call implies is then either idle on the systems' core (the load side
 * held them back) or other work on it, and the table says which: the bench charges the gateway for
 * everything its processes and their packets cost, and names what is not theirs instead of guessing.
 * Jaeger stays at the bench's priority: measured, it costs 5–27 µs of its core per call at 100 %
 * (a few per cent of that core at a quiet run's rate), too little to hold the load generator back.
 */

export interface TracingVariant {
  /** "off", or the sampling ratio in per cent ("1 %", "100 %"). */
  id: string;
  samplingRatio: number | null;
}

export interface TracingRun extends MeasuredRun {
  variant: string;
  /**
   * CPU time per correct answer during the run (µs), by process: every process of the variant's
   * gateway (Envoy, sidecar, control plane, Redis, dev Portal), the bench backend, Jaeger, the load
   * generator, and `softirq`, the systems' cores' kernel time for loopback delivery that no process is
   * charged for (the spans' export included). The cost of tracing wherever it is paid.
   */
  cpuMicrosPerCall: Record<string, number>;
  /**
   * Both sides' cores per correct answer (µs, /proc/stat): busy with anything and idle. Idle on the
   * systems' core at saturation says the systems were not what limited the rate (the load side held
   * them back); busy beyond the processes counted says other work took part of it.
   */
  cores: { systems: CoreUse; loadGenerator: CoreUse };
  /** Time per correct answer (µs) the load generator's event loop waited, runnable, for its core. */
  loadGeneratorRunQueueWaitMicros: number;
  /**
   * What the systems' core ran besides the counted processes, per correct answer (µs, every thread's
   * schedstat), by process: the other variants' gateways (named so), kernel threads, other work on the
   * machine. Names the "busy, no row" of `cores`, except softirq run in a process's context (in that
   * process's time) and threads that ended during the run.
   */
  uncountedOnSystemsCore: Record<string, number>;
}

export interface CoreUse {
  busy: number;
  idle: number;
}

export interface TracingResults {
  variants: TracingVariant[];
  runs: TracingRun[];
  /** Spans each variant's Envoy exported over the scenario (its `tracing.opentelemetry.spans_sent`). */
  envoySpansSent: Record<string, number>;
  /**
   * Requests each variant's Envoy served on the agents' listener over the scenario (its
   * `http.mcp_gateway.downstream_rq_total`, warm-ups included, as the spans): the spans per request
   * say what besides the call's own span is exported (the session check's, initialize's).
   */
  envoyRequestsServed: Record<string, number>;
  /** What each piece of Envoy's tracing costs by itself (tracing-attributes.ts). */
  attributeCosts: AttributeCostRun[];
  setup: string;
}

const READY_TIMEOUT_MS = 60_000;

/** The rows of cpuMicrosPerCall spent on the systems' core: the gateway's processes, the backend and softirq. */
export const SYSTEMS_CORE_ROWS = ['envoy', 'sidecar', 'control-plane', 'redis', 'portal', 'backend', 'softirq'] as const;

/** CPU µs per call a run's counted processes and softirq spent on the systems' core. */
export function systemsCoreMicrosPerCall(run: Pick<TracingRun, 'cpuMicrosPerCall'>): number {
  return SYSTEMS_CORE_ROWS.reduce((sum, name) => sum + (run.cpuMicrosPerCall[name] ?? 0), 0);
}

/** Process ids whose CPU time a run counts, by name, and the cores on either side. */
interface Counted {
  pids: Record<string, number>;
  systemCores: number[];
  loadGeneratorCores: number[];
  /** Names for processes the bench started that the run does not count (the other variants' gateways). */
  labels: Map<number, string>;
}

type CpuPerCall = Pick<TracingRun, 'cpuMicrosPerCall' | 'cores' | 'loadGeneratorRunQueueWaitMicros' | 'uncountedOnSystemsCore'>;

/** Runs `measure` and tells the CPU each counted process and both sides' cores spent meanwhile, per correct answer. */
async function withCpuPerCall(counted: Counted, measure: () => Promise<MeasuredRun>): Promise<MeasuredRun & CpuPerCall> {
  const snapshot = () => {
    const threads = threadTimes();
    const systems = coreMicros(counted.systemCores);
    const processes: Record<string, number> = Object.fromEntries(Object.entries(counted.pids).map(([name, pid]) => [name, cpuSecondsOf(pid) * 1e6]));
    processes.softirq = systems.softirq;
    return { processes, systems, loadGenerator: coreMicros(counted.loadGeneratorCores), runQueueWait: runQueueWaitMicrosOf(process.pid), threads };
  };
  const before = snapshot();
  const run = await measure();
  const after = snapshot();
  const perCall = (micros: number) => micros / Math.max(1, run.ok);
  const cpuMicrosPerCall = Object.fromEntries(Object.keys(before.processes).map((name) => [name, perCall(after.processes[name] - before.processes[name])]));
  const use = (side: 'systems' | 'loadGenerator') => ({ busy: perCall(after[side].busy - before[side].busy), idle: perCall(after[side].idle - before[side].idle) });
  return {
    ...run,
    cpuMicrosPerCall,
    cores: { systems: use('systems'), loadGenerator: use('loadGenerator') },
    loadGeneratorRunQueueWaitMicros: perCall(after.runQueueWait - before.runQueueWait),
    uncountedOnSystemsCore: Object.fromEntries(
      Object.entries(uncountedThreadMicros(before.threads, after.threads, { pids: new Set(Object.values(counted.pids)), cores: counted.systemCores, labels: counted.labels, bench: process.pid }))
        .map(([name, micros]) => [name, perCall(micros)] as const)
        .filter(([, micros]) => micros >= 0.5)
        .sort(([, a], [, b]) => b - a),
    ),
  };
}

const variantId = (ratio: number | null) => (ratio === null ? 'off' : `${+(ratio * 100).toFixed(2)} %`);

const envoyStatsSchema = z.object({ stats: z.array(z.object({ name: z.string(), value: z.number().optional() })) });

/** A counter of Envoy's admin stats (0 when Envoy has none of that name). */
async function envoyCounter(stack: GatewayStack, name: string): Promise<number> {
  const filter = `^${name.replace(/\./g, '\\.')}$`;
  const body = envoyStatsSchema.parse(await (await fetch(`${stack.envoyAdminUrl}/stats?format=json&filter=${encodeURIComponent(filter)}`)).json());
  return body.stats.find((stat) => stat.name === name)?.value ?? 0;
}

export async function runTracingScenario(
  group: ProcessGroup,
  topology: Topology,
  callBackendPid: number,
  settings: BenchSettings,
  log: (line: string) => void,
): Promise<TracingResults> {
  const dir = path.join(group.logDir, 'tracing');
  const jaeger = await startJaeger(path.join(dir, 'jaeger'));
  group.adoptBeside('jaeger', jaeger.pid, () => jaeger.stop());
  // The call route alone: no tools/list fleet whose catalog refresh would run during the measurement.
  const registryFile = path.join(dir, 'registry.yaml');
  const call = topology.callRoute;
  fs.writeFileSync(
    registryFile,
    stringify({ routes: [{ key: call.key, toolServices: call.backends.map((backend) => ({ id: backend.endpoint.id, name: backend.name, url: backend.endpoint.url })) }] }),
  );
  const variants: TracingVariant[] = [null, ...settings.tracing.samplingRatios].map((samplingRatio) => ({ id: variantId(samplingRatio), samplingRatio }));
  const stacks = new Map<string, GatewayStack>();
  for (const variant of variants) {
    const logDir = path.join(dir, `gateway-${variant.id.replace(/\W+/g, '')}`);
    const tracing = variant.samplingRatio === null ? undefined : { otlpEndpoint: jaeger.otlpHttpUrl, samplingRatio: variant.samplingRatio };
    stacks.set(variant.id, await group.startGateway(`gateway-tracing-${variant.id}`, { registryFile, logDir, tracing }));
  }
  const paths = variants.map((variant) => ({
    variant: variant.id,
    name: `gateway, tracing ${variant.id}`,
    callUrl: stacks.get(variant.id)!.gatewayUrl(call.key),
    toolPrefix: `${call.backends[0].name}__`,
  }));
  await waitUntilCallsAnswer(paths, settings, READY_TIMEOUT_MS);

  const { toolCall, tracing } = settings;
  const drivers = new Map<string, Awaited<ReturnType<typeof callDriver>>>();
  const runs: TracingRun[] = [];
  const cores = (list: string) => (group.cpus.pinned ? coresOfList(list) : coresOfList(`0-${os.availableParallelism() - 1}`));
  const counted = (variant: string): Counted => ({
    pids: {
      ...Object.fromEntries([...stacks.get(variant)!.processes].map(([name, member]) => [name, member.child.pid!])),
      backend: callBackendPid,
      ...(jaeger.pid !== undefined && { jaeger: jaeger.pid }),
      'load generator': process.pid,
    },
    systemCores: cores(group.cpus.systemsUnderTest),
    loadGeneratorCores: cores(group.cpus.loadGenerator),
    labels: new Map(
      [...stacks].flatMap(([other, stack]) => [...stack.processes].map(([name, member]) => [member.child.pid!, `${name} of tracing ${other}`] as const)),
    ),
  });
  const record = (variant: string, run: MeasuredRun & CpuPerCall) => {
    runs.push({ variant, ...run });
    const cpu = Object.entries(run.cpuMicrosPerCall).map(([name, micros]) => `${name} ${micros.toFixed(0)}`).join(', ');
    const idle = `idle µs per call: systems' core ${run.cores.systems.idle.toFixed(0)}, load generator's ${run.cores.loadGenerator.idle.toFixed(0)}; load generator waited for its core ${run.loadGeneratorRunQueueWaitMicros.toFixed(0)} µs per call`;
    const uncounted = Object.entries(run.uncountedOnSystemsCore).map(([name, micros]) => `${name} ${micros.toFixed(1)}`).join(', ');
    log(`${runLine(`tracing ${variant}`, run)}; CPU µs per call: ${cpu}; ${idle}; systems' core, not counted: ${uncounted || 'nothing'}`);
  };
  try {
    for (const entry of paths) {
      const driver = await callDriver(entry, settings);
      drivers.set(entry.variant, driver);
      await runFixedRate(driver.issue, { ...toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
    }
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      const order = inRotation(paths, repetition);
      for (const { variant } of order) {
        const { issue } = drivers.get(variant)!;
        const rate = tracing.ratePerSecond;
        await runFixedRate(issue, { rate, durationMs: toolCall.warmupMs, maxInFlight: settings.maxInFlight });
        record(variant, await withCpuPerCall(counted(variant), async () => measuredRun(String(rate), repetition, await runFixedRate(issue, { rate, durationMs: toolCall.measureMs, maxInFlight: settings.maxInFlight }))));
      }
      for (const { variant } of order) {
        const { issue } = drivers.get(variant)!;
        const { concurrency, warmupMs, measureMs } = toolCall.saturation;
        await runClosedLoop(issue, { concurrency, durationMs: warmupMs });
        record(variant, await withCpuPerCall(counted(variant), async () => measuredRun(SATURATION, repetition, await runClosedLoop(issue, { concurrency, durationMs: measureMs }))));
      }
    }
  } finally {
    for (const driver of drivers.values()) driver.close();
  }
  const envoySpans: Record<string, number> = {};
  const envoyRequests: Record<string, number> = {};
  for (const variant of variants) {
    envoySpans[variant.id] = await envoyCounter(stacks.get(variant.id)!, 'tracing.opentelemetry.spans_sent');
    envoyRequests[variant.id] = await envoyCounter(stacks.get(variant.id)!, 'http.mcp_gateway.downstream_rq_total');
  }
  const attributeCosts = await runAttributeCosts(group, jaeger.otlpHttpUrl, settings, log);
  return {
    variants,
    runs,
    envoySpansSent: envoySpans,
    envoyRequestsServed: envoyRequests,
    attributeCosts,
    setup: `three GatewayStacks with only the call route (${call.key}), the same bench backend; tracing off, or --otlp-endpoint to Jaeger v1.76.0 (OTLP/HTTP, in-memory store, pinned to the load generator's CPU) with --trace-sampling as named; the load sends no traceparent; in a full run after the five systems of scenarios 1–3 are stopped, so that nothing else of the bench's runs on the systems' core`,
  };
}
