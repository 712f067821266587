import { XdsResources } from '../translate';
import { TYPE_URL } from '../translate/type-urls';
import { jwtAuthnKeepingRemoved } from '../translate/auth';
import { EncodingMemo, buildSnapshot } from './snapshot';
import { SnapshotCache } from './snapshot-cache';

/** How long a publication waits for Envoys to answer before going on without the slow ones. */
export const ENVOY_ANSWER_TIMEOUT_MS = 5000;

export interface PublicationTimes {
  encodeMs: number;
  pushMs: number;
}

export interface AnswerWaiter {
  /** Resolves once every connected Envoy has answered `version` of `typeUrl`, or after timeoutMs. */
  waitForAnswers(typeUrl: string, version: string, timeoutMs: number): Promise<void>;
}

/**
 * Publishes new xDS so that no request is sent to a cluster Envoy does not have, nor validated with a
 * jwt_authn requirement it does not have. Additions are safe in one step (the ADS stream sends clusters
 * and jwt_authn's configuration before routes). Removals take two: first the new routes with the old
 * clusters and requirements still present, then — once every Envoy has answered those routes — the
 * clusters and requirements without the removed ones.
 */
export class XdsPublisher {
  private previous: XdsResources = {};
  private readonly memo = new EncodingMemo();
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly cache: SnapshotCache,
    private readonly envoys: AnswerWaiter,
    private readonly drainTimeoutMs = ENVOY_ANSWER_TIMEOUT_MS,
  ) {}

  /**
   * Publications run one after another, in call order. `onPublished` gets the milliseconds spent
   * encoding the final snapshot, and writing it to the open streams.
   */
  publish(resources: XdsResources, onPublished: (times: PublicationTimes) => void = () => undefined): Promise<void> {
    this.queue = this.queue.then(() => this.publishNow(resources, onPublished));
    return this.queue;
  }

  private async publishNow(resources: XdsResources, onPublished: (times: PublicationTimes) => void): Promise<void> {
    const names = (list = resources[TYPE_URL.cluster]) => new Set(list.map((cluster) => cluster.name));
    const kept = names();
    const removed = (this.previous[TYPE_URL.cluster] ?? []).filter((cluster) => !kept.has(cluster.name));
    const [jwtAuthn] = resources[TYPE_URL.typedExtensionConfig] ?? [];
    const keptJwtAuthn = jwtAuthn && jwtAuthnKeepingRemoved(this.previous[TYPE_URL.typedExtensionConfig]?.[0], jwtAuthn);
    if (removed.length > 0 || keptJwtAuthn) {
      const interim = buildSnapshot(
        {
          ...resources,
          [TYPE_URL.cluster]: [...resources[TYPE_URL.cluster], ...removed],
          ...(keptJwtAuthn && { [TYPE_URL.typedExtensionConfig]: [keptJwtAuthn] }),
        },
        this.memo,
      );
      this.cache.set(interim);
      await this.envoys.waitForAnswers(TYPE_URL.routeConfiguration, interim.get(TYPE_URL.routeConfiguration)!.version, this.drainTimeoutMs);
    }
    const started = performance.now();
    const snapshot = buildSnapshot(resources, this.memo);
    const built = performance.now();
    // Each open stream sends what changed at once: this is where the responses are serialized.
    this.cache.set(snapshot);
    onPublished({ encodeMs: built - started, pushMs: performance.now() - built });
    this.previous = resources;
  }
}
