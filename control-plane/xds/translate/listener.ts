import { CALLER_CLAIM_HEADERS, CALLER_HEADER_NAMES } from '../../auth/caller-identity';
import { EGRESS_FAILURE_BODY } from '../../shared/egress-fetch';
import { TypedJson } from '../protobuf/proto-json';
import { originCheckFilter } from './access';
import { jwtAuthnFilter } from './auth';
import { callScriptFilter, mcpFilter, sessionCheckFilter } from './call-lane';
import { localReplyConfig } from './local-replies';
import { LIMIT_HEADER, quotaFilters } from './quotas';
import { duration } from './duration';
import { internalListenerTransportSocket } from './internal-tls';
import { LISTENER_CERTIFICATE_SECRET, sdsSecret } from './secrets';
import { AUDIT_ONLY_KEYS, CallLogWireRecord } from '../../admin/call-log';
import {
  CALL_LOG_CLUSTER_NAME,
  CHECK_HEADERS,
  EXT_AUTHZ_METADATA_NAMESPACE,
  EGRESS_LISTENER_NAME,
  EGRESS_ROUTE_CONFIG_NAME,
  EdgeSettings,
  GatewaySettings,
  LISTENER_NAME,
  MCP_METADATA_NAMESPACE,
  METADATA_NAMESPACE,
  POOLED_LANE_HEADER,
  ROUTE_CONFIG_NAME,
} from './settings';
import { connectionManagerTracing, spanIdsFilter } from './tracing';
import { TYPE_URL, typedStruct } from './type-urls';

/** A key of the call script's dynamic metadata, as the access logs format it; `cut` bounds a value a client or token chose. */
const ours = (key: string, cut?: number) => `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:${key})${cut ? `:${cut}` : ''}%`;
/** A key of the mcp filter's parse of the request (either lane). */
const parsed = (path: string, cut: number) => `%DYNAMIC_METADATA(${MCP_METADATA_NAMESPACE}:${path}):${cut}%`;

/**
 * The caller of a call as the call script recorded it (one value, `caller`, holding the three parts),
 * cut to a bounded length: the token's issuer chose it.
 */
const callerOf = (part: 'iss' | 'sub' | 'client') => ours(`caller:${part}`, 256);

export const accessLog = {
  name: 'envoy.access_loggers.stdout',
  typed_config: {
    '@type': TYPE_URL.stdoutAccessLog,
    log_format: {
      json_format: {
        // Values a client chooses are cut to a bounded length (:N), so that no request can swell the log.
        start_time: '%START_TIME%',
        method: '%REQ(:METHOD):16%',
        path: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH):256%',
        status: '%RESPONSE_CODE%',
        flags: '%RESPONSE_FLAGS%',
        details: '%RESPONSE_CODE_DETAILS%',
        envoy_route: '%ROUTE_NAME%',
        upstream_cluster: '%UPSTREAM_CLUSTER%',
        duration_ms: '%DURATION%',
        attempts: '%UPSTREAM_REQUEST_ATTEMPT_COUNT%',
        request_id: '%REQ(X-REQUEST-ID):64%',
        traceparent: '%REQ(TRACEPARENT):64%',
        route_key: ours('route'),
        // The mcp filter's parse of every request, either lane.
        rpc_method: parsed('method', 64),
        rpc_id: parsed('id', 64),
        backend: ours('backend'),
        tool: ours('tool', 128),
        // Set by the call script when it knows the call's outcome: ok, failed, degraded or denied.
        outcome: ours('outcome'),
        // Who called (docs/approval-and-audit.md), as the call script recorded it from jwt_authn's claim
        // headers (the route removes those before the request leaves, and the log sees the request as
        // it left): calls, prompts and resources on routes with auth; absent elsewhere. The client is
        // `client_id` (RFC 9068), else `azp` (Keycloak).
        caller_iss: callerOf('iss'),
        caller_sub: callerOf('sub'),
        caller_client_id: callerOf('client'),
      },
    },
  },
};

