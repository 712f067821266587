import { PackedAny } from '../protobuf/proto-json';
import { PUSH_ORDER, WILDCARD_TYPES } from './push-order';
import { XdsCallbacks, XdsNodeRef } from './callbacks';
import { Snapshot, TypeSnapshot } from './snapshot';

export interface DeltaDiscoveryRequest {
  node?: { id: string; cluster: string } | null;
  type_url: string;
  resource_names_subscribe: string[];
  resource_names_unsubscribe: string[];
  /** Filled only in the first request of a type on a stream: what the client kept from an earlier stream. */
  initial_resource_versions: Record<string, string>;
  response_nonce: string;
  error_detail?: { code: number; message: string } | null;
}

export interface DeltaResource {
  name: string;
  version: string;
  resource: PackedAny;
}

export interface DeltaDiscoveryResponse {
  system_version_info: string;
  resources: DeltaResource[];
  removed_resources: string[];
  type_url: string;
  nonce: string;
}

const WILDCARD_NAME = '*';
/** Differs from every real version, so the next push either sends the resource or reports it removed. */
const UNKNOWN_VERSION = '';

interface Push {
  nonce: string;
  version: string;
  at: number;
}

interface DeltaTypeState {
  wildcard: boolean;
  /** Names subscribed one by one, besides or instead of the wildcard. */
  subscribed: Set<string>;
  /** The version of each resource the client holds: what it reported on (re)connect, then what we sent. */
  clientVersions: Map<string, string>;
  lastPush?: Push;
}

/**
 * Incremental (delta) ADS on one gRPC stream per Envoy: each push carries only the resources whose
 * content hash the client does not hold, and the names it holds that are gone. Versions are recorded
 * when sent, so a NACKed resource is not resent until its content changes.
 */
export class DeltaAdsStream {
  private node?: XdsNodeRef;
  private readonly types = new Map<string, DeltaTypeState>();
  private nonceCounter = 0;

  constructor(
    private readonly send: (response: DeltaDiscoveryResponse) => void,
    private readonly callbacks: XdsCallbacks,
  ) {}

  nodeRef(): XdsNodeRef | undefined {
    return this.node;
  }

  onRequest(request: DeltaDiscoveryRequest, snapshot: Snapshot): void {
    if (request.node && !this.node) this.node = { id: request.node.id, cluster: request.node.cluster };
    let state = this.types.get(request.type_url);
    if (!state) {
      // Legacy wildcard: a first LDS or CDS request that names nothing asks for everything.
      const wildcard = WILDCARD_TYPES.has(request.type_url) && request.resource_names_subscribe.length === 0;
      state = { wildcard, subscribed: new Set(), clientVersions: new Map() };
      this.types.set(request.type_url, state);
    }
    if (request.response_nonce) this.recordAnswer(request, state);
    // Applied even when answering a superseded push: a delta request states each subscription change only once.
    this.updateSubscription(request, state);
    this.pushChanges(request.type_url, state, snapshot);
  }

  onSnapshot(snapshot: Snapshot): void {
    for (const typeUrl of PUSH_ORDER) {
      const state = this.types.get(typeUrl);
      if (state) this.pushChanges(typeUrl, state, snapshot);
    }
  }

  private recordAnswer(request: DeltaDiscoveryRequest, state: DeltaTypeState): void {
    const push = state.lastPush;
    if (!this.node || request.response_nonce !== push?.nonce) return;
    if (request.error_detail) {
      this.callbacks.onNack?.(this.node, request.type_url, push.version, request.error_detail.message);
    } else {
      this.callbacks.onAck?.(this.node, request.type_url, push.version, Date.now() - push.at);
    }
  }

  private updateSubscription(request: DeltaDiscoveryRequest, state: DeltaTypeState): void {
    const wildcardAllowed = WILDCARD_TYPES.has(request.type_url);
    for (const name of request.resource_names_subscribe) {
      if (name === WILDCARD_NAME && wildcardAllowed) {
        state.wildcard = true;
        continue;
      }
      state.subscribed.add(name);
      // The client may have dropped its copy just before re-subscribing, so it gets the resource again.
      state.clientVersions.delete(name);
    }
    for (const name of request.resource_names_unsubscribe) {
      if (name === WILDCARD_NAME && wildcardAllowed) {
        state.wildcard = false;
        // The client drops by itself what it held only through the wildcard.
        for (const held of state.clientVersions.keys()) if (!state.subscribed.has(held)) state.clientVersions.delete(held);
        continue;
      }
      state.subscribed.delete(name);
      // Under a wildcard the client still wants the resource and waits to hear whether it exists.
      if (state.wildcard) state.clientVersions.set(name, UNKNOWN_VERSION);
      else state.clientVersions.delete(name);
    }
    for (const [name, version] of Object.entries(request.initial_resource_versions)) state.clientVersions.set(name, version);
  }

  private pushChanges(typeUrl: string, state: DeltaTypeState, snapshot: Snapshot): void {
    const typeSnapshot = snapshot.get(typeUrl);
    if (!typeSnapshot) return;
    const resources = changedResources(typeSnapshot, state);
    const removedResources = [...state.clientVersions.keys()].filter((name) => !typeSnapshot.resources.has(name));
    // Envoy completes its initialization only once its first wildcard request is answered, even with nothing.
    const firstWildcardAnswer = state.wildcard && !state.lastPush;
    if (resources.length === 0 && removedResources.length === 0 && !firstWildcardAnswer) return;

    for (const resource of resources) state.clientVersions.set(resource.name, resource.version);
    for (const name of removedResources) state.clientVersions.delete(name);
    const nonce = String(++this.nonceCounter);
    state.lastPush = { nonce, version: typeSnapshot.version, at: Date.now() };
    this.send({
      system_version_info: typeSnapshot.version,
      resources,
      removed_resources: removedResources,
      type_url: typeUrl,
      nonce,
    });
    if (this.node) this.callbacks.onPush?.(this.node, typeUrl, typeSnapshot.version, nonce);
  }
}

/** Resources the client subscribes to (by name or wildcard) and does not hold in their current version. */
function changedResources(typeSnapshot: TypeSnapshot, state: DeltaTypeState): DeltaResource[] {
  const changed: DeltaResource[] = [];
  for (const [name, version] of typeSnapshot.resourceVersions) {
    const subscribed = state.wildcard || state.subscribed.has(name);
    if (subscribed && state.clientVersions.get(name) !== version) {
      changed.push({ name, version, resource: typeSnapshot.resources.get(name)! });
    }
  }
  return changed;
}
