import { EventEmitter } from 'node:events';
import { CatalogSnapshotMessage } from './catalog-store';

/** What the catalog stream sends the sidecars: the current catalog, then every change. */
export interface CatalogFeed {
  current(): CatalogSnapshotMessage;
  on(event: 'change', listener: (snapshot: CatalogSnapshotMessage) => void): this;
  off(event: 'change', listener: (snapshot: CatalogSnapshotMessage) => void): this;
}

/**
 * The catalog as the sidecars are sent it: a version only once the routes carrying its call rules
 * are published to Envoy and every connected Envoy has answered them (docs/xds.md). The sidecars list
 * tools and Envoy calls them; sent the other way round, a client could be listed a tool whose call
 * Envoy still answers "has no tool". Versions are sent in order; one overtaken before its routes were
 * published is skipped (the newer one is sent instead), one that waited for Envoy's answers is sent.
 */
export class CatalogPublication extends EventEmitter implements CatalogFeed {
  private published: CatalogSnapshotMessage;
  private latest: CatalogSnapshotMessage;
  private queue: Promise<void> = Promise.resolve();

  /** `envoysAnswered`: resolves once every connected Envoy has answered the routes published last (bounded by a timeout). */
  constructor(
    initial: CatalogSnapshotMessage,
    private readonly envoysAnswered: () => Promise<void>,
  ) {
    super();
    this.published = initial;
    this.latest = initial;
  }

  current(): CatalogSnapshotMessage {
    return this.published;
  }

  /** `routesPublished`: resolves once Envoy's routes with this version's call rules are in the xDS snapshot. */
  offer(snapshot: CatalogSnapshotMessage, routesPublished: Promise<void>): void {
    this.latest = snapshot;
    this.queue = this.queue.then(async () => {
      await routesPublished;
      if (snapshot !== this.latest) return;
      await this.envoysAnswered();
      this.published = snapshot;
      this.emit('change', snapshot);
    });
  }
}
