/** Gateway-wide settings the translator needs besides the registry: where things listen, and the edge limits. */
export interface GatewaySettings {
  listener: { address: string; port: number };
  /**
   * The agent-facing listener terminates TLS with this certificate and key (PEM files on the Envoy host,
   * read and watched by Envoy through SDS: replaced files are served without a listener change).
   */
  listenerTls?: { certFile: string; keyFile: string };
  /**
   * Envoy's egress listener, for the sidecars' own requests to Tool Services (backend sessions,
   * notifications, DELETE), so that they get the same credentials, TLS and rotation as calls
   * (docs/adr/0013-backend-credentials.md). It sends whatever reaches it with the gateway's backend
   * credentials: with internalTls it takes only sidecar certificates (mutual TLS); without, plain HTTP,
   * so loopback only (docs/adr/0017-closed-inside.md).
   */
  egress: { address: string; port: number };
  /**
   * The sidecars' HTTP addresses: the gateway lane (the MCP methods the gateway answers itself, clients'
   * GET streams) and the call lane's session check (docs/adr/0008-data-path-lanes.md). Every address
   * is an endpoint of each of the three sidecar clusters; a DNS name is resolved by Envoy (STRICT_DNS),
   * every record of it an endpoint (docs/adr/0010-deployment.md).
   */
  sidecars: { address: string; port: number }[];
  /**
   * Mutual TLS on the inside (docs/adr/0017-closed-inside.md): Envoy calls the sidecars over TLS with
   * its own internal certificate, which it reads (and reads again when it changes) from this directory
   * on its host (`tls.crt`, `tls.key`, `ca.crt`), and accepts only sidecar certificates of that CA.
   * Without it the sidecar clusters are plain HTTP (loopback only).
   */
  internalTls?: { envoyDir: string };
  /** Largest JSON-RPC request body, on every HTTP version (the mcp filter refuses larger ones). */
  maxRequestBodyBytes: number;
  /**
   * How long Envoy waits for the session check, which may open a backend's session. The check itself
   * answers by this time less SESSION_CHECK_MARGIN_MS, naming the slow backend (the sidecar is told
   * the limit with each check: CHECK_HEADERS.deadline).
   */
  sessionCheckTimeoutMs: number;
  /** Rate and concurrency limits (docs/quotas.md). */
  quotas: QuotaSettings;
  /** The listener's edge limits (docs/adr/0009-edge-hardening.md). */
  edge: EdgeSettings;
  /** Circuit breakers of every Tool Service cluster: what one backend may hold of Envoy. */
  toolServiceLimits: ToolServiceLimits;
  /** Who may reach the gateway: its public URL, and the Host and Origin values it serves (docs/auth.md). */
  access: AccessSettings;
  /**
   * The control plane writes an audit (control-plane/audit/): the call script hands each call's
   * arguments (raw JSON) to the call log, for the audit's arguments hash, and the call log's record
   * carries the audit's fields. Off without an audit: then neither is copied nor formatted.
   */
  auditArguments: boolean;
  /**
   * Envoy's JSON access log of the agents' listener on stdout (docs/observability.md#logs): one line per
   * request. On by default; off (`--no-envoy-access-log`) saves Envoy about 25 µs of CPU per request
   * (docs/adr/0008-data-path-lanes.md, "The two access logs"). The call log, metrics and audit do not
   * depend on it.
   */
  envoyAccessLog: boolean;
  /** Envoy's spans (docs/observability.md#traces); absent, no tracer is configured at all. */
  tracing?: GatewayTracing;
}

/** `*`: any value. */
export type AllowList = readonly string[] | '*';

export interface AccessSettings {
  /** The gateway's public origin, scheme://host[:port]: resource URLs are <publicUrl>/mcp/<key> (docs/auth.md). */
  publicUrl: string;
  /** Host header values served (Envoy virtual-host domains, `*.example.com` allowed); any other Host gets 403 (DNS rebinding). */
  allowedHosts: AllowList;
  /**
   * Origin header values served and answered with CORS (exact origins; `*` inside one matches any
   * characters of a host or port, e.g. `http://localhost:*`); any other Origin gets 403 (MCP transport
   * MUST). A request without Origin (not from a browser) is not affected.
   */
  allowedOrigins: AllowList;
}

/**
 * Where Envoy reaches the ratelimit service: a host and port, or a Unix domain socket on Envoy's host
 * (what the dev stack and `mcpgw up` use: only processes allowed into its directory can connect;
 * docs/quotas.md).
 */
export type RateLimitServiceAddress = { address: string; port: number } | { socketPath: string };

