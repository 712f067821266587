import { GatewayIR, RouteBackendIR, RouteIR, ToolServiceIR } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { duration } from './duration';
import { BACKEND_CLUSTER_HEADER, GatewaySettings, ROUTE_CONFIG_NAME, SIDECAR_STREAMS_CLUSTER_NAME } from './settings';
import { TYPE_URL } from './type-urls';

/** A JSON-RPC error answered by Envoy itself, for requests the sidecar did not steer. */
function jsonRpcDirectResponse(status: number, code: number, message: string) {
  return {
    status,
    body: { inline_string: JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } }) },
  };
}

const JSON_CONTENT_TYPE = [
  { header: { key: 'content-type', value: 'application/json' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
];

function backendRoute(route: RouteIR, backend: RouteBackendIR, service: ToolServiceIR) {
  const { host, port, path } = service.endpoint;
  return {
    name: `${route.key}/${backend.name}`,
    match: {
      path_separated_prefix: route.path,
      headers: [{ name: BACKEND_CLUSTER_HEADER, string_match: { exact: backend.clusterName } }],
    },
    route: {
      cluster: backend.clusterName,
      prefix_rewrite: path,
      host_rewrite_literal: `${host}:${port}`,
      // By default no whole-response deadline (a tools/call may stream for minutes), only an idle limit.
      timeout: duration(service.timeouts.requestTimeoutMs),
      idle_timeout: duration(service.timeouts.idleTimeoutMs),
      // Always safe: the request never reached the backend. The sidecar widens this per request for
      // read-only and idempotent tools. Envoy never retries once response bytes went downstream.
      retry_policy: {
        retry_on: 'connect-failure,reset-before-request',
        num_retries: 2,
        retry_back_off: { base_interval: '0.025s', max_interval: '0.250s' },
      },
    },
    request_headers_to_remove: [BACKEND_CLUSTER_HEADER],
    // A backend's own session id must not reach the client, whose session is the gateway's (ADR-0004).
    response_headers_to_remove: ['mcp-session-id'],
  };
}

/** Reached only when the sidecar did not handle the request: it steers or answers everything else. */
function unsteeredRoute(route: RouteIR) {
  return {
    name: `${route.key}/unsteered`,
    match: { path_separated_prefix: route.path },
    direct_response: jsonRpcDirectResponse(503, -32603, `gateway sidecar unavailable: request on route "${route.key}" not routed, try again`),
    response_headers_to_add: JSON_CONTENT_TYPE,
  };
}

/** A client's GET stream of the route, steered by the sidecar to the sidecars' stream server; it lasts as long as the client keeps it. */
function streamsRoute(route: RouteIR) {
  return {
    name: `${route.key}/streams`,
    match: {
      path_separated_prefix: route.path,
      headers: [{ name: BACKEND_CLUSTER_HEADER, string_match: { exact: SIDECAR_STREAMS_CLUSTER_NAME } }],
    },
    route: { cluster: SIDECAR_STREAMS_CLUSTER_NAME, timeout: '0s' },
    request_headers_to_remove: [BACKEND_CLUSTER_HEADER],
  };
}

/** All routes live in one RouteConfiguration, so any registry change is a single RDS update. */
export function buildRouteConfiguration(ir: GatewayIR, settings: GatewaySettings): TypedJson {
  const services = new Map(ir.toolServices.map((service) => [service.clusterName, service]));
  const routes = ir.routes.flatMap((route) => [
    ...route.backends.map((backend) => backendRoute(route, backend, services.get(backend.clusterName)!)),
    ...(settings.sidecarStreams ? [streamsRoute(route)] : []),
    unsteeredRoute(route),
  ]);
  return {
    '@type': TYPE_URL.routeConfiguration,
    name: ROUTE_CONFIG_NAME,
    virtual_hosts: [
      {
        name: 'mcp',
        domains: ['*'],
        // Callers see x-envoy-attempt-count on every proxied response.
        include_attempt_count_in_response: true,
        routes: [
          ...routes,
          {
            name: 'not_found',
            match: { prefix: '/' },
            direct_response: jsonRpcDirectResponse(404, -32600, 'not an MCP route: use /mcp/{routeKey}'),
            response_headers_to_add: JSON_CONTENT_TYPE,
          },
        ],
      },
    ],
  };
}
