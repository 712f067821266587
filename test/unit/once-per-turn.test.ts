import { oncePerTurn } from '../../control-plane/shared/once-per-turn';

describe('oncePerTurn', () => {
  it('runs once for every call of one turn, after that turn, seeing the state its callers set', async () => {
    let state = 0;
    const seen: number[] = [];
    const publish = oncePerTurn(async () => {
      seen.push(state);
      return state;
    });
    state = 1;
    const first = publish();
    state = 2;
    const second = publish();
    expect(seen).toEqual([]);
    expect(second).toBe(first);
    expect(await first).toBe(2);
    expect(seen).toEqual([2]);
  });

  it('runs again for a call made once the run has started, and passes a failure to that turn\'s callers only', async () => {
    let runs = 0;
    const publish = oncePerTurn(async () => {
      runs++;
      if (runs === 1) throw new Error('first run failed');
      return runs;
    });
    const failing = publish();
    await expect(failing).rejects.toThrow('first run failed');
    expect(await publish()).toBe(2);
    expect(runs).toBe(2);
  });
});
