import { createHash } from 'node:crypto';
import { PackedAny, TypedJson, packAny } from '../protobuf/proto-json';
import { XdsResources } from '../translate';

export interface TypeSnapshot {
  /** Content hash: an unchanged resource set keeps its version, so nothing is pushed for it. */
  version: string;
  resources: Map<string, PackedAny>;
  /** Content hash per resource: delta xDS sends only the resources whose hash the client lacks. */
  resourceVersions: Map<string, string>;
}

/** Encoded resources per type URL; immutable once built. */
export type Snapshot = ReadonlyMap<string, TypeSnapshot>;

function resourceName(json: Record<string, unknown>): string {
  const name = json.name ?? json.cluster_name;
  if (typeof name !== 'string') throw new Error(`resource of type ${String(json['@type'])} has no name`);
  return name;
}

function contentHash(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex').slice(0, 16);
}

interface EncodedResource {
  packed: PackedAny;
  version: string;
}

/**
 * Keeps the encoded resources of the last build by their proto3 JSON text, so that a registry change
 * re-encodes only what changed: with thousands of clusters, encoding dominates the build.
 */
export class EncodingMemo {
  private previous = new Map<string, EncodedResource>();
  private current = new Map<string, EncodedResource>();

  encode(json: TypedJson): EncodedResource {
    const key = JSON.stringify(json);
    let encoded = this.current.get(key) ?? this.previous.get(key);
    if (!encoded) {
      const packed = packAny(json);
      encoded = { packed, version: contentHash(packed.value) };
    }
    this.current.set(key, encoded);
    return encoded;
  }

  /** Forgets what the build that just ended did not use. */
  endBuild(): void {
    this.previous = this.current;
    this.current = new Map();
  }
}

export function buildSnapshot(resources: XdsResources, memo = new EncodingMemo()): Snapshot {
  const snapshot = new Map<string, TypeSnapshot>();
  for (const [typeUrl, list] of Object.entries(resources)) {
    const hash = createHash('sha256');
    const encoded = new Map<string, PackedAny>();
    const resourceVersions = new Map<string, string>();
    for (const json of [...list].sort((a, b) => resourceName(a).localeCompare(resourceName(b)))) {
      const { packed, version } = memo.encode(json);
      const name = resourceName(json);
      hash.update(name).update('\0').update(packed.value);
      encoded.set(name, packed);
      resourceVersions.set(name, version);
    }
    snapshot.set(typeUrl, { version: hash.digest('hex').slice(0, 16), resources: encoded, resourceVersions });
  }
  memo.endBuild();
  return snapshot;
}
