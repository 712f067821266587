import { EncodingMemo, buildSnapshot } from '../../control-plane/xds/server/snapshot';
import { ConcurrencyLimit } from '../../control-plane/shared/concurrency-limit';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';

const clusters = (timeouts: string[]) => ({
  [TYPE_URL.cluster]: timeouts.map((timeout, index) => ({ '@type': TYPE_URL.cluster, name: `c${index}`, connect_timeout: timeout })),
});

describe('snapshot encoding memo', () => {
  it('gives the same snapshot as a fresh build, reusing the encoding of unchanged resources', () => {
    const memo = new EncodingMemo();
    const first = buildSnapshot(clusters(['1s', '2s']), memo);
    const second = buildSnapshot(clusters(['1s', '3s']), memo);
    expect(second).toEqual(buildSnapshot(clusters(['1s', '3s'])));
    const [before, after] = [first, second].map((snapshot) => snapshot.get(TYPE_URL.cluster)!.resources);
    expect(after.get('c0')).toBe(before.get('c0'));
    expect(after.get('c1')).not.toBe(before.get('c1'));
  });
});

describe('concurrency limit', () => {
  it('runs at most `limit` tasks at once, the rest in call order', async () => {
    const limit = new ConcurrencyLimit(2);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    await Promise.all(
      [0, 1, 2, 3, 4].map((index) =>
        limit.run(async () => {
          running++;
          peak = Math.max(peak, running);
          order.push(index);
          await new Promise((resolve) => setTimeout(resolve, 10));
          running--;
        }),
      ),
    );
    expect(peak).toBe(2);
    expect(order).toEqual([0, 1, 2, 3, 4]);
  });
});
