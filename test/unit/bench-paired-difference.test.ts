import { pairedAddedMedian, pairedRatioMedian, signedMicros, spreadOf } from '../../bench/load/stats';

/** What a variant adds, read per repetition (bench/load/stats.ts): the figure the variant benches report beside their medians. */
describe('pairedAddedMedian', () => {
  const run = (repetition: number, value: number) => ({ repetition, value });

  it('pairs each figure with the baseline of the same repetition, whatever their order', () => {
    // Repetition 3 ran while the machine was busy: +60 there, +5 in the two others.
    const baseline = [run(1, 100), run(2, 300), run(3, 200)];
    const variant = [run(3, 260), run(1, 105), run(2, 305)];
    expect(pairedAddedMedian(baseline, variant)).toBe(5);
    // The difference of the medians takes the busy repetition's figure for the variant's: +60.
    expect(spreadOf(variant.map((entry) => entry.value)).median - spreadOf(baseline.map((entry) => entry.value)).median).toBe(60);
  });

  it('leaves out a repetition only one side has, and says undefined when none pairs', () => {
    expect(pairedAddedMedian([run(1, 100), run(2, 100)], [run(2, 90), run(3, 500)])).toBe(-10);
    expect(pairedAddedMedian([run(1, 100)], [run(2, 90)])).toBeUndefined();
  });

  it('writes a difference in whole µs with its sign', () => {
    expect([signedMicros(12.4), signedMicros(-3.6), signedMicros(0), signedMicros(undefined)]).toEqual(['+12', '-4', '+0', '–']);
  });
});

/** A variant's figure as a multiple of the baseline's, read per repetition: the ratios the variant benches' verdicts use. */
describe('pairedRatioMedian', () => {
  const runs = (values: number[]) => values.map((value, index) => ({ repetition: index + 1, value }));

  it('reads a drifting machine as no difference where each repetition shows none', () => {
    // bench/results/auth.md, 2026-11-30 quiet run, p50 at 100 req/s: `open`, and `token` (the same route
    // with a token nothing validates). The machine sped up from repetition to repetition.
    const open = runs([2.74, 2.64, 1.81, 1.75, 1.77]);
    const token = runs([2.68, 2.47, 2.24, 1.6, 1.49]);
    // The ratio of the two medians (what the verdict read then) takes repetition 3's token for 1.24× open.
    const ofMedians = spreadOf(token.map((entry) => entry.value)).median / spreadOf(open.map((entry) => entry.value)).median;
    expect(ofMedians).toBeCloseTo(1.238, 3);
    expect(pairedRatioMedian(open, token)).toBeCloseTo(0.936, 3);
  });

  it('leaves out a repetition only one side has, and says undefined when none pairs', () => {
    expect(pairedRatioMedian([{ repetition: 1, value: 2 }, { repetition: 2, value: 4 }], [{ repetition: 2, value: 5 }, { repetition: 3, value: 9 }])).toBe(1.25);
    expect(pairedRatioMedian([{ repetition: 1, value: 2 }], [{ repetition: 2, value: 5 }])).toBeUndefined();
  });
});
