import { EventEmitter } from 'node:events';
import { Logger } from '../shared/log';
import { Registry } from './model';
import { RegistryMerge, mergeRegistry } from './registry-state';
import { RegistrySource } from './source';
import { RegistryProblem, validateRegistry } from './validate';

export interface RegistryControllerOptions {
  /** How long one poll may wait for a change (the Portal's long-poll), and the refresh period. */
  refreshIntervalMs: number;
  /** Gap after a failed poll, doubled up to maxBackoffMs while the source stays down. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface RegistryStatus {
  source: string;
  revision?: string;
  lastSuccessAt?: string;
  lastError?: { message: string; at: string };
  /** Declared routes rejected by validation; each keeps its previous good state if it had one. */
  rejectedRoutes: RegistryProblem[];
  /** Where the routes served now came from. */
  origin: 'none' | 'source' | 'redis-last-good';
}

export interface RegistryPollResult {
  outcome: 'changed' | 'unchanged' | 'failed';
  durationMs: number;
}

/**
 * Keeps the served registry in step with its source. Emits 'update' (registry, merge) after every
 * change and 'poll' (RegistryPollResult) after every poll. A failing source changes nothing: the
 * routes in memory keep serving until the source answers again.
 */
export class RegistryController extends EventEmitter {
  private registry: Registry = { routes: [] };
  private revision?: string;
  private readonly status: RegistryStatus;
  private readonly abort = new AbortController();
  private running?: Promise<void>;

  constructor(
    private readonly source: RegistrySource,
    private readonly options: RegistryControllerOptions,
    private readonly log: Logger,
  ) {
    super();
    this.status = { source: source.description, rejectedRoutes: [], origin: 'none' };
  }

  current(): Registry {
    return this.registry;
  }

  currentStatus(): RegistryStatus {
    return { ...this.status };
  }

  /** One poll; by default it answers at once (no long-poll wait). */
  async pollOnce(waitMs = 0): Promise<RegistryPollResult['outcome']> {
    const started = Date.now();
    try {
      const document = await this.source.poll(this.revision, waitMs, this.abort.signal);
      this.status.lastSuccessAt = new Date().toISOString();
      if (document === 'unchanged') {
        this.emit('poll', { outcome: 'unchanged', durationMs: Date.now() - started } satisfies RegistryPollResult);
        return 'unchanged';
      }
      this.revision = document.revision;
      this.status.revision = document.revision;
      this.apply(mergeRegistry(this.registry, validateRegistry(document.body)), 'source');
      this.emit('poll', { outcome: 'changed', durationMs: Date.now() - started } satisfies RegistryPollResult);
      return 'changed';
    } catch (error) {
      if (this.abort.signal.aborted) return 'failed';
      const message = (error as Error).message;
      this.status.lastError = { message, at: new Date().toISOString() };
      this.log.warn('registry source failed; keeping the routes in memory', { source: this.source.description, error: message });
      this.emit('poll', { outcome: 'failed', durationMs: Date.now() - started } satisfies RegistryPollResult);
      return 'failed';
    }
  }

  /** Cold start with the source down: serve the routes Redis kept, until the source answers. */
  restore(routes: Registry['routes']): void {
    if (this.status.origin !== 'none' || routes.length === 0) return;
    const validation = validateRegistry({ routes });
    this.apply(mergeRegistry(this.registry, validation), 'redis-last-good');
  }

  private apply(merge: RegistryMerge, origin: RegistryStatus['origin']): void {
    this.status.rejectedRoutes = merge.rejected;
    for (const problem of merge.rejected) {
      this.log.warn('registry route rejected; it keeps its previous state', { route: problem.route, field: problem.field, problem: problem.message });
    }
    const changed = merge.added.length + merge.removed.length + merge.changed.length > 0;
    const first = this.status.origin === 'none';
    this.status.origin = origin;
    if (!changed && !first) return;
    this.registry = merge.registry;
    this.log.info('registry updated', { origin, added: merge.added, removed: merge.removed, changed: merge.changed });
    this.emit('update', this.registry, merge);
  }

  /** Polls until stop(): long-polls while the source supports it, backs off while it fails. */
  start(): void {
    const minBackoff = this.options.minBackoffMs ?? 500;
    const maxBackoff = this.options.maxBackoffMs ?? 30_000;
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        this.abort.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
    this.running = (async () => {
      let backoff = minBackoff;
      while (!this.abort.signal.aborted) {
        const started = Date.now();
        const outcome = await this.pollOnce(this.options.refreshIntervalMs);
        if (outcome === 'failed') {
          await sleep(backoff);
          backoff = Math.min(backoff * 2, maxBackoff);
          continue;
        }
        backoff = minBackoff;
        // A source that says "unchanged" at once instead of holding the request is polled on the interval.
        const elapsed = Date.now() - started;
        if (outcome === 'unchanged' && elapsed < minBackoff) await sleep(this.options.refreshIntervalMs - elapsed);
      }
    })();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
    this.source.close?.();
  }
}