/** 401 (no or invalid token) to 403 (scope, audience, origin): a request the gateway refused to its caller. */
const DENIED_STATUSES = { min: 401, max: 403 };
const statusIs = (op: 'GE' | 'LE', value: number) => ({
  status_code_filter: { comparison: { op, value: { default_value: value, runtime_key: `mcpgw.call_log.denied_status_${op === 'GE' ? 'min' : 'max'}` } } },
});

/**
 * The call log's two batches (docs/adr/0008-data-path-lanes.md, "The call log's batches"). A call that
 * holds concurrency slots waits at most LEASED_CALLS_FLUSH_INTERVAL for its record to leave: a caller
 * at its concurrency limit calls again this soon after one of its calls ended (docs/adr/0016-quotas.md,
 * Concurrency). Every other record waits at most CALL_LOG_FLUSH_INTERVAL: what reads them (metrics,
 * the dashboard, the audit, a backend marked degraded) needs no quicker answer, and each batch wakes
 * the control plane — at 300 calls/s 50 ms batches cost it about as much as the records they carried.
 */
const LEASED_CALLS_FLUSH_INTERVAL = '0.050s';
const CALL_LOG_FLUSH_INTERVAL = '0.250s';
/** Envoy sends a batch when it reaches this size, or at the flush interval (the receiver bounds what it holds by it). */
export const CALL_LOG_BUFFER_BYTES = 65536;

/**
 * What one call-log message may hold (the receiver refuses more before it completes): a batch of
 * Envoy's buffer, and one record past it whose client-chosen values fill two request bodies (the
 * call script keeps the arguments, the tool name and the id — twice — uncut) and its headers.
 */
export const callLogMessageBytes = (gateway: Pick<GatewaySettings, 'maxRequestBodyBytes' | 'edge'>) =>
  CALL_LOG_BUFFER_BYTES + 2 * gateway.maxRequestBodyBytes + gateway.edge.maxRequestHeadersKb * 1024 + 64 * 1024;

/**
 * The call log's record (control-plane/admin/call-log.ts callLogEntrySchema reads it): the call
 * script's record of the call as one value — its whole metadata namespace, which the consumers read
 * most of (route, backend, tool, outcome, fallback, the caller, the approval, with an audit the
 * arguments) — and one format string per key of Envoy's own that the consumers read. Envoy formats
 * each key per call: one formatter for the script's record costs Envoy a fraction of one per value
 * (docs/adr/0008-data-path-lanes.md, "Session 9: a leaner call-log record"). The script's values are
 * cut to their bounds where they are read (the decoder), Envoy's own a client chooses here; the record
 * holds at most about two request bodies (the arguments, the tool name and the id, which the script
 * keeps twice), which bounds what the receiver accepts (callLogMessageBytes).
 */
const CALL_LOG_RECORD = {
  script: `%DYNAMIC_METADATA(${METADATA_NAMESPACE})%`,
  rpc_method: parsed('method', 64),
  lease: `%DYNAMIC_METADATA(${EXT_AUTHZ_METADATA_NAMESPACE}:${CHECK_HEADERS.concurrencyLease}):512%`,
  start_ms: '%START_TIME(%s%3f)%',
  duration_ms: '%DURATION%',
  status: '%RESPONSE_CODE%',
  details: '%RESPONSE_CODE_DETAILS%',
  flags: '%RESPONSE_FLAGS_LONG%',
  attempts: '%UPSTREAM_REQUEST_ATTEMPT_COUNT%',
  envoy_route: '%ROUTE_NAME%',
  upstream: '%UPSTREAM_REMOTE_ADDRESS%',
  upstream_tls_failure: '%UPSTREAM_TRANSPORT_FAILURE_REASON%',
  limit: `%RESP(${LIMIT_HEADER}):256%`,
  ratelimit_limit: '%RESP(X-RATELIMIT-LIMIT):1024%',
  rpc_tool: parsed('params:name', 256),
  request_id: '%REQ(X-REQUEST-ID):64%',
  path: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH):256%',
  claim_iss: `%REQ(${CALLER_CLAIM_HEADERS.iss}):256%`,
  claim_sub: `%REQ(${CALLER_CLAIM_HEADERS.sub}):256%`,
  claim_client_id: `%REQ(${CALLER_CLAIM_HEADERS.client_id}):256%`,
  claim_azp: `%REQ(${CALLER_CLAIM_HEADERS.azp}):256%`,
} satisfies Record<keyof CallLogWireRecord, string>;

