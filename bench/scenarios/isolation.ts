import * as fs from 'node:fs';
import * as http from 'node:http';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { ECHO_TOOL, HANG_TOOL } from '../backends/bench-tool-service';
import { IssueRequest, runClosedLoop } from '../load/load-runner';
import { McpHttpClient, answerTo, openSession } from '../load/mcp-client';
import { LatencySummary, summarize } from '../load/stats';
import { SlowHeaderFlood } from '../load/slow-header-flood';
import { MCP_POST_HEADERS, MCP_PROTOCOL_VERSION } from '../mcp/streamable-http';
import { GATEWAY_DEFAULTS } from '../../control-plane/xds/translate/settings';

/**
 * Isolation (issue 9): tools/call answered correctly per second on one route, unloaded, while another
 * route's backend holds 2,000 calls open, and during a 5,000-connection slow-header flood, everything
 * at the gateway's default limits. Target: each loaded figure at least 90 % of the unloaded one, no
 * wrong answer, no process of the gateway lost.
 */

export interface IsolationSettings {
  mode: 'full' | 'quick';
  /** Each phase is measured this many times, the phases interleaved within a repetition. */
  repetitions: number;
  /** Closed-loop clients of the measured route, over `sessions` MCP sessions. */
  concurrency: number;
  sessions: number;
  /** Once before anything is measured: JIT, Envoy's and the sidecar's connection pools. */
  initialWarmupMs: number;
  /** Before each measured run, under that run's load, discarded. */
  warmupMs: number;
  measureMs: number;
  requestTimeoutMs: number;
  /** Calls the stuck backend holds open during the "hung" phase. */
  hungCalls: number;
  /** Slow-header connections held open (re-opened when Envoy times one out) during the "flood" phase. */
  floodConnections: number;
  /**
   * How long the flood runs before the flood phase is measured: past Envoy's request-headers timeout
   * (10 s by default), so that the measured window sees the flood's connections timed out and re-opened.
   */
  floodSettleMs: number;
}

export const ISOLATION_SETTINGS: Record<'full' | 'quick', IsolationSettings> = {
  full: { mode: 'full', repetitions: 5, concurrency: 16, sessions: 8, initialWarmupMs: 10_000, warmupMs: 2_000, measureMs: 6_000, requestTimeoutMs: 10_000, hungCalls: 2_000, floodConnections: 5_000, floodSettleMs: 9_000 },
  quick: { mode: 'quick', repetitions: 1, concurrency: 16, sessions: 8, initialWarmupMs: 3_000, warmupMs: 500, measureMs: 2_000, requestTimeoutMs: 10_000, hungCalls: 2_000, floodConnections: 5_000, floodSettleMs: 0 },
};

export type Phase = 'unloaded' | 'hung' | 'flood';
const PHASES: Phase[] = ['unloaded', 'hung', 'flood'];

export interface PhaseRun {
  phase: Phase;
  repetition: number;
  /** Correct answers per second. */
  throughput: number;
  sent: number;
  ok: number;
  /** Answers that came back but were not the echo asked for. */
  wrongAnswers: number;
  /** Everything else that failed, by reason. */
  errors: Record<string, number>;
  latencyMs: LatencySummary;
  /** Envoy's CPU time over the measured run, per second of it (1000: one core busy). */
  envoyCpuMsPerSecond: number;
  /** What the load around the measured route was while it was measured. */
  load: { hungAtBackend?: number; hungQueued?: number; floodOpen?: number; floodClosedByEnvoy?: number };
}

export interface IsolationResults {
  runs: PhaseRun[];
  /**
   * Per phase: median throughput, and the median over repetitions of its ratio to the unloaded run of
   * the same repetition (runs minutes apart on a shared machine differ more than the phases do).
   */
  summary: Record<
    Phase,
    {
      medianThroughput: number;
      ratioToUnloaded: number;
      wrongAnswers: number;
      errors: number;
      medianEnvoyCpuMsPerSecond: number;
      /** Envoy's CPU per correct answer (what the load around it costs Envoy; steadier than answers/s on a shared machine). */
      medianEnvoyCpuUsPerAnswer: number;
    }
  >;
  /** Gateway processes that were not running at the end (a crash). */
  processesLost: string[];
  target: { ratio: number; met: boolean };
}

const WRONG = 'wrong tool result';
const TARGET_RATIO = 0.9;
const FLOOD_SOURCES = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6'];

