import { EventEmitter } from 'node:events';
import { Logger } from '../shared/log';
import { Registry } from './model';
import { RegistryMerge, mergeRegistry } from './registry-state';
import { DocumentRejectionReason, RegistryDocumentError, RegistrySource } from './source';
import { DEFAULT_REGISTRY_POLICY, RegistryPolicy, RegistryProblem, describeProblem, validateRegistry } from './validate';

export interface RegistryControllerOptions {
  /** How long one poll may wait for a change (the Portal's long-poll), and the refresh period. */
  refreshIntervalMs: number;
  /** Gap after a failed poll, doubled up to maxBackoffMs while the source stays down. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** What this gateway allows a registry to ask for (token passthrough); the defaults when absent. */
  policy?: RegistryPolicy;
}

export interface RegistryStatus {
  source: string;
  /** The revision of the document served now. */
  revision?: string;
  /** When the source last answered with a document that was applied, or with "unchanged". */
  lastSuccessAt?: string;
  /** The last failure, of either kind: the source unreachable or erring, or its document refused. */
  lastError?: { message: string; at: string };
  /**
   * Set while the source's current document is refused as a whole (docs/adr/0000-portal-registry-decisions.md §6: the last good registry
   * keeps serving); cleared once a document is applied. `since`: the first refusal in a row.
   */
  rejectedDocument?: { reason: DocumentRejectionReason; message: string; revision?: string; at: string; since: string };
  /** Declared routes rejected by validation; each keeps its previous good state if it had one. */
  rejectedRoutes: RegistryProblem[];
  /** Where the routes served now came from. */
  origin: 'none' | 'source' | 'redis-last-good';
}

export interface RegistryPollResult {
  /** `rejected`: the source answered with a document that is not a registry at all (rejection says why). */
  outcome: 'changed' | 'unchanged' | 'failed' | 'rejected';
  durationMs: number;
  rejection?: DocumentRejectionReason;
  /** For a changed registry, ms per step on the way to the 'update' event (read: when the source measures it). */
  stepsMs?: Partial<Record<'read' | 'validate' | 'merge', number>>;
}

/**
 * Keeps the served registry in step with its source. Emits 'update' (registry, merge) after every
 * change and 'poll' (RegistryPollResult) after every poll. A failing source, or a document that is
 * not a registry at all, changes nothing: the routes in memory keep serving until the source answers
 * with a registry again.
 */
export class RegistryController extends EventEmitter {
  private registry: Registry = { routes: [] };
  /** The newest revision the source has sent, applied or refused: polls wait for a newer one. */
  private seenRevision?: string;
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

  private get policy(): RegistryPolicy {
    return this.options.policy ?? DEFAULT_REGISTRY_POLICY;
  }

  currentStatus(): RegistryStatus {
    return { ...this.status };
  }

  /** One poll; by default it answers at once (no long-poll wait). */
  async pollOnce(waitMs = 0): Promise<RegistryPollResult['outcome']> {
    const started = Date.now();
    const finish = (outcome: RegistryPollResult['outcome'], rejection?: DocumentRejectionReason, stepsMs?: RegistryPollResult['stepsMs']) => {
      this.emit('poll', { outcome, durationMs: Date.now() - started, ...(rejection && { rejection }), ...(stepsMs && { stepsMs }) } satisfies RegistryPollResult);
      return outcome;
    };
    try {
      const document = await this.source.poll(this.seenRevision, waitMs, this.abort.signal);
      if (document === 'unchanged') {
        this.status.lastSuccessAt = new Date().toISOString();
        return finish('unchanged');
      }
      this.seenRevision = document.revision;
      const validateStarted = performance.now();
      const validation = validateRegistry(document.body, this.policy);
      const validateMs = performance.now() - validateStarted;
      if (validation.documentRejected) {
        const problems = validation.problems.map(describeProblem).join('; ');
        const reason = document.body === null || document.body === undefined ? 'empty' : 'not-a-registry';
        throw new RegistryDocumentError(reason, `${this.source.description} sent a document that is not a registry: ${problems}`, document.revision);
      }
      this.status.lastSuccessAt = new Date().toISOString();
      this.status.revision = document.revision;
      this.status.rejectedDocument = undefined;
      const mergeStarted = performance.now();
      const merge = mergeRegistry(this.registry, validation, this.policy);
      const mergeMs = performance.now() - mergeStarted;
      this.apply(merge, 'source');
      return finish('changed', undefined, { ...(document.readMs !== undefined && { read: document.readMs }), validate: validateMs, merge: mergeMs });
    } catch (error) {
      if (this.abort.signal.aborted) return 'failed';
      const message = (error as Error).message;
      const at = new Date().toISOString();
      this.status.lastError = { message, at };
      if (error instanceof RegistryDocumentError) {
        if (error.revision !== undefined) this.seenRevision = error.revision;
        const since = this.status.rejectedDocument?.since ?? at;
        this.status.rejectedDocument = { reason: error.reason, message, revision: error.revision, at, since };
        this.log.warn('registry document rejected; keeping the last good registry', {
          source: this.source.description,
          reason: error.reason,
          revision: error.revision,
          rejectedSince: since,
          error: message,
        });
        return finish('rejected', error.reason);
      }
      this.log.warn('registry source failed; keeping the routes in memory', { source: this.source.description, error: message });
      return finish('failed');
    }
  }

  /** Cold start with the source down: serve the routes Redis kept, until the source answers. */
  restore(routes: Registry['routes']): void {
    if (this.status.origin !== 'none' || routes.length === 0) return;
    const validation = validateRegistry({ routes }, this.policy);
    this.apply(mergeRegistry(this.registry, validation, this.policy), 'redis-last-good');
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
        // The next poll waits for a revision newer than the refused one, so the fix arrives as fast as
        // any change; the pause only keeps a source that sends a new bad revision every time from being hammered.
        if (outcome === 'rejected') await sleep(minBackoff);
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
