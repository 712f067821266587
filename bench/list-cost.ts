import * as fs from 'node:fs';
import { threadsCpuNanosecondsOf } from './scenarios/cpu-time';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { z } from 'zod';
import { GatewayStack, StackOptions } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { MCP_POST_HEADERS } from './mcp/streamable-http';
import { McpHttpClient, openSession } from './load/mcp-client';
import { runFixedRate } from './load/load-runner';
import { percentile, sortedCopy } from './load/stats';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startBackendProcess } from './systems/systems';
import { planTopology } from './systems/topology';
import { baselineStart, revisionOf } from './systems/baseline';

/**
 * Where a whole tools/list answer's time goes (issue 10, docs/adr/0008-data-path-lanes.md, "List
 * answers"): the tools/list scenario's all-up route (50 backends × 100 tools, 1.74 MB) on the gateway
 * alone — this tree's, and a baseline worktree's beside it when one is given — listed
 *   - at the scenario's rate (2 per second, fixed-rate): the answer's latency split at its response
 *     head (the sidecar's work and Envoy's forwarding of the head) and at its last byte, with the
 *     number of reads the client needed;
 *   - one after another: the CPU of Envoy and of the sidecar per answer (every thread, from
 *     /proc/<pid>/task/<tid>/schedstat, ns), steadier than latency on a shared machine.
 * The client parses no answer inside the measured time (it checks the tool count after).
 *   scripts/bench.sh list-cost [<baseline worktree, built>] [--repetitions N] [--control-plane-args '<options>']
 * Writes bench/results/tool-list-cost.json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'list-cost');
const RESULTS_DIR = projectPath('bench', 'results');
const USAGE = "usage: node dist/bench/list-cost.js [<baseline worktree>] [--repetitions N] [--control-plane-args '<options>']";
/** Answers per CPU measurement: at ≈ 1 ms of CPU each, enough to put the idle work of the processes far below the answers'. */
const ANSWERS_PER_CPU_RUN = 80;

const log = (line: string) => process.stdout.write(`[bench list-cost] ${line}\n`);

const Arguments = z.object({
  baseline: z.string().optional(),
  repetitions: z.coerce.number().int().positive().default(4),
  /** More control-plane options for this tree's gateway (a trial of a setting, e.g. Envoy's buffer limits), space-separated. */
  controlPlaneArgs: z.string().default(''),
});

function parseArguments(argv: string[]) {
  const options: Record<string, string> = {};
  for (let index = 0; index < argv.length; index++) {
    if (argv[index] === '--repetitions') options.repetitions = argv[++index];
    else if (argv[index] === '--control-plane-args') options.controlPlaneArgs = argv[++index];
    else options.baseline = argv[index];
  }
  const parsed = Arguments.safeParse(options);
  if (!parsed.success) throw new Error(`${parsed.error.issues[0]?.message}. ${USAGE}`);
  return parsed.data;
}

const threadsCpuMicros = (pid: number) => threadsCpuNanosecondsOf(pid) / 1000;

interface Timed {
  /** performance.now() at the last byte. */
  endMs: number;
  headMs: number;
  lastByteMs: number;
  reads: number;
}

/** One tools/list, timed at the response head and at the last byte; the tool count is checked after the clock stops. */
function timedList(agent: http.Agent, url: string, session: Record<string, string>, expected: number): Promise<Timed> {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  return new Promise((resolve, reject) => {
    const sentMs = performance.now();
    const request = http.request(url, { method: 'POST', agent, headers: { ...MCP_POST_HEADERS, ...session, 'content-length': Buffer.byteLength(body) } }, (response) => {
      const headMs = performance.now() - sentMs;
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () => {
        const endMs = performance.now();
        const lastByteMs = endMs - sentMs;
        const text = Buffer.concat(chunks).toString('utf8');
        const json = response.headers['content-type']?.includes('text/event-stream') ? text.slice(text.indexOf('data: ') + 6) : text;
        const tools = (JSON.parse(json) as { result?: { tools?: unknown[] } }).result?.tools?.length;
        if (response.statusCode !== 200 || tools !== expected) reject(new Error(`HTTP ${response.statusCode}, ${tools} tools (expected ${expected})`));
        else resolve({ endMs, headMs, lastByteMs, reads: chunks.length });
      });
    });
    request.on('error', reject);
    request.end(body);
  });
}

