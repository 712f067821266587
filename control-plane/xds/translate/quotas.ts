import { CALLER_CLAIM_HEADERS } from '../../auth/caller-identity';
import { GatewayIR, RouteIR, ToolServiceIR } from '../../ir/gateway-ir';
import { LimitIR, Rate, ToolQuotaIR, WhenServiceDown, rateText } from '../../ir/quotas-ir';
import { TypedJson } from '../protobuf/proto-json';
import type { HttpFilter } from './call-lane';
import { duration } from './duration';
import { METADATA_NAMESPACE, QuotaSettings, RATELIMIT_CLUSTER_NAME, RateLimitServiceAddress } from './settings';
import { TYPE_URL, typedStruct } from './type-urls';

/**
 * Rate limits decided in Envoy (docs/quotas.md, docs/adr/0016-quotas.md).
 *
 * Per-instance limits: six local_ratelimit filters in the listener, one per slot — a limit's scope
 * (route, Tool Service, tool) and whether it counts each caller on its own. Their token buckets come
 * by ECDS, so a change of limits never touches the listener, and a bucket is keyed by the limit's
 * lane and rate with the scope and the caller as wildcards: one descriptor counts every route (or
 * caller) with that rate apart, and adding a route never resets anybody's count. One filter per slot,
 * because a local_ratelimit filter does not say which of its buckets refused a request: the slot's
 * filter names the limit itself (x-mcpgw-limit).
 *
 * Shared limits: Envoy's ratelimit filter asks the ratelimit service (envoyproxy/ratelimit on Redis),
 * one filter for limits that let calls through when the service cannot answer and one for limits that
 * refuse them; each route lists its descriptors in its own per-route config.
 */

/** Descriptor entry keys, for Envoy's filters and the ratelimit service's configuration alike. */
export const DESCRIPTOR_KEYS = {
  /** Which limit: `<lane>:<rate>` for a per-instance limit, the limit's name for a shared one. */
  limit: 'limit',
  /** What the limit is counted for: a route key, a Tool Service id, or `<Tool Service id>/<tool>`. */
  scope: 'scope',
  /** The token's subject (a route with auth). */
  caller: 'caller',
  /** The client's address (a route without auth): the key Envoy's remote_address action gives. */
  address: 'remote_address',
} as const;

/** The ratelimit service's domain of every shared limit. */
export const RATELIMIT_DOMAIN = 'mcpgw';

/** The per-route metadata the refusals' names are formed from (route key, lane, Tool Service id, concurrency limit), on routes with limits. */
export const QUOTA_ROUTE_METADATA = 'mcpgw.quota';
/** The header naming the limit a refusal is for. */
export const LIMIT_HEADER = 'x-mcpgw-limit';

type Scope = 'route' | 'tool_service' | 'tool';

interface LocalSlot {
  /** The filter's name in the listener, and its ECDS resource's. */
  filter: string;
  scope: Scope;
  perCaller: boolean;
  /** The route rate_limits entries it reads. */
  stage: number;
}

const routeMeta = (key: string) => `%METADATA(ROUTE:${QUOTA_ROUTE_METADATA}:${key})%`;
const ourMeta = (key: string) => `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:${key})%`;
/** A tool limit's kind, <caller|total>_<local|allow|refuse>: the call script's metadata key of its value is quota_tool_<kind>. */
const toolQuotaKind = (perCaller: boolean, where: 'local' | WhenServiceDown) => `${perCaller ? 'caller' : 'total'}_${where}`;
const toolQuotaKey = (perCaller: boolean, where: 'local' | WhenServiceDown) => `quota_tool_${toolQuotaKind(perCaller, where)}`;
export const TOOL_QUOTA_SCOPE_KEY = 'quota_tool_scope';

export const LOCAL_QUOTA_SLOTS: LocalSlot[] = [
  { filter: 'mcpgw.quota.route_caller', scope: 'route', perCaller: true, stage: 0 },
  { filter: 'mcpgw.quota.route_total', scope: 'route', perCaller: false, stage: 1 },
  { filter: 'mcpgw.quota.tool_service_caller', scope: 'tool_service', perCaller: true, stage: 2 },
  { filter: 'mcpgw.quota.tool_service_total', scope: 'tool_service', perCaller: false, stage: 3 },
  { filter: 'mcpgw.quota.tool_caller', scope: 'tool', perCaller: true, stage: 4 },
  { filter: 'mcpgw.quota.tool_total', scope: 'tool', perCaller: false, stage: 5 },
];

