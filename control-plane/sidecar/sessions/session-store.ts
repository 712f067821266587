import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { z } from 'zod';
import { REDIS_TIMEOUT_DEFAULTS, RedisAuth, RedisTimeouts, createRedisClient, redisAnswers } from '../../shared/redis-client';

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
  /** The level the client set with logging/setLevel; every backend session opened later gets it too. */
  logLevel?: string;
  /**
   * The caller that opened it (issuer and subject of its token, docs/auth.md); absent for a session
   * opened without a token. Only the same owner may use it: anyone else gets 404, as for an unknown id.
   */
  owner?: string;
}

export interface SessionStore {
  /** Rejects with ClientFieldsTooLargeError when the client's declaration is over the limit; nothing is stored then. */
  create(session: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession>;
  /**
   * undefined for an unknown, expired or forged id. `fresh`: read from the source of truth, not from a
   * copy another replica may have changed since (a backend session it opened).
   */
  get(id: string, options?: { fresh?: boolean }): Promise<GatewaySession | undefined>;
  /**
   * Records a backend session unless one was recorded meanwhile; returns the one that counts, and
   * pushes the session's idle expiry back. Rejects with SessionGoneError when the gateway session ended
   * (DELETE or expiry) meanwhile: nothing is recorded then, and the backend session just opened is
   * the caller's to close (claimOpenedBackendSession does both).
   */
  claimBackend(id: string, backend: string, backendSessionId: string): Promise<string>;
  /** Drops a backend session the backend no longer knows, unless another one was recorded meanwhile. */
  forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void>;
  /** Records the client's logging/setLevel; nothing when the session ended meanwhile. */
  setLogLevel(id: string, level: string): Promise<void>;
  /**
   * Records a request a backend sent the client of this session (its own id as raw JSON), so that the
   * client's answer to it is taken once; nothing when the session ended meanwhile.
   */
  expectAnswer(id: string, backend: string, requestId: string): Promise<void>;
  /** Whether that request was outstanding; it is not any more. */
  takeAnswer(id: string, backend: string, requestId: string): Promise<boolean>;
  remove(id: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Word of a gateway session whose backend sessions changed (one recorded or forgotten) or that ended,
 * on any replica: the replica holding the client's GET stream listens in a new backend session at
 * once, before the backend's first requests there (docs/adr/0018-stream-relaying.md).
 */
export interface SessionChanges {
  onChanged(listener: (id: string) => void): void;
}

/** Listeners of SessionChanges, told in the order they came. */
export class ChangeListeners implements SessionChanges {
  private readonly listeners: ((id: string) => void)[] = [];

  onChanged(listener: (id: string) => void): void {
    this.listeners.push(listener);
  }

  tell(id: string): void {
    for (const listener of this.listeners) listener(id);
  }
}

/** Bounds on what one client makes the gateway store (docs/hardening.md). */
export interface SessionLimits {
  /**
   * Most bytes of `initialize`'s params.clientInfo and params.capabilities together, as JSON: both are
   * kept for the session's whole life, to replay to each backend's initialize.
   */
  maxClientFieldsBytes: number;
}

/**
 * 16 KiB: a client's clientInfo and capabilities take a few hundred bytes, and with the idle TTL this
 * bounds what one initialize can make Redis hold.
 */
export const SESSION_DEFAULTS: SessionLimits = { maxClientFieldsBytes: 16_384 };

/** An initialize the gateway refuses to store: the sidecar answers it with JSON-RPC -32602 and this message. */
export class ClientFieldsTooLargeError extends Error {
  constructor(
    readonly limitBytes: number,
    readonly actualBytes: number,
  ) {
    super(
      `initialize params.clientInfo and params.capabilities take ${actualBytes} bytes as JSON; the gateway stores at most ${limitBytes} bytes of them per session`,
    );
  }
}

/** The gateway session ended (DELETE or idle expiry) while a backend session was being opened for it. */
export class SessionGoneError extends Error {
  constructor(readonly sessionId: string) {
    super('the gateway session ended while a backend session was being opened for it');
  }
}

function checkClientFields(fields: Omit<GatewaySession, 'id' | 'backends'>, limits: SessionLimits): { clientInfo: string; clientCapabilities: string } {
  const clientInfo = JSON.stringify(fields.clientInfo);
  const clientCapabilities = JSON.stringify(fields.clientCapabilities);
  const bytes = Buffer.byteLength(clientInfo) + Buffer.byteLength(clientCapabilities);
  if (bytes > limits.maxClientFieldsBytes) throw new ClientFieldsTooLargeError(limits.maxClientFieldsBytes, bytes);
  return { clientInfo, clientCapabilities };
}

/** 192 random bits: unguessable, so a forged id is simply not found. */
export const newSessionId = () => randomBytes(24).toString('base64url');
const SESSION_ID_PATTERN = /^[A-Za-z0-9_-]{32}$/;

const storedSessionSchema = z.object({
  route: z.string(),
  protocolVersion: z.string(),
  owner: z.string().optional(),
  clientInfo: z.string().transform((json) => JSON.parse(json) as Record<string, unknown>),
  clientCapabilities: z.string().transform((json) => JSON.parse(json) as Record<string, unknown>),
  logLevel: z.string().optional(),
});

const BACKEND_FIELD = 'backend:';
/** A request a backend sent the client, awaiting the client's answer: `answer:<backend>:<its own id as JSON>`. */
const answerField = (backend: string, requestId: string) => `answer:${backend}:${requestId}`;

/** Sets a field only while the session exists, so an ended session is not re-created without its TTL. */
const SET_IF_SESSION_EXISTS = `if redis.call('HEXISTS', KEYS[1], 'route') == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end return 0`;

/** Compare-and-delete, so two replicas recovering the same backend session cannot drop each other's new one. */
const FORGET_IF_UNCHANGED = `if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0`;

/**
 * Claims only while the session exists (its route field is there), and refreshes its idle expiry in
 * the same step: a DELETE or an expiry between a call's session lookup and this claim must not
 * re-create the hash without a TTL. Answers the backend session that counts, or nil when the session is gone.
 */
const CLAIM_IF_SESSION_EXISTS = `
if redis.call('HEXISTS', KEYS[1], 'route') == 0 then return false end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return redis.call('HGET', KEYS[1], ARGV[1])`;

/** Records an outstanding request only while the session exists (as CLAIM_IF_SESSION_EXISTS does). */
const EXPECT_IF_SESSION_EXISTS = `
if redis.call('HEXISTS', KEYS[1], 'route') == 0 then return 0 end
return redis.call('HSET', KEYS[1], ARGV[1], '1')`;

export interface RedisSessionStoreOptions extends Partial<SessionLimits>, Partial<RedisTimeouts> {
  url: string;
  auth?: RedisAuth;
  prefix: string;
  idleTtlSeconds: number;
  /**
   * Replicas that must hold a new session before initialize is answered (Redis `WAIT`): Redis
   * replicates asynchronously, and a primary that fails right after a write takes it along. 0: none.
   */
  waitReplicas?: number;
  /**
   * Told when new sessions stop being acknowledged by enough replicas (`acknowledged` < waitReplicas),
   * and when they are again (`acknowledged` >= waitReplicas): once per change, not per session.
   */
  onReplication?: (acknowledged: number) => void;
}

/**
 * How long a new session waits for its replicas. Replication on one network takes well under a
 * millisecond; past this the replica is down or far behind, and the session is served anyway (and
 * reported): refusing every new session because a replica is down would make it a point of failure.
 */
export const REPLICA_WAIT_MS = 200;
/**
 * After a WAIT that fell short, new sessions skip WAIT for this long before trying again: while no
 * replica is there (e.g. right after a failover, until the old primary returns as a replica) each
 * initialize would otherwise pay REPLICA_WAIT_MS.
 */
export const REPLICA_RETRY_AFTER_MS = 5_000;

/**
 * Sessions in Redis: shared by every sidecar replica and kept across sidecar restarts. One hash per
 * session, idle-expiring: each use pushes the expiry back.
 */
export class RedisSessionStore implements SessionStore {
  private readonly redis: Redis;
  private readonly prefix: string;
  private readonly idleTtlSeconds: number;
  private readonly limits: SessionLimits;
  /**
   * New sessions are written on a connection of their own: WAIT blocks the connection it is sent on
   * (and counts only that connection's writes), and the session check's reads must never queue behind it.
   */
  private readonly writer: Redis;
  private readonly waitReplicas: number;
  private readonly onReplication: (acknowledged: number) => void;
  /** performance.now() until which new sessions skip WAIT (replicas were missing); 0: WAIT. */
  private replicasMissingUntil = 0;

  constructor(options: RedisSessionStoreOptions) {
    this.prefix = options.prefix;
    this.waitReplicas = options.waitReplicas ?? 0;
    this.onReplication = options.onReplication ?? (() => undefined);
    this.idleTtlSeconds = options.idleTtlSeconds;
    this.limits = { maxClientFieldsBytes: options.maxClientFieldsBytes ?? SESSION_DEFAULTS.maxClientFieldsBytes };
    // While Redis is unreachable or hung a session request fails at once or after the command timeout,
    // well within Envoy's timeouts for the sidecar, and the client is told why (docs/errors.md).
    this.redis = this.connection(options);
    this.writer = this.waitReplicas > 0 ? this.connection(options) : this.redis;
  }

  private connection(options: RedisSessionStoreOptions): Redis {
    return createRedisClient(
      options.url,
      {
        connectTimeoutMs: options.connectTimeoutMs ?? REDIS_TIMEOUT_DEFAULTS.connectTimeoutMs,
        commandTimeoutMs: options.commandTimeoutMs ?? REDIS_TIMEOUT_DEFAULTS.commandTimeoutMs,
      },
      { maxRetriesPerRequest: 2, auth: options.auth },
    );
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

  /** Whether Redis answers now (mcpgw_redis_up). */
  answers(): Promise<boolean> {
    return redisAnswers(this.redis);
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
    const stored = checkClientFields(fields, this.limits);
    return this.guarded(async () => {
      const session: GatewaySession = { ...fields, id: newSessionId(), backends: {} };
      await this.writer
        .multi()
        .hset(this.key(session.id), { route: session.route, protocolVersion: session.protocolVersion, ...(session.owner !== undefined && { owner: session.owner }), ...stored })
        .expire(this.key(session.id), this.idleTtlSeconds)
        .exec();
      await this.untilReplicated();
      return session;
    });
  }

  /** WAIT for the replicas, unless they were found missing a moment ago; reports each change of that. */
  private async untilReplicated(): Promise<void> {
    if (this.waitReplicas === 0 || performance.now() < this.replicasMissingUntil) return;
    const acknowledged = await this.writer.wait(this.waitReplicas, REPLICA_WAIT_MS);
    const missing = acknowledged < this.waitReplicas;
    if (missing !== this.replicasMissingUntil > 0) this.onReplication(acknowledged);
    this.replicasMissingUntil = missing ? performance.now() + REPLICA_RETRY_AFTER_MS : 0;
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
    const counted = await this.guarded(
      () => this.redis.eval(CLAIM_IF_SESSION_EXISTS, 1, this.key(id), `${BACKEND_FIELD}${backend}`, backendSessionId, this.idleTtlSeconds) as Promise<string | null>,
    );
    if (counted === null) throw new SessionGoneError(id);
    return counted;
  }

  async forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.eval(FORGET_IF_UNCHANGED, 1, this.key(id), `${BACKEND_FIELD}${backend}`, staleBackendSessionId);
    });
  }

  async setLogLevel(id: string, level: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.eval(SET_IF_SESSION_EXISTS, 1, this.key(id), 'logLevel', level);
    });
  }

  async expectAnswer(id: string, backend: string, requestId: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.eval(EXPECT_IF_SESSION_EXISTS, 1, this.key(id), answerField(backend, requestId));
    });
  }

  async takeAnswer(id: string, backend: string, requestId: string): Promise<boolean> {
    return this.guarded(async () => (await this.redis.hdel(this.key(id), answerField(backend, requestId))) === 1);
  }

  async remove(id: string): Promise<void> {
    return this.guarded(async () => {
      await this.redis.del(this.key(id));
    });
  }

  async close(): Promise<void> {
    this.redis.disconnect();
    this.writer.disconnect();
  }
}

