import * as fs from 'node:fs';
import * as os from 'node:os';
import { projectPath } from '../control-plane/shared/paths';
import { parseRate } from '../control-plane/ir/quotas-ir';
import { leaseSize } from '../control-plane/xds/translate/quotas';
import { ENVOY_WORKERS, IN_FLIGHT_NEVER_REACHED, NEVER_REACHED, leaseWorkersOf, startQuotaGateway } from './quota-setup';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { VariantRun, measureVariants, medianOf, variantTable } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * What rate limiting costs a tools/call (issue 14, docs/adr/0016-quotas.md): one gateway, one backend,
 * three routes to it measured in the same run, interleaved — `off` (no limits), `local` (per-instance
 * limits: the route's per caller and total, the Tool Service's total, the tool's per caller: four
 * local_ratelimit slots count every call) and `global` (shared limits: the route's per caller and
 * total, the Tool Service's total, each asked of the real envoyproxy/ratelimit service on Redis) —
 * and `concurrency` (each caller's calls in flight, a per-caller concurrency limit: the session check
 * takes a slot in Redis for every call, Envoy's call log gives it back through the control plane) —
 * at fixed rates (p50/p99) and at saturation. The limits are far above the load: nothing is refused,
 * what is measured is the counting.
 *   scripts/bench.sh quotas [--quick]     (node dist/bench/quota-cost.js [--quick] [--leased])
 * Writes bench/results/quotas.json and .md (a --quick run: quotas-quick.*). With --leased[=<n>] the
 * gateway leases its shared limits per Envoy worker (--shared-limit-lease-workers, docs/adr/0016-quotas.md,
 * "Leased shared limits"): `global` is then the leased path; results in quotas-leased[-<n>].* (-quick).
 */

const LOG_DIR = projectPath('.run', 'bench', 'quotas');
/** Saturation of each variant against `off` (issue 14). */
const TARGETS = { local: 0.97, global: 0.9 };

const log = (line: string) => process.stdout.write(`[bench quotas] ${line}\n`);

function markdown(runs: VariantRun[], context: { measuredAt: string; mode: string; cores: number; load: number[]; pinned: boolean; repetitions: number; leaseWorkers?: number }): string {
  const saturation = (variant: string) => medianOf(runs, variant, 'saturation', (run) => run.throughput);
  const ratio = (variant: 'local' | 'global') => saturation(variant) / saturation('off');
  const verdict = (variant: 'local' | 'global') =>
    `${variant} ≥ ${TARGETS[variant]}× (measured ${ratio(variant).toFixed(3)}: ${ratio(variant) >= TARGETS[variant] ? 'met' : 'NOT met'})`;
  const errors = runs.reduce((sum, run) => sum + run.errors, 0);
  return [
    '# Quotas: tools/call with rate limiting off, per instance (local) and shared (global), and a per-caller concurrency limit',
    '',
    `Measured ${context.measuredAt} (${context.mode} run, ${context.repetitions} repetitions) on ${context.cores} cores, load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min)${context.pinned ? '; load generator on the last core, the gateway on the others' : ''}, by \`node dist/bench/quota-cost.js${context.leaseWorkers !== undefined ? ` --leased=${context.leaseWorkers}` : ''}\` (\`scripts/bench.sh quotas\`).`,
    'One gateway (Envoy 1.40, control plane, sidecar, Redis, envoyproxy/ratelimit), one stateless bench backend, four routes to it in the same run, measured in turn:',
    '`off` (no limits); `local` (the route\'s calls per caller and total, the Tool Service\'s total, the tool\'s per caller: four local_ratelimit slots);',
    context.leaseWorkers !== undefined
      ? `\`global\` (the route's calls per caller and total, the Tool Service's total, all \`shared: true\`, **leased** per Envoy worker: \`--shared-limit-lease-workers ${context.leaseWorkers}\`, each worker's call script takes ${leaseSize(parseRate(NEVER_REACHED), context.leaseWorkers)} tokens a lease of the ratelimit service and asks again when they are spent or the second ends);`
      : '`global` (the route\'s calls per caller and total, the Tool Service\'s total, all `shared: true`: one gRPC call to the ratelimit service per tools/call, three descriptors);',
    '`concurrency` (the route\'s calls in flight per caller: the session check on every call, a slot taken in Redis, given back through the call log and the control plane).',
    `Every rate is ${NEVER_REACHED} and every in-flight limit ${IN_FLIGHT_NEVER_REACHED}: nothing is refused. Control plane and Redis CPU per call include the call log of every variant; concurrency's extra there is giving slots back; the ratelimit service (on the gateway's core, like Redis) works for \`global\` only. tools/call \`bench__echo\` in 8 sessions, 16 clients at saturation; figures are medians over the repetitions; latency in ms, off / local / global / concurrency (ratios local, global, concurrency to off).`,
    '',
    ...variantTable(runs, 'off', ['local', 'global', 'concurrency']),
    '',
    `Targets (saturation against off): ${verdict('local')}; ${verdict('global')}. Wrong or failed answers: ${errors}.`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const leaseWorkers = leaseWorkersOf(process.argv);
  // Rates below saturation, as bench/auth-cost.ts: a p50 at 500 req/s measures a queue on a shared 2-core machine.
  const base = benchSettings(quick);
  const settings = { ...base, toolCall: { ...base.toolCall, ratesPerSecond: [100, 250] } };
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  let runs: VariantRun[];
  try {
    const stack = await startQuotaGateway(group, LOG_DIR, leaseWorkers);
    const pidOf = (name: string) => stack.processes.get(name)!.child.pid!;
    const pids = { envoy: pidOf('envoy'), sidecar: pidOf('sidecar'), controlPlane: pidOf('control-plane'), redis: pidOf('redis'), rateLimit: pidOf('ratelimit') };
    runs = await measureVariants(
      ['off', 'local', 'global', 'concurrency'].map((name) => ({ name, url: stack.gatewayUrl(name) })),
      settings,
      pids,
      log,
    );
  } finally {
    await group.stopAll();
  }
  const leaseName = leaseWorkers === undefined ? '' : leaseWorkers === ENVOY_WORKERS ? '-leased' : `-leased-${leaseWorkers}`;
  const name = `quotas${leaseName}${quick ? '-quick' : ''}`;
  const context = { measuredAt: new Date().toISOString(), mode: settings.mode, cores, load: os.loadavg().slice(0, 2), pinned: cpuPlan.pinned, repetitions: settings.repetitions, ...(leaseWorkers !== undefined && { leaseWorkers }) };
  writeBenchResults(name, { ...context, settings: settings.toolCall, runs }, markdown(runs, context), log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench quotas] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
