import { TypedJson } from '../protobuf/proto-json';

const prefix = 'type.googleapis.com/';

export const TYPE_URL = {
  listener: `${prefix}envoy.config.listener.v3.Listener`,
  routeConfiguration: `${prefix}envoy.config.route.v3.RouteConfiguration`,
  cluster: `${prefix}envoy.config.cluster.v3.Cluster`,
  clusterLoadAssignment: `${prefix}envoy.config.endpoint.v3.ClusterLoadAssignment`,
  httpConnectionManager: `${prefix}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`,
  extAuthz: `${prefix}envoy.extensions.filters.http.ext_authz.v3.ExtAuthz`,
  router: `${prefix}envoy.extensions.filters.http.router.v3.Router`,
  filterConfig: `${prefix}envoy.config.route.v3.FilterConfig`,
  httpProtocolOptions: `${prefix}envoy.extensions.upstreams.http.v3.HttpProtocolOptions`,
  upstreamTls: `${prefix}envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext`,
  downstreamTls: `${prefix}envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext`,
  secret: `${prefix}envoy.extensions.transport_sockets.tls.v3.Secret`,
  credentialInjector: `${prefix}envoy.extensions.filters.http.credential_injector.v3.CredentialInjector`,
  upstreamCodec: `${prefix}envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec`,
  stdoutAccessLog: `${prefix}envoy.extensions.access_loggers.stream.v3.StdoutAccessLog`,
  fluentdAccessLog: `${prefix}envoy.extensions.access_loggers.fluentd.v3.FluentdAccessLogConfig`,
  typedStruct: `${prefix}xds.type.v3.TypedStruct`,
  typedExtensionConfig: `${prefix}envoy.config.core.v3.TypedExtensionConfig`,
  jwtAuthn: `${prefix}envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication`,
  jwtAuthnPerRoute: `${prefix}envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig`,
  cors: `${prefix}envoy.extensions.filters.http.cors.v3.Cors`,
  corsPolicy: `${prefix}envoy.extensions.filters.http.cors.v3.CorsPolicy`,
  rbac: `${prefix}envoy.extensions.filters.http.rbac.v3.RBAC`,
  celFilter: `${prefix}envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter`,
  openTelemetryConfig: `${prefix}envoy.config.trace.v3.OpenTelemetryConfig`,
  headerMutation: `${prefix}envoy.extensions.filters.http.header_mutation.v3.HeaderMutation`,
  extensionWithMatcher: `${prefix}envoy.extensions.common.matching.v3.ExtensionWithMatcher`,
  requestHeaderInput: `${prefix}envoy.type.matcher.v3.HttpRequestHeaderMatchInput`,
  skipFilter: `${prefix}envoy.extensions.filters.common.matcher.action.v3.SkipFilter`,
  // Typed although on every route: filter_context is declared in envoy-protos.ts (addNewerFields).
  luaPerRoute: `${prefix}envoy.extensions.filters.http.lua.v3.LuaPerRoute`,
  previousHostsPredicate: `${prefix}envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate`,
  // Newer than the protos the project ships (ADR-0002): these travel as TypedStruct.
  mcp: `${prefix}envoy.extensions.filters.http.mcp.v3.Mcp`,
  mcpOverride: `${prefix}envoy.extensions.filters.http.mcp.v3.McpOverride`,
  lua: `${prefix}envoy.extensions.filters.http.lua.v3.Lua`,
  // The shipped Generic lacks header_value_prefix ("Bearer ").
  genericCredential: `${prefix}envoy.extensions.http.injected_credentials.generic.v3.Generic`,
  earlyHeaderMutation: `${prefix}envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation`,
  parentBasedSampler: `${prefix}envoy.extensions.tracers.opentelemetry.samplers.v3.ParentBasedSamplerConfig`,
  traceIdRatioSampler: `${prefix}envoy.extensions.tracers.opentelemetry.samplers.v3.TraceIdRatioBasedSamplerConfig`,
  localRateLimit: `${prefix}envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit`,
  rateLimit: `${prefix}envoy.extensions.filters.http.ratelimit.v3.RateLimit`,
  rateLimitPerRoute: `${prefix}envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute`,
} as const;

/**
 * A config of a type newer than the shipped protos (ADR-0002), for Envoy to decode by its own: written
 * as proto3 JSON, carried as a Struct.
 */
export function typedStruct(typeUrl: string, value: Record<string, unknown>): TypedJson {
  return { '@type': TYPE_URL.typedStruct, type_url: typeUrl, value };
}
