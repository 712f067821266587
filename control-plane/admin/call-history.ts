import { BACKEND_OUTCOMES, CallObserver, CallOutcome, CallRecord, ERROR_OUTCOMES } from './call-log';

/**
 * The last hour of tools/call, in memory, for the operator dashboard (GET /dashboard): per (route,
 * backend, tool) one point per step with the calls by outcome and a latency histogram, a ring of the
 * latest denials and fallbacks, and each backend's run of failing calls. Fed by the call log; bounded:
 * at most `steps` points per series (tools are capped per backend by the call log), and a series
 * without a call in the window is dropped.
 */

export interface HistorySettings {
  /** Width of one point. */
  stepMs: number;
  /** Points kept per series: the window is stepMs × steps. */
  steps: number;
  /** Denials and fallbacks kept. */
  notableCalls: number;
  /** The window of the "now" figures (rate, error ratio, p50/p99). */
  recentMs: number;
}

/** One point per 10 s for an hour; the figures of the last 5 minutes. */
export const HISTORY_DEFAULTS: HistorySettings = { stepMs: 10_000, steps: 360, notableCalls: 100, recentMs: 300_000 };

/**
 * Latency buckets are quarter powers of two of a millisecond, each about 19 % wider than the one
 * below; bucket 0 holds everything up to 1 ms. A quantile is reported as its bucket's upper bound.
 */
const latencyBucketOf = (seconds: number) => Math.max(0, Math.ceil(Math.log2(seconds * 1000) * 4));
const bucketUpperMs = (bucket: number) => 2 ** (bucket / 4);

interface Point {
  step: number;
  calls: number;
  byOutcome: Map<CallOutcome, number>;
  /** Calls that went for a backend, by latency bucket. */
  latency: Map<number, number>;
}

interface Series {
  route: string;
  backend: string;
  tool: string;
  /** By step number (time / stepMs). */
  points: Map<number, Point>;
}

export interface NotableCall {
  at: string;
  route: string;
  backend: string;
  tool: string;
  outcome: CallOutcome;
  attempts: number;
  ms: number;
  detail: string;
}

export interface BackendCallHealth {
  route: string;
  backend: string;
  lastCallAt: string;
  /** Set while the backend's latest calls failed or fell back: when the first of them ended. */
  failingSince?: string;
  /** What Envoy said of the latest failed call. */
  lastError?: string;
}

export interface Figures {
  calls: number;
  callsPerSecond: number;
  /** Failed or degraded over calls that went for a backend; null without such calls. */
  errorRatio: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
}

export interface SeriesView {
  route: string;
  backend: string;
  tool: string;
  /** Over the last recentMs. */
  recent: Figures;
  /** [step index in the window (0 = oldest), calls, calls for a backend, errors, p50 ms, p99 ms], only steps with calls. */
  points: [number, number, number, number, number | null, number | null][];
}

export interface HistoryView {
  stepSeconds: number;
  steps: number;
  /** Start of the window's first step, ms since the epoch. */
  windowStart: number;
  series: SeriesView[];
  /** Newest first, by when they ended. */
  notable: NotableCall[];
  backends: BackendCallHealth[];
}

function quantileMs(latency: Map<number, number>, q: number): number | null {
  const total = [...latency.values()].reduce((sum, count) => sum + count, 0);
  if (total === 0) return null;
  let seen = 0;
  for (const bucket of [...latency.keys()].sort((a, b) => a - b)) {
    seen += latency.get(bucket)!;
    if (seen >= q * total) return bucketUpperMs(bucket);
  }
  return null;
}

const count = (point: Pick<Point, 'byOutcome'>, outcomes: readonly CallOutcome[]) => outcomes.reduce((sum, outcome) => sum + (point.byOutcome.get(outcome) ?? 0), 0);

/** Calls, backend calls, errors and latency of several points together. */
function merged(points: Point[]): Omit<Point, 'step'> {
  const total: Omit<Point, 'step'> = { calls: 0, byOutcome: new Map(), latency: new Map() };
  for (const point of points) {
    total.calls += point.calls;
    for (const [outcome, calls] of point.byOutcome) total.byOutcome.set(outcome, (total.byOutcome.get(outcome) ?? 0) + calls);
    for (const [bucket, calls] of point.latency) total.latency.set(bucket, (total.latency.get(bucket) ?? 0) + calls);
  }
  return total;
}

export class CallHistory implements CallObserver {
  private readonly series = new Map<string, Series>();
  private readonly notable: NotableCall[] = [];
  private readonly health = new Map<string, BackendCallHealth>();
  private newestStep = 0;

  constructor(
    private readonly settings: HistorySettings = HISTORY_DEFAULTS,
    private readonly now = () => Date.now(),
  ) {}

