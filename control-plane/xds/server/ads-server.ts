import * as grpc from '@grpc/grpc-js';
import { PackedAny } from '../protobuf/proto-json';
import { XdsCallbacks, XdsNodeRef } from './callbacks';
import { DeltaAdsStream, DeltaDiscoveryRequest, DeltaDiscoveryResponse } from './delta-ads-stream';
import { PUSH_ORDER, WILDCARD_TYPES } from './push-order';
import { Snapshot } from './snapshot';
import { SnapshotCache } from './snapshot-cache';

interface DiscoveryRequest {
  version_info: string;
  node?: { id: string; cluster: string } | null;
  resource_names: string[];
  type_url: string;
  response_nonce: string;
  error_detail?: { code: number; message: string } | null;
}

interface DiscoveryResponse {
  version_info: string;
  resources: PackedAny[];
  type_url: string;
  nonce: string;
}


interface TypeState {
  /** undefined: wildcard subscription. */
  names?: Set<string>;
  sentVersion?: string;
  sentNames?: string;
  sentNonce?: string;
  sentAt?: number;
}

function namesKey(names: Set<string> | undefined): string {
  return names ? [...names].sort().join(',') : '*';
}

/**
 * State-of-the-world ADS on one gRPC stream per Envoy. A NACKed version is never resent: the stream
 * remembers what it sent, and only a new snapshot version (or a new subscription) triggers a push.
 */
export class AdsStream {
  private node?: XdsNodeRef;
  private readonly types = new Map<string, TypeState>();
  private nonceCounter = 0;

  constructor(
    private readonly send: (response: DiscoveryResponse) => void,
    private readonly callbacks: XdsCallbacks,
  ) {}

  nodeRef(): XdsNodeRef | undefined {
    return this.node;
  }

  onRequest(request: DiscoveryRequest, snapshot: Snapshot): void {
    if (request.node && !this.node) this.node = { id: request.node.id, cluster: request.node.cluster };
    const state = this.types.get(request.type_url) ?? {};
    this.types.set(request.type_url, state);

    if (request.response_nonce) {
      if (request.response_nonce !== state.sentNonce) return; // answer to a superseded push
      if (this.node) {
        if (request.error_detail) {
          this.callbacks.onNack?.(this.node, request.type_url, state.sentVersion ?? '', request.error_detail.message);
        } else {
          this.callbacks.onAck?.(this.node, request.type_url, request.version_info, Date.now() - (state.sentAt ?? Date.now()));
        }
      }
    }
    const wildcard = WILDCARD_TYPES.has(request.type_url) && request.resource_names.length === 0;
    state.names = wildcard ? undefined : new Set(request.resource_names);
    this.pushIfChanged(request.type_url, state, snapshot);
  }

  onSnapshot(snapshot: Snapshot): void {
    for (const typeUrl of PUSH_ORDER) {
      const state = this.types.get(typeUrl);
      if (state) this.pushIfChanged(typeUrl, state, snapshot);
    }
  }

  private pushIfChanged(typeUrl: string, state: TypeState, snapshot: Snapshot): void {
    const typeSnapshot = snapshot.get(typeUrl);
    if (!typeSnapshot) return;
    const names = namesKey(state.names);
    if (state.sentVersion === typeSnapshot.version && state.sentNames === names) return;
    const resources = [...typeSnapshot.resources.entries()]
      .filter(([name]) => !state.names || state.names.has(name))
      .map(([, packed]) => packed);
    const nonce = String(++this.nonceCounter);
    Object.assign(state, { sentVersion: typeSnapshot.version, sentNames: names, sentNonce: nonce, sentAt: Date.now() });
    this.send({ version_info: typeSnapshot.version, resources, type_url: typeUrl, nonce });
    if (this.node) this.callbacks.onPush?.(this.node, typeUrl, typeSnapshot.version, nonce);
  }
}

/** What the gRPC handlers need of a stream, state of the world or delta. */
interface XdsStream<Request> {
  nodeRef(): XdsNodeRef | undefined;
  onRequest(request: Request, snapshot: Snapshot): void;
  onSnapshot(snapshot: Snapshot): void;
}

let streamCounter = 0;

/** One ADS call's lifecycle: follow the cache while open; end and error may both fire, the close is reported once. */
function serveStream<Request, Response>(
  call: grpc.ServerDuplexStream<Request, Response>,
  cache: SnapshotCache,
  callbacks: XdsCallbacks,
  createStream: (send: (response: Response) => void) => XdsStream<Request>,
): void {
  const streamId = ++streamCounter;
  const stream = createStream((response) => call.write(response));
  const unwatch = cache.watch((snapshot) => stream.onSnapshot(snapshot));
  callbacks.onStreamOpen?.(streamId);
  call.on('data', (request: Request) => stream.onRequest(request, cache.current()));
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    unwatch();
    callbacks.onStreamClosed?.(streamId, stream.nodeRef());
  };
  call.on('end', () => {
    close();
    call.end();
  });
  call.on('error', close);
}

export function adsServiceHandlers(cache: SnapshotCache, callbacks: XdsCallbacks): grpc.UntypedServiceImplementation {
  return {
    StreamAggregatedResources: (call: grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) =>
      serveStream(call, cache, callbacks, (send) => new AdsStream(send, callbacks)),
    DeltaAggregatedResources: (call: grpc.ServerDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>) =>
      serveStream(call, cache, callbacks, (send) => new DeltaAdsStream(send, callbacks)),
  };
}
