import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { envoyStat, listedTools, metricValue, startGateway } from '../support/gateway-fixture';
import { clientFrom, refusal } from '../support/callers';
import { HoldingToolService } from '../support/holding-tool-service';

/**
 * Per-caller concurrency limits (docs/quotas.md, docs/adr/0016-quotas.md "Concurrency"), through the
 * real Envoy, sidecar, control plane and Redis, with real MCP SDK clients and a Tool Service whose
 * tool `hold` answers only when the test releases it. Callers are told apart by their address (the
 * routes have no auth): A comes from 127.0.0.1, B from 127.0.0.2.
 */

const A = '127.0.0.1';
const B = '127.0.0.2';

type Caller = Awaited<ReturnType<typeof clientFrom>>;

/**
 * `count` calls of `hold` by one caller, once the Tool Service began every one of them; each call's
 * promise settles when it is released (or cut), never throws.
 */
async function holdCalls(holding: HoldingToolService, caller: Caller, count: number) {
  const startedBefore = holding.started;
  const calls = Array.from({ length: count }, (_, index) =>
    caller.client.callTool({ name: 'holding__hold', arguments: { tag: `held ${index}` } }, undefined, { timeout: 60_000 }).then(
      (result) => result.content,
      (error: Error) => error,
    ),
  );
  await waitFor(`${count} calls held by the Tool Service`, async () => (holding.started === startedBefore + count ? true : undefined));
  return calls;
}

/** Concurrency slots taken now, in the gateway's Redis: every caller's, of every limit. */
async function slotsTaken(stack: GatewayStack): Promise<number> {
  const redis = stack.redisClient();
  try {
    let taken = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', '*in-flight:*', 'COUNT', 1000);
      for (const key of keys) taken += await redis.zcard(key);
      cursor = next;
    } while (cursor !== '0');
    return taken;
  } finally {
    redis.disconnect();
  }
}

const allSlotsGivenBack = (stack: GatewayStack) =>
  waitFor('every concurrency slot given back', async () => ((await slotsTaken(stack)) === 0 ? true : undefined), { timeoutMs: 5_000 });

