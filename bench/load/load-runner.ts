import { percentile, sortedCopy } from './stats';

/**
 * Two ways of applying load, both bounded in time and in requests in flight:
 * - fixed rate (open loop): request i is due at start + i/rate whether or not earlier ones have
 *   answered, and its latency counts from that intended time, so a stall shows up in every request
 *   it delayed (no coordinated omission);
 * - closed loop: N clients each send their next request when the previous answered; this finds
 *   the saturation throughput (its latencies are service times, not latencies at a given rate).
 */

export interface RequestOutcome {
  /** performance.now() when the answer's last byte arrived. */
  endMs: number;
  /** Why the answer was wrong, when it was. */
  error?: string;
}

export type IssueRequest = () => Promise<RequestOutcome>;

export interface RunResult {
  durationMs: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
  /** Latencies (ms) of the correct answers. */
  latenciesMs: number[];
  /** Correct answers per second over the run. */
  throughput: number;
  /** How late the generator sent compared with the schedule, p99 (ms): its own health (fixed rate only). */
  sendLagP99Ms: number;
}

function countError(errors: Record<string, number>, reason: string): void {
  errors[reason] = (errors[reason] ?? 0) + 1;
}

async function settle(issue: IssueRequest, intendedMs: number, result: RunResult): Promise<number> {
  try {
    const outcome = await issue();
    if (outcome.error) countError(result.errors, outcome.error);
    else {
      result.ok++;
      result.latenciesMs.push(outcome.endMs - intendedMs);
    }
    return outcome.endMs;
  } catch (error) {
    countError(result.errors, (error as Error).message);
    return performance.now();
  }
}

/** How late a Node timer may fire: below this the scheduler spins instead of sleeping. */
const TIMER_GRID_MS = 1.5;

const emptyResult = (): RunResult => ({ durationMs: 0, sent: 0, ok: 0, errors: {}, latenciesMs: [], throughput: 0, sendLagP99Ms: 0 });

export function runFixedRate(issue: IssueRequest, options: { rate: number; durationMs: number; maxInFlight: number }): Promise<RunResult> {
  const result = emptyResult();
  const total = Math.max(1, Math.round((options.rate * options.durationMs) / 1000));
  const intervalMs = 1000 / options.rate;
  const sendLags: number[] = [];
  const startMs = performance.now() + 5;
  let next = 0;
  let inFlight = 0;
  let lastEndMs = startMs;
  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (next < total || inFlight > 0) return;
      result.durationMs = lastEndMs - startMs;
      result.throughput = result.ok / (result.durationMs / 1000);
      result.sendLagP99Ms = percentile(sortedCopy(sendLags), 0.99);
      resolve(result);
    };
    // Timers fire on a ~1 ms grid, which would shift sends by up to a millisecond: sleep on a timer
    // only while the next send is further away than that, and spin (setImmediate) for the rest.
    const tick = () => {
      const now = performance.now();
      while (next < total && startMs + next * intervalMs <= now) {
        const intendedMs = startMs + next * intervalMs;
        next++;
        result.sent++;
        if (inFlight >= options.maxInFlight) {
          countError(result.errors, 'not sent: too many requests in flight');
          continue;
        }
        sendLags.push(now - intendedMs);
        inFlight++;
        void settle(issue, intendedMs, result).then((endMs) => {
          inFlight--;
          lastEndMs = Math.max(lastEndMs, endMs);
          finishIfDone();
        });
      }
      if (next >= total) finishIfDone();
      else if (startMs + next * intervalMs - performance.now() > TIMER_GRID_MS) setTimeout(tick, 0);
      else setImmediate(tick);
    };
    setImmediate(tick);
  });
}

export async function runClosedLoop(issue: IssueRequest, options: { concurrency: number; durationMs: number }): Promise<RunResult> {
  const result = emptyResult();
  const startMs = performance.now();
  const deadline = startMs + options.durationMs;
  let lastEndMs = startMs;
  const client = async () => {
    while (performance.now() < deadline) {
      result.sent++;
      lastEndMs = Math.max(lastEndMs, await settle(issue, performance.now(), result));
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, client));
  // No schedule to fall behind in a closed loop.
  result.sendLagP99Ms = Number.NaN;
  result.durationMs = lastEndMs - startMs;
  result.throughput = result.ok / (result.durationMs / 1000);
  return result;
}
