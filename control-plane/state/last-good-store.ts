import Redis from 'ioredis';
import { z } from 'zod';
import { Route, routeSchema } from '../registry/model';
import { Logger } from '../shared/log';

/** What a route's catalog looked like when it was saved: enough to serve tools/list at once. */
const savedCatalogSchema = z.array(
  z.object({
    name: z.string(),
    cluster: z.string(),
    tools_json: z.array(z.string()),
    last_success_at: z.string(),
    // Absent in copies saved before the gateway served backends of the stateless revision.
    protocol_version: z.string().optional(),
    sessionful: z.boolean().optional(),
  }),
);
export type SavedBackendCatalog = z.output<typeof savedCatalogSchema>[number];

export interface SavedRoute {
  key: string;
  mapping?: Route;
  catalog?: SavedBackendCatalog[];
}

/**
 * Redis keeps each route's last-good state for cold starts (ADR-0013): one hash per route, with the
 * route's mapping and its catalog as separate fields so their writers never race, plus a set of route
 * keys so a cold start with the Portal down still knows which routes to read. Redis is never on the
 * request path, and a Redis outage only costs the warm start: every call here logs and carries on.
 */
export class LastGoodStore {
  private readonly redis: Redis;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly log: Logger,
  ) {
    this.redis = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1, connectTimeout: 2000 });
    this.redis.on('error', () => undefined); // reported per call below, not once per reconnect attempt
  }

  private routeKey(key: string): string {
    return `${this.prefix}route:${key}`;
  }

  private get indexKey(): string {
    return `${this.prefix}routes`;
  }

  async connect(): Promise<void> {
    await this.attempt('connect', () => this.redis.connect());
  }

  private async attempt<T>(what: string, action: () => Promise<T>): Promise<T | undefined> {
    try {
      return await action();
    } catch (error) {
      this.log.warn('redis last-good store unavailable; serving from memory only', { operation: what, error: (error as Error).message });
      return undefined;
    }
  }

  async saveMapping(route: Route): Promise<void> {
    await this.attempt('save mapping', () =>
      this.redis.multi().sadd(this.indexKey, route.key).hset(this.routeKey(route.key), 'mapping', JSON.stringify(route)).exec(),
    );
  }

  async saveCatalog(routeKey: string, catalog: SavedBackendCatalog[]): Promise<void> {
    await this.attempt('save catalog', () =>
      this.redis.multi().sadd(this.indexKey, routeKey).hset(this.routeKey(routeKey), 'catalog', JSON.stringify(catalog)).exec(),
    );
  }

  async removeRoute(routeKey: string): Promise<void> {
    await this.attempt('remove route', () => this.redis.multi().srem(this.indexKey, routeKey).del(this.routeKey(routeKey)).exec());
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
    this.redis.disconnect();
  }
}
