import * as fs from 'node:fs';
import Redis, { RedisOptions } from 'ioredis';

/** How long the gateway waits for Redis (docs/hardening.md): a hung Redis must cost a request an error, never a hang. */
export interface RedisTimeouts {
  /** Until the TCP connection to Redis is up; a reconnect is tried again with backoff. */
  connectTimeoutMs: number;
  /** Until a command's reply: past it the command fails with "Command timed out". */
  commandTimeoutMs: number;
}

/**
 * Defaults: a session request must fail well inside Envoy's limits for the sidecar (the session
 * check's 6 s, the gateway lane's 30 s), with an answer naming Redis, rather than be cut by Envoy as
 * "sidecar unavailable"; a healthy Redis on the same
 * network answers in well under a millisecond, so 500 ms is only ever reached by a Redis in trouble.
 */
export const REDIS_TIMEOUT_DEFAULTS: RedisTimeouts = { connectTimeoutMs: 2000, commandTimeoutMs: 500 };

/**
 * Where Redis is, as the `--redis` setting of the control plane and the sidecar names it:
 * - `redis://[[user]:password@]HOST:PORT[/DB]` (or `rediss://` for TLS): one Redis, or a Service in front of the primary;
 * - `sentinel://[[user]:password@]HOST:PORT[,HOST:PORT…]/PRIMARY[/DB]`: the Sentinels that know the
 *   primary named PRIMARY (Sentinel's `monitor` name). The client asks them for the primary, and again
 *   after a failover. A password is the data nodes' and the Sentinels' alike. `sentinels://` (as
 *   `rediss://`): TLS to the Sentinels and to the data nodes they name, both checked against --redis-ca.
 */
export type RedisAddress =
  | { kind: 'url'; url: string }
  | { kind: 'sentinel'; tls: boolean; sentinels: { host: string; port: number }[]; primaryName: string; db: number; username?: string; password?: string };

export const REDIS_ADDRESS_RULE =
  'must be redis://HOST:PORT (rediss:// for TLS) or sentinel://HOST:PORT[,HOST:PORT...]/PRIMARY_NAME (sentinels:// for TLS), optionally with user:password@ and /DB';