/** The shared-limit filters, by what a limit does when the service cannot answer. */
export const SHARED_QUOTA_FILTERS: Record<WhenServiceDown, string> = { allow: 'mcpgw.quota.shared', refuse: 'mcpgw.quota.shared_refusing' };
/** A stage no route entry uses: the shared filters read only their per-route configs, never the local slots' entries. */
const SHARED_STAGE = 10;

/** How a slot's refusal names its limit (the names of docs/quotas.md). */
function limitNameFormula(slot: LocalSlot): string {
  const suffix = slot.perCaller ? '/per-caller' : '';
  switch (slot.scope) {
    case 'route':
      return `route:${routeMeta('route')}/${routeMeta('lane')}${suffix}`;
    case 'tool_service':
      return `tool-service:${routeMeta('tool_service')}/calls${suffix}`;
    case 'tool':
      return `tool:${ourMeta(TOOL_QUOTA_SCOPE_KEY)}/calls${suffix}`;
  }
}

export const UNIT_SECONDS: Record<Rate['unit'], number> = { second: 1, minute: 60, hour: 3600, day: 86400 };

/** N per unit: N tokens, all of them back when the unit has passed. */
const tokenBucket = (rate: Rate) => ({ max_tokens: rate.requests, tokens_per_fill: rate.requests, fill_interval: `${UNIT_SECONDS[rate.unit]}s` });

type Lane = 'calls' | 'discovery';
const localKey = (lane: Lane, rate: Rate) => `${lane}:${rateText(rate)}`;

const isLocal = (limit: LimitIR) => !limit.shared;
/** A shared limit the call script leases where the gateway leases them (leaseWorkers given): every one not marked exact. */
const isLeased = (limit: LimitIR, leaseWorkers: number | undefined) => leaseWorkers !== undefined && limit.shared !== undefined && !limit.shared.exact;

/** The per-instance limits of a slot across the whole registry, as (bucket key, rate). */
function localLimitsOf(ir: GatewayIR, slot: LocalSlot): Map<string, Rate> {
  const found = new Map<string, Rate>();
  const add = (lane: Lane, limits: LimitIR[]) => {
    for (const limit of limits) if (isLocal(limit) && limit.perCaller === slot.perCaller) found.set(localKey(lane, limit.rate), limit.rate);
  };
  for (const route of ir.routes) {
    if (slot.scope !== 'route') continue;
    add('calls', route.quotas.calls);
    add('discovery', route.quotas.discovery);
  }
  for (const service of ir.toolServices) {
    if (slot.scope === 'tool_service') add('calls', service.quotas.calls);
    if (slot.scope === 'tool') for (const tool of service.quotas.tools) add('calls', tool.calls);
  }
  return found;
}

const everyRequest = (enabled: boolean) => ({ default_value: { numerator: enabled ? 100 : 0, denominator: 'HUNDRED' } });

/**
 * A slot's local_ratelimit configuration (an ECDS resource): a descriptor per (lane, rate) it has,
 * counted apart per scope value and, for a per-caller slot, per caller — whichever of subject or
 * address the route knows its callers by. A slot no limit uses is switched off (nothing evaluated).
 */