/** The record without the audit's keys when the control plane writes no audit (the script then records no arguments). */
export function callLogRecord(audit: boolean): Record<string, string> {
  if (audit) return CALL_LOG_RECORD;
  return Object.fromEntries(Object.entries(CALL_LOG_RECORD).filter(([key]) => !(AUDIT_ONLY_KEYS as readonly string[]).includes(key)));
}

/**
 * Every tools/call (either lane), every request refused with 401 to 403, and every request a limit
 * refused on either lane: what the call log carries.
 */
const CALL_LOG_FILTER = {
  or_filter: {
    filters: [
      {
        metadata_filter: {
          matcher: { filter: MCP_METADATA_NAMESPACE, path: [{ key: 'method' }], value: { string_match: { exact: 'tools/call' } } },
          match_if_key_not_found: false,
        },
      },
      { and_filter: { filters: [statusIs('GE', DENIED_STATUSES.min), statusIs('LE', DENIED_STATUSES.max)] } },
      { status_code_filter: { comparison: { op: 'EQ', value: { default_value: 429, runtime_key: 'mcpgw.call_log.limited_status' } } } },
      { response_flag_filter: { flags: ['RLSE'] } },
    ],
  },
};

/**
 * Whether the session check gave the call a concurrency lease (a non-empty value), or not (absent or
 * empty): the two halves of every record, so that each goes in exactly one of the two batches. Envoy's
 * metadata filter has no negation: the second half is "absent, or equal to the empty string".
 */
const leaseMatch = (held: boolean) => ({
  metadata_filter: {
    matcher: {
      filter: EXT_AUTHZ_METADATA_NAMESPACE,
      path: [{ key: CHECK_HEADERS.concurrencyLease }],
      value: { string_match: held ? { safe_regex: { regex: '.+' } } : { exact: '' } },
    },
    match_if_key_not_found: !held,
  },
});

/**
 * The call log, sent to the control plane (control-plane/admin/call-log-receiver.ts) by Envoy's fluentd
 * logger over the call-log cluster (envoy/bootstrap.yaml), which counts outcomes and durations by
 * route, backend and tool, refusals by limit, writes the audit (control-plane/audit/), and gives back
 * the concurrency slots of the calls that ended (control-plane/quotas/concurrency-slots.ts): whatever
 * ended a call — its answer, the client gone, a timeout, a reset — Envoy logs it. Off the request path,
 * in two loggers that split the records by whether the call held slots: the same record, each call in
 * one of them, the leased calls' batches sent sooner.
 */
function callLog(record: Record<string, string>, leased: boolean) {
  return {
    name: 'envoy.access_loggers.fluentd',
    filter: { and_filter: { filters: [CALL_LOG_FILTER, leaseMatch(leased)] } },
    typed_config: {
      '@type': TYPE_URL.fluentdAccessLog,
      cluster: CALL_LOG_CLUSTER_NAME,
      tag: 'mcpgw_calls',
      stat_prefix: leased ? 'mcpgw_leased_calls' : 'mcpgw_calls',
      buffer_flush_interval: leased ? LEASED_CALLS_FLUSH_INTERVAL : CALL_LOG_FLUSH_INTERVAL,
      buffer_size_bytes: CALL_LOG_BUFFER_BYTES,
      record,
    },
  };
}

/** The call log's two loggers (leased calls, the rest) with one record. */
export const callLogs = (record: Record<string, string>) => [callLog(record, true), callLog(record, false)];

/**
 * TLS for agents: the certificate is an SDS secret by name, its files read and watched by Envoy, so a
 * rotated certificate changes no byte of the listener (which would drain it) and cuts no connection.
 */
