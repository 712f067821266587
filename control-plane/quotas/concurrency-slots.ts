import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { z } from 'zod';
import { CallLogConsumer, LogEntry } from '../admin/call-log';
import { toolConcurrencyName } from '../ir/quotas-ir';
import { Logger } from '../shared/log';

/**
 * Per-caller concurrency limits (docs/adr/0016-quotas.md, Concurrency): each caller's tools/call in
 * flight at once, counted in Redis across every Envoy and sidecar replica. The session check takes a
 * call's slots before Envoy sends it (take); Envoy's call log reports the call's end, whatever ended
 * it, and the control plane gives the slots back (release). A slot is a lease: a member of one sorted
 * set per (limit, caller), scored with the moment it lapses (the call's deadline and a margin), so a
 * call whose end is never reported (an Envoy or the control plane lost meanwhile) stops counting then,
 * and a sidecar or control plane restart loses nothing (the sets are Redis's).
 */

/** One limit a call is under: its name (the client sees it) and the calls each caller may have in flight. */
export interface InFlightLimit {
  name: string;
  inFlight: number;
}

/** What the call script asks for (M.in_flight_limits in call-lane.lua): the call's deadline and limits. */
export interface InFlightRequest {
  deadlineMs: number;
  limits: InFlightLimit[];
}

/** Past the call's deadline a lease lapses after this margin: Envoy's report of its end is normally long there. */
export const LEASE_MARGIN_MS = 5_000;

const LIMIT_PART = /^([1-9][0-9]{0,5})=(.+)$/;
const TOOL_PART = /^tool=([1-9][0-9]{0,5})$/;

/**
 * The script's `<deadline ms>;<in flight>=<name>;…[;tool=<in flight>]` (route and Tool Service names
 * hold no ";"), the tool's own limit named after the tool. Undefined: the call is under no such limit;
 * a string: why the value is not one the script writes.
 */
export function inFlightRequestOf(header: string | undefined, toolServiceId: string, tool: string): InFlightRequest | undefined | string {
  if (header === undefined || header === '') return undefined;
  const [deadline, ...parts] = header.split(';');
  const deadlineMs = Number(deadline);
  if (!Number.isInteger(deadlineMs) || deadlineMs <= 0) return `the call's deadline "${deadline}" is not a number of ms`;
  const limits: InFlightLimit[] = [];
  for (const part of parts) {
    const own = TOOL_PART.exec(part);
    const named = own ? undefined : LIMIT_PART.exec(part);
    if (own) limits.push({ name: toolConcurrencyName(toolServiceId, tool), inFlight: Number(own[1]) });
    else if (named) limits.push({ name: named[2], inFlight: Number(named[1]) });
    else return `"${part}" is not a concurrency limit`;
  }
  return limits.length > 0 ? { deadlineMs, limits } : undefined;
}

/**
 * Takes a slot of every limit, or none: for each sorted set, lapsed leases go first; past any limit,
 * nothing is taken and its place (1-based) is returned; otherwise the lease joins every set, each set
 * living at least as long as its newest lease. Redis's clock decides, the same for every replica.
 * KEYS: one set per limit. ARGV: lease id, lease ms, then each set's limit.
 */
const TAKE_SCRIPT = `
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
  if redis.call('ZCARD', key) >= tonumber(ARGV[i + 2]) then return i end
end
local lease_ms = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now_ms + lease_ms, ARGV[1])
  if redis.call('PTTL', key) < lease_ms then redis.call('PEXPIRE', key, lease_ms) end
end
return 0`;

/** The slots a call holds, as the lease header carries them to Envoy's metadata and back in the call log. */
const leaseSchema = z.object({ id: z.string().min(1).max(64), keys: z.array(z.string().min(1).max(2048)).min(1).max(16) }).strict();
export type Lease = z.output<typeof leaseSchema>;

export const leaseHeaderOf = (lease: Lease) => Buffer.from(JSON.stringify(lease)).toString('base64url');

