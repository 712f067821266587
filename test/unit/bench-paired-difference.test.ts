import { pairedAddedMedian, signedMicros, spreadOf } from '../../bench/load/stats';

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