function agentTlsSocket() {
  return {
    name: 'envoy.transport_sockets.tls',
    typed_config: {
      '@type': TYPE_URL.downstreamTls,
      common_tls_context: {
        tls_certificate_sds_secret_configs: [sdsSecret(LISTENER_CERTIFICATE_SECRET)],
        alpn_protocols: ['h2', 'http/1.1'],
      },
    },
  };
}

/**
 * Before Envoy reads a request's headers: a client's own Forwarded, and its own X-Forwarded-For unless
 * a trusted load balancer in front writes it, are dropped, so that the X-Forwarded-For a backend gets
 * holds the address Envoy saw (use_remote_address appends it) and nothing a client made up. So is its
 * own lane header: only the call script picks the sidecar's pooled-call route (before any route is chosen).
 * A client's own copies of the caller's claim headers are dropped too: only jwt_authn sets them (docs/auth.md).
 */
function clientHeadersDropped(xffNumTrustedHops: number) {
  const dropped = [...(xffNumTrustedHops === 0 ? ['forwarded', 'x-forwarded-for'] : ['forwarded']), POOLED_LANE_HEADER, ...CALLER_HEADER_NAMES];
  return {
    name: 'envoy.http.early_header_mutation.header_mutation',
    typed_config: typedStruct(TYPE_URL.earlyHeaderMutation, { mutations: dropped.map((remove) => ({ remove })) }),
  };
}

/**
 * The HCM's edge settings (Envoy's "Configuring Envoy as an edge proxy"; each value is a setting,
 * docs/adr/0009-edge-hardening.md): slow or silent clients are timed out, headers and HTTP/2 streams
 * are bounded, and the client's address is the one Envoy saw.
 */
function edgeConnectionManagerSettings(edge: EdgeSettings) {
  return {
    // A call or a GET stream may last for minutes: the request timeout covers receiving the request
    // only (Envoy stops it once the response has begun), and routes set their own idle limits.
    request_headers_timeout: duration(edge.requestHeadersTimeoutMs),
    request_timeout: duration(edge.requestTimeoutMs),
    stream_idle_timeout: duration(edge.streamIdleTimeoutMs),
    max_request_headers_kb: edge.maxRequestHeadersKb,
    common_http_protocol_options: {
      idle_timeout: duration(edge.connectionIdleTimeoutMs),
      max_headers_count: edge.maxHeadersCount,
      // Application headers reach the backend unchanged, underscores included (seed 002: the gateway
      // strips only Mcp-Session-Id and Authorization). Envoy itself never folds "_" into "-".
      headers_with_underscores_action: 'ALLOW',
    },
    http2_protocol_options: {
      max_concurrent_streams: edge.http2MaxConcurrentStreams,
      initial_stream_window_size: edge.http2InitialStreamWindowBytes,
      initial_connection_window_size: edge.http2InitialConnectionWindowBytes,
    },
    // The client's address is the peer's (or the one a trusted load balancer put in front of it):
    // a client's own X-Forwarded-For is replaced, never believed, and Envoy's own x-envoy-* request
    // headers (retries, timeouts) are not taken from an external client.
    use_remote_address: true,
    xff_num_trusted_hops: edge.xffNumTrustedHops,
    early_header_mutation_extensions: [clientHeadersDropped(edge.xffNumTrustedHops)],
    // One spelling per path: dot segments resolved, slashes merged; an escaped slash is refused (no
    // route key has one: ROUTE_KEY_PATTERN).
    normalize_path: true,
    merge_slashes: true,
    path_with_escaped_slashes_action: 'REJECT_REQUEST',
  };
}

/**
 * The agents' listener. It depends on gateway settings only, never on the registry: Envoy drains a
 * listener on every LDS change, which would cut streams in flight, so registry changes stay in RDS/CDS.
 */