const slotKeyPrefix = (keyspace: string) => `${keyspace}in-flight:`;

export type TakeResult = { taken: true; lease: Lease } | { taken: false; limit: InFlightLimit };

type SlotsRedis = Redis & { takeSlots(...args: (string | number)[]): Promise<number> };

export class ConcurrencySlots {
  private readonly redis: SlotsRedis;

  constructor(redis: Redis, private readonly keyspace: string) {
    redis.defineCommand('takeSlots', { lua: TAKE_SCRIPT });
    this.redis = redis as SlotsRedis;
  }

  /** The set of one limit's slots of one caller (the caller as the check knows it: subject or address). */
  private keyOf(limit: InFlightLimit, caller: string): string {
    return `${slotKeyPrefix(this.keyspace)}${limit.name}\n${caller}`;
  }

  async take(caller: string, request: InFlightRequest): Promise<TakeResult> {
    const keys = request.limits.map((limit) => this.keyOf(limit, caller));
    const id = randomUUID();
    const refused = await this.redis.takeSlots(keys.length, ...keys, id, request.deadlineMs + LEASE_MARGIN_MS, ...request.limits.map((limit) => limit.inFlight));
    if (refused > 0) return { taken: false, limit: request.limits[refused - 1] };
    return { taken: true, lease: { id, keys } };
  }

  /** A lease as the call log reports it, or undefined for anything that is not one of this keyspace's. */
  leaseOf(header: unknown): Lease | undefined {
    if (typeof header !== 'string') return undefined;
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(header, 'base64url').toString('utf8'));
    } catch {
      return undefined;
    }
    const lease = leaseSchema.safeParse(parsed);
    const prefix = slotKeyPrefix(this.keyspace);
    return lease.success && lease.data.keys.every((key) => key.startsWith(prefix)) ? lease.data : undefined;
  }

  /** Gives back the slots of calls that ended: one round trip for a whole batch of the call log. */
  async release(leases: Lease[]): Promise<void> {
    const pipeline = this.redis.pipeline();
    for (const lease of leases) for (const key of lease.keys) pipeline.zrem(key, lease.id);
    await pipeline.exec();
  }

  close(): void {
    this.redis.disconnect();
  }
}

/**
 * The call log's reader of leases (control-plane/xds/translate/listener.ts): every call that held
 * slots, once it ended, gives them back. Without Redis (no --redis), or while it cannot be asked, the
 * slots lapse only at their lease's end: warned, at most every WARNING_INTERVAL_MS.
 */
export class LeaseReleases implements CallLogConsumer {
  private lastWarningAt = -Infinity;
  /** Leases of the entries of the message being read: given back together once it is read. */
  private pending: Lease[] = [];

  constructor(
    private readonly slots: Pick<ConcurrencySlots, 'release' | 'leaseOf'> | undefined,
    private readonly log: Logger,
  ) {}

  add(entry: LogEntry): void {
    const header = entry.lease;
    if (header == null) return;
    if (!this.slots) return this.warn('a call that held concurrency slots ended, but the control plane has no --redis to give them back: they lapse at their deadline');
    const lease = this.slots.leaseOf(header);
    if (!lease) return this.warn('the call log reported a lease that is not one of this gateway\'s: ignored');
    if (this.pending.push(lease) === 1) queueMicrotask(() => this.releasePending());
  }

  private releasePending(): void {
    const leases = this.pending;
    this.pending = [];
    this.slots!.release(leases).catch((error: Error) => this.warn('concurrency slots could not be given back (Redis): they lapse at their deadline', error));
  }

  private warn(message: string, error?: Error): void {
    const now = performance.now();
    if (now - this.lastWarningAt < WARNING_INTERVAL_MS) return;
    this.lastWarningAt = now;
    this.log.warn(message, error && { error: error.message });
  }
}

const WARNING_INTERVAL_MS = 10_000;
