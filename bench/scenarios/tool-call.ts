import { ECHO_TOOL } from '../backends/bench-tool-service';
import { IssueRequest, RunResult, runClosedLoop, runFixedRate } from '../load/load-runner';
import { McpHttpClient, echoOutcome, openSession } from '../load/mcp-client';
import { LatencySummary, percentileSpectrum, summarize } from '../load/stats';
import { BenchSettings } from '../settings';
import { SystemId, SystemUnderTest, inRotation } from '../systems/systems';

/** Scenario 1: tools/call with a small result, at fixed rates and at saturation. */

export const SATURATION = 'saturation';

/** One measured load run of a path: its figures, whatever the path is. */
export interface MeasuredRun {
  /** `${rate}` for a fixed-rate run, or 'saturation'. */
  load: string;
  repetition: number;
  latencyMs: LatencySummary;
  throughput: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
  sendLagP99Ms: number;
}

export interface LoadRun extends MeasuredRun {
  system: SystemId;
}

export function measuredRun(load: string, repetition: number, result: RunResult): MeasuredRun {
  return {
    load,
    repetition,
    latencyMs: summarize(result.latenciesMs),
    throughput: result.throughput,
    sent: result.sent,
    ok: result.ok,
    errors: result.errors,
    sendLagP99Ms: result.sendLagP99Ms,
  };
}

/** The log line of one run. */
export function runLine(label: string, run: MeasuredRun): string {
  const errors = run.sent - run.ok;
  const load = run.load === SATURATION ? run.load : `${run.load} req/s`;
  return `${label} ${load} #${run.repetition}: p50 ${run.latencyMs.p50.toFixed(2)} ms, p99 ${run.latencyMs.p99.toFixed(2)} ms, ${run.throughput.toFixed(0)} ok/s${errors ? `, ${errors} errors` : ''}`;
}

export interface ToolCallResults {
  runs: LoadRun[];
  /** Whether the path handed out an Mcp-Session-Id at initialize (then sent on every request). */
  sessionIds: Partial<Record<SystemId, boolean>>;
  /** Percentile spectrum of all repetitions pooled, by load and system (for the chart). */
  spectra: Record<string, Partial<Record<SystemId, { q: number; ms: number }[]>>>;
}

const ECHO_TEXT = 'bench';

/** Where a driver sends tools/call, and the headers its agent sends with every request (its bearer token). */
export type CallPath = Pick<SystemUnderTest, 'callUrl' | 'toolPrefix'> & Partial<Pick<SystemUnderTest, 'requestHeaders'>>;

/** One MCP client per system: its sessions, and a request that checks the echo came back. */
export async function callDriver(system: CallPath, settings: BenchSettings): Promise<{ issue: IssueRequest; sessionIds: boolean; close(): void }> {
  const client = new McpHttpClient(64);
  const sessions: Record<string, string>[] = [];
  for (let index = 0; index < settings.toolCall.sessions; index++) {
    sessions.push(await openSession(client, system.callUrl, settings.requestTimeoutMs, system.requestHeaders));
  }
  let turn = 0;
  const issue: IssueRequest = async () => {
    const id = client.newId();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `${system.toolPrefix}${ECHO_TOOL}`, arguments: { text: ECHO_TEXT } } });
    const answer = await client.post(system.callUrl, body, { headers: sessions[turn++ % sessions.length], timeoutMs: settings.requestTimeoutMs });
    return echoOutcome(answer, id, ECHO_TEXT);
  };
  return { issue, sessionIds: sessions.some((headers) => 'mcp-session-id' in headers), close: () => client.close() };
}

/** Why a fresh MCP session cannot call the echo tool on this path right now, if it cannot. */
async function callProblem(system: CallPath, settings: BenchSettings): Promise<string | undefined> {
  let driver: Awaited<ReturnType<typeof callDriver>> | undefined;
  try {
    driver = await callDriver(system, settings);
    return (await driver.issue()).error;
  } catch (error) {
    return (error as Error).message;
  } finally {
    driver?.close();
  }
}

/** Before any measurement: every path answers a tools/call (the gateway's catalog fills in the background). */
export async function waitUntilCallsAnswer(systems: Pick<SystemUnderTest, 'name' | 'callUrl' | 'toolPrefix'>[], settings: BenchSettings, timeoutMs: number): Promise<void> {
  for (const system of systems) {
    const deadline = performance.now() + timeoutMs;
    for (let problem = await callProblem(system, settings); problem; problem = await callProblem(system, settings)) {
      if (performance.now() > deadline) throw new Error(`${system.name} (${system.callUrl}) does not answer tools/call: ${problem}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

export async function runToolCallScenario(systems: SystemUnderTest[], settings: BenchSettings, log: (line: string) => void): Promise<ToolCallResults> {
  const { toolCall } = settings;
  const drivers = new Map<SystemId, Awaited<ReturnType<typeof callDriver>>>();
  const runs: LoadRun[] = [];
  const pooled = new Map<string, number[]>();
  const record = (system: SystemId, load: string, repetition: number, result: RunResult) => {
    const run = { system, ...measuredRun(load, repetition, result) };
    runs.push(run);
    const key = `${load}|${system}`;
    pooled.set(key, (pooled.get(key) ?? []).concat(result.latenciesMs));
    log(runLine(`tools/call ${system}`, run));
  };
  try {
    for (const system of systems) {
      const driver = await callDriver(system, settings);
      drivers.set(system.id, driver);
      await runFixedRate(driver.issue, { ...toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
    }
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      for (const rate of toolCall.ratesPerSecond) {
        for (const system of inRotation(systems, repetition)) {
          const { issue } = drivers.get(system.id)!;
          await runFixedRate(issue, { rate, durationMs: toolCall.warmupMs, maxInFlight: settings.maxInFlight });
          record(system.id, String(rate), repetition, await runFixedRate(issue, { rate, durationMs: toolCall.measureMs, maxInFlight: settings.maxInFlight }));
        }
      }
      for (const system of inRotation(systems, repetition)) {
        const { issue } = drivers.get(system.id)!;
        const { concurrency, warmupMs, measureMs } = toolCall.saturation;
        await runClosedLoop(issue, { concurrency, durationMs: warmupMs });
        record(system.id, SATURATION, repetition, await runClosedLoop(issue, { concurrency, durationMs: measureMs }));
      }
    }
  } finally {
    for (const driver of drivers.values()) driver.close();
  }
  const spectra: ToolCallResults['spectra'] = {};
  for (const [key, samples] of pooled) {
    const [load, system] = key.split('|') as [string, SystemId];
    (spectra[load] ??= {})[system] = percentileSpectrum(samples);
  }
  return { runs, sessionIds: Object.fromEntries([...drivers].map(([id, driver]) => [id, driver.sessionIds])), spectra };
}
