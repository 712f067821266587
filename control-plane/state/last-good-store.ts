import type Redis from 'ioredis';
import { z } from 'zod';
import { SavedSigningKeys, SigningKeyPersistence, savedSigningKeysSchema } from '../auth/signing-keys';
import { Route, routeSchema } from '../registry/model';
import { Logger } from '../shared/log';
import { REDIS_TIMEOUT_DEFAULTS, RedisAuth, RedisTimeouts, createRedisClient, redisAnswers } from '../shared/redis-client';

/** What a route's catalog looked like when it was saved: enough to serve tools/list at once. */
const savedCatalogSchema = z.array(
  z.object({
    name: z.string(),
    /** The Tool Service's catalog key (`tool_service.<id>`). */
    tool_service: z.string(),
    tools_json: z.array(z.string()),
    last_success_at: z.string(),
    // Absent in copies saved before the gateway served backends of the stateless revision.
    protocol_version: z.string().optional(),
    sessionful: z.boolean().optional(),
    // Absent in copies saved before the gateway spoke to backends of both revisions in each client's.
    also_modern: z.boolean().optional(),
    // Absent in copies saved before the gateway served prompts and resources.
    prompts_json: z.array(z.string()).optional(),
    resources_json: z.array(z.string()).optional(),
    resource_templates_json: z.array(z.string()).optional(),
    capabilities_json: z.string().optional(),
    needs_json: z.string().optional(),
  }),
);
export type SavedBackendCatalog = z.output<typeof savedCatalogSchema>[number];

export interface SavedRoute {
  key: string;
  mapping?: Route;
  catalog?: SavedBackendCatalog[];
}

/** A route's writes not yet made: the newest value of each field, or its removal. */
type PendingWrite = { mapping?: string; catalog?: string } | 'remove';

/**
 * Redis keeps each route's last-good state for cold starts (docs/adr/0000-portal-registry-decisions.md §7): one hash per route, with the
 * route's mapping and its catalog as separate fields so their writers never race, plus a set of route
 * keys so a cold start with the Portal down still knows which routes to read. Redis is never on the
 * request path, and a Redis outage only costs the warm start:
 * - writes are queued, never awaited by the caller, and coalesced per route (only the newest value of
 *   each field is written), so a hung Redis holds up no registry update and the queue stays bounded;
 * - every command has the client's command timeout, so a hung Redis fails each write instead of
 *   holding the queue for ever;
 * - a failure is logged once when Redis becomes unavailable and once when it is back.
 */
export class LastGoodStore implements SigningKeyPersistence {
  private readonly redis: Redis;
  private readonly pending = new Map<string, PendingWrite>();
  private draining?: Promise<void>;
  private unavailable = false;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly log: Logger,
    timeouts: RedisTimeouts = REDIS_TIMEOUT_DEFAULTS,
    auth?: RedisAuth,
  ) {
    this.redis = createRedisClient(url, timeouts, { lazyConnect: true, auth });
  }

  private routeKey(key: string): string {
    return `${this.prefix}route:${key}`;
  }

  private get indexKey(): string {
    return `${this.prefix}routes`;
  }

  /** Every issuer's last signing keys, one field per key source (docs/adr/0011-caller-identity.md). */
  private get signingKeysKey(): string {
    return `${this.prefix}signing-keys`;
  }

  /** Not awaited: keys change rarely, and a hung Redis must hold up nothing. */
  save(source: string, saved: SavedSigningKeys): void {
    void this.attempt('save signing keys', () => this.redis.hset(this.signingKeysKey, source, JSON.stringify(saved)));
  }

  async load(): Promise<Map<string, SavedSigningKeys>> {
    const fields = (await this.attempt('load signing keys', () => this.redis.hgetall(this.signingKeysKey))) ?? {};
    const loaded = new Map<string, SavedSigningKeys>();
    for (const [source, json] of Object.entries(fields)) {
      const saved = this.parseField(source, 'signing-keys', json, savedSigningKeysSchema);
      if (saved) loaded.set(source, saved);
    }
    return loaded;
  }

  /** Whether Redis answers now (mcpgw_redis_up). */
  answers(): Promise<boolean> {
    return redisAnswers(this.redis);
  }

  async connect(): Promise<void> {
    await this.attempt('connect', () => this.redis.connect());
  }

  private async attempt<T>(what: string, action: () => Promise<T>): Promise<T | undefined> {
    try {
      const result = await action();
      if (this.unavailable) this.log.info('redis last-good store available again', { operation: what });
      this.unavailable = false;
      return result;
    } catch (error) {
      if (!this.unavailable) {
        this.log.warn('redis last-good store unavailable; serving from memory only', { operation: what, error: (error as Error).message });
      }
      this.unavailable = true;
      return undefined;
    }
  }

  saveMapping(route: Route): void {
    this.queue(route.key, { mapping: JSON.stringify(route) });
  }

  saveCatalog(routeKey: string, catalog: SavedBackendCatalog[]): void {
    this.queue(routeKey, { catalog: JSON.stringify(catalog) });
  }

  removeRoute(routeKey: string): void {
    this.queue(routeKey, 'remove');
  }

  private queue(routeKey: string, write: PendingWrite): void {
    const earlier = this.pending.get(routeKey);
    // Re-inserted, so a route's writes keep their order relative to other routes' as well.
    this.pending.delete(routeKey);
    this.pending.set(routeKey, write === 'remove' || earlier === undefined || earlier === 'remove' ? write : { ...earlier, ...write });
    this.draining ??= this.drain().finally(() => (this.draining = undefined));
  }

  private async drain(): Promise<void> {
    for (let next = this.pending.entries().next(); !next.done; next = this.pending.entries().next()) {
      const [routeKey, write] = next.value;
      this.pending.delete(routeKey);
      if (write === 'remove') {
        await this.attempt('remove route', () => this.redis.multi().srem(this.indexKey, routeKey).del(this.routeKey(routeKey)).exec());
      } else {
        await this.attempt('save route', () => this.redis.multi().sadd(this.indexKey, routeKey).hset(this.routeKey(routeKey), write).exec());
      }
    }
  }

  /** Resolves once every write queued so far has been made or has failed. */
  async flush(): Promise<void> {
    while (this.draining) await this.draining;
  }

  /** Every saved route, validated like any external input; an unreadable field is skipped, never fatal. */
  async loadAll(): Promise<SavedRoute[]> {
    const keys = (await this.attempt('load index', () => this.redis.smembers(this.indexKey))) ?? [];
    const saved: SavedRoute[] = [];
    for (const key of keys.sort()) {
      const fields = (await this.attempt('load route', () => this.redis.hgetall(this.routeKey(key)))) ?? {};
      saved.push({
        key,
        mapping: this.parseField(key, 'mapping', fields.mapping, routeSchema),
        catalog: this.parseField(key, 'catalog', fields.catalog, savedCatalogSchema),
      });
    }
    return saved;
  }

  private parseField<T extends z.ZodType>(route: string, field: string, json: string | undefined, schema: T): z.output<T> | undefined {
    if (json === undefined) return undefined;
    try {
      const parsed = schema.safeParse(JSON.parse(json));
      if (parsed.success) return parsed.data;
      this.log.warn('skipping an invalid last-good entry', { route, field, error: parsed.error.issues[0]?.message });
    } catch (error) {
      this.log.warn('skipping an unreadable last-good entry', { route, field, error: (error as Error).message });
    }
    return undefined;
  }

  async close(): Promise<void> {
    this.pending.clear();
    this.redis.disconnect();
  }
}
