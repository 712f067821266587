import { ConcurrencySlots, LEASE_MARGIN_MS, LeaseReleases, inFlightRequestOf, leaseHeaderOf } from '../../control-plane/quotas/concurrency-slots';
import { redisKeyspace } from '../../control-plane/shared/redis-keys';
import { LogEntry, callLogEntrySchema } from '../../control-plane/admin/call-log';
import { TestRedis } from '../support/redis-server';
import { testDir } from '../support/gateway-fixture';
import { quietLogger } from '../support/quiet-logger';

/**
 * Per-caller concurrency slots (docs/adr/0016-quotas.md, Concurrency) in a real redis-server: taken
 * all or none, given back by the call log, lapsing when a call's end is never reported.
 */

const route = { name: 'route:demo/concurrency/per-caller', inFlight: 2 };
const service = { name: 'tool-service:jobs/concurrency/per-caller', inFlight: 1 };

describe('concurrency slots in Redis', () => {
  let redis: TestRedis;
  let slots: ConcurrencySlots;
  const keyspace = redisKeyspace('mcpgw-test:');

  beforeAll(async () => {
    redis = await TestRedis.start(testDir('concurrency-slots'));
    slots = new ConcurrencySlots(redis.client(), keyspace);
  });
  afterAll(async () => {
    slots?.close();
    await redis?.stop();
  });

  it("takes a caller's slots up to each limit, counts other callers apart, and takes none of a call over any limit", async () => {
    const first = await slots.take('address 10.0.0.1', { deadlineMs: 60_000, limits: [route] });
    const second = await slots.take('address 10.0.0.1', { deadlineMs: 60_000, limits: [route] });
    expect([first.taken, second.taken]).toEqual([true, true]);
    expect(await slots.take('address 10.0.0.1', { deadlineMs: 60_000, limits: [route] })).toEqual({ taken: false, limit: route });
    expect((await slots.take('address 10.0.0.2', { deadlineMs: 60_000, limits: [route] })).taken).toBe(true);
    // Over the route's limit: the Tool Service's slot is not taken either.
    expect(await slots.take('address 10.0.0.1', { deadlineMs: 60_000, limits: [service, route] })).toEqual({ taken: false, limit: route });
    expect((await slots.take('address 10.0.0.1', { deadlineMs: 60_000, limits: [service] })).taken).toBe(true);
  });

  it('gives a slot back when the call log reports the call ended', async () => {
    const caller = 'subject https://idp.example.com alice';
    const taken = await slots.take(caller, { deadlineMs: 60_000, limits: [service] });
    if (!taken.taken) throw new Error('not taken');
    expect((await slots.take(caller, { deadlineMs: 60_000, limits: [service] })).taken).toBe(false);
    const entry: LogEntry = callLogEntrySchema.parse({ lease: leaseHeaderOf(taken.lease) });
    new LeaseReleases(slots, quietLogger).add(entry);
    const client = redis.client();
    try {
      for (let wait = 0; wait < 50 && (await client.zcard(taken.lease.keys[0])) > 0; wait++) await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      client.disconnect();
    }
    expect((await slots.take(caller, { deadlineMs: 60_000, limits: [service] })).taken).toBe(true);
  });

  it('lets a slot whose end is never reported lapse after its deadline and margin', async () => {
    const caller = 'address 10.0.0.9';
    expect((await slots.take(caller, { deadlineMs: 1, limits: [service] })).taken).toBe(true);
    expect((await slots.take(caller, { deadlineMs: 1, limits: [service] })).taken).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 1 + LEASE_MARGIN_MS + 100));
    expect((await slots.take(caller, { deadlineMs: 1, limits: [service] })).taken).toBe(true);
  }, 15_000);

  it("never gives back what is not a lease of this gateway's keyspace", async () => {
    const taken = await slots.take('address 10.0.0.20', { deadlineMs: 60_000, limits: [service] });
    if (!taken.taken) throw new Error('not taken');
    expect(slots.leaseOf(leaseHeaderOf(taken.lease))).toEqual(taken.lease);
    expect(slots.leaseOf(leaseHeaderOf({ id: taken.lease.id, keys: ['mcpgw-test:v1:sessions:x'] }))).toBeUndefined();
    expect(slots.leaseOf('not base64 JSON')).toBeUndefined();
    expect(slots.leaseOf(undefined)).toBeUndefined();
  });
});

describe("the call script's limits, as the session check reads them", () => {
  it.each([
    ['no limits', undefined, undefined],
    ['an empty header', '', undefined],
    [
      "the route's and the Tool Service's",
      '600000;4=route:demo/concurrency/per-caller;2=tool-service:jobs/concurrency/per-caller',
      { deadlineMs: 600000, limits: [{ name: 'route:demo/concurrency/per-caller', inFlight: 4 }, { name: 'tool-service:jobs/concurrency/per-caller', inFlight: 2 }] },
    ],
    ["the tool's own, named after the tool", '30000;tool=1', { deadlineMs: 30000, limits: [{ name: 'tool:jobs/run_task/concurrency/per-caller', inFlight: 1 }] }],
    ['a deadline that is no number', 'soon;tool=1', expect.stringMatching(/deadline/)],
    ['a part that is no limit', '30000;4', expect.stringMatching(/"4" is not a concurrency limit/)],
  ])('%s', (_case, header, expected) => {
    expect(inFlightRequestOf(header, 'jobs', 'run_task')).toEqual(expected);
  });
});
