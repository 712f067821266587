import { GatewayIR, RouteBackendIR, RouteIR, ToolServiceIR, perCallerCredentials } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { corsPolicy, hostDeniedVirtualHost, servedDomains } from './access';
import { CALLER_HEADERS_REMOVED, SigningKeys, authenticatedRouteParts, keysUnavailableRoute, metadataDocumentRoute } from './auth';
import { CallLaneCatalog, GATEWAY_LANE_FILTERS, SESSION_END_FILTERS, callMatch, callRouteFilters, surfaceMatches, surfaceRouteFilters } from './call-lane';
import { duration } from './duration';
import { callRouteQuotas, gatewayRouteQuotas } from './quotas';
import { CHECK_HEADERS, EGRESS_ROUTE_CONFIG_NAME, ENVOY_UNKNOWN_ROUTE_HEADER, EGRESS_UPSTREAM_HEADER, GatewaySettings, MCP_METADATA_NAMESPACE, POOLED_CALL_PATH, POOLED_LANE_HEADER, ROUTE_CONFIG_NAME, SIDECAR_CLUSTER_NAME, SIDECAR_STREAMS_CLUSTER_NAME } from './settings';
import { GATEWAY_SPANS, routeTracing } from './tracing';
import { transportRefusalRoutes } from './transport-refusals';
import { TYPE_URL, typedStruct } from './type-urls';

/** Where the sidecars serve the approval pages. */
export const APPROVAL_PAGES_PATH = '/approvals';

/** The approval pages are a browser's: the mcp filter lets them pass unparsed; no call script, no session check. */
const APPROVAL_PAGE_FILTERS = {
  ...GATEWAY_LANE_FILTERS,
  'envoy.filters.http.mcp': typedStruct(TYPE_URL.mcpOverride, { traffic_mode: 'PASS_THROUGH' }),
};

/** How long the gateway lane may take: it answers from memory, or ends and notifies backend sessions (bounded there). */
const GATEWAY_LANE_TIMEOUT = '30s';
/** A client's GET stream is kept alive by the sidecar's keepalive comments (every 30 s). */
const STREAM_IDLE_TIMEOUT = '120s';

/**
 * Concurrency slots are leases (docs/adr/0016-quotas.md, Concurrency): one whose call's end Envoy never
 * reports lapses after the call's deadline; a call without one (a route timeout of 0) holds them this long.
 */
const UNBOUNDED_CALL_LEASE_MS = 15 * 60_000;

/** What the routes take of the gateway's settings: the audit's copy of call arguments, Envoy's tracer. */
type RouteSettings = Pick<GatewaySettings, 'auditArguments' | 'tracing' | 'quotas'>;

/** The call lane: a tools/call named with this backend's prefix, to its Tool Service, under the call script's rules. */
function callRoute(route: RouteIR, backend: RouteBackendIR, service: ToolServiceIR, catalog: CallLaneCatalog, settings: RouteSettings) {
  const { host, port, path } = service.endpoint;
  const leaseWorkers = settings.quotas.sharedLimitLeases?.workers;
  const quotas = callRouteQuotas(route, service, leaseWorkers);
  const toolQuotas = {
    ...(leaseWorkers !== undefined && { leases: { workers: leaseWorkers, timeoutMs: settings.quotas.rateLimitTimeoutMs, shared: quotas.leased } }),
    toolServiceId: service.id,
    tools: service.quotas.tools,
    inFlight: [route.quotas.concurrencyPerCaller, service.quotas.concurrencyPerCaller].filter((limit) => limit !== undefined),
    deadlineMs: service.timeouts.requestTimeoutMs > 0 ? service.timeouts.requestTimeoutMs : UNBOUNDED_CALL_LEASE_MS,
  };
  return {
    name: `${route.key}/call/${backend.name}`,
    ...(settings.tracing && routeTracing(GATEWAY_SPANS.forward, route.key, backend.name)),
    match: callMatch(route.path, backend.name, catalog.separator),
    ...(quotas.metadata && { metadata: quotas.metadata }),
    route: {
      cluster: backend.clusterName,
      prefix_rewrite: path,
      host_rewrite_literal: `${host}:${port}`,
      // By default no whole-response deadline (a tools/call may stream for minutes), only an idle limit.
      timeout: duration(service.timeouts.requestTimeoutMs),
      idle_timeout: duration(service.timeouts.idleTimeoutMs),
      // No retry_policy: the virtual host's (CALL_RETRY_POLICY) applies.
      ...(quotas.rateLimits.length > 0 && { rate_limits: quotas.rateLimits }),
    },
    typed_per_filter_config: {
      ...callRouteFilters(route.key, backend.name, catalog.separator, catalog.routes.get(route.key), route.auth, {
        annotate: true,
        auditArguments: settings.auditArguments,
        credentials: service.credentials.mode,
        quotas: toolQuotas,
        pooledCallLane: takesPooledCallLane(service, catalog, route.key, backend.name),
      }),
      ...quotas.sharedFilters,
    },
    ...callerHeadersRemoval(service),
    // A backend's own session id must not reach the client, whose session is the gateway's (ADR-0004).
    response_headers_to_remove: ['mcp-session-id'],
  };
}

