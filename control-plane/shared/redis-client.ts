import Redis from 'ioredis';

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
 * A Redis client that never queues: while Redis is unreachable or hung, each command fails at once or
 * after the command timeout, and the caller says what that means for its own work.
 */
export function createRedisClient(url: string, timeouts: RedisTimeouts, options: { lazyConnect?: boolean; maxRetriesPerRequest?: number } = {}): Redis {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    connectTimeout: timeouts.connectTimeoutMs,
    commandTimeout: timeouts.commandTimeoutMs,
    maxRetriesPerRequest: options.maxRetriesPerRequest ?? 1,
    lazyConnect: options.lazyConnect ?? false,
  });
  redis.on('error', () => undefined); // each call reports its own failure, not every reconnect attempt
  return redis;
}

/** Whether Redis answers a PING now; with the client's command timeout, a hung Redis is a no within that time. */
export async function redisAnswers(redis: Redis): Promise<boolean> {
  try {
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  }
}