export function buildListener(settings: GatewaySettings): TypedJson {
  return {
    '@type': TYPE_URL.listener,
    name: LISTENER_NAME,
    address: { socket_address: { address: settings.listener.address, port_value: settings.listener.port } },
    per_connection_buffer_limit_bytes: settings.edge.perConnectionBufferLimitBytes,
    filter_chains: [
      {
        ...(settings.listenerTls && { transport_socket: agentTlsSocket() }),
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': TYPE_URL.httpConnectionManager,
              stat_prefix: 'mcp_gateway',
              codec_type: 'AUTO',
              rds: { route_config_name: ROUTE_CONFIG_NAME, config_source: { ads: {}, resource_api_version: 'V3' } },
              ...edgeConnectionManagerSettings(settings.edge),
              access_log: [...(settings.envoyAccessLog ? [accessLog] : []), ...callLogs(callLogRecord(settings.auditArguments))],
              local_reply_config: localReplyConfig(),
              ...(settings.tracing && { tracing: connectionManagerTracing(settings.tracing) }),
              // CORS answers the preflights of browser pages on allowed origins (they carry no token), the
              // origin check refuses any other origin, jwt_authn validates the token of every request of a
              // route with auth before anything reads its body (docs/auth.md). The two
              // lanes (docs/adr/0008-data-path-lanes.md): the mcp filter parses every request; a
              // tools/call route turns on the call script and the session check with its own rules. The
              // quota filters count what the call script let through, before the session check works
              // for it (docs/adr/0016-quotas.md).
              http_filters: [
                { name: 'envoy.filters.http.cors', typed_config: { '@type': TYPE_URL.cors } },
                originCheckFilter(settings.access.allowedOrigins),
                jwtAuthnFilter(),
                mcpFilter(settings.maxRequestBodyBytes),
                ...(settings.tracing ? [spanIdsFilter()] : []),
                callScriptFilter(settings.tracing !== undefined),
                ...quotaFilters(settings.quotas),
                sessionCheckFilter(settings.sessionCheckTimeoutMs),
                { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
              ],
            },
          },
        ],
      },
    ],
  };
}

/** The egress listener's access log: also the serial of the sidecar certificate each request came with, so a renewal can be followed. */
const egressAccessLog = {
  ...accessLog,
  typed_config: {
    ...accessLog.typed_config,
    log_format: { json_format: { ...accessLog.typed_config.log_format.json_format, egress_peer_serial: '%DOWNSTREAM_PEER_SERIAL%' } },
  },
};

/**
 * The egress listener (docs/adr/0013-backend-credentials.md): the sidecars' own requests to Tool
 * Services — backend sessions, relayed notifications and answers, DELETEs — enter Envoy here and leave
 * through the same clusters as calls, with the same credential injection, TLS and certificate
 * rotation. Whoever reaches it gets the gateway's backend credentials sent for it, so with a closed
 * inside it takes only sidecars' certificates (mutual TLS, docs/adr/0017-closed-inside.md); without one
 * it is plain HTTP on loopback. Routes (RDS) pick the cluster by a header; like the agents' listener
 * it never changes with the registry.
 */
export function buildEgressListener(settings: GatewaySettings): TypedJson {
  return {
    '@type': TYPE_URL.listener,
    name: EGRESS_LISTENER_NAME,
    address: { socket_address: { address: settings.egress.address, port_value: settings.egress.port } },
    filter_chains: [
      {
        ...(settings.internalTls && { transport_socket: internalListenerTransportSocket('sidecar') }),
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': TYPE_URL.httpConnectionManager,
              stat_prefix: 'mcp_egress',
              codec_type: 'AUTO',
              rds: { route_config_name: EGRESS_ROUTE_CONFIG_NAME, config_source: { ads: {}, resource_api_version: 'V3' } },
              // The sidecars' requests carry their own deadlines.
              stream_idle_timeout: '600s',
              request_timeout: '0s',
              access_log: [egressAccessLog],
              // Envoy's own replies (the Tool Service could not be reached) say why, for the sidecar's errors.
              local_reply_config: { body_format: { json_format: EGRESS_FAILURE_BODY } },
              http_filters: [{ name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } }],
            },
          },
        ],
      },
    ],
  };
}