export interface QuotaSettings {
  /**
   * The ratelimit service (envoyproxy/ratelimit, gRPC) that counts shared limits for every Envoy;
   * without one, every shared limit is a limit its service cannot answer for (its whenServiceDown).
   */
  rateLimitService?: RateLimitServiceAddress;
  /** How long Envoy waits for the ratelimit service before a shared limit's whenServiceDown applies. */
  rateLimitTimeoutMs: number;
  /**
   * Callers (or tools) each per-instance limit keeps its own count for; past it, the one seen least
   * recently starts over.
   */
  maxTrackedCallers: number;
  /**
   * Shared limits of tools/call leased per Envoy worker instead of asked per call (docs/adr/0016-quotas.md,
   * "Leased shared limits"): `workers` is how many Envoy workers share the limits (every Envoy's
   * --concurrency together), which bounds a lease to 1/20 of a limit across them. Absent: one check per call.
   */
  sharedLimitLeases?: { workers: number };
}

/**
 * Envoy's edge-proxy settings on the one listener (Envoy's "Configuring Envoy as an edge proxy"), each
 * an `mcpgw control-plane` flag. They live in the listener, which never changes with the registry.
 */
export interface EdgeSettings {
  /** A connection's read and write buffers before Envoy applies back-pressure (listener per_connection_buffer_limit_bytes). */
  perConnectionBufferLimitBytes: number;
  /** From a request's first byte to the end of its headers (slow-header clients). */
  requestHeadersTimeoutMs: number;
  /** From a request's first byte to the end of its body; stops once the response has begun, so it never cuts a streamed answer. */
  requestTimeoutMs: number;
  /** A stream with no bytes either way (routes set their own: calls, GET streams). */
  streamIdleTimeoutMs: number;
  /** A connection with no request in flight; shortened under connection or memory pressure. */
  connectionIdleTimeoutMs: number;
  /** Request headers of one request, in KiB (431 past it). */
  maxRequestHeadersKb: number;
  /** Request headers of one request, counted (431 past it). */
  maxHeadersCount: number;
  /** Load balancers in front whose X-Forwarded-For entries are trusted (0: the gateway is the edge). */
  xffNumTrustedHops: number;
  /** Streams at once on one HTTP/2 connection. */
  http2MaxConcurrentStreams: number;
  /** HTTP/2 flow-control windows: what a client may send ahead of Envoy reading it. */
  http2InitialStreamWindowBytes: number;
  http2InitialConnectionWindowBytes: number;
}

/** What one Tool Service may hold of Envoy (its cluster's circuit breakers; past them its calls fail at once, -32004). */
export interface ToolServiceLimits {
  /** Calls in flight to it (HTTP/1.1: one upstream connection each). */
  maxRequests: number;
  /** Calls waiting for a connection to it. */
  maxPendingRequests: number;
}

/** Envoy's OpenTelemetry tracer: a gateway setting, so it changes the listener only when it changes. */
export interface GatewayTracing {
  /** OTLP/HTTP base URL of the collector, e.g. http://collector:4318: Envoy posts spans to `<url>/v1/traces`. */
  otlpEndpoint: string;
  /** Share of the traces Envoy starts that are kept (0…1); a caller's sampled flag is followed. */
  samplingRatio: number;
  /** `service.name` of Envoy's spans. */
  serviceName: string;
}

/** Defaults of the settings above that are not addresses (docs/xds.md and docs/adr/0009-edge-hardening.md say why). */
export const GATEWAY_DEFAULTS = {
  maxRequestBodyBytes: 1024 * 1024,
  sessionCheckTimeoutMs: 6_000,
  quotas: { rateLimitTimeoutMs: 200, maxTrackedCallers: 10_000 } satisfies QuotaSettings as QuotaSettings,
  edge: {
    perConnectionBufferLimitBytes: 32 * 1024,
    requestHeadersTimeoutMs: 10_000,
    requestTimeoutMs: 60_000,
    streamIdleTimeoutMs: 300_000,
    connectionIdleTimeoutMs: 300_000,
    maxRequestHeadersKb: 64,
    maxHeadersCount: 100,
    xffNumTrustedHops: 0,
    http2MaxConcurrentStreams: 100,
    http2InitialStreamWindowBytes: 64 * 1024,
    http2InitialConnectionWindowBytes: 1024 * 1024,
  } satisfies EdgeSettings,
  toolServiceLimits: { maxRequests: 1024, maxPendingRequests: 1024 } satisfies ToolServiceLimits,
  auditArguments: false,
  envoyAccessLog: true,
};

/**
 * The session check answers this long before Envoy's --session-check-timeout-ms: a backend whose
 * session cannot be opened in time is named in a -32004, never reported as the sidecar being away.
 */
export const SESSION_CHECK_MARGIN_MS = 500;

