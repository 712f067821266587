import Redis from 'ioredis';
import { Logger } from '../../shared/log';
import { ChangeListeners, GatewaySession, SessionChanges, SessionStore } from './session-store';

/**
 * Sessions as the session check reads them on every call in a session (docs/adr/0008-data-path-lanes.md):
 * from this process's memory, with Redis the source of truth. An entry is read from Redis again after
 * `freshMs` (which also pushes the session's idle expiry back while it is used), and dropped at once
 * on every replica when any replica ends the session, or records or forgets one of its backend
 * sessions (a replica holding the client's GET stream then listens in it: docs/adr/0018-stream-relaying.md):
 * the session's id is published on a Redis channel every replica listens to. If that message is lost
 * (Redis unreachable at that moment), another replica may serve its old copy for at most `freshMs`.
 */
export interface SessionCacheOptions {
  freshMs: number;
  maxEntries: number;
  /**
   * While Redis cannot be read (a primary failover, an outage), a session read from it within this
   * long is served from memory rather than failing the call. Nothing can end a session meanwhile:
   * ending one needs Redis too. 0: never.
   */
  staleOnErrorMs: number;
}

export const SESSION_CACHE_DEFAULTS: SessionCacheOptions = { freshMs: 5_000, maxEntries: 100_000, staleOnErrorMs: 60_000 };

/** How the replicas tell each other a session ended or changed: each drops its copy (the channel carries the session's id). */
export interface SessionEndings {
  publish(id: string): Promise<void>;
  onEnded(listener: (id: string) => void): void;
  close(): Promise<void>;
}

/** The endings channel on Redis pub/sub: a connection of its own, since a subscribed connection can do nothing else. */
export function redisSessionEndings(redis: Redis, subscriber: Redis, channel: string, log: Logger): SessionEndings {
  const listeners: ((id: string) => void)[] = [];
  subscriber.on('message', (from: string, id: string) => {
    if (from === channel) for (const listener of listeners) listener(id);
  });
  subscriber.on('error', () => undefined);
  subscriber.on('ready', () => {
    subscriber.subscribe(channel).catch((error: Error) => log.warn('cannot listen for ended sessions; cached sessions expire on their own', { error: error.message }));
  });
  return {
    publish: async (id) => {
      await redis.publish(channel, id);
    },
    onEnded: (listener) => listeners.push(listener),
    close: async () => {
      subscriber.disconnect();
    },
  };
}

const copyOf = (session: GatewaySession): GatewaySession => ({ ...session, backends: { ...session.backends } });

export class CachedSessionStore implements SessionStore, SessionChanges {
  /** Insertion order is age order: the oldest entry goes first when the cache is full. */
  private readonly entries = new Map<string, { session: GatewaySession; fetchedAt: number }>();
  private readonly changes = new ChangeListeners();

  constructor(
    private readonly inner: SessionStore,
    private readonly endings: SessionEndings,
    private readonly options: SessionCacheOptions,
    private readonly log: Logger,
  ) {
    // The copy goes first: a listener reads the session again.
    endings.onEnded((id) => {
      this.entries.delete(id);
      this.changes.tell(id);
    });
  }

  /** Told of every change any replica publishes, this one's own included (its subscriber hears them too). */
  onChanged(listener: (id: string) => void): void {
    this.changes.onChanged(listener);
  }

  private remember(session: GatewaySession): void {
    this.entries.delete(session.id);
    this.entries.set(session.id, { session: copyOf(session), fetchedAt: performance.now() });
    if (this.entries.size > this.options.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }

  async create(fields: Omit<GatewaySession, 'id' | 'backends'>): Promise<GatewaySession> {
    const session = await this.inner.create(fields);
    this.remember(session);
    return session;
  }

  async get(id: string, options: { fresh?: boolean } = {}): Promise<GatewaySession | undefined> {
    const entry = this.entries.get(id);
    const age = entry ? performance.now() - entry.fetchedAt : Number.POSITIVE_INFINITY;
    if (age < this.options.freshMs && !options.fresh) return copyOf(entry!.session);
    let session: GatewaySession | undefined;
    try {
      session = await this.inner.get(id);
    } catch (error) {
      if (age >= this.options.staleOnErrorMs) throw error;
      return copyOf(entry!.session);
    }
    if (session) this.remember(session);
    else this.entries.delete(id);
    return session;
  }

  async claimBackend(id: string, backend: string, backendSessionId: string): Promise<string> {
    const counted = await this.inner.claimBackend(id, backend, backendSessionId);
    const entry = this.entries.get(id);
    if (entry) entry.session.backends[backend] = counted;
    if (counted === backendSessionId) this.tellReplicas(id);
    return counted;
  }

  async forgetBackend(id: string, backend: string, staleBackendSessionId: string): Promise<void> {
    await this.inner.forgetBackend(id, backend, staleBackendSessionId);
    const entry = this.entries.get(id);
    if (entry?.session.backends[backend] === staleBackendSessionId) delete entry.session.backends[backend];
    this.tellReplicas(id);
  }

  /**
   * The other replicas drop their copy of a session whose backend sessions changed (this one too: it
   * reads it again). Not awaited: the request that opened the backend session (a call's session check)
   * does not wait for the message.
   */
  private tellReplicas(id: string): void {
    void this.endings.publish(id).catch((error: Error) =>
      this.log.warn('could not tell the other replicas a session changed; their cached copies are read again on their own', { error: error.message }),
    );
  }

  async setLogLevel(id: string, level: string): Promise<void> {
    await this.inner.setLogLevel(id, level);
    const entry = this.entries.get(id);
    if (entry) entry.session.logLevel = level;
  }

  /** Outstanding requests are not cached: an answer is taken once, whichever replica it reaches. */
  expectAnswer(id: string, backend: string, requestId: string): Promise<void> {
    return this.inner.expectAnswer(id, backend, requestId);
  }

  takeAnswer(id: string, backend: string, requestId: string): Promise<boolean> {
    return this.inner.takeAnswer(id, backend, requestId);
  }

  async remove(id: string): Promise<void> {
    this.entries.delete(id);
    await this.inner.remove(id);
    await this.endings.publish(id).catch((error: Error) =>
      this.log.warn('could not tell the other replicas a session ended; their cached copies expire on their own', { error: error.message }),
    );
  }

  async close(): Promise<void> {
    await this.endings.close();
    await this.inner.close();
  }
}
