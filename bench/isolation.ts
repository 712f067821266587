import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { buildGatewayIR } from '../control-plane/ir/gateway-ir';
import { projectPath } from '../control-plane/shared/paths';
import { waitFor } from '../control-plane/devstack/processes';
import { describeEnvironment } from './report/environment';
import { ISOLATION_SETTINGS, IsolationResults, runIsolationScenario } from './scenarios/isolation';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { allocatePort } from './systems/ports';

/**
 * The isolation bench (issue 9): tools/call answered correctly per second on one route, unloaded,
 * while another route's backend holds 2,000 calls open, and during a 5,000-connection slow-header
 * flood, against the gateway at its default limits (scenarios/isolation.ts). Stops everything it
 * started; writes bench/results/isolation.{json,md} (a --quick run: quick-isolation.*, not kept).
 *   scripts/bench.sh isolation [--quick]
 */

const RESULTS_DIR = projectPath('bench', 'results');
const LOG_DIR = projectPath('.run', 'bench-isolation');
const BACKENDS_MAIN = projectPath('dist', 'bench', 'backends', 'main.js');

const log = (line: string) => process.stdout.write(`[isolation] ${line}\n`);

const loadAverage = () => os.loadavg().map((value) => Math.round(value * 100) / 100);

function writeAtomically(file: string, content: string): void {
  fs.writeFileSync(`${file}.tmp`, content);
  fs.renameSync(`${file}.tmp`, file);
}

function markdown(results: IsolationResults & { settings: object; startedAt: string; loadAverageBefore: number[]; loadAverageAfter: number[] }): string {
  const row = (phase: keyof IsolationResults['summary']) => {
    const summary = results.summary[phase];
    const runs = results.runs.filter((run) => run.phase === phase);
    const perRepetition = runs.map((run) => run.throughput.toFixed(0)).join(' / ');
    const p99 = runs.map((run) => run.latencyMs.p99.toFixed(1)).join(' / ');
    return `| ${phase} | ${summary.medianThroughput.toFixed(0)} (${perRepetition}) | ${(summary.ratioToUnloaded * 100).toFixed(1)} % | ${p99} | ${summary.medianEnvoyCpuMsPerSecond.toFixed(0)} | ${summary.medianEnvoyCpuUsPerAnswer.toFixed(0)} | ${summary.wrongAnswers} | ${summary.errors} |`;
  };
  return [
    '# Isolation bench',
    '',
    `Run ${results.startedAt} (${JSON.stringify(results.settings)}). tools/call \`echo\` on route \`measured\`, closed loop; "hung": route \`stuck\`'s backend holds the calls (1,024 at the backend, the rest queued by its circuit breaker); "flood": slow-header connections held open from 127.0.0.2–6, re-opened when Envoy times them out (its request-headers timeout, 10 s), measured once the flood has run past that. Gateway at its default limits.`,
    '',
    '| phase | correct answers/s: median (per repetition) | of unloaded (median of ratios to the same repetition) | p99 ms per repetition | Envoy CPU ms/s (median) | Envoy CPU µs per answer (median) | wrong answers | errors |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    row('unloaded'),
    row('hung'),
    row('flood'),
    '',
    `Target: at least ${results.target.ratio * 100} % of the unloaded figure, 0 wrong answers, 0 crashes — ${results.target.met ? 'met' : 'NOT met'}. Processes lost: ${results.processesLost.length ? results.processesLost.join(', ') : 'none'}. Load average (1, 5, 15 min) on a shared machine of ${os.cpus().length} cores: ${results.loadAverageBefore.join(', ')} before the run, ${results.loadAverageAfter.join(', ')} after it.`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.some((arg) => arg !== '--quick')) {
    process.stderr.write(`usage: scripts/bench.sh isolation [--quick]\n`);
    process.exit(2);
  }
  const settings = ISOLATION_SETTINGS[args.includes('--quick') ? 'quick' : 'full'];
  const startedAt = new Date().toISOString();
  const loadAverageBefore = loadAverage();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, claimCpus());
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  }
  try {
    const [measuredPort, stuckPort] = [await allocatePort(), await allocatePort()];
    const spec = [measuredPort, stuckPort].map((port) => ({ port, fillerTools: 0, listDelayMs: 0 }));
    group.spawn('backends', process.execPath, [BACKENDS_MAIN, '--spec', JSON.stringify(spec)]);
    const registryFile = path.join(LOG_DIR, 'registry.yaml');
    const stuckUrl = `http://127.0.0.1:${stuckPort}/mcp`;
    const registry = {
      routes: [
        { key: 'measured', toolServices: [{ id: 'bench', name: 'bench', url: `http://127.0.0.1:${measuredPort}/mcp` }] },
        { key: 'stuck', toolServices: [{ id: 'stuck', name: 'stuck', url: stuckUrl }] },
      ],
    };
    fs.writeFileSync(registryFile, stringify(registry));
    const stuckCluster = buildGatewayIR(registry).clusters.find((cluster) => cluster.url === stuckUrl)!.clusterName;
    const stack = await group.startGateway('gateway', { registryFile, logDir: path.join(LOG_DIR, 'gateway') });
    for (const [route, tool] of [['measured', 'bench__echo'], ['stuck', 'stuck__hang']]) {
      await waitFor(`${tool} on route ${route}`, async () => {
        const answer = await fetch(stack.gatewayUrl(route), {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        return (await answer.text()).includes(`"${tool}"`) ? true : undefined;
      });
    }
    log(`${settings.mode} run; logs in ${LOG_DIR}`);
    const results = await runIsolationScenario(stack, stuckCluster, settings, log);
    const report = { ...results, settings, startedAt, loadAverageBefore, loadAverageAfter: loadAverage(), environment: describeEnvironment() };
    const name = settings.mode === 'quick' ? 'quick-isolation' : 'isolation';
    writeAtomically(path.join(RESULTS_DIR, `${name}.json`), `${JSON.stringify(report, null, 2)}\n`);
    writeAtomically(path.join(RESULTS_DIR, `${name}.md`), markdown(report));
    log(`hung: ${(results.summary.hung.ratioToUnloaded * 100).toFixed(1)} %, flood: ${(results.summary.flood.ratioToUnloaded * 100).toFixed(1)} % of unloaded; target ${results.target.met ? 'met' : 'NOT met'}; bench/results/${name}.md`);
  } finally {
    await group.stopAll();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`[isolation] failed: ${error.stack}\n`);
  process.exit(1);
});