const SENTINEL_ADDRESS = /^sentinel(s?):\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@]+)\/([^/?#]+)(?:\/(\d+))?$/;

/** Reads a Redis address; throws an Error saying what is wrong with it. */
export function parseRedisAddress(value: string): RedisAddress {
  if (/^sentinels?:\/\//.test(value)) {
    const match = SENTINEL_ADDRESS.exec(value);
    if (!match) throw new Error(REDIS_ADDRESS_RULE);
    const [, tls, username, password, hosts, primaryName, db] = match;
    const sentinels = hosts.split(',').map((entry) => {
      const hostPort = /^([^:\s]+):(\d{1,5})$/.exec(entry.trim());
      const port = Number(hostPort?.[2]);
      if (!hostPort || port < 1 || port > 65535) throw new Error(`Sentinel "${entry}" ${REDIS_ADDRESS_RULE}`);
      return { host: hostPort[1], port };
    });
    return {
      kind: 'sentinel',
      tls: tls === 's',
      sentinels,
      primaryName: decodeURIComponent(primaryName),
      db: db ? Number(db) : 0,
      ...(username ? { username: decodeURIComponent(username) } : {}),
      ...(password ? { password: decodeURIComponent(password) } : {}),
    };
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(REDIS_ADDRESS_RULE);
  }
  if ((url.protocol !== 'redis:' && url.protocol !== 'rediss:') || !url.hostname) throw new Error(REDIS_ADDRESS_RULE);
  return { kind: 'url', url: value };
}

/** The address for logs: without its password. */
export function describeRedisAddress(value: string): string {
  return value.replace(/^([a-z]+:\/\/[^:@/]*:)[^@/]*@/, '$1***@');
}

/**
 * What authenticates the gateway to Redis besides its address (docs/adr/0017-closed-inside.md): the
 * ACL user's password (from a file: never on a command line, never logged), which overrides a password
 * in the address, and the CA that a `rediss://` Redis's (or a `sentinels://` setup's) certificates must chain to.
 */
export interface RedisAuth {
  password?: string;
  tlsCaFile?: string;
}

/** Reads --redis-password-file: the file's content without a trailing newline. */
export function readRedisPassword(file: string): string {
  const password = fs.readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  if (!password) throw new Error(`the Redis password file ${file} is empty`);
  return password;
}

/**
 * After a failover the old primary becomes a replica and refuses writes (READONLY) until the client
 * has found the new one: reconnecting (and sending the command again) finds it.
 */
const reconnectOnReadOnly = (error: Error) => (error.message.startsWith('READONLY') ? 2 : false);

/**
 * Where and how to log in, as ioredis options: a redis:// or rediss:// address (the password from
 * `auth` winning over one in the address; ioredis itself would let the address's win, even an empty
 * one), or the Sentinels of a primary.
 */
export function connectionOptions(address: string, auth?: RedisAuth): RedisOptions {
  const parsed = parseRedisAddress(address);
  const tlsOptions = () => (auth?.tlsCaFile ? { ca: fs.readFileSync(auth.tlsCaFile) } : {});
  if (parsed.kind === 'sentinel') {
    const tls = parsed.tls ? tlsOptions() : undefined;
    return {
      // sentinelTLS for the Sentinels; tls with enableTLSForSentinelMode for the primary and replicas they name.
      ...(tls && { sentinelTLS: tls, tls, enableTLSForSentinelMode: true }),
      sentinels: parsed.sentinels,
      name: parsed.primaryName,
      db: parsed.db,
      username: parsed.username,
      password: auth?.password ?? parsed.password,
      sentinelUsername: parsed.username,
      sentinelPassword: auth?.password ?? parsed.password,
      // No failoverDetector: in ioredis 6.0.0 a +switch-master arriving while the client reconnects
      // ends the client for good ("Connection is closed." from then on; reproduced under load by
      // test/e2e/replicas.test.ts and bench/redis-failover.ts). It is not needed: a killed primary
      // drops the connection, and a demoted one is told by Sentinel to drop its clients (CLIENT
      // KILL TYPE normal); the reconnect asks the Sentinels, and READONLY reconnects as well.
      failoverDetector: false,
      // Ask the Sentinels again soon after a failed try: a failover takes seconds, not minutes.
      sentinelRetryStrategy: (attempt: number) => Math.min(100 * attempt, 1000),
    };
  }
  const url = new URL(parsed.url);
  const decoded = (part: string) => (part ? decodeURIComponent(part) : undefined);
  const password = auth?.password ?? decoded(url.password);
  return {
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port ? Number(url.port) : 6379,
    db: url.pathname.length > 1 ? Number(url.pathname.slice(1)) : 0,
    ...(decoded(url.username) && { username: decoded(url.username) }),
    ...(password !== undefined && { password }),
    ...(url.protocol === 'rediss:' && { tls: tlsOptions() }),
  };
}

/**
 * A Redis client that never queues: while Redis is unreachable or hung, each command fails at once or
 * after the command timeout, and the caller says what that means for its own work. With Sentinels it
 * follows the primary: it asks them at every (re)connect.
 */
export function createRedisClient(
  address: string,
  timeouts: RedisTimeouts,
  /** autoPipelining: commands of one event-loop turn go in one write (a client on every call's path). */
  options: { lazyConnect?: boolean; maxRetriesPerRequest?: number; auth?: RedisAuth; autoPipelining?: boolean } = {},
): Redis {
  const redis = new Redis({
    enableAutoPipelining: options.autoPipelining ?? false,
    ...connectionOptions(address, options.auth),
    enableOfflineQueue: false,
    connectTimeout: timeouts.connectTimeoutMs,
    commandTimeout: timeouts.commandTimeoutMs,
    maxRetriesPerRequest: options.maxRetriesPerRequest ?? 1,
    lazyConnect: options.lazyConnect ?? false,
    reconnectOnError: reconnectOnReadOnly,
  });
  redis.on('error', () => undefined); // each call reports its own failure, not every reconnect attempt
  return redis;
}

/** Whether a client follows a primary through Sentinels (then writes that must survive a failover wait for a replica). */
export const isSentinelAddress = (address: string) => parseRedisAddress(address).kind === 'sentinel';

/** Whether Redis answers a PING now; with the client's command timeout, a hung Redis is a no within that time. */
export async function redisAnswers(redis: Redis): Promise<boolean> {
  try {
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  }
}
