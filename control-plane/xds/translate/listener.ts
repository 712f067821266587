import { TypedJson } from '../protobuf/proto-json';
import { callScriptFilter, mcpFilter, sessionCheckFilter } from './call-lane';
import { localReplyConfig } from './local-replies';
import { LIMIT_HEADER, quotaFilters } from './quotas';
import { CONTROL_PLANE_CLUSTER_NAME, GatewaySettings, LISTENER_NAME, MCP_METADATA_NAMESPACE, METADATA_NAMESPACE, ROUTE_CONFIG_NAME } from './settings';
import { TYPE_URL } from './type-urls';

const accessLog = {
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
        route_key: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:route)%`,
        // The mcp filter's parse of every request, either lane.
        rpc_method: `%DYNAMIC_METADATA(${MCP_METADATA_NAMESPACE}:method):64%`,
        rpc_id: `%DYNAMIC_METADATA(${MCP_METADATA_NAMESPACE}:id):64%`,
        backend: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:backend)%`,
        tool: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:tool):128%`,
        // Set by the call script when it knows the call's outcome: ok, failed, degraded or denied.
        outcome: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:outcome)%`,
      },
    },
  },
};

/**
 * Every call of the call lane, and every request a limit refused on either lane, streamed to the
 * control plane (control-plane/admin/call-log.ts), which counts outcomes and durations by route,
 * backend and tool, and refusals by limit: batched, off the request path.
 */
const callLog = {
  name: 'envoy.access_loggers.http_grpc',
  filter: {
    or_filter: {
      filters: [
        { metadata_filter: { matcher: { filter: METADATA_NAMESPACE, path: [{ key: 'backend' }], value: { present_match: true } }, match_if_key_not_found: false } },
        { status_code_filter: { comparison: { op: 'EQ', value: { default_value: 429, runtime_key: 'mcpgw.unused' } } } },
        { response_flag_filter: { flags: ['RLSE'] } },
      ],
    },
  },
  typed_config: {
    '@type': TYPE_URL.grpcAccessLog,
    common_config: {
      log_name: 'mcpgw_calls',
      grpc_service: { envoy_grpc: { cluster_name: CONTROL_PLANE_CLUSTER_NAME } },
      transport_api_version: 'V3',
      buffer_flush_interval: '1s',
      buffer_size_bytes: 65536,
    },
    // The limit a refusal names (docs/quotas.md).
    additional_response_headers_to_log: [LIMIT_HEADER, 'x-ratelimit-limit'],
  },
};

/**
 * The one listener. It depends on gateway settings only, never on the registry: Envoy drains a
 * listener on every LDS change, which would cut streams in flight, so registry changes stay in RDS/CDS.
 */
export function buildListener(settings: GatewaySettings): TypedJson {
  return {
    '@type': TYPE_URL.listener,
    name: LISTENER_NAME,
    address: { socket_address: { address: settings.listener.address, port_value: settings.listener.port } },
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': TYPE_URL.httpConnectionManager,
              stat_prefix: 'mcp_gateway',
              codec_type: 'AUTO',
              rds: { route_config_name: ROUTE_CONFIG_NAME, config_source: { ads: {}, resource_api_version: 'V3' } },
              // Long-lived SSE streams are normal here; idle limits are set per route.
              stream_idle_timeout: '600s',
              request_timeout: '0s',
              access_log: [accessLog, callLog],
              local_reply_config: localReplyConfig(),
              // The two lanes (docs/adr/0008-data-path-lanes.md): the mcp filter parses every request; a
              // tools/call route turns on the call script and the session check with its own rules. The
              // quota filters count what the call script let through, before the session check works
              // for it (docs/adr/0016-quotas.md).
              http_filters: [
                mcpFilter(settings.maxRequestBodyBytes),
                callScriptFilter(),
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