  private stepOf(ms: number): number {
    return Math.floor(ms / this.settings.stepMs);
  }

  /** The window's first step, given its newest. */
  private oldestStep(newest: number): number {
    return newest - this.settings.steps + 1;
  }

  record(call: CallRecord): void {
    const step = this.stepOf(call.endedAt);
    const current = this.stepOf(this.now());
    if (step < this.oldestStep(current)) return;
    if (current > this.newestStep) {
      this.newestStep = current;
      this.dropBefore(this.oldestStep(current));
    }
    const key = `${call.route}\n${call.backend}\n${call.toolLabel}`;
    let series = this.series.get(key);
    if (!series) {
      series = { route: call.route, backend: call.backend, tool: call.toolLabel, points: new Map() };
      this.series.set(key, series);
    }
    let point = series.points.get(step);
    if (!point) {
      point = { step, calls: 0, byOutcome: new Map(), latency: new Map() };
      series.points.set(step, point);
    }
    point.calls += 1;
    point.byOutcome.set(call.outcome, (point.byOutcome.get(call.outcome) ?? 0) + 1);
    const forBackend = BACKEND_OUTCOMES.includes(call.outcome);
    if (forBackend) {
      const bucket = latencyBucketOf(call.seconds);
      point.latency.set(bucket, (point.latency.get(bucket) ?? 0) + 1);
    }
    if (call.outcome === 'denied' || call.outcome === 'degraded') this.remember(call);
    if (forBackend) this.updateHealth(call);
  }

  private remember(call: CallRecord): void {
    this.notable.push({
      at: new Date(call.endedAt).toISOString(),
      route: call.route,
      backend: call.backend,
      tool: call.tool,
      outcome: call.outcome,
      attempts: call.attempts,
      ms: Math.round(call.seconds * 1000),
      detail: call.detail,
    });
    if (this.notable.length > this.settings.notableCalls) this.notable.shift();
  }

  private updateHealth(call: CallRecord): void {
    const key = `${call.route}\n${call.backend}`;
    const previous = this.health.get(key);
    const at = new Date(call.endedAt).toISOString();
    if (!ERROR_OUTCOMES.includes(call.outcome)) {
      this.health.set(key, { route: call.route, backend: call.backend, lastCallAt: at });
      return;
    }
    this.health.set(key, {
      route: call.route,
      backend: call.backend,
      lastCallAt: at,
      failingSince: previous?.failingSince ?? at,
      lastError: `${call.outcome}: ${call.detail}`,
    });
  }

  private dropBefore(oldest: number): void {
    for (const [key, series] of this.series) {
      for (const step of series.points.keys()) if (step < oldest) series.points.delete(step);
      if (series.points.size === 0) this.series.delete(key);
    }
  }

  view(): HistoryView {
    const current = this.stepOf(this.now());
    const oldest = this.oldestStep(current);
    const recentFrom = this.stepOf(this.now() - this.settings.recentMs) + 1;
    const recentSeconds = ((current - recentFrom + 1) * this.settings.stepMs) / 1000;
    const series: SeriesView[] = [];
    for (const { route, backend, tool, points } of this.series.values()) {
      const inWindow = [...points.values()].filter((point) => point.step >= oldest).sort((a, b) => a.step - b.step);
      if (inWindow.length === 0) continue;
      const recent = merged(inWindow.filter((point) => point.step >= recentFrom));
      const backendCalls = count(recent, BACKEND_OUTCOMES);
      series.push({
        route,
        backend,
        tool,
        recent: {
          calls: recent.calls,
          callsPerSecond: recent.calls / recentSeconds,
          errorRatio: backendCalls > 0 ? count(recent, ERROR_OUTCOMES) / backendCalls : null,
          p50Ms: quantileMs(recent.latency, 0.5),
          p99Ms: quantileMs(recent.latency, 0.99),
        },
        points: inWindow.map((point) => [
          point.step - oldest,
          point.calls,
          count(point, BACKEND_OUTCOMES),
          count(point, ERROR_OUTCOMES),
          quantileMs(point.latency, 0.5),
          quantileMs(point.latency, 0.99),
        ]),
      });
    }
    series.sort((a, b) => a.route.localeCompare(b.route) || a.backend.localeCompare(b.backend) || a.tool.localeCompare(b.tool));
    return {
      stepSeconds: this.settings.stepMs / 1000,
      steps: this.settings.steps,
      windowStart: oldest * this.settings.stepMs,
      series,
      // Envoy's workers send their entries in batches of their own: arrival order is not the calls' order.
      notable: [...this.notable].reverse().sort((a, b) => b.at.localeCompare(a.at)),
      backends: [...this.health.values()],
    };
  }
}