describe('per-caller concurrency limits', () => {
  let stack: GatewayStack;
  let holding: HoldingToolService;

  beforeAll(async () => {
    holding = await HoldingToolService.start();
    ({ stack } = await startGateway('quotas-concurrency', () => ({
      routes: [
        { key: 'route-two', quotas: { concurrency: { perCaller: 2 } }, toolServices: [{ id: 'holding-route', name: 'holding', url: holding.url }] },
        { key: 'service-one', toolServices: [{ id: 'holding-one', name: 'holding', url: holding.url, quotas: { concurrency: { perCaller: 1 } } }] },
        {
          key: 'tool-one',
          toolServices: [{ id: 'holding-tools', name: 'holding', url: holding.url, quotas: { tools: [{ tools: ['hold'], concurrency: { perCaller: 1 } }] } }],
        },
      ],
    })));
    for (const route of ['route-two', 'service-one', 'tool-one']) {
      await waitFor(`route ${route} to serve tools`, async () => ((await listedTools(stack.gatewayUrl(route)))?.length ? true : undefined));
    }
  });
  afterAll(async () => {
    holding?.releaseAll();
    await stack?.stop();
    await holding?.stop();
  });
  // Each test starts with every slot free: the last calls of the test before give theirs back only when
  // the call log reports their end (within its flush interval), which can be after the test has ended.
  afterEach(async () => {
    holding.releaseAll();
    await allSlotsGivenBack(stack);
  });

  it("refuses caller A's call past its 2 calls in flight with 429 and -32029 naming the limit, serves caller B meanwhile, and serves A again once its calls ended", async () => {
    const url = stack.gatewayUrl('route-two');
    const [a, b] = await Promise.all([clientFrom(url, A), clientFrom(url, B)]);
    try {
      const held = await holdCalls(holding, a, 2);

      const refused = await refusal(a.client.callTool({ name: 'holding__echo', arguments: { text: 'third' } }));
      expect(refused.status).toBe(429);
      expect(refused.error).toMatchObject({
        code: -32029,
        message: expect.stringContaining('route:route-two/concurrency/per-caller'),
        data: { outcome: 'limited', limit: 'route:route-two/concurrency/per-caller', in_flight_limit: 2, retry_after_s: 1, backend: 'holding', tool: 'echo' },
      });
      // The same route, another caller: its own slots.
      expect((await b.client.callTool({ name: 'holding__echo', arguments: { text: 'B goes on' } })).content).toEqual([{ type: 'text', text: 'B goes on' }]);

      holding.releaseAll();
      expect(await Promise.all(held)).toEqual([[{ type: 'text', text: 'released held 0' }], [{ type: 'text', text: 'released held 1' }]]);
      // The call log sends the ends of calls that held slots within 50 ms: A's slots are back soon.
      await allSlotsGivenBack(stack);
      const again = await holdCalls(holding, a, 2);
      holding.releaseAll();
      await Promise.all(again);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('gives back the slots of calls whose client went away mid-call, while the Tool Service still holds them', async () => {
    const url = stack.gatewayUrl('route-two');
    const gone = await clientFrom(url, A);
    const held = await holdCalls(holding, gone, 2);
    const waiting = await clientFrom(url, A);
    try {
      expect((await refusal(waiting.client.callTool({ name: 'holding__echo', arguments: { text: 'full' } }))).status).toBe(429);
      // A's connections cut with both calls in flight: Envoy logs each call's end (downstream reset).
      await gone.cut();
      await allSlotsGivenBack(stack);
      // Both slots: two calls fit again.
      const again = await holdCalls(holding, waiting, 2);
      holding.releaseAll();
      expect((await Promise.all(again)).every((content) => Array.isArray(content))).toBe(true);
    } finally {
      // The cut client's calls fail (or time out) on their own: they are not waited for.
      await Promise.all([waiting.close(), gone.client.close()]);
      void Promise.all(held);
    }
  });

  it('gives back the slot of a call Envoy timed out, and those of calls held while the sidecar restarted', async () => {
    const url = stack.gatewayUrl('route-two');
    const a = await clientFrom(url, A);
    try {
      // Envoy ends the call at the tool's 500 ms deadline (the answer had begun: the stream is cut).
      const timedOut = await a.client.callTool({ name: 'holding__hold_briefly', arguments: { tag: 'too long' } }, undefined, { timeout: 5_000 }).then(
        () => undefined,
        (error: Error) => error,
      );
      expect(timedOut).toBeInstanceOf(Error);
      // The Tool Service may still hold it (nothing tells it the call ended): released here.
      holding.releaseAll();
      await allSlotsGivenBack(stack);

      const held = await holdCalls(holding, a, 2);
      await stack.stopProcess('sidecar');
      await stack.startSidecar();
      holding.releaseAll();
      await Promise.all(held);
      await allSlotsGivenBack(stack);
      // A's session lives in Redis: the restarted sidecar checks its next calls, both slots free.
      const again = await holdCalls(holding, a, 2);
      holding.releaseAll();
      await Promise.all(again);
    } finally {
      await a.close();
    }
  });

  it("limits each caller's calls in flight to a Tool Service, apart from other callers", async () => {
    const url = stack.gatewayUrl('service-one');
    const [a, b] = await Promise.all([clientFrom(url, A), clientFrom(url, B)]);
    try {
      const held = await holdCalls(holding, a, 1);
      const refused = await refusal(a.client.callTool({ name: 'holding__echo', arguments: { text: 'second' } }));
      expect(refused.status).toBe(429);
      expect(refused.error).toMatchObject({ code: -32029, data: { limit: 'tool-service:holding-one/concurrency/per-caller', in_flight_limit: 1 } });
      expect((await b.client.callTool({ name: 'holding__echo', arguments: { text: 'B' } })).content).toEqual([{ type: 'text', text: 'B' }]);
      holding.releaseAll();
      await Promise.all(held);
      await allSlotsGivenBack(stack);
      expect((await a.client.callTool({ name: 'holding__echo', arguments: { text: 'A' } })).content).toEqual([{ type: 'text', text: 'A' }]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("limits each caller's calls in flight of a tool, leaving the Tool Service's other tools alone", async () => {
    const url = stack.gatewayUrl('tool-one');
    const a = await clientFrom(url, A);
    try {
      const held = await holdCalls(holding, a, 1);
      const refused = await refusal(a.client.callTool({ name: 'holding__hold', arguments: { tag: 'second' } }));
      expect(refused.error).toMatchObject({ code: -32029, data: { limit: 'tool:holding-tools/hold/concurrency/per-caller', tool: 'hold' } });
      expect((await a.client.callTool({ name: 'holding__echo', arguments: { text: 'other tool' } })).content).toEqual([{ type: 'text', text: 'other tool' }]);
      holding.releaseAll();
      await Promise.all(held);
    } finally {
      await a.close();
    }
  });

  it("sends the records of calls that held slots in the call log's quick batches and every other in its slower ones, each call once", async () => {
    const batched = async () => ({
      leased: await envoyStat(stack, 'access_logs.fluentd.mcpgw_leased_calls.entries_buffered'),
      others: await envoyStat(stack, 'access_logs.fluentd.mcpgw_calls.entries_buffered'),
      counted: await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'route-two' }),
    });
    const before = await batched();
    const a = await clientFrom(stack.gatewayUrl('route-two'), A);
    try {
      const held = await holdCalls(holding, a, 2);
      // Past the limit: refused by the session check, which took no slot.
      expect((await refusal(a.client.callTool({ name: 'holding__echo', arguments: { text: 'third' } }))).status).toBe(429);
      holding.releaseAll();
      await Promise.all(held);
    } finally {
      await a.close();
    }
    await waitFor('the three calls counted', async () => ((await batched()).counted - before.counted >= 3 ? true : undefined));
    // Longer than the slower batch's interval: a record sent by both loggers would have been counted twice by now.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const after = await batched();
    expect({ leased: after.leased - before.leased, others: after.others - before.others, counted: after.counted - before.counted }).toEqual({ leased: 2, others: 1, counted: 3 });
  });

  it('counts the refusals as limited in the call metrics and by their limit, and leaves no slot taken', async () => {
    await waitFor('the call log to report the refusals', async () =>
      (await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'tool-one' })) >= 1 ? true : undefined,
    );
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'route-two', lane: 'calls', limit: 'route:route-two/concurrency/per-caller' })).toBeGreaterThanOrEqual(2);
    expect(await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'service-one', lane: 'calls', limit: 'tool-service:holding-one/concurrency/per-caller' })).toBeGreaterThanOrEqual(1);
    expect(await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'service-one', backend: 'holding', outcome: 'limited' })).toBeGreaterThanOrEqual(1);
    // Every call of the tests above ended: no lease is left in Redis.
    await allSlotsGivenBack(stack);
  });
});
