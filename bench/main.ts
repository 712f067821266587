import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { projectPath } from '../control-plane/shared/paths';
import { describeEnvironment } from './report/environment';
import { renderMarkdown } from './report/markdown';
import { BenchResults } from './report/results';
import { assessTargets } from './report/targets';
import { runConfigurationScenario } from './scenarios/configuration';
import { runStreamingScenario } from './scenarios/streaming';
import { runToolCallScenario, waitUntilCallsAnswer } from './scenarios/tool-call';
import { runToolListScenario } from './scenarios/tool-list';
import { runTracingScenario } from './scenarios/tracing';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startBackends, startSystems } from './systems/systems';
import { planTopology } from './systems/topology';

/**
 * The whole benchmark (issue 5): starts the five systems side by side, runs every scenario, stops
 * everything it started, and writes bench/results/<name>.json, .md and -latency.png.
 * Run it with scripts/bench.sh [--quick].
 */

const RESULTS_DIR = projectPath('bench', 'results');
const LOG_DIR = projectPath('.run', 'bench');
const CHART_SCRIPT = projectPath('bench', 'chart', 'latency_chart.py');
const VENV_PYTHON = projectPath('.venv', 'bin', 'python');
/** How long a system may take to answer its first tools/call (the gateway fetches its catalog first). */
const READY_TIMEOUT_MS = 60_000;

const log = (line: string) => process.stdout.write(`[bench] ${line}\n`);

const loadAverages: BenchResults['loadAverages'] = [];
function noteLoad(after: string): void {
  const [oneMinute, fiveMinutes] = os.loadavg().map((value) => Math.round(value * 100) / 100);
  loadAverages.push({ after, oneMinute, fiveMinutes });
}

/** Written beside the target and renamed, so an interrupted run never leaves a half-written file. */
function writeAtomically(file: string, content: string): void {
  fs.writeFileSync(`${file}.tmp`, content);
  fs.renameSync(`${file}.tmp`, file);
}

/** The results as the file holds them: fractions to 6 significant digits (percentiles near 1 keep theirs), no float noise. */
function resultsJson(results: BenchResults): string {
  const rounded = (_key: string, value: unknown) => (typeof value === 'number' && !Number.isInteger(value) ? Number(value.toPrecision(6)) : value);
  return `${JSON.stringify(results, rounded, 2)}\n`;
}

function drawChart(jsonFile: string, pngFile: string): string | undefined {
  try {
    execFileSync(VENV_PYTHON, [CHART_SCRIPT, jsonFile, `${pngFile}.tmp`], { stdio: ['ignore', 'inherit', 'inherit'] });
    fs.renameSync(`${pngFile}.tmp`, pngFile);
    return path.basename(pngFile);
  } catch (error) {
    log(`warning: no chart (${(error as Error).message.split('\n')[0]}); scripts/bench.sh installs matplotlib into .venv/`);
    return undefined;
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const unknown = args.filter((arg) => arg !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`usage: scripts/bench.sh [--quick]\nunknown argument(s): ${unknown.join(' ')}\n`);
    process.exit(2);
  }
  const settings = benchSettings(args.includes('--quick'));
  const startedAt = new Date();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const groups: ProcessGroup[] = [];
  const stopEverything = async () => {
    for (const group of [...groups].reverse()) await group.stopAll();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log(`${signal}: stopping everything the bench started`);
      void stopEverything().then(() => process.exit(130));
    });
  }
  // A failure outside the awaited chain would otherwise end this process and orphan its children.
  process.once('unhandledRejection', (reason) => {
    log(`failed: ${reason instanceof Error ? (reason.stack ?? reason.message) : String(reason)}`);
    void stopEverything().then(() => process.exit(1));
  });

  log(`${settings.mode} run; logs of every process in ${LOG_DIR}`);
  const environment = describeEnvironment();
  const systemsGroup = new ProcessGroup(path.join(LOG_DIR, 'systems'), cpuPlan);
  groups.push(systemsGroup);
  let requestScenarios;
  let systems;
  try {
    const topology = await planTopology(settings.toolList.fleet);
    await startBackends(systemsGroup, topology);
    const running = await startSystems(systemsGroup, topology, { naiveListTimeoutMs: settings.toolList.naiveListTimeoutMs });
    systems = running.systems.map((system) => ({ id: system.id, name: system.name, setup: running.notes[system.id] }));
    log(`systems up: ${running.systems.map((system) => `${system.id} ${system.callUrl}`).join(', ')}`);
    await waitUntilCallsAnswer(running.systems, settings, READY_TIMEOUT_MS);
    noteLoad('start-up');
    const toolCall = await runToolCallScenario(running.systems, settings, log);
    noteLoad('tools/call');
    const tracing = await runTracingScenario(systemsGroup, topology, settings, log);
    noteLoad('tracing');
    const streaming = await runStreamingScenario(running.systems, settings, log);
    noteLoad('streaming');
    const toolList = await runToolListScenario(running.systems, topology, settings, log);
    noteLoad('tools/list');
    requestScenarios = { toolCall, streaming, toolList, tracing };
  } finally {
    await systemsGroup.stopAll();
  }

  const configurationGroup = new ProcessGroup(path.join(LOG_DIR, 'configuration'), cpuPlan);
  groups.push(configurationGroup);
  let configuration;
  try {
    configuration = await runConfigurationScenario(configurationGroup, settings, log);
    noteLoad('configuration');
  } finally {
    await configurationGroup.stopAll();
  }

  const finishedAt = new Date();
  const withoutTargets: Omit<BenchResults, 'targets'> = {
    schemaVersion: 1,
    mode: settings.mode,
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    durationSeconds: Math.round((finishedAt.getTime() - startedAt.getTime()) / 1000),
    environment,
    cpuPlan,
    loadAverages,
    settings,
    systems,
    ...requestScenarios,
    configuration,
  };
  const results: BenchResults = { ...withoutTargets, targets: assessTargets(withoutTargets) };

  // A quick run never overwrites the numbers the repository carries.
  const name = settings.mode === 'full' ? 'latest' : 'quick';
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const jsonFile = path.join(RESULTS_DIR, `${name}.json`);
  writeAtomically(jsonFile, resultsJson(results));
  const chart = drawChart(jsonFile, path.join(RESULTS_DIR, `${name}-latency.png`));
  const markdownFile = path.join(RESULTS_DIR, `${name}.md`);
  writeAtomically(markdownFile, `${renderMarkdown(results, chart)}\n`);
  log(`results: ${path.relative(projectPath(), jsonFile)}, ${path.relative(projectPath(), markdownFile)}${chart ? `, bench/results/${chart}` : ''}`);
  for (const target of results.targets) log(`target ${target.met === null ? 'not measured' : target.met ? 'met' : 'missed'}: ${target.target} — ${target.measured}`);
}

main().catch((error: Error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
