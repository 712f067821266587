import { Snapshot } from './snapshot';

type Watcher = (snapshot: Snapshot) => void;

/** Holds the current snapshot and tells every open xDS stream when it changes. */
export class SnapshotCache {
  private snapshot: Snapshot = new Map();
  private readonly watchers = new Set<Watcher>();

  current(): Snapshot {
    return this.snapshot;
  }

  set(snapshot: Snapshot): void {
    this.snapshot = snapshot;
    for (const watcher of this.watchers) watcher(snapshot);
  }

  watch(watcher: Watcher): () => void {
    this.watchers.add(watcher);
    return () => this.watchers.delete(watcher);
  }
}