function localSlotConfig(ir: GatewayIR, slot: LocalSlot, settings: QuotaSettings): TypedJson {
  const limits = [...localLimitsOf(ir, slot)].sort(([a], [b]) => a.localeCompare(b));
  const wildcard = (key: string) => ({ key });
  const callerShapes = slot.perCaller ? [[wildcard(DESCRIPTOR_KEYS.caller)], [wildcard(DESCRIPTOR_KEYS.address)]] : [[]];
  const descriptors = limits.flatMap(([key, rate]) =>
    callerShapes.map((caller) => ({
      entries: [{ key: DESCRIPTOR_KEYS.limit, value: key }, wildcard(DESCRIPTOR_KEYS.scope), ...caller],
      token_bucket: tokenBucket(rate),
    })),
  );
  return {
    '@type': TYPE_URL.typedExtensionConfig,
    name: slot.filter,
    typed_config: typedStruct(TYPE_URL.localRateLimit, {
      stat_prefix: slot.filter.replace(/\./g, '_'),
      stage: slot.stage,
      filter_enabled: everyRequest(descriptors.length > 0),
      filter_enforced: everyRequest(true),
      enable_retry_after_header: true,
      max_dynamic_descriptors: settings.maxTrackedCallers,
      response_headers_to_add: [{ header: { key: LIMIT_HEADER, value: limitNameFormula(slot) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
      descriptors,
    }),
  };
}

/** The six slots' configurations (ECDS): they depend on the registry's limits only, never on the catalog. */
export function localQuotaConfigs(ir: GatewayIR, settings: QuotaSettings): TypedJson[] {
  return LOCAL_QUOTA_SLOTS.map((slot) => localSlotConfig(ir, slot, settings));
}

/** The listener's quota filters: the six slots (configured by ECDS) and the two shared-limit filters. */
export function quotaFilters(settings: QuotaSettings): HttpFilter[] {
  const local = LOCAL_QUOTA_SLOTS.map((slot) => ({
    name: slot.filter,
    config_discovery: { config_source: { ads: {}, resource_api_version: 'V3' }, type_urls: [TYPE_URL.localRateLimit] },
  }));
  const shared = (Object.entries(SHARED_QUOTA_FILTERS) as [WhenServiceDown, string][]).map(([whenServiceDown, name]) => ({
    name,
    typed_config: typedStruct(TYPE_URL.rateLimit, {
      domain: RATELIMIT_DOMAIN,
      stage: SHARED_STAGE,
      stat_prefix: name.replace(/\./g, '_'),
      timeout: duration(settings.rateLimitTimeoutMs),
      rate_limit_service: { transport_api_version: 'V3', grpc_service: { envoy_grpc: { cluster_name: RATELIMIT_CLUSTER_NAME } } },
      // The limits that applied, with their names, on every answer they were counted for.
      enable_x_ratelimit_headers: 'DRAFT_VERSION_03',
      enable_retry_after_header: true,
      ...(whenServiceDown === 'refuse' && { failure_mode_deny: true, status_on_error: { code: 'ServiceUnavailable' } }),
    }),
  }));
  return [...local, ...shared];
}

const endpointAddress = (service: RateLimitServiceAddress) =>
  'socketPath' in service ? { pipe: { path: service.socketPath } } : { socket_address: { address: service.address, port_value: service.port } };

/** The ratelimit service's cluster (gRPC); without a configured service it has no endpoint, and every shared limit meets its whenServiceDown. */
export function rateLimitServiceCluster(settings: QuotaSettings): TypedJson {
  const service = settings.rateLimitService;
  const overSocket = service !== undefined && 'socketPath' in service;
  return {
    '@type': TYPE_URL.cluster,
    name: RATELIMIT_CLUSTER_NAME,
    // A pipe address has no name to resolve (Envoy refuses one in a STRICT_DNS cluster).
    type: overSocket ? 'STATIC' : 'STRICT_DNS',
    connect_timeout: '1s',
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': TYPE_URL.httpProtocolOptions,
        explicit_http_config: { http2_protocol_options: {} },
      },
    },
    load_assignment: {
      cluster_name: RATELIMIT_CLUSTER_NAME,
      endpoints: service ? [{ lb_endpoints: [{ endpoint: { address: endpointAddress(service) } }] }] : [],
    },
  };
}

// --- per route

type Action = Record<string, unknown>;
const constant = (key: string, value: string): Action => ({ generic_key: { descriptor_key: key, descriptor_value: value } });
const fromOurMetadata = (descriptorKey: string, key: string): Action => ({
  metadata: { descriptor_key: descriptorKey, metadata_key: { key: METADATA_NAMESPACE, path: [{ key }] }, source: 'DYNAMIC' },
});

/**
 * Who the caller is, to a route: on a route with auth the validated token's subject, which jwt_authn
 * (before these filters) copied into its claim header — a client cannot set it; on an open route the client's
 * address.
 */
const callerAction = (route: RouteIR): Action =>
  route.auth
    ? {
        // jwt_authn's copy of the validated subject (a client's own is removed before it runs).
        request_headers: { descriptor_key: DESCRIPTOR_KEYS.caller, header_name: CALLER_CLAIM_HEADERS.sub },
      }
    : { remote_address: {} };

/** What one route's requests are limited by, for the filters that count them. */
interface RouteLimits {
  /** Per-instance limits, each in its slot: [slot, actions]. */
  local: [LocalSlot, Action[]][];
  /** Shared limits, by their whenServiceDown. */
  shared: Record<WhenServiceDown, Action[][]>;
  /** Shared limits the call script leases instead (settings.sharedLimitLeases): none go to the shared filters then. */
  leased?: SharedLeaseContext[];
}

/**
 * Leased shared limits (docs/adr/0016-quotas.md, "Leased shared limits"): each Envoy worker takes
 * `lease` tokens of a shared limit at a time from the ratelimit service (hits_addend) and spends them
 * on its own until they are gone or the limit's window ends. A worker's tokens left unspent at the
 * window's end were counted but never used: at most workers × lease per window, bounded here to
 * 1/LEASE_SPREAD of the limit; a limit too small for a lease of two takes one token per call (exact,
 * today's cost).
 */
export const LEASE_SPREAD = 20;
export const leaseSize = (rate: Rate, workers: number) => Math.max(1, Math.floor(rate.requests / (LEASE_SPREAD * workers)));

/** A leased shared limit as the call script reads it (call-lane.lua, leased limits). */
export interface SharedLeaseContext {
  name: string;
  /** The scope entry's value; absent for a tool's limit (the script forms `<Tool Service id>/<tool>`). */
  scope?: string;
  /** Counted per caller (the subject on a route with auth, else the client's address). */
  caller: boolean;
  /** whenServiceDown: refuse (503) rather than let the call through uncounted. */
  refuse: boolean;
  /** Tokens a worker takes at a time. */
  lease: number;
  /** The limit's window in seconds: a lease ends with it. */
  window_s: number;
}

export function sharedLeaseContext(limit: LimitIR, workers: number, scope?: string): SharedLeaseContext {
  return {
    name: limit.name,
    ...(scope !== undefined && { scope }),
    caller: limit.perCaller,
    refuse: limit.shared?.whenServiceDown === 'refuse',
    lease: leaseSize(limit.rate, workers),
    window_s: UNIT_SECONDS[limit.rate.unit],
  };
}

const slotOf = (scope: Scope, perCaller: boolean) => LOCAL_QUOTA_SLOTS.find((slot) => slot.scope === scope && slot.perCaller === perCaller)!;

function limitsFor(route: RouteIR, lane: Lane, scope: Exclude<Scope, 'tool'>, scopeValue: string, limits: LimitIR[], into: RouteLimits, leaseWorkers?: number): void {
  for (const limit of limits) {
    const caller = limit.perCaller ? [callerAction(route)] : [];
    if (leaseWorkers !== undefined && isLeased(limit, leaseWorkers)) {
      (into.leased ??= []).push(sharedLeaseContext(limit, leaseWorkers, scopeValue));
    } else if (limit.shared) {
      into.shared[limit.shared.whenServiceDown].push([constant(DESCRIPTOR_KEYS.limit, limit.name), constant(DESCRIPTOR_KEYS.scope, scopeValue), ...caller]);
    } else {
      into.local.push([slotOf(scope, limit.perCaller), [constant(DESCRIPTOR_KEYS.limit, localKey(lane, limit.rate)), constant(DESCRIPTOR_KEYS.scope, scopeValue), ...caller]]);
    }
  }
}

/**
 * Tool limits of a call route: their values differ per tool, so the call script puts the tool's
 * limits into metadata (quota_tool_*) and these entries read them; a call of a tool without one
 * makes no descriptor.
 */
function toolLimitsFor(route: RouteIR, tools: ToolQuotaIR[], into: RouteLimits, leaseWorkers: number | undefined): void {
  const counted = (limit: LimitIR) => !isLeased(limit, leaseWorkers);
  const kinds = new Set(tools.flatMap((tool) => tool.calls.filter(counted).map((limit) => `${limit.perCaller}|${limit.shared?.whenServiceDown ?? 'local'}`)));
  for (const kind of [...kinds].sort()) {
    const [perCaller, where] = kind.split('|') as ['true' | 'false', 'local' | WhenServiceDown];
    const byCaller = perCaller === 'true';
    const actions = [
      fromOurMetadata(DESCRIPTOR_KEYS.limit, toolQuotaKey(byCaller, where)),
      fromOurMetadata(DESCRIPTOR_KEYS.scope, TOOL_QUOTA_SCOPE_KEY),
      ...(byCaller ? [callerAction(route)] : []),
    ];
    if (where === 'local') into.local.push([slotOf('tool', byCaller), actions]);
    else into.shared[where].push(actions);
  }
}

/** A route's rate_limits (the local slots' entries by stage) and per-route configs of the shared filters. */
function routeQuotaParts(limits: RouteLimits, metadata: Record<string, unknown>) {
  const rateLimits = [...limits.local]
    .sort(([a], [b]) => a.stage - b.stage)
    .map(([slot, actions]) => ({ stage: slot.stage, actions }));
  const shared = Object.fromEntries(
    (Object.entries(limits.shared) as [WhenServiceDown, Action[][]][])
      .filter(([, entries]) => entries.length > 0)
      .map(([whenServiceDown, entries]) => [
        SHARED_QUOTA_FILTERS[whenServiceDown],
        typedStruct(TYPE_URL.rateLimitPerRoute, { rate_limits: entries.map((actions) => ({ actions })) }),
      ]),
  );
  // Only the route's own limits read it (their entries, and a concurrency refusal's reply): a route
  // without any carries none, which at thousands of routes is megabytes of Envoy's memory
  // (docs/adr/0008-data-path-lanes.md, Envoy memory).
  const read = rateLimits.length > 0 || Object.keys(shared).length > 0 || 'concurrency' in metadata;
  return {
    rateLimits,
    sharedFilters: shared,
    leased: limits.leased ?? [],
    ...(read && { metadata: { filter_metadata: { [QUOTA_ROUTE_METADATA]: metadata } } }),
  };
}

const noLimits = (): RouteLimits => ({ local: [], shared: { allow: [], refuse: [] } });

/**
 * A call route's limits: the route's calls, its Tool Service's, and its tools'. With `leaseWorkers`
 * (settings.sharedLimitLeases) its shared limits are leased by the call script instead of asked per call.
 */
export function callRouteQuotas(route: RouteIR, service: ToolServiceIR, leaseWorkers?: number) {
  const limits = noLimits();
  limitsFor(route, 'calls', 'route', route.key, route.quotas.calls, limits, leaseWorkers);
  limitsFor(route, 'calls', 'tool_service', service.id, service.quotas.calls, limits, leaseWorkers);
  toolLimitsFor(route, service.quotas.tools, limits, leaseWorkers);
  return routeQuotaParts(limits, {
    route: route.key,
    lane: 'calls',
    tool_service: service.id,
    ...(service.quotas.concurrency !== undefined && { concurrency: service.quotas.concurrency }),
  });
}

/** The gateway lane's limits (what the gateway answers itself): the route's discovery limits. */
export function gatewayRouteQuotas(route: RouteIR) {
  const limits = noLimits();
  limitsFor(route, 'discovery', 'route', route.key, route.quotas.discovery, limits);
  return routeQuotaParts(limits, { route: route.key, lane: 'discovery' });
}

/**
 * The call script's context for a tool limit (docs/quotas.md): for each of its limits by kind, the
 * value of the metadata key (quota_tool_<kind>) the route's entries read — the bucket key of a per-instance limit, the name of a
 * shared one (the ratelimit service counts each tool apart under it).
 */
export function toolQuotaContext(tool: ToolQuotaIR, leaseWorkers?: number): Record<string, unknown> {
  const leased = tool.calls.filter((limit) => isLeased(limit, leaseWorkers));
  const counted = tool.calls.filter((limit) => !leased.includes(limit));
  return {
    ...Object.fromEntries(counted.map((limit) => [toolQuotaKind(limit.perCaller, limit.shared?.whenServiceDown ?? 'local'), limit.shared ? limit.name : localKey('calls', limit.rate)])),
    // Leased shared limits of the tool: the script forms each one's scope from the tool it calls.
    ...(leaseWorkers !== undefined && leased.length > 0 && { leases: leased.map((limit) => sharedLeaseContext(limit, leaseWorkers)) }),
  };
}
