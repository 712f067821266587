import { IdpUnavailableError, IssuedToken } from './idp-client';

/** What the cache reports: every lookup (hit: no request to the IdP was made for it), and every request to the IdP. */
export interface TokenCacheObserver {
  lookup(result: 'hit' | 'miss'): void;
  issued(outcome: 'ok' | 'refused' | 'unavailable', seconds: number): void;
}

export interface TokenCacheSettings {
  /** Tokens kept at most; the least recently used goes first. */
  maxEntries: number;
  /**
   * A token is renewed this long before it expires (at most a tenth of its lifetime), so that a backend
   * never gets one that expires on the way.
   */
  renewBeforeExpiryMs: number;
}

export const TOKEN_CACHE_DEFAULTS: TokenCacheSettings = { maxEntries: 10_000, renewBeforeExpiryMs: 30_000 };

interface Entry {
  token: string;
  /** Served without asking the IdP until then. */
  renewAtMs: number;
  /** Served while the IdP cannot be asked until then (its expiry, or the caller's). */
  validUntilMs: number;
}

/**
 * Tokens the IdP issued, by a key the caller chooses (for exchanges: the caller's token's hash, the
 * audience and the scopes). One request to the IdP per key at a time: everyone asking meanwhile waits
 * for it. A token is renewed shortly before it expires; while the IdP is down, a token still valid is
 * served until it expires. Bounded, least recently used first out.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>();
  private readonly inFlight = new Map<string, Promise<IssuedToken>>();

  constructor(
    private readonly settings: TokenCacheSettings,
    private readonly observer: TokenCacheObserver,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /**
   * The token for `key`, from the cache or from `issue`. `notAfterMs` bounds how long it is kept (the
   * caller's own token's expiry: nothing outlives the caller's right to it).
   */
  async get(key: string, issue: () => Promise<IssuedToken>, notAfterMs = Infinity): Promise<string> {
    return (await this.lookup(key, issue, notAfterMs)).token;
  }

  /** The same, with when the cache stops serving it (renewAtMs; in the past for a token kept only because the IdP is down). */
  async lookup(key: string, issue: () => Promise<IssuedToken>, notAfterMs = Infinity): Promise<{ token: string; renewAtMs: number }> {
    const now = this.now();
    const entry = this.entries.get(key);
    if (entry && now < entry.renewAtMs) {
      this.touch(key, entry);
      this.observer.lookup('hit');
      return { token: entry.token, renewAtMs: entry.renewAtMs };
    }
    const pending = this.inFlight.get(key);
    if (pending) {
      this.observer.lookup('hit');
      return this.settled(key, pending, notAfterMs);
    }
    this.observer.lookup('miss');
    const started = this.now();
    const request = issue().then(
      (issued) => {
        this.observer.issued('ok', (this.now() - started) / 1000);
        return issued;
      },
      (error: unknown) => {
        this.observer.issued(error instanceof IdpUnavailableError ? 'unavailable' : 'refused', (this.now() - started) / 1000);
        throw error;
      },
    );
    this.inFlight.set(key, request);
    try {
      return await this.settled(key, request, notAfterMs);
    } finally {
      this.inFlight.delete(key);
    }
  }

  private async settled(key: string, request: Promise<IssuedToken>, notAfterMs: number): Promise<{ token: string; renewAtMs: number }> {
    try {
      const issued = await request;
      return { token: issued.accessToken, renewAtMs: this.store(key, issued, notAfterMs) };
    } catch (error) {
      // The IdP is down, not refusing: a token issued earlier that is still valid keeps working.
      const kept = this.entries.get(key);
      if (error instanceof IdpUnavailableError && kept && this.now() < kept.validUntilMs) return { token: kept.token, renewAtMs: kept.renewAtMs };
      if (!(error instanceof IdpUnavailableError)) this.entries.delete(key);
      throw error;
    }
  }

  /** Keeps a token just issued (unless it is about to expire already); when the cache stops serving it. */
  private store(key: string, issued: IssuedToken, notAfterMs: number): number {
    const now = this.now();
    const validUntilMs = Math.min(issued.expiresAtMs, notAfterMs);
    const lifetime = validUntilMs - now;
    const renewAtMs = validUntilMs - Math.min(this.settings.renewBeforeExpiryMs, lifetime / 10);
    if (renewAtMs <= now) {
      this.entries.delete(key);
      return renewAtMs;
    }
    this.touch(key, { token: issued.accessToken, renewAtMs, validUntilMs });
    while (this.entries.size > this.settings.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    return renewAtMs;
  }

  /** Most recently used last: a Map iterates in insertion order. */
  private touch(key: string, entry: Entry): void {
    this.entries.delete(key);
    this.entries.set(key, entry);
  }
}
