/** Exact order statistics over raw samples (a run holds at most a few hundred thousand). */

export interface LatencySummary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentile of ascending samples, q in [0, 1]. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank];
}

export function sortedCopy(samples: ArrayLike<number>): Float64Array {
  return Float64Array.from(samples).sort();
}

export function summarize(samples: ArrayLike<number>): LatencySummary {
  const sorted = sortedCopy(samples);
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
    mean: sorted.length ? sum / sorted.length : Number.NaN,
  };
}

/** How a figure varied over the repetitions of a run. */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spreadOf(values: number[]): Spread {
  const finite = values.filter(Number.isFinite);
  const sorted = sortedCopy(finite);
  if (sorted.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  const middle = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(middle)] : (sorted[middle - 1] + sorted[middle]) / 2;
  return { median, min: sorted[0], max: sorted[sorted.length - 1] };
}

/** Per-metric spread over repetitions of the same summary. */
/** One figure of one repetition of a measurement. */
export interface RepeatedValue {
  repetition: number;
  value: number;
}

/**
 * What `variant` adds to `baseline`: the median over repetitions of the difference within each
 * repetition (undefined when no repetition has both). Variants of one repetition run back to back,
 * so a machine whose load drifts between repetitions (a shared one) moves both sides of each
 * difference alike: steadier than the difference of the two medians.
 */
export function pairedAddedMedian(baseline: RepeatedValue[], variant: RepeatedValue[]): number | undefined {
  const baseByRepetition = new Map(baseline.map((entry) => [entry.repetition, entry.value]));
  const added = variant.filter((entry) => baseByRepetition.has(entry.repetition)).map((entry) => entry.value - baseByRepetition.get(entry.repetition)!);
  return added.length === 0 ? undefined : spreadOf(added).median;
}

/**
 * The variant's figure as a multiple of the baseline's: the median over repetitions of the ratio
 * within each repetition (undefined when no repetition has both). Like pairedAddedMedian, a drift of
 * the machine between repetitions moves both sides of each ratio alike; the ratio of two medians
 * taken over different repetitions would read that drift as a difference between the variants.
 */
export function pairedRatioMedian(baseline: RepeatedValue[], variant: RepeatedValue[]): number | undefined {
  const baseByRepetition = new Map(baseline.map((entry) => [entry.repetition, entry.value]));
  const ratios = variant.filter((entry) => baseByRepetition.has(entry.repetition)).map((entry) => entry.value / baseByRepetition.get(entry.repetition)!);
  return ratios.length === 0 ? undefined : spreadOf(ratios).median;
}

/** A paired difference in whole µs with its sign ("+12", "-3"), or "–" when there is none. */
export function signedMicros(micros: number | undefined): string {
  if (micros === undefined) return '–';
  const rounded = Math.round(micros);
  return `${rounded >= 0 ? '+' : ''}${rounded}`;
}

export function spreadOfSummaries(summaries: LatencySummary[]): Record<keyof LatencySummary, Spread> {
  const keys: (keyof LatencySummary)[] = ['n', 'p50', 'p90', 'p99', 'max', 'mean'];
  return Object.fromEntries(keys.map((key) => [key, spreadOf(summaries.map((summary) => summary[key]))])) as Record<keyof LatencySummary, Spread>;
}

/**
 * The percentile spectrum of pooled samples at fixed quantiles, denser towards the tail
 * (0, 0.5, 0.75, 0.875, …), which is what the chart draws on a log axis of 1/(1-q).
 */
export function percentileSpectrum(samples: ArrayLike<number>, stepsPerHalving = 4, maxHalvings = 14): { q: number; ms: number }[] {
  const sorted = sortedCopy(samples);
  if (sorted.length === 0) return [];
  const points: { q: number; ms: number }[] = [];
  for (let step = 0; step <= stepsPerHalving * maxHalvings; step++) {
    const q = 1 - Math.pow(0.5, step / stepsPerHalving);
    // Past 1 - 1/n the samples say nothing more than the maximum.
    if (1 - q < 1 / sorted.length) break;
    points.push({ q, ms: percentile(sorted, q) });
  }
  points.push({ q: 1 - 1 / sorted.length, ms: sorted[sorted.length - 1] });
  return points;
}
