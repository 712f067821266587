/** Gateway-wide settings the translator needs besides the registry: where things listen. */
export interface GatewaySettings {
  listener: { address: string; port: number };
  /** The sidecar's ext_proc gRPC address; Envoy reaches it through a cluster sent over CDS. */
  sidecar: { address: string; port: number };
  /** The sidecars' HTTP address for clients' GET streams (tools/list_changed); none: GET is answered 405. */
  sidecarStreams?: { address: string; port: number };
}

export const LISTENER_NAME = 'mcp_gateway';
export const ROUTE_CONFIG_NAME = 'mcp_routes';
export const SIDECAR_CLUSTER_NAME = 'mcp_sidecar';
/** The sidecars' HTTP side, where clients' GET streams are held (steered there by the sidecar, like a call). */
export const SIDECAR_STREAMS_CLUSTER_NAME = 'mcp_sidecar_streams';
/** Set only by the sidecar (clients' copies are removed) to steer a tools/call to one Tool Service. */
export const BACKEND_CLUSTER_HEADER = 'x-mcpgw-cluster';
/** Dynamic-metadata namespace the sidecar writes (JSON-RPC id, backend, tool, fallback) for Envoy's formatters. */
export const METADATA_NAMESPACE = 'mcpgw';
