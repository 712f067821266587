import * as fs from 'node:fs';
import * as os from 'node:os';
import { projectPath } from '../control-plane/shared/paths';
import { startAuthVariants } from './auth-setup';
import { startIssuer } from './systems/issuer';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { VariantRun, measureVariants, targetsVerdict, variantTable } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * What caller identity costs a tools/call (issue 11, docs/adr/0011-caller-identity.md): one gateway,
 * one backend, routes to it — `open` (no auth) and `authed` (Envoy's jwt_authn validating an RS256
 * token of a local issuer, and the call script applying the tool's access rule: a required scope and a
 * group) — measured in the same run, interleaved, at fixed rates (p50/p99) and at saturation. Two more
 * variants split the cost into its pieces, each paired with `open` in the same repetition: `token`
 * (the same token sent to the open route, not validated there: what its bytes cost) and `validated`
 * (a route with auth and no rule: validation, the claim headers and the caller's record, without the
 * access decision).
 *   scripts/bench.sh auth [--quick]     (node dist/bench/auth-cost.js [--quick])
 * Writes bench/results/auth.json and .md (a --quick run: auth-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'auth');
const TARGETS = { p50Ratio: 1.05, saturationRatio: 0.95 };
/** The variants measured against `open`, smallest difference first; the targets are `authed`'s. */
const PIECES = ['token', 'validated', 'authed'];

const log = (line: string) => process.stdout.write(`[bench auth] ${line}\n`);

function markdown(runs: VariantRun[], context: { measuredAt: string; mode: string; cores: number; load: number[]; pinned: boolean; repetitions: number }): string {
  return [
    '# Caller identity: tools/call with and without JWT validation and per-tool authorization',
    '',
    `Measured ${context.measuredAt} (${context.mode} run) on ${context.cores} cores, load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min)${context.pinned ? '; load generator on the last core, the gateway on the others' : ''}, by \`scripts/bench.sh auth\`.`,
    'One gateway (Envoy 1.40, control plane, sidecar, Redis), one stateless bench backend, routes to it in the same run, measured in turn:',
    '`open` (no auth) and `authed` (jwt_authn validating a ~1 KB RS256 token of a local issuer, keys by ECDS; the call script applying the tool\'s rule: `requiredScopes: [tools:call]`, `allowGroups: [bench]`; sessions bound to the caller);',
    'and the pieces between them: `token` (the same token sent to `open`, where nothing validates it) and `validated` (a route with auth and no rule: jwt_authn, its claim headers and the call script\'s record of the caller, no access decision).',
    `tools/call \`bench__echo\` in 8 sessions, 16 clients at saturation, ${context.repetitions} repetitions, each measuring the variants in another order (each variant in each position and after each other variant equally often);`,
    'figures are medians over the repetitions, latency in ms, open / token / validated / authed; ratios (to open) are the medians of the ratios within each repetition, as are the CPU figures added over open.',
    '',
    ...variantTable(runs, 'open', PIECES),
    '',
    targetsVerdict(runs, 'open', 'authed', TARGETS),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  // Rates below saturation (p50 at 500 req/s measures a queue on a shared 2-core machine), and more
  // repetitions than the main bench: the variants differ by little, the machine by much. Twice the
  // number of variants, so that the balanced order of the variants (balancedOrder) comes round twice.
  const base = benchSettings(quick);
  const settings = { ...base, repetitions: quick ? 1 : 8, toolCall: { ...base.toolCall, ratesPerSecond: [100, 250] } };
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  const issuer = await startIssuer();
  const stopAll = async () => {
    await group.stopAll();
    await issuer.stop();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void stopAll().then(() => process.exit(130)));
  let runs: VariantRun[];
  try {
    const { variants, pids } = await startAuthVariants(group, issuer, LOG_DIR);
    runs = await measureVariants(variants, settings, pids, log);
  } finally {
    await stopAll();
  }
  const name = quick ? 'auth-quick' : 'auth';
  const context = { measuredAt: new Date().toISOString(), mode: settings.mode, cores, load: os.loadavg().slice(0, 2), pinned: cpuPlan.pinned, repetitions: settings.repetitions };
  writeBenchResults(name, { ...context, settings: settings.toolCall, repetitions: settings.repetitions, runs }, markdown(runs, context), log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench auth] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
