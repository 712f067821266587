import { SENT_AT_PREFIX, STREAM_TOOL } from '../backends/bench-tool-service';
import { McpHttpClient, answerTo, openSession } from '../load/mcp-client';
import { LatencySummary, percentileSpectrum, summarize } from '../load/stats';
import { JsonRpcMessage, SseDataReader } from '../mcp/streamable-http';
import { BenchSettings } from '../settings';
import { SystemId, SystemUnderTest, inRotation } from '../systems/systems';

/**
 * Scenario 2: a tool that sends N progress notifications M ms apart. Each notification carries the
 * backend's monotonic send time; the client notes the monotonic time its chunk arrived. Both clocks
 * are the same CLOCK_MONOTONIC, so the difference is how long the frame spent on this path. A path
 * that buffers shows it at once: its frames arrive late, all together.
 */

export interface StreamingRun {
  system: SystemId;
  repetition: number;
  calls: number;
  framesExpected: number;
  framesReceived: number;
  /** One-way delay of each call's first notification (it travels with the response headers). */
  firstFrameMs: LatencySummary;
  /** One-way delay of every later notification. */
  laterFramesMs: LatencySummary;
  /** From the request leaving the client to the first notification arriving (includes the tool's first wait). */
  requestToFirstFrameMs: LatencySummary;
  /** Where the slowest 1 % of this repetition's later frames sit (whereLateFramesSit). */
  lateFrames: LateFrames;
  errors: Record<string, number>;
}

/**
 * The slowest 1 % of a repetition's later frames (those that make its p99), and how many of them were among their own call's last
 * two frames (the moment calls of a wave end together) or sent within NEAR_CALL_START_MS of another
 * call's request (its session check, its request script): what a path does around a frame, told
 * apart without a second clock.
 */
export interface LateFrames {
  late: number;
  atOwnCallEnd: number;
  nearAnotherCallStart: number;
}

/** A frame sent within this many ms of another call's request counts as "near" that call's start. */
export const NEAR_CALL_START_MS = 10;

export interface StreamingResults {
  runs: StreamingRun[];
  /** Pooled one-way delay of all frames, by system (for the chart). */
  spectra: Partial<Record<SystemId, { q: number; ms: number }[]>>;
}

/** A later frame: its progress number, when the backend sent it and its one-way delay (ms, monotonic). */
export interface LaterFrame {
  progress: number;
  sentMs: number;
  delayMs: number;
}

export interface CallFrames {
  /** When the request left the client (ms, the same monotonic clock as the frames'). */
  startedMs: number;
  first: number[];
  later: LaterFrame[];
  requestToFirst: number[];
  error?: string;
}

/** The slowest 1 % of `calls`' later frames (at least one; each call of `notifications` frames), and where they sit. */
export function whereLateFramesSit(calls: CallFrames[], notifications: number): LateFrames {
  const frames = calls.flatMap((call) => call.later.map((frame) => ({ call, frame })));
  const slowest = frames.sort((a, b) => b.frame.delayMs - a.frame.delayMs).slice(0, Math.ceil(frames.length / 100));
  return {
    late: slowest.length,
    atOwnCallEnd: slowest.filter(({ frame }) => frame.progress >= notifications - 1).length,
    nearAnotherCallStart: slowest.filter(({ call, frame }) => calls.some((other) => other !== call && Math.abs(other.startedMs - frame.sentMs) <= NEAR_CALL_START_MS)).length,
  };
}

const nsToMs = (ns: bigint) => Number(ns) / 1e6;

async function streamOneCall(client: McpHttpClient, system: SystemUnderTest, session: Record<string, string>, settings: BenchSettings): Promise<CallFrames> {
  const { notifications, intervalMs } = settings.streaming;
  const id = client.newId();
  const reader = new SseDataReader();
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: `${system.toolPrefix}${STREAM_TOOL}`, arguments: { count: notifications, interval_ms: intervalMs }, _meta: { progressToken: id } },
  });
  const sentNs = process.hrtime.bigint();
  const frames: CallFrames = { startedMs: nsToMs(sentNs), first: [], later: [], requestToFirst: [] };
  const onChunk = (chunk: string, arrivedNs: bigint) => {
    for (const data of reader.push(chunk)) {
      const message = JSON.parse(data) as JsonRpcMessage;
      if (message.method !== 'notifications/progress') continue;
      const params = message.params as { progress: number; message: string };
      const backendSentNs = BigInt(params.message.slice(SENT_AT_PREFIX.length));
      const delayMs = nsToMs(arrivedNs - backendSentNs);
      if (params.progress === 1) {
        frames.first.push(delayMs);
        frames.requestToFirst.push(nsToMs(arrivedNs - sentNs));
      } else frames.later.push({ progress: params.progress, sentMs: nsToMs(backendSentNs), delayMs });
    }
  };
  try {
    const answer = await client.post(system.callUrl, body, { headers: session, timeoutMs: settings.requestTimeoutMs, onChunk });
    answerTo(answer, id);
    if (frames.first.length + frames.later.length !== notifications) {
      frames.error = `${frames.first.length + frames.later.length} of ${notifications} notifications arrived as SSE frames`;
    }
  } catch (error) {
    frames.error = (error as Error).message;
  }
  return frames;
}

export async function runStreamingScenario(systems: SystemUnderTest[], settings: BenchSettings, log: (line: string) => void): Promise<StreamingResults> {
  const { callsPerRepetition, concurrency, notifications } = settings.streaming;
  const runs: StreamingRun[] = [];
  const pooled = new Map<SystemId, number[]>();
  for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
    for (const system of inRotation(systems, repetition)) {
      const client = new McpHttpClient(concurrency);
      try {
        const session = await openSession(client, system.callUrl, settings.requestTimeoutMs, system.requestHeaders);
        const calls: CallFrames[] = [];
        let started = 0;
        const worker = async () => {
          while (started < callsPerRepetition) {
            started++;
            calls.push(await streamOneCall(client, system, session, settings));
          }
        };
        await Promise.all(Array.from({ length: concurrency }, worker));
        const errors: Record<string, number> = {};
        for (const call of calls) if (call.error) errors[call.error] = (errors[call.error] ?? 0) + 1;
        const first = calls.flatMap((call) => call.first);
        const later = calls.flatMap((call) => call.later.map((frame) => frame.delayMs));
        const run: StreamingRun = {
          system: system.id,
          repetition,
          calls: calls.length,
          framesExpected: calls.length * notifications,
          framesReceived: first.length + later.length,
          firstFrameMs: summarize(first),
          laterFramesMs: summarize(later),
          requestToFirstFrameMs: summarize(calls.flatMap((call) => call.requestToFirst)),
          lateFrames: whereLateFramesSit(calls, notifications),
          errors,
        };
        runs.push(run);
        pooled.set(system.id, (pooled.get(system.id) ?? []).concat(first, later));
        log(
          `streaming ${system.id} #${repetition}: first frame p50 ${run.firstFrameMs.p50.toFixed(2)} ms, later frames p50 ${run.laterFramesMs.p50.toFixed(2)} / p99 ${run.laterFramesMs.p99.toFixed(2)} ms, ${run.framesReceived}/${run.framesExpected} frames; slowest 1 %: ${run.lateFrames.late}, at their call's end ${run.lateFrames.atOwnCallEnd}, near another call's start ${run.lateFrames.nearAnotherCallStart}`,
        );
      } finally {
        client.close();
      }
    }
  }
  return { runs, spectra: Object.fromEntries([...pooled].map(([system, samples]) => [system, percentileSpectrum(samples)])) };
}
