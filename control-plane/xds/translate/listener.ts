import { TypedJson } from '../protobuf/proto-json';
import { localReplyConfig } from './local-replies';
import { BACKEND_CLUSTER_HEADER, GatewaySettings, LISTENER_NAME, METADATA_NAMESPACE, ROUTE_CONFIG_NAME, SIDECAR_CLUSTER_NAME } from './settings';
import { TYPE_URL } from './type-urls';

/**
 * The sidecar sees every request's headers and, for POSTs, the whole JSON-RPC body (BUFFERED), so
 * it can answer or steer the request. Of the responses, only those of steered requests reach it
 * (the sidecar's own answers have no response phase): their headers, and then, by mode_override,
 * the body of a tools/call answer chunk by chunk (STREAMED), to put the call's outcome into its final
 * message and scope the ids of requests its backend sends (ADR-0006).
 */
const extProcFilter = {
  name: 'envoy.filters.http.ext_proc',
  typed_config: {
    '@type': TYPE_URL.extProc,
    grpc_service: { envoy_grpc: { cluster_name: SIDECAR_CLUSTER_NAME }, timeout: '5s' },
    // Fail open, so that a sidecar restart never cuts a tools/call stream in flight (its outcome is
    // then simply not annotated). Requests still fail closed: without the sidecar's steering header
    // no route leads to a backend (clientSteeringStrip).
    failure_mode_allow: true,
    message_timeout: '2s',
    // The sidecar may take longer when it sends a call again in a new backend session (ADR-0006).
    max_message_timeout: '300s',
    allow_mode_override: true,
    // The sidecar sets Envoy's per-request timeout and retry headers, and removes clients' copies.
    mutation_rules: { allow_envoy: true },
    metadata_options: { receiving_namespaces: { untyped: [METADATA_NAMESPACE] } },
    processing_mode: {
      request_header_mode: 'SEND',
      request_body_mode: 'BUFFERED',
      request_trailer_mode: 'SKIP',
      response_header_mode: 'SEND',
      response_body_mode: 'NONE',
      response_trailer_mode: 'SKIP',
    },
  },
};

/**
 * Only the sidecar may steer: a client's own steering header is gone before the route is chosen
 * (early header mutation runs before route matching, which any filter's route lookup would cache),
 * so a request the sidecar did not handle (it was down or too slow) matches no backend route.
 */
const clientSteeringStrip = {
  name: 'mcpgw.strip_client_steering',
  typed_config: {
    '@type': TYPE_URL.earlyHeaderMutation,
    mutations: [{ remove: BACKEND_CLUSTER_HEADER }],
  },
};

const accessLog = {
  name: 'envoy.access_loggers.stdout',
  typed_config: {
    '@type': TYPE_URL.stdoutAccessLog,
    log_format: {
      json_format: {
        start_time: '%START_TIME%',
        method: '%REQ(:METHOD)%',
        path: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%',
        status: '%RESPONSE_CODE%',
        flags: '%RESPONSE_FLAGS%',
        details: '%RESPONSE_CODE_DETAILS%',
        upstream_cluster: '%UPSTREAM_CLUSTER%',
        duration_ms: '%DURATION%',
        attempts: '%UPSTREAM_REQUEST_ATTEMPT_COUNT%',
        request_id: '%REQ(X-REQUEST-ID)%',
        traceparent: '%REQ(TRACEPARENT)%',
        route_key: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:route)%`,
        rpc_method: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:method)%`,
        rpc_id: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:rpc_id)%`,
        backend: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:backend)%`,
        tool: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:tool)%`,
        // Set by the sidecar when it knows the call's outcome: ok, failed, degraded or denied.
        outcome: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:outcome)%`,
      },
    },
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
              access_log: [accessLog],
              local_reply_config: localReplyConfig(),
              early_header_mutation_extensions: [clientSteeringStrip],
              http_filters: [
                extProcFilter,
                { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
              ],
            },
          },
        ],
      },
    ],
  };
}
