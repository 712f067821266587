import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { projectPath } from '../control-plane/shared/paths';
import { describeEnvironment } from './report/environment';
import { renderMarkdown } from './report/markdown';
import { BenchResults, SCENARIOS_RUN_ALONE, ScenarioRunAlone } from './report/results';
import { assessTargets } from './report/targets';
import { runConfigurationScenario } from './scenarios/configuration';
import { runStreamingScenario } from './scenarios/streaming';
import { runToolCallScenario, waitUntilCallsAnswer } from './scenarios/tool-call';
import { runToolListScenario } from './scenarios/tool-list';
import { runTracingScenario } from './scenarios/tracing';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startBackendProcess, startBackends, startSystems } from './systems/systems';
import { planTopology } from './systems/topology';

/**
 * The whole benchmark (issue 5): starts the five systems side by side, runs scenarios 1–3 on them and
 * stops them, then scenario 5 (its own gateways, alone on the systems' core) and scenario 4 (its own
 * gateway and backends), and writes bench/results/<name>.json, .md and -latency.png.
 * Run it with scripts/bench.sh [--quick] [--only tool-list|configuration|tracing|streaming]: `--only tool-list`
 * runs scenario 3 alone (tools/list, prompts/list, resources/list of 50 backends), `--only streaming`
 * scenario 2 alone (progress notifications through the five systems), `--only
 * configuration` scenario 4 alone (1,000 routes × 5 Tool Services), `--only tracing` scenario 5 alone
 * (the gateways with tracing off and at each sampling ratio, and the static Envoys of the per-piece
 * table; none of the five systems), each writing bench/results/<scenario>.* (quick-<scenario>.* with
 * --quick), leaving the full run's files as they are.
 */

const USAGE = `usage: scripts/bench.sh [--quick] [--only ${SCENARIOS_RUN_ALONE.join('|')}]`;

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
  let options: { quick?: boolean; only?: string };
  try {
    ({ values: options } = parseArgs({ options: { quick: { type: 'boolean' }, only: { type: 'string' } }, strict: true, allowPositionals: false }));
  } catch (error) {
    process.stderr.write(`${USAGE}\n${(error as Error).message}\n`);
    process.exit(2);
  }
  if (options.only !== undefined && !(SCENARIOS_RUN_ALONE as readonly string[]).includes(options.only)) {
    process.stderr.write(`${USAGE}\n--only: "${options.only}" is not a scenario that runs alone (${SCENARIOS_RUN_ALONE.join(', ')})\n`);
    process.exit(2);
  }
  const only = options.only as ScenarioRunAlone | undefined;
  const settings = benchSettings(options.quick === true);
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
  let requestScenarios: Pick<BenchResults, 'toolCall' | 'streaming' | 'toolList'> = {};
  let systems: BenchResults['systems'] = [];
  // Scenarios 4 and 5 alone start their own gateways and backends below: none of the five systems.
  if (only !== 'configuration' && only !== 'tracing') {
    try {
      const topology = await planTopology(settings.toolList.fleet);
      await startBackends(systemsGroup, topology);
      const running = await startSystems(systemsGroup, topology, { naiveListTimeoutMs: settings.toolList.naiveListTimeoutMs });
      systems = running.systems.map((system) => ({ id: system.id, name: system.name, setup: running.notes[system.id] }));
      log(`systems up: ${running.systems.map((system) => `${system.id} ${system.callUrl}`).join(', ')}`);
      await waitUntilCallsAnswer(running.systems, settings, READY_TIMEOUT_MS);
      noteLoad('start-up');
      if (only === 'tool-list') {
        requestScenarios = { toolList: await runToolListScenario(running.systems, topology, settings, log) };
        noteLoad('tools/list');
      } else if (only === 'streaming') {
        requestScenarios = { streaming: await runStreamingScenario(running.systems, settings, log) };
        noteLoad('streaming');
      } else {
        const toolCall = await runToolCallScenario(running.systems, settings, log);
        noteLoad('tools/call');
        const streaming = await runStreamingScenario(running.systems, settings, log);
        noteLoad('streaming');
        const toolList = await runToolListScenario(running.systems, topology, settings, log);
        requestScenarios = { toolCall, streaming, toolList };
        noteLoad('tools/list');
      }
    } finally {
      await systemsGroup.stopAll();
    }
  }

  // Scenario 5 with nothing else of the bench's on the systems' core: the five systems above stay up
  // between their scenarios, and their periodic work (C's catalog refresh of the 50-backend fleet every
  // 30 s, its retries of the fleet's unreachable Tool Service every 10 s) ran on that core during
  // scenario 5's windows, counted in no row and landing on whichever variant was measuring (issue 15,
  // session 9: 129 µs per call at 100 % in the quiet run of session 8).
  let tracing;
  if (!only || only === 'tracing') {
    const tracingGroup = new ProcessGroup(path.join(LOG_DIR, 'tracing'), cpuPlan);
    groups.push(tracingGroup);
    try {
      const topology = await planTopology(settings.toolList.fleet);
      // The gateways start their own: only the call route's backend is needed.
      const callBackend = await startBackendProcess(tracingGroup, 'backend-call', topology.callBackendSpecs);
      tracing = await runTracingScenario(tracingGroup, topology, callBackend.child.pid!, settings, log);
      noteLoad('tracing');
    } finally {
      await tracingGroup.stopAll();
    }
  }

  let configuration;
  if (!only || only === 'configuration') {
    const configurationGroup = new ProcessGroup(path.join(LOG_DIR, 'configuration'), cpuPlan);
    groups.push(configurationGroup);
    try {
      configuration = await runConfigurationScenario(configurationGroup, settings, log);
      noteLoad('configuration');
    } finally {
      await configurationGroup.stopAll();
    }
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
    ...(only && { only }),
    systems,
    ...requestScenarios,
    ...(tracing && { tracing }),
    configuration,
  };
  const results: BenchResults = { ...withoutTargets, targets: assessTargets(withoutTargets) };

  // A quick run, or one scenario alone, never overwrites the numbers the repository carries.
  const name = [settings.mode === 'full' ? undefined : 'quick', only].filter(Boolean).join('-') || 'latest';
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const jsonFile = path.join(RESULTS_DIR, `${name}.json`);
  writeAtomically(jsonFile, resultsJson(results));
  // The chart's panels are mostly tools/call and streaming: a scenario run alone has its tables only.
  const chart = only ? undefined : drawChart(jsonFile, path.join(RESULTS_DIR, `${name}-latency.png`));
  const markdownFile = path.join(RESULTS_DIR, `${name}.md`);
  writeAtomically(markdownFile, `${renderMarkdown(results, chart)}\n`);
  log(`results: ${path.relative(projectPath(), jsonFile)}, ${path.relative(projectPath(), markdownFile)}${chart ? `, bench/results/${chart}` : ''}`);
  for (const target of results.targets) log(`target ${target.met === null ? 'not measured' : target.met ? 'met' : 'missed'}: ${target.target} — ${target.measured}`);
}

main().catch((error: Error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