interface Run {
  variant: string;
  repetition: number;
  p50: number;
  p99: number;
  max: number;
  headP50: number;
  headP99: number;
  readsP50: number;
  cpuUsPerAnswer: { envoy: number; sidecar: number };
}

const median = (values: number[]) => percentile(sortedCopy(values), 0.5);

async function measure(name: string, url: string, pids: { envoy: number; sidecar: number }, expected: number, repetition: number): Promise<Run> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
  const session = await openSession(new McpHttpClient(1), url, 10_000);
  try {
    for (let index = 0; index < 5; index++) await timedList(agent, url, session, expected);
    const timings: Timed[] = [];
    const paced = await runFixedRate(
      async () => {
        const timed = await timedList(agent, url, session, expected);
        timings.push(timed);
        return { endMs: timed.endMs };
      },
      { rate: 2, durationMs: 6_000, maxInFlight: 16 },
    );
    const before = { envoy: threadsCpuMicros(pids.envoy), sidecar: threadsCpuMicros(pids.sidecar) };
    for (let index = 0; index < ANSWERS_PER_CPU_RUN; index++) await timedList(agent, url, session, expected);
    const cpuUsPerAnswer = {
      envoy: (threadsCpuMicros(pids.envoy) - before.envoy) / ANSWERS_PER_CPU_RUN,
      sidecar: (threadsCpuMicros(pids.sidecar) - before.sidecar) / ANSWERS_PER_CPU_RUN,
    };
    const sorted = sortedCopy(paced.latenciesMs);
    const heads = sortedCopy(timings.map((timed) => timed.headMs));
    const run: Run = {
      variant: name,
      repetition,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      max: sorted.at(-1) ?? NaN,
      headP50: percentile(heads, 0.5),
      headP99: percentile(heads, 0.99),
      readsP50: median(timings.map((timed) => timed.reads)),
      cpuUsPerAnswer,
    };
    log(
      `${name} #${repetition}: p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms, head p50/p99 ${run.headP50.toFixed(2)}/${run.headP99.toFixed(2)} ms, ` +
        `${run.readsP50} reads, CPU/answer Envoy ${cpuUsPerAnswer.envoy.toFixed(0)} µs, sidecar ${cpuUsPerAnswer.sidecar.toFixed(0)} µs` +
        `${Object.keys(paced.errors).length ? `, errors ${JSON.stringify(paced.errors)}` : ''}`,
    );
    return run;
  } finally {
    agent.destroy();
  }
}