async function measuredCalls(url: string, settings: IsolationSettings): Promise<{ issue: IssueRequest; close(): void }> {
  const client = new McpHttpClient(settings.concurrency);
  const sessions: Record<string, string>[] = [];
  for (let index = 0; index < settings.sessions; index++) sessions.push(await openSession(client, url, settings.requestTimeoutMs));
  let turn = 0;
  const issue: IssueRequest = async () => {
    const id = client.newId();
    const expected = `isolation-${id}`;
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `bench__${ECHO_TOOL}`, arguments: { text: expected } } });
    const answer = await client.post(url, body, { headers: sessions[turn++ % sessions.length], timeoutMs: settings.requestTimeoutMs });
    try {
      const result = answerTo(answer, id).result as { content?: { text?: string }[] };
      return { endMs: answer.endMs, error: result.content?.[0]?.text === expected ? undefined : WRONG };
    } catch (error) {
      return { endMs: answer.endMs, error: (error as Error).message };
    }
  };
  return { issue, close: () => client.close() };
}

/**
 * Calls of the stuck backend's `hang`, each on a connection of its own, held until released. Envoy
 * counts a call waiting for its upstream connection to be made as pending, so a burst of more than the
 * circuit breaker's pending limit at a backend overflows at once (each such call answered -32004):
 * they are opened 100 at a time, the next hundred once the last ones have their connection (or wait
 * for one behind the breaker's limit of calls in flight).
 */
class HungCalls {
  private readonly agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  private readonly requests: http.ClientRequest[] = [];
  private released = false;

  constructor(private readonly url: string) {}

  async open(count: number, settled: (opened: number) => Promise<boolean>): Promise<void> {
    for (let index = 0; index < count && !this.released; index++) {
      const request = http.request(this.url, { method: 'POST', agent: this.agent, headers: { ...MCP_POST_HEADERS, 'mcp-protocol-version': MCP_PROTOCOL_VERSION } });
      request.on('error', () => undefined);
      request.on('response', (response) => response.resume());
      request.end(JSON.stringify({ jsonrpc: '2.0', id: index, method: 'tools/call', params: { name: `stuck__${HANG_TOOL}`, arguments: {} } }));
      this.requests.push(request);
      if (index % 100 === 99) await until(() => settled(index + 1), `${index + 1} hung calls to settle`);
    }
  }

  release(): void {
    this.released = true;
    for (const request of this.requests) request.destroy();
    this.agent.destroy();
  }
}

async function envoyStat(stack: GatewayStack, name: string): Promise<number> {
  const stats = (await (await fetch(`${stack.envoyAdminUrl}/stats?format=json&filter=${encodeURIComponent(`^${name}$`)}`)).json()) as { stats: { name: string; value: number }[] };
  return stats.stats.find((stat) => stat.name === name)?.value ?? 0;
}

