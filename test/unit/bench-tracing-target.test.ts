import { assessTargets } from '../../bench/report/targets';
import { BenchResults } from '../../bench/report/results';
import { SATURATION } from '../../bench/scenarios/tool-call';
import { TracingRun } from '../../bench/scenarios/tracing';
import { benchSettings } from '../../bench/settings';

/** Scenario 5's saturation runs, ok/s by repetition, for each variant. */
function tracingResults(okPerSecond: Record<string, number[]>): Omit<BenchResults, 'targets'> {
  const runs = Object.entries(okPerSecond).flatMap(([variant, values]) =>
    values.map(
      (throughput, index): TracingRun => ({
        variant,
        load: SATURATION,
        repetition: index + 1,
        latencyMs: { n: 1, p50: 8, p90: 9, p99: 10, max: 11, mean: 8 },
        throughput,
        sent: throughput * 5,
        ok: throughput * 5,
        errors: {},
        sendLagP99Ms: 0,
        cpuMicrosPerCall: {},
        cores: { systems: { busy: 0, idle: 0 }, loadGenerator: { busy: 0, idle: 0 } },
        loadGeneratorRunQueueWaitMicros: 0,
        uncountedOnSystemsCore: {},
      }),
    ),
  );
  return {
    schemaVersion: 1,
    mode: 'full',
    startedAt: '',
    finishedAt: '',
    durationSeconds: 0,
    environment: {} as BenchResults['environment'],
    cpuPlan: { pinned: true, loadGenerator: '1', systemsUnderTest: '0', niceness: -10 },
    loadAverages: [],
    settings: benchSettings(false),
    only: 'tracing',
    systems: [],
    tracing: {
      variants: Object.keys(okPerSecond).map((id) => ({ id, samplingRatio: id === 'off' ? null : Number.parseFloat(id) / 100 })),
      runs,
      envoySpansSent: {},
      envoyRequestsServed: {},
      attributeCosts: [],
      setup: '',
    },
  };
}

const fullSamplingTarget = (results: Omit<BenchResults, 'targets'>) => assessTargets(results).find((target) => target.target.startsWith('tracing at 100 %'))!;

describe("scenario 5's target: tracing at 100 % costs at most 10 % of saturation", () => {
  it('reads the ratio within each repetition, not the ratio of medians taken from different repetitions', () => {
    // Within each repetition 100 % runs at 0.93×, 0.92× and 0.77× off (its third run disturbed):
    // median 0.92×. The medians of the two columns come from different repetitions (off's from the
    // third, 100 %'s from the first): 1,300 / 1,500 = 0.87×.
    const results = tracingResults({ off: [1400, 1700, 1500], '100 %': [1300, 1560, 1150] });
    const target = fullSamplingTarget(results);
    expect(target.measured).toContain('0.92×');
    expect(target.met).toBe(true);
  });

  it('is missed when most repetitions cost more than 10 %', () => {
    // The quiet full run of 2026-12-01 01:46 UTC (bench/results/latest.json): 0.96×, 0.78×, 0.71×.
    const target = fullSamplingTarget(tracingResults({ off: [1554, 1521, 1699], '100 %': [1490, 1189, 1212] }));
    expect(target.measured).toContain('0.78×');
    expect(target.met).toBe(false);
  });
});