async function main(): Promise<void> {
  const { baseline, repetitions, controlPlaneArgs } = parseArguments(process.argv.slice(2));
  const fleet = benchSettings(false).toolList.fleet;
  const topology = await planTopology({ ...fleet });
  const route = topology.listRoutes.normal;
  const expected = route.backends.length * topology.toolsPerFleetBackend;
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const registryFile = path.join(LOG_DIR, 'registry.yaml');
  fs.writeFileSync(registryFile, stringify({ routes: [{ key: route.key, toolServices: route.backends.map((backend) => ({ id: backend.endpoint.id, name: backend.name, url: backend.endpoint.url })) }] }));
  const revisions: Record<string, string> = {
    this: `${revisionOf(projectPath())}${controlPlaneArgs ? ` with control plane ${controlPlaneArgs}` : ''}`,
    ...(baseline && { baseline: revisionOf(path.resolve(baseline)) }),
  };
  const loadBefore = os.loadavg().slice(0, 2);
  const runs: Run[] = [];
  try {
    await startBackendProcess(group, 'backend-fleet', topology.fleetSpecs.filter((spec) => route.backends.some((backend) => backend.endpoint.port === spec.port)));
    const stacks = new Map<string, GatewayStack>();
    const startOptions = (name: string): Omit<StackOptions, 'ports'> => ({ registryFile, logDir: path.join(LOG_DIR, name) });
    if (baseline) stacks.set('baseline', await group.startGateway('baseline', startOptions('baseline'), baselineStart(path.resolve(baseline))));
    const trialArgs = controlPlaneArgs.split(' ').filter(Boolean);
    stacks.set('this', await group.startGateway('this', { ...startOptions('this'), ...(trialArgs.length > 0 && { extraArgs: { controlPlane: trialArgs } }) }));
    const pids = (stack: GatewayStack) => ({ envoy: stack.processes.get('envoy')!.child.pid!, sidecar: stack.processes.get('sidecar')!.child.pid! });
    for (const [name, stack] of stacks) {
      const url = stack.gatewayUrl(route.key);
      const deadline = Date.now() + 300_000;
      for (;;) {
        const listed = () => openSession(new McpHttpClient(1), url, 10_000).then((session) => timedList(new http.Agent(), url, session, expected));
        if (await listed().then(() => true, () => false)) break;
        if (Date.now() > deadline) throw new Error(`${name}: the route never listed ${expected} tools`);
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    const names = [...stacks.keys()];
    for (let repetition = 1; repetition <= repetitions; repetition++) {
      const order = repetition % 2 === 0 ? [...names].reverse() : names;
      for (const name of order) {
        const stack = stacks.get(name)!;
        runs.push(await measure(name, stack.gatewayUrl(route.key), pids(stack), expected, repetition));
      }
    }
  } finally {
    await group.stopAll();
  }
  const loadAfter = os.loadavg().slice(0, 2);
  const results = { revisions, loadBefore, loadAfter, answersPerCpuRun: ANSWERS_PER_CPU_RUN, runs };
  fs.writeFileSync(path.join(RESULTS_DIR, 'tool-list-cost.json'), `${JSON.stringify(results, null, 2)}\n`);
  const variants = [...new Set(runs.map((run) => run.variant))];
  const cell = (variant: string, pick: (run: Run) => number, digits: number) => {
    const values = runs.filter((run) => run.variant === variant).map(pick);
    const sorted = sortedCopy(values);
    return `${median(values).toFixed(digits)} (${sorted[0].toFixed(digits)}–${sorted.at(-1)!.toFixed(digits)})`;
  };
  const lines = [
    '# tools/list of 5,000 tools, whole: where the time goes',
    '',
    `Run ${new Date().toISOString()} with \`node dist/bench/list-cost.js\` (bench/list-cost.ts): the tools/list scenario's all-up route (50 backends × 100 tools) on the gateway alone, variants interleaved; load average (1 / 5 min) ${loadBefore.map((value) => value.toFixed(2)).join(' / ')} before, ${loadAfter.map((value) => value.toFixed(2)).join(' / ')} after.`,
    '',
    ...Object.entries(revisions).map(([name, revision]) => `- ${name}: ${revision}`),
    '',
    'Latency at 2 listings per second for 6 s (12 listings; p99 is the worst of them), "head" the response head alone; CPU per answer over 80 answers one after another (every thread; ns from schedstat). Medians over repetitions (min–max).',
    '',
    '| variant | p50 ms | p99 ms | head p50 ms | head p99 ms | client reads | Envoy CPU µs/answer | sidecar CPU µs/answer |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ...variants.map(
      (variant) =>
        `| ${variant} | ${cell(variant, (run) => run.p50, 2)} | ${cell(variant, (run) => run.p99, 2)} | ${cell(variant, (run) => run.headP50, 2)} | ${cell(variant, (run) => run.headP99, 2)} | ${cell(variant, (run) => run.readsP50, 0)} | ${cell(variant, (run) => run.cpuUsPerAnswer.envoy, 0)} | ${cell(variant, (run) => run.cpuUsPerAnswer.sidecar, 0)} |`,
    ),
  ];
  fs.writeFileSync(path.join(RESULTS_DIR, 'tool-list-cost.md'), `${lines.join('\n')}\n`);
  log(lines.slice(-variants.length - 2).join('\n'));
}

main().catch((error: Error) => {
  process.stderr.write(`${error.stack ?? error.message}\n`);
  process.exit(1);
});
