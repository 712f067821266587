import { balancedOrder } from '../../bench/variant-cost';

/**
 * The order the variant benches measure their variants in, repetition by repetition
 * (bench/variant-cost.ts): over a full cycle of repetitions, no variant is favoured by its position
 * in a repetition nor by the variant measured just before it.
 */
describe('balancedOrder', () => {
  const cycle = (variants: string[], repetitions: number) => Array.from({ length: repetitions }, (_, index) => balancedOrder(variants, index + 1));
  const countsOf = (keys: string[]) => keys.reduce((counts, key) => counts.set(key, (counts.get(key) ?? 0) + 1), new Map<string, number>());

  it.each([
    [['open', 'token', 'validated', 'authed'], 4],
    [['off', 'local', 'global', 'concurrency'], 4],
    [['plain', 'closed'], 2],
    [['a', 'b', 'c'], 6],
    [['a', 'b', 'c', 'd', 'e', 'f'], 6],
  ])('%j: every variant in every position, and right after every other variant, equally often over %i repetitions', (variants, repetitions) => {
    const orders = cycle(variants, repetitions);
    for (const order of orders) expect([...order].sort()).toEqual([...variants].sort());
    for (let position = 0; position < variants.length; position++) {
      expect([...countsOf(orders.map((order) => order[position])).values()]).toEqual(variants.map(() => repetitions / variants.length));
    }
    const neighbours = countsOf(orders.flatMap((order) => order.slice(1).map((variant, index) => `${order[index]}→${variant}`)));
    expect(neighbours.size).toBe(variants.length * (variants.length - 1));
    expect(new Set(neighbours.values())).toEqual(new Set([(repetitions * (variants.length - 1)) / (variants.length * (variants.length - 1))]));
  });

  it('starts the cycle again after it', () => {
    expect(balancedOrder(['a', 'b', 'c', 'd'], 5)).toEqual(balancedOrder(['a', 'b', 'c', 'd'], 1));
  });
});