/**
 * The pooled-call lane (docs/adr/0018-stream-relaying.md, "Gaps closed later", 1) of a backend of a
 * session-based revision that keeps sessions: a stateless client's call that goes in its pooled session,
 * named so by the call script (POOLED_LANE_HEADER, which a client cannot send: the edge drops it), goes
 * to a sidecar, which forwards it through the egress listener and, when the backend ends the call's
 * stream before the answer, resumes it there. Everything else is the call route's: the script and its
 * rules, the session check, limits, deadline. The sidecar makes the backend's credentials itself, as for
 * all its requests on a caller's behalf: it gets the caller's token the script moved, not the one the
 * script made.
 */
function pooledCallRoute(route: RouteIR, backend: RouteBackendIR, call: ReturnType<typeof callRoute>) {
  return {
    ...call,
    name: `${route.key}/pooled-call/${backend.name}`,
    match: { ...call.match, headers: [{ name: POOLED_LANE_HEADER, present_match: true }] },
    route: {
      cluster: SIDECAR_STREAMS_CLUSTER_NAME,
      prefix_rewrite: POOLED_CALL_PATH,
      timeout: call.route.timeout,
      idle_timeout: call.route.idle_timeout,
      // Only what never reached a sidecar: the call may have begun at the backend.
      retry_policy: SIDECAR_RETRY_POLICY,
      ...(call.route.rate_limits && { rate_limits: call.route.rate_limits }),
    },
    request_headers_to_add: [
      { header: { key: CHECK_HEADERS.route, value: route.key }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
      { header: { key: CHECK_HEADERS.backend, value: backend.name }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
    ],
    request_headers_to_remove: ['authorization', POOLED_LANE_HEADER],
  };
}

/**
 * A backend whose stateless clients' calls go in a pooled session (ADR-0008) and whose Tool Service opted
 * in to the pooled-call lane: a sidecar's CPU on each such call, and the call depends on a sidecar, only
 * for a backend that may end a call's stream early although the pooled session has no such thing.
 */
const takesPooledCallLane = (service: ToolServiceIR, catalog: CallLaneCatalog, routeKey: string, backendName: string) => {
  const rules = catalog.routes.get(routeKey)?.backends.get(backendName);
  return service.resumeCutPooledCalls && rules?.era === 'session' && rules.sessionful;
};

/**
 * Neither the caller's claims (removed by the virtual host) nor its own Authorization ever reach a Tool
 * Service (docs/auth.md): removed as the request leaves, after every filter (a service-account cluster's
 * injector then sets its own). With per-caller credentials the call script moved the caller's token aside
 * for the sidecar and set the Authorization the backend gets; what is removed then is the moved copy.
 */
function callerHeadersRemoval(service: ToolServiceIR) {
  return {
    request_headers_to_remove: [
      ...CALLER_HEADERS_REMOVED.request_headers_to_remove,
      perCallerCredentials(service.credentials) ? CHECK_HEADERS.callerAuthorization : 'authorization',
    ],
  };
}

/**
 * The routes of a backend's prompts and resources (docs/adr/0015-federated-resources-and-prompts.md):
 * prompts/get, completion/complete and resources/* naming this backend go to its Tool Service like a
 * call, under the same script, session check, credentials and upstream settings, for what it serves.
 */
function surfaceRoutes(route: RouteIR, backend: RouteBackendIR, service: ToolServiceIR, catalog: CallLaneCatalog, settings: RouteSettings) {
  const rules = catalog.routes.get(route.key)?.backends.get(backend.name);
  if (!rules) return [];
  const call = callRoute(route, backend, service, catalog, settings);
  const filters = surfaceRouteFilters(route.key, backend.name, catalog.separator, rules, route.auth, service.credentials.mode);
  return surfaceMatches(route.path, backend.name, catalog.separator, rules.serves).map(({ kind, match }) => ({
    ...call,
    name: `${route.key}/${kind}/${backend.name}`,
    match,
    typed_per_filter_config: filters,
  }));
}

/**
 * The retries of a call (and of a backend's prompt and resource routes), always safe: the request never
 * reached the backend. The call script widens them per request for read-only and idempotent tools.
 * Envoy never retries once response bytes went downstream. It is the virtual host's, which every route
 * without its own takes, rather than each call route's: thousands of copies cost Envoy megabytes
 * (docs/adr/0008-data-path-lanes.md, Envoy memory). Sidecar-lane routes set their own.
 */
const CALL_RETRY_POLICY = {
  retry_on: 'connect-failure,reset-before-request',
  num_retries: 2,
  retry_back_off: { base_interval: '0.025s', max_interval: '0.250s' },
};

/** A stream the sidecars hold for as long as the client keeps it: no deadline, only an idle limit; one a dead replica reset goes to another. */
function sidecarStreamRoute(route: RouteIR, name: string, match: Record<string, unknown>, traced: boolean) {
  return {
    name: `${route.key}/${name}`,
    ...(traced && routeTracing(GATEWAY_SPANS.stream, route.key)),
    match: { path_separated_prefix: route.path, ...match },
    route: { cluster: SIDECAR_STREAMS_CLUSTER_NAME, timeout: '0s', idle_timeout: STREAM_IDLE_TIMEOUT, retry_policy: STREAMS_RETRY_POLICY },
    typed_per_filter_config: GATEWAY_LANE_FILTERS,
  };
}

/** A client's standalone GET stream of the route. */
const streamsRoute = (route: RouteIR, traced: boolean) =>
  sidecarStreamRoute(route, 'streams', { headers: [{ name: ':method', string_match: { exact: 'GET' } }] }, traced);

/** A stateless client's subscriptions/listen (MCP 2026-07-28): a POST whose answer is a stream, like a GET stream. */
const listenRoute = (route: RouteIR, traced: boolean) =>
  sidecarStreamRoute(
    route,
    'listen',
    { dynamic_metadata: [{ filter: MCP_METADATA_NAMESPACE, path: [{ key: 'method' }], value: { string_match: { exact: 'subscriptions/listen' } } }] },
    traced,
  );

/**
 * A request the sidecar never received (refused, reset before it was sent) is safe to send again, and
 * goes to another replica than the ones already tried (previous_hosts), so one dead replica costs no
 * answer while another is up.
 */
export const SIDECAR_RETRY_POLICY = {
  retry_on: 'connect-failure,reset-before-request,refused-stream',
  num_retries: 2,
  retry_host_predicate: [{ name: 'envoy.retry_host_predicates.previous_hosts', typed_config: { '@type': TYPE_URL.previousHostsPredicate } }],
  host_selection_retry_max_attempts: 3,
};

/**
 * A GET stream (or a resumed one, docs/adr/0018-stream-relaying.md) changes nothing: one reset before
 * its answer began — a replica that died, on a pooled connection — is sent to another replica too.
 */
const STREAMS_RETRY_POLICY = { ...SIDECAR_RETRY_POLICY, retry_on: 'connect-failure,reset,refused-stream' };

/** The limits of a gateway-lane route (its discovery limits, docs/quotas.md). */
type GatewayRouteQuotas = ReturnType<typeof gatewayRouteQuotas>;

/** The gateway lane: everything the gateway answers itself (initialize, tools/list, DELETE, …) and calls no backend route took. */
function gatewayRoute(
  name: string,
  match: Record<string, unknown>,
  tracing: ReturnType<typeof routeTracing> | undefined,
  filters: Record<string, unknown> = GATEWAY_LANE_FILTERS,
  quotas?: GatewayRouteQuotas,
) {
  return {
    name,
    ...tracing,
    match,
    ...(quotas?.metadata && { metadata: quotas.metadata }),
    route: {
      cluster: SIDECAR_CLUSTER_NAME,
      timeout: GATEWAY_LANE_TIMEOUT,
      // Another sidecar replica, if one refused or reset before answering.
      retry_policy: SIDECAR_RETRY_POLICY,
      ...(quotas && quotas.rateLimits.length > 0 && { rate_limits: quotas.rateLimits }),
    },
    typed_per_filter_config: { ...filters, ...quotas?.sharedFilters },
  };
}

/** A route with auth validates every request of its lanes; its 401s name its metadata document. */
function withAuth(route: RouteIR, lane: { metadata?: { filter_metadata: Record<string, unknown> }; typed_per_filter_config: Record<string, unknown> }) {
  if (!route.auth) return lane;
  const { metadata, filters } = authenticatedRouteParts(route);
  return {
    ...lane,
    // Beside the route's own (its limits').
    metadata: { filter_metadata: { ...lane.metadata?.filter_metadata, ...metadata.filter_metadata } },
    typed_per_filter_config: { ...lane.typed_per_filter_config, ...filters },
  };
}

/** Per route key: a call route per backend (longest prefix first, so a prefix that extends another wins), the GET stream route, then the gateway lane. */
function routesOf(
  route: RouteIR,
  services: Map<string, ToolServiceIR>,
  catalog: CallLaneCatalog,
  keys: SigningKeys,
  settings: RouteSettings,
): Record<string, unknown>[] {
  if (route.auth && !keys.has(route.auth.keys.name)) return [metadataDocumentRoute(route), keysUnavailableRoute(route)];
  const answered = settings.tracing ? routeTracing(GATEWAY_SPANS.answer, route.key) : undefined;
  const lanes = [
    ...[...route.backends]
      .sort((a, b) => b.name.length - a.name.length || a.name.localeCompare(b.name))
      .flatMap((backend) => {
        const service = services.get(backend.catalogKey)!;
        const call = callRoute(route, backend, service, catalog, settings);
        return [
          ...(takesPooledCallLane(service, catalog, route.key, backend.name) ? [pooledCallRoute(route, backend, call)] : []),
          call,
          ...surfaceRoutes(route, backend, service, catalog, settings),
        ];
      }),
    streamsRoute(route, settings.tracing !== undefined),
    listenRoute(route, settings.tracing !== undefined),
    gatewayRoute(`${route.key}/end`, { path_separated_prefix: route.path, headers: [{ name: ':method', string_match: { exact: 'DELETE' } }] }, answered, SESSION_END_FILTERS),
    gatewayRoute(`${route.key}/gateway`, { path_separated_prefix: route.path }, answered, GATEWAY_LANE_FILTERS, gatewayRouteQuotas(route)),
  ].map((lane) => withAuth(route, lane));
  return route.auth ? [metadataDocumentRoute(route), ...lanes] : lanes;
}

/**
 * All routes live in one RouteConfiguration, so any registry or catalog change is a single RDS update.
 * The served hosts are one virtual host (any other Host meets host_denied), with the CORS policy of
 * the allowed browser origins (the listener refuses any other origin: access.ts).
 */
export function buildRouteConfiguration(
  ir: GatewayIR,
  catalog: CallLaneCatalog,
  settings: RouteSettings & Pick<GatewaySettings, 'access'>,
  keys: SigningKeys,
): TypedJson {
  const { access } = settings;
  // By Tool Service, not by cluster: Tool Services sharing a cluster may differ in their deadlines.
  const services = new Map(ir.toolServices.map((service) => [service.catalogKey, service]));
  const routes = ir.routes.flatMap((route) => routesOf(route, services, catalog, keys, settings));
  return {
    '@type': TYPE_URL.routeConfiguration,
    name: ROUTE_CONFIG_NAME,
    virtual_hosts: [
      {
        name: 'mcp',
        domains: servedDomains(access.allowedHosts, ir.routes.flatMap((route) => (route.auth ? [new URL(route.auth.resource).host] : []))),
        // Callers see x-envoy-attempt-count on every proxied response.
        include_attempt_count_in_response: true,
        // Shared by every route rather than repeated on each (docs/adr/0008-data-path-lanes.md, Envoy memory).
        retry_policy: CALL_RETRY_POLICY,
        typed_per_filter_config: { 'envoy.filters.http.cors': corsPolicy(access.allowedOrigins) },
        routes: [
          // Before any route key's: refused on their headers, whatever path they name.
          ...transportRefusalRoutes(),
          ...routes,
          // /mcp without a key, or a key no route has: the sidecar says which.
          {
            ...gatewayRoute('unknown_route', { path_separated_prefix: '/mcp' }, undefined),
            request_headers_to_add: [{ header: { key: ENVOY_UNKNOWN_ROUTE_HEADER, value: 'true' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
          },
          // The approval pages people open in a browser (docs/approval-and-audit.md): HTML and forms, not MCP.
          gatewayRoute('approval_pages', { path_separated_prefix: APPROVAL_PAGES_PATH }, undefined, APPROVAL_PAGE_FILTERS),
          {
            name: 'not_found',
            match: { prefix: '/' },
            // In JSON-RPC form by the local-reply mappers (local-replies.ts), like every reply of Envoy's own.
            direct_response: { status: 404, body: { inline_string: 'not an MCP route: use /mcp/{routeKey}' } },
          },
        ],
      },
      ...hostDeniedVirtualHost(access.allowedHosts),
    ],
  };
}

/**
 * The egress listener's routes (docs/adr/0013-backend-credentials.md): one per Tool Service cluster,
 * chosen by the header the sidecar and the control plane name it with; anything else is refused.
 */
export function buildEgressRouteConfiguration(ir: GatewayIR): TypedJson {
  return {
    '@type': TYPE_URL.routeConfiguration,
    name: EGRESS_ROUTE_CONFIG_NAME,
    virtual_hosts: [
      {
        name: 'egress',
        domains: ['*'],
        routes: [
          ...ir.clusters.map((service) => ({
            name: `egress/${service.clusterName}`,
            match: { prefix: '/', headers: [{ name: EGRESS_UPSTREAM_HEADER, string_match: { exact: service.clusterName } }] },
            route: {
              cluster: service.clusterName,
              host_rewrite_literal: `${service.endpoint.host}:${service.endpoint.port}`,
              // The sidecar and the control plane bound their own requests.
              timeout: '0s',
              idle_timeout: duration(service.timeouts.idleTimeoutMs),
              // The gateway's own requests (backend sessions, their GET streams) are counted apart from
              // the calls a Tool Service's concurrency limit bounds (docs/quotas.md): the cluster's HIGH thresholds.
              ...(service.quotas.concurrency !== undefined && { priority: 'HIGH' }),
            },
            // The sidecar sets per-caller credentials itself; anything else goes as the cluster makes it.
            request_headers_to_remove: [EGRESS_UPSTREAM_HEADER, ...(perCallerCredentials(service.credentials) ? [] : ['authorization'])],
          })),
          {
            name: 'egress/unknown',
            match: { prefix: '/' },
            direct_response: { status: 404, body: { inline_string: `no Tool Service cluster named by ${EGRESS_UPSTREAM_HEADER}` } },
          },
        ],
      },
    ],
  };
}
