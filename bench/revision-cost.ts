import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { z } from 'zod';
import { GatewayStack } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startSingleBackendRoute } from './systems/systems';
import { ProcessIds, VariantRun, measureVariants, variantTable } from './variant-cost';
import { baselineStart, revisionOf } from './systems/baseline';
import { writeBenchResults } from './report/results-file';

/**
 * Two revisions of the gateway in one run (issue 10, docs/adr/0008-data-path-lanes.md, the saturation
 * regression): this tree's and a baseline worktree's, each its own GatewayStack (its own control plane,
 * generated xDS, call script, sidecar and Envoy) on one stateless bench backend, tools/call at
 * saturation in interleaved repetitions, with Envoy's, the sidecar's and the control plane's CPU per
 * call paired by repetition. Comparing two full runs of scripts/bench.sh mixes in whatever else the
 * machine did in between; this does not.
 *   git worktree add /work/wt/base <revision> && (cd /work/wt/base && npx tsc -p tsconfig.json)
 *   scripts/bench.sh revision /work/wt/base [--quick] [--rate N]     (node dist/bench/revision-cost.js …)
 * With --rate N, also at N req/s (where the control plane's wake-ups weigh more than at saturation).
 * Writes bench/results/revision-cost.json and .md (a --quick run: revision-cost-quick.*; with --rate N: revision-cost-N-rps.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'revision');
const USAGE = 'usage: scripts/bench.sh revision <baseline worktree, built> [--quick] [--rate N]';
const REPETITIONS = { full: 12, quick: 2 };

const log = (line: string) => process.stdout.write(`[bench revision] ${line}\n`);

const Arguments = z.object({
  baseline: z.string().min(1, USAGE),
  quick: z.boolean(),
  rate: z.coerce.number().int().positive().optional(),
});

/** The baseline worktree, then --quick and --rate N in any order. */
function argumentsOf(args: string[]) {
  const rateAt = args.indexOf('--rate');
  const rest = args.slice(1).filter((_, index) => rateAt < 0 || (index + 1 !== rateAt && index + 1 !== rateAt + 1));
  if (rest.some((arg) => arg !== '--quick')) return Arguments.safeParse({});
  return Arguments.safeParse({ baseline: args[0], quick: rest.length > 0, rate: rateAt > 0 ? args[rateAt + 1] : undefined });
}


async function main(): Promise<void> {
  const parsed = argumentsOf(process.argv.slice(2));
  if (!parsed.success) {
    process.stderr.write(`${USAGE}\n`);
    process.exit(2);
  }
  const { baseline: baselineDir, quick, rate } = parsed.data;
  const baseline = path.resolve(baselineDir);
  const startBaseline = baselineStart(baseline);
  const base = benchSettings(quick);
  // Saturation (the regression was of answers per second; CPU per call is its steadier measure), and the rate asked for.
  const settings = { ...base, repetitions: quick ? REPETITIONS.quick : REPETITIONS.full, toolCall: { ...base.toolCall, ratesPerSecond: rate ? [rate] : [] } };
  // Before claimCpus: pinned to its core, this process sees one.
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const revisions = { baseline: revisionOf(baseline), this: revisionOf(projectPath()) };
  const loadBefore = os.loadavg().slice(0, 2);
  let runs: VariantRun[];
  try {
    const { registryFile } = await startSingleBackendRoute(group, LOG_DIR);
    const stacks = new Map<string, GatewayStack>([
      ['baseline', await group.startGateway('baseline', { registryFile, logDir: path.join(LOG_DIR, 'baseline') }, startBaseline)],
      ['this', await group.startGateway('this', { registryFile, logDir: path.join(LOG_DIR, 'this') })],
    ]);
    const pids = (variant: string): ProcessIds => {
      const pid = (name: string) => stacks.get(variant)!.processes.get(name)!.child.pid!;
      return { envoy: pid('envoy'), sidecar: pid('sidecar'), controlPlane: pid('control-plane') };
    };
    runs = await measureVariants([...stacks].map(([name, stack]) => ({ name, url: stack.gatewayUrl('bench') })), settings, pids, log);
  } finally {
    await group.stopAll();
  }
  const context = { measuredAt: new Date().toISOString(), mode: settings.mode, cores, load: { before: loadBefore, after: os.loadavg().slice(0, 2) }, pinned: cpuPlan.pinned, revisions };
  const markdown = [
    '# Two revisions of the gateway in one run',
    '',
    `Measured ${context.measuredAt} (${context.mode} run, ${settings.repetitions} interleaved repetitions) on ${context.cores} cores, load average ${loadBefore.map((value) => value.toFixed(2)).join(' / ')} before and ${context.load.after.map((value) => value.toFixed(2)).join(' / ')} after (1 / 5 min)${context.pinned ? '; load generator on the last core, the gateways on the others' : ''}, by \`scripts/bench.sh revision\`.`,
    `baseline: ${revisions.baseline}; this: ${revisions.this}. Each its own GatewayStack on one stateless bench backend, tools/call \`bench__echo\` in 8 sessions; medians over the repetitions, baseline / this (ratio).`,
    '',
    ...variantTable(runs, 'baseline', ['this']),
    '',
  ].join('\n');
  const name = `revision-cost${rate ? `-${rate}-rps` : ''}${quick ? '-quick' : ''}`;
  writeBenchResults(name, { ...context, settings: settings.toolCall, repetitions: settings.repetitions, runs }, markdown, log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench revision] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
