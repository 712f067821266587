const prefix = 'type.googleapis.com/';

export const TYPE_URL = {
  listener: `${prefix}envoy.config.listener.v3.Listener`,
  routeConfiguration: `${prefix}envoy.config.route.v3.RouteConfiguration`,
  cluster: `${prefix}envoy.config.cluster.v3.Cluster`,
  clusterLoadAssignment: `${prefix}envoy.config.endpoint.v3.ClusterLoadAssignment`,
  httpConnectionManager: `${prefix}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`,
  extProc: `${prefix}envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor`,
  earlyHeaderMutation: `${prefix}envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation`,
  router: `${prefix}envoy.extensions.filters.http.router.v3.Router`,
  httpProtocolOptions: `${prefix}envoy.extensions.upstreams.http.v3.HttpProtocolOptions`,
  upstreamTls: `${prefix}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext`,
  stdoutAccessLog: `${prefix}envoy.extensions.access_loggers.stream.v3.StdoutAccessLog`,
} as const;
