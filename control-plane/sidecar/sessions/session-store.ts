import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { z } from 'zod';

/**
 * A client's MCP session with the gateway (docs/adr/0004-sessions.md). Each stateful backend of the
 * route gets its own session lazily, on the first call that reaches it, so a backend that was down at
 * initialize joins when it comes back.
 */
export interface GatewaySession {
  id: string;
  route: string;
  protocolVersion: string;
  /** What the client declared at initialize; replayed to each backend's initialize. */
  clientInfo: Record<string, unknown>;
  clientCapabilities: Record<string, unknown>;
  /** Backend name → that backend's Mcp-Session-Id ("" for a backend that runs stateless). */
  backends: Record<string, string>;
}

export interface SessionStore {
  create(session: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession>;
  /** undefined for an unknown, expired or forged id. */
  get(id: string): Promise<GatewaySession | undefined>;
  /** Records a backend session unless one was recorded meanwhile; returns the one that counts. */
  claimBackend(id: string, backend: string, backendSessionId: string): Promise<string>;
  /** Drops a backend session the backend no longer knows, unless another one was recorded meanwhile. */
  forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void>;
  remove(id: string): Promise<void>;
  close(): Promise<void>;
}

/** 192 random bits: unguessable, so a forged id is simply not found. */
export const newSessionId = () => randomBytes(24).toString('base64url');
const SESSION_ID_PATTERN = /^[A-Za-z0-9_-]{32}$/;

const storedSessionSchema = z.object({
  route: z.string(),
  protocolVersion: z.string(),
  clientInfo: z.string().transform((json) => JSON.parse(json) as Record<string, unknown>),
  clientCapabilities: z.string().transform((json) => JSON.parse(json) as Record<string, unknown>),
});

const BACKEND_FIELD = 'backend:';

/** Compare-and-delete, so two replicas recovering the same backend session cannot drop each other's new one. */
const FORGET_IF_UNCHANGED = `if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0`;

/**
 * Sessions in Redis: shared by every sidecar replica and kept across sidecar restarts. One hash per
 * session, idle-expiring: each use pushes the expiry back.
 */
export class RedisSessionStore implements SessionStore {
  private readonly redis: Redis;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly idleTtlSeconds: number,
  ) {
    // No offline queue: while Redis is unreachable a session request fails at once, within Envoy's
    // ext_proc message timeout, and the client is told why (docs/errors.md).
    this.redis = new Redis(url, { maxRetriesPerRequest: 2, connectTimeout: 2000, enableOfflineQueue: false });
    this.redis.on('error', () => undefined); // each call reports its own failure
  }

  /** Resolves once Redis is connected, or false after timeoutMs: requests are not queued while it is not. */
  connected(timeoutMs: number): Promise<boolean> {
    if (this.redis.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.redis.once('ready', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** What a Redis failure means to the client: no session can be opened, found or ended now. */
  private async guarded<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw new Error(`session store (Redis) unavailable: ${(error as Error).message}`);
    }
  }

  private key(id: string): string {
    return `${this.prefix}session:${id}`;
  }

  async create(fields: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession> {
    return this.guarded(async () => {
      const session: GatewaySession = { ...fields, id: newSessionId(), backends: {} };
      await this.redis
        .multi()
        .hset(this.key(session.id), {
          route: session.route,
          protocolVersion: session.protocolVersion,
          clientInfo: JSON.stringify(session.clientInfo),
          clientCapabilities: JSON.stringify(session.clientCapabilities),
        })
        .expire(this.key(session.id), this.idleTtlSeconds)
        .exec();
      return session;
    });
  }

  async get(id: string): Promise<GatewaySession | undefined> {
    return this.guarded(async () => {
      if (!SESSION_ID_PATTERN.test(id)) return undefined;
      const [[, fields]] = (await this.redis.multi().hgetall(this.key(id)).expire(this.key(id), this.idleTtlSeconds).exec()) as [
        [Error | null, Record<string, string>],
      ];
      const parsed = storedSessionSchema.safeParse(fields);
      if (!parsed.success) return undefined;
      const backends = Object.fromEntries(
        Object.entries(fields)
          .filter(([field]) => field.startsWith(BACKEND_FIELD))
          .map(([field, value]) => [field.slice(BACKEND_FIELD.length), value]),
      );
      return { id, ...parsed.data, backends };
    });
  }

  async claimBackend(id: string, backend: string, backendSessionId: string): Promise<string> {
    return this.guarded(async () => {
      const field = `${BACKEND_FIELD}${backend}`;
      await this.redis.hsetnx(this.key(id), field, backendSessionId);
      return (await this.redis.hget(this.key(id), field)) ?? backendSessionId;
    });
  }

  async forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.eval(FORGET_IF_UNCHANGED, 1, this.key(id), `${BACKEND_FIELD}${backend}`, staleBackendSessionId);
    });
  }

  async remove(id: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.del(this.key(id));
    });
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

/** For a single sidecar without Redis: sessions live and die with the process. */
export class MemorySessionStore implements SessionStore {
  private readonly sessions = new Map<string, { session: GatewaySession; expiresAt: number }>();

  constructor(private readonly idleTtlSeconds: number) {}

  async create(fields: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession> {
    const session: GatewaySession = { ...fields, id: newSessionId(), backends: {} };
    this.sessions.set(session.id, { session, expiresAt: Date.now() + this.idleTtlSeconds * 1000 });
    return session;
  }

  async get(id: string): Promise<GatewaySession | undefined> {
    const entry = this.sessions.get(id);
    if (!entry || entry.expiresAt < Date.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    entry.expiresAt = Date.now() + this.idleTtlSeconds * 1000;
    return { ...entry.session, backends: { ...entry.session.backends } };
  }

  async claimBackend(id: string, backend: string, backendSessionId: string): Promise<string> {
    const session = this.sessions.get(id)?.session;
    if (!session) return backendSessionId;
    session.backends[backend] ??= backendSessionId;
    return session.backends[backend];
  }

  async forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void> {
    const session = this.sessions.get(id)?.session;
    if (session?.backends[backend] === staleBackendSessionId) delete session.backends[backend];
  }

  async remove(id: string): Promise<void> {
    this.sessions.delete(id);
  }

  async close(): Promise<void> {
    this.sessions.clear();
  }
}
