import { createHash } from 'node:crypto';
import { PackedAny, packAny } from '../protobuf/proto-json';
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

export function buildSnapshot(resources: XdsResources): Snapshot {
  const snapshot = new Map<string, TypeSnapshot>();
  for (const [typeUrl, list] of Object.entries(resources)) {
    const hash = createHash('sha256');
    const encoded = new Map<string, PackedAny>();
    const resourceVersions = new Map<string, string>();
    for (const json of [...list].sort((a, b) => resourceName(a).localeCompare(resourceName(b)))) {
      const packed = packAny(json);
      const name = resourceName(json);
      hash.update(name).update('\0').update(packed.value);
      encoded.set(name, packed);
      resourceVersions.set(name, contentHash(packed.value));
    }
    snapshot.set(typeUrl, { version: hash.digest('hex').slice(0, 16), resources: encoded, resourceVersions });
  }
  return snapshot;
}