/** For a single sidecar without Redis: sessions live and die with the process. */
export class MemorySessionStore implements SessionStore, SessionChanges {
  private readonly sessions = new Map<string, { session: GatewaySession; expiresAt: number; awaitingAnswers: Set<string> }>();
  private readonly changes = new ChangeListeners();

  constructor(
    private readonly idleTtlSeconds: number,
    private readonly limits: SessionLimits = SESSION_DEFAULTS,
  ) {}

  async create(fields: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession> {
    checkClientFields(fields, this.limits);
    const session: GatewaySession = { ...fields, id: newSessionId(), backends: {} };
    this.sessions.set(session.id, { session, expiresAt: Date.now() + this.idleTtlSeconds * 1000, awaitingAnswers: new Set() });
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
    const entry = this.sessions.get(id);
    if (!entry || entry.expiresAt < Date.now()) throw new SessionGoneError(id);
    const { session } = entry;
    entry.expiresAt = Date.now() + this.idleTtlSeconds * 1000;
    session.backends[backend] ??= backendSessionId;
    if (session.backends[backend] === backendSessionId) this.changes.tell(id);
    return session.backends[backend];
  }

  async forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void> {
    const session = this.sessions.get(id)?.session;
    if (session?.backends[backend] === staleBackendSessionId) delete session.backends[backend];
    this.changes.tell(id);
  }

  onChanged(listener: (id: string) => void): void {
    this.changes.onChanged(listener);
  }

  async setLogLevel(id: string, level: string): Promise<void> {
    const session = this.sessions.get(id)?.session;
    if (session) session.logLevel = level;
  }

  async expectAnswer(id: string, backend: string, requestId: string): Promise<void> {
    this.sessions.get(id)?.awaitingAnswers.add(answerField(backend, requestId));
  }

  async takeAnswer(id: string, backend: string, requestId: string): Promise<boolean> {
    return this.sessions.get(id)?.awaitingAnswers.delete(answerField(backend, requestId)) ?? false;
  }

  async remove(id: string): Promise<void> {
    this.sessions.delete(id);
    this.changes.tell(id);
  }

  async close(): Promise<void> {
    this.sessions.clear();
  }
}
