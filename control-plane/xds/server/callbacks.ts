/** Observability hooks of the xDS server (go-control-plane style): metrics and status subscribe here. */
export interface XdsNodeRef {
  id: string;
  cluster: string;
}

export interface XdsCallbacks {
  onStreamOpen?(streamId: number): void;
  onStreamClosed?(streamId: number, node?: XdsNodeRef): void;
  onPush?(node: XdsNodeRef, typeUrl: string, version: string, nonce: string): void;
  onAck?(node: XdsNodeRef, typeUrl: string, version: string, pushToAckMs: number): void;
  onNack?(node: XdsNodeRef, typeUrl: string, rejectedVersion: string, errorDetail: string): void;
}
