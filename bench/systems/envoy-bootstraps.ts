import { BackendEndpoint, HOST, RouteSpec, distinctEndpoints } from './topology';

/**
 * Static Envoy bootstraps for the bench-only systems B (plain Envoy, no MCP awareness) and D (Envoy
 * 1.40's native MCP router). Both are generated from the same topology as the gateway (C), with the
 * same cluster shape, so the systems differ only in the HTTP filters between client and backend.
 */

const HCM_TYPE = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const ROUTER_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
// envoy.filters.http.mcp / mcp_router are newer than the protos the project ships (ADR-0002); a
// static bootstrap is parsed by Envoy itself, which knows them, so plain `@type` works here.
const MCP_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.mcp.v3.Mcp';
const MCP_ROUTER_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.mcp_router.v3.McpRouter';

/** A cluster of one static endpoint (a backend of the topology, or any id and port). */
export function staticCluster(backend: Pick<BackendEndpoint, 'id' | 'port'>) {
  return {
    name: backend.id,
    type: 'STATIC',
    connect_timeout: '2s',
    load_assignment: {
      cluster_name: backend.id,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: HOST, port_value: backend.port } } } }] }],
    },
  };
}

/** A plain HTTP listener on HOST: these routes, these HTTP filters (and any other connection manager settings, such as tracing). */
export function listener(name: string, port: number, routes: unknown[], httpFilters: unknown[], connectionManager: Record<string, unknown> = {}) {
  return {
    name,
    address: { socket_address: { address: HOST, port_value: port } },
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': HCM_TYPE,
              stat_prefix: name,
              // Long SSE responses: no idle cut while a tool streams (the gateway's defaults are alike).
              stream_idle_timeout: '300s',
              route_config: { name, virtual_hosts: [{ name, domains: ['*'], routes }] },
              http_filters: httpFilters,
              ...connectionManager,
            },
          },
        ],
      },
    ],
  };
}

function bootstrap(adminPort: number, listeners: unknown[], clusters: BackendEndpoint[]) {
  return {
    admin: { address: { socket_address: { address: HOST, port_value: adminPort } } },
    static_resources: { listeners, clusters: clusters.map(staticCluster) },
  };
}

/** B: one route, path-prefix matched, to the call route's backend; the path rewritten to /mcp. */
export function plainEnvoyBootstrap(adminPort: number, listenerPort: number, callRoute: RouteSpec) {
  const backend = callRoute.backends[0].endpoint;
  const routes = [
    {
      match: { path_separated_prefix: `/mcp/${callRoute.key}` },
      // timeout 0s: a tools/call may stream for as long as the tool runs (Envoy's default is 15 s).
      route: { cluster: backend.id, prefix_rewrite: new URL(backend.url).pathname, timeout: '0s' },
    },
  ];
  return bootstrap(adminPort, [listener('plain', listenerPort, routes, [{ name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER_TYPE } }])], [backend]);
}

/**
 * D: one listener per route, since mcp_router's backend list is per filter instance. The router is
 * the terminal filter and ignores the route action; the route only has to match.
 */
export function nativeMcpRouterBootstrap(adminPort: number, listeners: { port: number; route: RouteSpec }[]) {
  const built = listeners.map(({ port, route }) =>
    listener(
      `mcp_router_${route.key}`,
      port,
      [{ match: { prefix: '/' }, route: { cluster: route.backends[0].endpoint.id } }],
      [
        { name: 'envoy.filters.http.mcp', typed_config: { '@type': MCP_TYPE } },
        {
          name: 'envoy.filters.http.mcp_router',
          typed_config: {
            '@type': MCP_ROUTER_TYPE,
            servers: route.backends.map((backend) => ({
              name: backend.name,
              mcp_cluster: { cluster: backend.endpoint.id, path: new URL(backend.endpoint.url).pathname },
            })),
          },
        },
      ],
    ),
  );
  return bootstrap(adminPort, built, distinctEndpoints(listeners.map((entry) => entry.route)));
}