/** CPU time (user and system) Envoy has used so far, in ms: /proc/<pid>/stat, in clock ticks of 10 ms. */
function envoyCpuMs(stack: GatewayStack): number {
  const fields = fs.readFileSync(`/proc/${stack.processes.get('envoy')!.child.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Client connections Envoy's listener holds now. */
const clientConnections = (stack: GatewayStack) => envoyStat(stack, `listener.127.0.0.1_${stack.ports.listener}.downstream_cx_active`);

async function until(condition: () => Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const giveUpAt = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > giveUpAt) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)];

/** `stuckCluster`: Envoy's cluster of the stuck backend (clusters are named after their upstream). */
export async function runIsolationScenario(stack: GatewayStack, stuckCluster: string, settings: IsolationSettings, log: (line: string) => void): Promise<IsolationResults> {
  const measuredUrl = stack.gatewayUrl('measured');
  const calls = await measuredCalls(measuredUrl, settings);
  const runs: PhaseRun[] = [];
  try {
    await runClosedLoop(calls.issue, { concurrency: settings.concurrency, durationMs: settings.initialWarmupMs });
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      // Each repetition starts with another phase, so that no phase always runs first (or last).
      const order = PHASES.map((_, index) => PHASES[(index + repetition - 1) % PHASES.length]);
      for (const phase of order) {
        let hung: HungCalls | undefined;
        let flood: SlowHeaderFlood | undefined;
        const load: PhaseRun['load'] = {};
        try {
          if (phase === 'hung') {
            hung = new HungCalls(stack.gatewayUrl('stuck'));
            const held = async () => (await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_active`)) + (await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_pending_active`));
            // Settled: every call opened so far is at the backend or queued behind the breaker's limit,
            // none still waiting for its connection to be made.
            const waitingBeyondLimit = (opened: number) => Math.max(0, opened - GATEWAY_DEFAULTS.toolServiceLimits.maxRequests);
            await hung.open(settings.hungCalls, async (opened) => (await held()) >= opened && (await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_pending_active`)) <= waitingBeyondLimit(opened));
            await until(async () => (await held()) >= settings.hungCalls, `${settings.hungCalls} calls held open`);
          }
          if (phase === 'flood') {
            // A header line every 5 s (a slow-header client gains nothing by sending more often: Envoy's
            // request-headers timeout counts from the first byte); one timed out is opened again after 1 s.
            flood = new SlowHeaderFlood({
              port: stack.ports.listener,
              connections: settings.floodConnections,
              sourceAddresses: FLOOD_SOURCES,
              openPerSecond: 5_000,
              trickleMs: 5_000,
              durationMs: 10 * 60_000,
              reopenAfterMs: 1_000,
            });
            await until(async () => (await clientConnections(stack)) >= settings.floodConnections, `${settings.floodConnections} flood connections`);
            await new Promise((resolve) => setTimeout(resolve, settings.floodSettleMs));
          }
          await runClosedLoop(calls.issue, { concurrency: settings.concurrency, durationMs: settings.warmupMs });
          const envoyCpuBefore = envoyCpuMs(stack);
          const result = await runClosedLoop(calls.issue, { concurrency: settings.concurrency, durationMs: settings.measureMs });
          const envoyCpuMsPerSecond = (envoyCpuMs(stack) - envoyCpuBefore) / (result.durationMs / 1000);
          if (hung) {
            load.hungAtBackend = await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_active`);
            load.hungQueued = await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_pending_active`);
          }
          if (flood) {
            load.floodOpen = (await clientConnections(stack)) - settings.concurrency;
            load.floodClosedByEnvoy = flood.stop().closedByPeer;
          }
          const { [WRONG]: wrongAnswers = 0, ...errors } = result.errors;
          runs.push({ phase, repetition, throughput: result.throughput, sent: result.sent, ok: result.ok, wrongAnswers, errors, latencyMs: summarize(result.latenciesMs), envoyCpuMsPerSecond, load });
          const failed = result.sent - result.ok;
          log(`${phase} #${repetition}: ${result.throughput.toFixed(0)} correct answers/s, p50 ${runs[runs.length - 1].latencyMs.p50.toFixed(2)} ms, p99 ${runs[runs.length - 1].latencyMs.p99.toFixed(2)} ms, Envoy CPU ${envoyCpuMsPerSecond.toFixed(0)} ms/s${failed ? `, ${failed} failed ${JSON.stringify(result.errors)}` : ''} ${JSON.stringify(load)}`);
        } finally {
          hung?.release();
          flood?.stop();
        }
        // The next phase starts from an idle gateway: the released calls and the flood's connections gone.
        await until(async () => (await envoyStat(stack, `cluster.${stuckCluster}.upstream_rq_active`)) === 0, 'the hung calls to end');
        await until(async () => (await clientConnections(stack)) <= settings.concurrency + settings.sessions, "the flood's connections to close");
      }
    }
  } finally {
    calls.close();
  }
  const unloadedOf = (repetition: number) => runs.find((run) => run.phase === 'unloaded' && run.repetition === repetition)!.throughput;
  const summary = Object.fromEntries(
    PHASES.map((phase) => {
      const ofPhase = runs.filter((run) => run.phase === phase);
      const errors = ofPhase.reduce((sum, run) => sum + Object.values(run.errors).reduce((a, b) => a + b, 0), 0);
      return [
        phase,
        {
          medianThroughput: median(ofPhase.map((run) => run.throughput)),
          ratioToUnloaded: median(ofPhase.map((run) => run.throughput / unloadedOf(run.repetition))),
          wrongAnswers: ofPhase.reduce((sum, run) => sum + run.wrongAnswers, 0),
          errors,
          medianEnvoyCpuMsPerSecond: median(ofPhase.map((run) => run.envoyCpuMsPerSecond)),
          medianEnvoyCpuUsPerAnswer: median(ofPhase.map((run) => (run.envoyCpuMsPerSecond * 1000) / run.throughput)),
        },
      ];
    }),
  ) as IsolationResults['summary'];
  const processesLost = [...stack.processes.entries()].filter(([, process]) => !process.running).map(([name]) => name);
  const met =
    processesLost.length === 0 && PHASES.every((phase) => summary[phase].wrongAnswers === 0 && summary[phase].errors === 0 && summary[phase].ratioToUnloaded >= TARGET_RATIO);
  return { runs, summary, processesLost, target: { ratio: TARGET_RATIO, met } };
}