export const LISTENER_NAME = 'mcp_gateway';
/** The bootstrap's cluster of the control planes' call-log ports (envoy/bootstrap.yaml): Envoy's fluentd logger sends there. */
export const CALL_LOG_CLUSTER_NAME = 'call_log_control_plane';
export const ROUTE_CONFIG_NAME = 'mcp_routes';
/** The egress listener and its routes (one per Tool Service cluster). */
export const EGRESS_LISTENER_NAME = 'mcp_egress';
export const EGRESS_ROUTE_CONFIG_NAME = 'mcp_egress_routes';
/** The header the gateway's components name the cluster of a request on the egress listener with (removed before it leaves). */
export const EGRESS_UPSTREAM_HEADER = 'x-mcpgw-upstream';
/** The sidecars' gateway lane: initialize, tools/list, notifications, DELETE, … (short requests). */
export const SIDECAR_CLUSTER_NAME = 'mcp_sidecar';
/** The same sidecars, for clients' standalone GET streams: long-lived, so limited apart from the rest. */
export const SIDECAR_STREAMS_CLUSTER_NAME = 'mcp_sidecar_streams';
/** The same sidecars, for the call lane's session check (ext_authz over HTTP). */
export const SIDECAR_CHECK_CLUSTER_NAME = 'mcp_sidecar_check';
/** The OTLP collector, for Envoy's spans (only with tracing settings). */
export const OTEL_COLLECTOR_CLUSTER_NAME = 'otel_collector';
/** Where the sidecar serves the session check; Envoy prefixes the call's own path with it. */
export const SESSION_CHECK_PATH = '/check';
/** The ratelimit service (envoyproxy/ratelimit) of shared limits, over gRPC. */
export const RATELIMIT_CLUSTER_NAME = 'mcpgw_ratelimit';
/** Dynamic-metadata namespace the call lane writes (route, backend, tool, JSON-RPC id, fallback, outcome) for Envoy's formatters. */
export const METADATA_NAMESPACE = 'mcpgw';
/** The mcp filter's own dynamic-metadata namespace (method, id, params.name). */
export const MCP_METADATA_NAMESPACE = 'envoy.filters.http.mcp';
/** ext_authz's namespace: the headers the session check names in dynamic_metadata_from_headers. */
export const EXT_AUTHZ_METADATA_NAMESPACE = 'envoy.filters.http.ext_authz';
/** Headers the session check receives from the call script's metadata and may send back. */
/**
 * Set by Envoy's catch-all `unknown_route` only: the route key is unknown to Envoy too. Without it a key
 * the sidecar's catalog does not know yet is one Envoy already routes (a registry change reaches Envoy
 * before the catalog, which waits for Envoy's ACK): "being added, call again", not 404.
 */
export const ENVOY_UNKNOWN_ROUTE_HEADER = 'x-mcpgw-envoy-unknown-route';

export const CHECK_HEADERS = {
  route: 'x-mcpgw-route',
  backend: 'x-mcpgw-backend',
  tool: 'x-mcpgw-tool',
  /** The request's JSON-RPC method (tools/call, prompts/get, resources/read, …), which errors name. */
  method: 'x-mcpgw-method',
  rpcId: 'x-mcpgw-rpc-id',
  /** By when (ms from the check's start) the check must have answered: Envoy's timeout less SESSION_CHECK_MARGIN_MS. */
  deadline: 'x-mcpgw-check-deadline-ms',
  /** The backend session a call went in, and the gateway session it belongs to, kept for the response side (a lost session). */
  backendSession: 'x-mcpgw-backend-session',
  gatewaySession: 'x-mcpgw-gateway-session',
  /**
   * The caller's own Authorization, moved here by the call script on a route whose backend credentials
   * come from it (token exchange, passthrough): the sidecar makes the backend's Authorization from it
   * (the script's credential request) and opens backend sessions with it (the check); the route removes it.
   */
  callerAuthorization: 'x-mcpgw-caller-authorization',
  /** The client's address as Envoy resolved it: the caller of a per-caller limit on a route without auth. */
  clientAddress: 'x-mcpgw-client-address',
  /** The call's per-caller concurrency limits, from the call script (M.in_flight_limits in call-lane.lua). */
  concurrency: 'x-mcpgw-concurrency',
  /** The concurrency slots the check took for the call, which Envoy's call log gives back when the call ends. */
  concurrencyLease: 'x-mcpgw-concurrency-lease',
} as const;

/**
 * With tracing on, the call script learns the ids of Envoy's span of the call from this header
 * (`<trace id>-<span id>`, added before the script runs, only to a request with a traceparent), to
 * write them into params._meta.
 */
export const SPAN_IDS_HEADER = 'x-mcpgw-span';

/** Envoy's answer statuses (ext_authz): 200 lets the call go; anything else is the client's answer. */
export const CHECK_STATUS = {
  ALLOW: 200,
  /**
   * A JSON-RPC error for the client, which Envoy's local-reply mapper sends with status 200 (MCP
   * clients read JSON-RPC errors only from 2xx answers; 200 itself would mean "allowed" here).
   */
  JSON_RPC_ERROR: 424,
} as const;

/**
 * The call script sets this on a stateless (2026-07-28) client's call that goes in a pooled backend
 * session, and asks Envoy to choose the route again: the backend's pooled-call route, whose upstream is
 * a sidecar that resumes the call's stream when the backend ends it before the answer
 * (docs/adr/0018-stream-relaying.md). A client's own header of this name is dropped at the edge.
 */
export const POOLED_LANE_HEADER = 'x-mcpgw-lane';
/** Where the pooled-call route sends such a call on a sidecar. */
export const POOLED_CALL_PATH = '/internal/pooled-call';
