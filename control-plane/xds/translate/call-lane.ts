import * as fs from 'node:fs';
import { createHash } from 'node:crypto';
import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { AccessRuleMessage, CATALOG_DEFAULTS, CatalogSnapshotMessage } from '../../catalog/catalog-store';
import { BackendCredentials, RouteAuthIR } from '../../ir/gateway-ir';
import { CALLER_HEADER_NAMES } from '../../auth/caller-identity';
import { MODERN_PROTOCOL_VERSION } from '../../sidecar/modern-era';
import { schemeNameOf } from '../../catalog/resource-naming';
import { projectPath } from '../../shared/paths';
import { TypedJson } from '../protobuf/proto-json';
import { duration } from './duration';
import {
  CHECK_HEADERS,
  MCP_METADATA_NAMESPACE,
  METADATA_NAMESPACE,
  SESSION_CHECK_MARGIN_MS,
  SESSION_CHECK_PATH,
  SIDECAR_CHECK_CLUSTER_NAME,
  SIDECAR_CLUSTER_NAME,
  RATELIMIT_CLUSTER_NAME,
} from './settings';
import { TYPE_URL, typedStruct } from './type-urls';
import { InFlightLimitIR, ToolQuotaIR, toolQuotaOf } from '../../ir/quotas-ir';
import { LIMIT_HEADER, RATELIMIT_DOMAIN, SharedLeaseContext, toolQuotaContext } from './quotas';

/**
 * The call lane (docs/adr/0008-data-path-lanes.md): Envoy's mcp filter parses every POST, a tools/call
 * matches its backend's route by the name's prefix, the call script (control-plane/xds/lua/call-lane.lua)
 * decides on it with that route's rules, and the session check runs when the script asks for it.
 */

/** A tool may ask for its own deadline in its tools/list entry: `_meta: { "mcpgw/timeoutMs": 30000 }`. */
export const TOOL_TIMEOUT_META_KEY = 'mcpgw/timeoutMs';

/** What the call lane needs to know of one backend of one route, from the catalog. */
export interface CallLaneBackend {
  /**
   * The revision family it speaks: the stateless one gets the request envelope and routing headers;
   * `dual`, a backend of both, gets each client's request in the client's own revision.
   */
  era: 'modern' | 'session' | 'dual';
  /** It hands out sessions, so a stateless client's call needs one opened for it. */
  sessionful: boolean;
  /** Its own names of the tools the route serves, with how Envoy treats a call of each. */
  tools: Map<string, string>;
  /** Its own names of tools the route's policy denies, with the rule. */
  denied: Map<string, string>;
  /** Its own names of tools whose calls wait for an approval, with their risk and approvers' group ("": the caller). */
  approvals: Map<string, { risk: string; approvers: string }>;
  fallbackText: string;
  /** Its own names of the prompts the route serves. */
  prompts: Set<string>;
  /** What it declared it serves besides tools: each gets its routes (docs/adr/0015-federated-resources-and-prompts.md). */
  serves: { prompts: boolean; resources: boolean; subscriptions: boolean; completions: boolean };
}

/** What the call lane needs of one route: its backends by name, and the access rules their tools' flags point into (`a=<n>`, 1-based). */
export interface CallLaneRoute {
  backends: Map<string, CallLaneBackend>;
  accessRules: AccessRuleMessage[];
}

/** What the call lane needs of the catalog: the tool-name separator, and route key → its backends' rules. */
export interface CallLaneCatalog {
  separator: string;
  routes: Map<string, CallLaneRoute>;
}

/** Before any catalog: no tool is served yet, so every call is answered "unknown tool". */
export const EMPTY_CALL_LANE_CATALOG: CallLaneCatalog = { separator: CATALOG_DEFAULTS.toolNameSeparator, routes: new Map() };

/**
 * How Envoy treats one tools/call, as the script's flags: its own deadline (`t=`), retries beyond "never
 * reached the backend" (`r`, only for tools the backend marks read-only or idempotent: running a
 * side-effecting tool twice is worse than failing once), and the degraded fallback (`f`, read-only tools
 * of a Tool Service that has one).
 */
export function toolFlags(tool: Tool, hasFallback: boolean, access: { accessRule?: number; needsApproval?: boolean } = {}): string {
  const flags: string[] = [];
  const requested = tool._meta?.[TOOL_TIMEOUT_META_KEY];
  if (typeof requested === 'number' && Number.isInteger(requested) && requested > 0) flags.push(`t=${requested}`);
  const readOnly = tool.annotations?.readOnlyHint === true;
  if (readOnly || tool.annotations?.idempotentHint === true) flags.push('r');
  if (readOnly && hasFallback) flags.push('f');
  // Who may call it (docs/auth.md): the route's access rule n, in the call route's context as access:<n>.
  if (access.accessRule) flags.push(`a=${access.accessRule}`);
  // Its calls go through the approval check first (control-plane/approval/).
  if (access.needsApproval) flags.push('ap');
  return flags.join(';');
}

const parsedToolLists = new WeakMap<string[], Tool[]>();
/** A backend's tools, parsed once per list: the catalog shares one tools_json list among every route backend of a listing. */
function parsedTools(toolsJson: string[]): Tool[] {
  let tools = parsedToolLists.get(toolsJson);
  if (!tools) parsedToolLists.set(toolsJson, (tools = toolsJson.map((json) => JSON.parse(json) as Tool)));
  return tools;
}

export function callLaneCatalogOf(snapshot: CatalogSnapshotMessage): CallLaneCatalog {
  const routes = new Map<string, CallLaneRoute>();
  for (const route of snapshot.routes) {
    const backends = new Map<string, CallLaneBackend>();
    const served = new Map(route.tools.map((exposed) => [`${exposed.backend}\n${exposed.tool_index}`, exposed.access_rule]));
    const servedPrompts = new Set(route.prompts.map((exposed) => `${exposed.backend}\n${exposed.index}`));
    for (const backend of route.backends) {
      const tools = new Map<string, string>();
      const approvals = new Map((backend.approval_tools ?? []).map((approval) => [approval.tool, { risk: approval.risk, approvers: approval.approvers }]));
      parsedTools(backend.tools_json).forEach((tool, index) => {
        const accessRule = served.get(`${backend.name}\n${index}`);
        if (accessRule === undefined) return;
        tools.set(tool.name, toolFlags(tool, backend.fallback_text !== '', { accessRule, needsApproval: approvals.has(tool.name) }));
      });
      const prompts = new Set(
        backend.prompts_json.flatMap((json, index) => (servedPrompts.has(`${backend.name}\n${index}`) ? [(JSON.parse(json) as { name: string }).name] : [])),
      );
      const capabilities = parseCapabilities(backend.capabilities_json);
      const era = backend.protocol_version === MODERN_PROTOCOL_VERSION ? 'modern' : backend.also_modern ? 'dual' : 'session';
      backends.set(backend.name, {
        era,
        sessionful: backend.sessionful,
        tools,
        denied: new Map(backend.denied_tools.map((denied) => [denied.tool, denied.rule])),
        approvals,
        fallbackText: backend.fallback_text,
        prompts,
        serves: {
          prompts: capabilities.prompts !== undefined,
          resources: capabilities.resources !== undefined,
          // The stateless revision has no resources/subscribe: its subscriptions are made with subscriptions/listen.
          subscriptions: era === 'session' && isObject(capabilities.resources) && capabilities.resources.subscribe === true,
          completions: capabilities.completions !== undefined,
        },
      });
    }
    routes.set(route.route_key, { backends, accessRules: route.access_rules });
  }
  return { separator: snapshot.tool_name_separator, routes };
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function parseCapabilities(json: string): Record<string, unknown> {
  try {
    const parsed = JSON.parse(json || '{}') as unknown;
    return isObject(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** An entry of the HttpConnectionManager's http_filters: its configuration inline, or by ECDS. */
export type HttpFilter = { name: string; disabled?: boolean } & ({ typed_config: TypedJson } | { config_discovery: Record<string, unknown> });

const CALL_SCRIPT = projectPath('control-plane/xds/lua/call-lane.lua');
let callScriptFile: string | undefined;

/** How long the call script waits for a backend's credentials: above the sidecar's IdP timeout (5 s by default). */
export const BACKEND_CREDENTIAL_TIMEOUT_MS = 6_000;

/**
 * What the call script takes for a key a route's filter_context leaves out: the gateway's constants,
 * and per backend the commonest value. Envoy keeps each route's context apart, so at 1,000 routes ×
 * 5 Tool Services these repeated on every call route cost it megabytes (docs/adr/0008-data-path-lanes.md,
 * Envoy memory); they reach it once, in the script's prelude. Constants only, never the registry's or
 * the catalog's: the Listener that carries the script must not change when they do.
 */
export const ROUTE_CONTEXT_DEFAULTS = {
  separator: CATALOG_DEFAULTS.toolNameSeparator,
  era: 'session',
  sessionful: true,
  // Call routes annotate the answer with the call's outcome; prompt and resource routes say false.
  annotate: true,
  fallback: '',
  per_caller_credentials: false,
  credential_mode: 'none',
  sidecar_cluster: SIDECAR_CLUSTER_NAME,
  credential_cluster: SIDECAR_CHECK_CLUSTER_NAME,
  credential_timeout_ms: BACKEND_CREDENTIAL_TIMEOUT_MS,
  // Only a backend whose Tool Service opts in (transport.resumeCutPooledCalls) has a pooled-call route.
  pooled_call_lane: false,
  // Leased shared limits (docs/adr/0016-quotas.md): the ratelimit service's cluster and domain.
  ratelimit_cluster: RATELIMIT_CLUSTER_NAME,
  ratelimit_domain: RATELIMIT_DOMAIN,
} as const satisfies Record<string, string | number | boolean>;

/** A route's context as Envoy gets it: without what the script's defaults already say. */
function withoutDefaults(context: Record<string, unknown>): Record<string, unknown> {
  const defaults: Record<string, unknown> = ROUTE_CONTEXT_DEFAULTS;
  return Object.fromEntries(Object.entries(context).filter(([key, value]) => defaults[key] !== value));
}

/**
 * The digest of a route's whole context (128 bits of SHA-256): each Envoy worker's call script
 * remembers what it read of a context by it (call-lane.lua, route_context), so any change of a value —
 * a tool's flags, an access rule, a quota — gives the route another digest, and no worker can go on
 * deciding a call by the rules it remembers from before (docs/adr/0011-caller-identity.md).
 */
export const contextDigest = (context: Record<string, unknown>) => createHash('sha256').update(JSON.stringify(context)).digest('base64url').slice(0, 22);

/** A route's context as the call script gets it: without its defaults, with its digest. */
function scriptContext(context: Record<string, unknown>): Record<string, unknown> {
  return { ...withoutDefaults(context), digest: contextDigest(context) };
}

const luaValue = (value: string | number | boolean) => (typeof value === 'string' ? JSON.stringify(value) : String(value));

/**
 * The script's prelude: ROUTE_CONTEXT_DEFAULTS as a Lua table, and TRACING (Envoy's tracer is on: the
 * script leaves the span's attributes in metadata), on the script's first line (a comment), so that line
 * numbers in Envoy's Lua errors still match the file. The values are plain ASCII, where a JSON string is
 * a Lua string.
 */
function scriptPrelude(tracing: boolean): string {
  const fields = Object.entries(ROUTE_CONTEXT_DEFAULTS).map(([key, value]) => `${key} = ${luaValue(value)}`);
  return `local ROUTE_CONTEXT_DEFAULTS = { ${fields.join(', ')} }; local TRACING = ${tracing}; `;
}

/**
 * The listener's Lua filter, running the call script with each call route's own rules. It cannot be
 * off at the listener and turned on by a call route: Envoy settles which filters run when a request
 * starts, before the mcp filter has read the body that picks the call route. Gateway lane routes
 * turn it off instead (gatewayLaneFilters). Tracing is a listener setting, so the script may know it.
 */
export function callScriptFilter(tracing: boolean): HttpFilter {
  const callScript = scriptPrelude(tracing) + (callScriptFile ??= fs.readFileSync(CALL_SCRIPT, 'utf8'));
  return {
    name: 'envoy.filters.http.lua',
    typed_config: typedStruct(TYPE_URL.lua, {
      default_source_code: { inline_string: callScript },
      // The script changes headers it owns; the route was chosen by the mcp filter's metadata and stays.
      clear_route_cache: false,
    }),
  };
}

/** The mcp filter: every request is MCP (anything else is refused in JSON-RPC form), parsed once, bounded, duplicate keys refused. */
export function mcpFilter(maxRequestBodyBytes: number): HttpFilter {
  return {
    name: 'envoy.filters.http.mcp',
    typed_config: typedStruct(TYPE_URL.mcp, {
      traffic_mode: 'REJECT_NO_MCP',
      reject_duplicate_keys: true,
      max_request_body_size: maxRequestBodyBytes,
      // 2026-07-28 requests: Mcp-Method / Mcp-Name must agree with the body (-32020); a newer revision is refused (-32022).
      attribute_source: 'VERIFY',
      max_supported_protocol_version: MODERN_PROTOCOL_VERSION,
      clear_route_cache: true,
    }),
  };
}

const formatterOf = (key: string) => `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:${key})%`;

/**
 * Client headers the session check sees: its session, protocol version, what a backend session is
 * opened with on the client's behalf, (per-caller credentials) the caller's token the script moved,
 * and the caller's claims as jwt_authn validated them (a client's own copies are removed before
 * jwt_authn runs; absent on open routes).
 */
const CHECKED_CLIENT_HEADERS = ['mcp-session-id', 'mcp-protocol-version', CHECK_HEADERS.callerAuthorization, 'traceparent', 'tracestate', 'baggage', ...CALLER_HEADER_NAMES];

/**
 * core.v3.RetryPolicy of the session check: only what never reached a sidecar, on another replica.
 * Envoy makes the back-off's max_interval each try's timeout too (convertCoreToRouteRetryPolicy):
 * it is the check's own timeout, or a check that opens a backend session would be cut.
 */
const sessionCheckRetryPolicy = (timeoutMs: number) => ({
  retry_on: 'connect-failure,reset-before-request',
  num_retries: 2,
  retry_back_off: { base_interval: '0.010s', max_interval: duration(timeoutMs) },
  retry_host_predicate: [{ name: 'envoy.retry_host_predicates.previous_hosts', typed_config: { '@type': TYPE_URL.previousHostsPredicate } }],
  host_selection_retry_max_attempts: 3,
});

/**
 * The session check (ext_authz over HTTP to the sidecars), asked only when the call script sets its
 * flag: a call in a session, or a stateless client's call for a backend that needs one. It may put the
 * backend's own session into Mcp-Session-Id, or refuse the call in JSON-RPC form.
 */
export function sessionCheckFilter(timeoutMs: number): HttpFilter {
  return {
    name: 'envoy.filters.http.ext_authz',
    // A TypedStruct: http_service.retry_policy is newer than the shipped protos (ADR-0002).
    typed_config: typedStruct(TYPE_URL.extAuthz, {
      transport_api_version: 'V3',
      http_service: {
        server_uri: { uri: `http://${SIDECAR_CHECK_CLUSTER_NAME}${SESSION_CHECK_PATH}`, cluster: SIDECAR_CHECK_CLUSTER_NAME, timeout: duration(timeoutMs) },
        path_prefix: SESSION_CHECK_PATH,
        // A check the sidecar never received goes to another replica (docs/adr/0010-deployment.md); one
        // cut after it was sent is not repeated (it may have opened a backend session): that call fails.
        retry_policy: sessionCheckRetryPolicy(timeoutMs),
        authorization_request: {
          headers_to_add: [
            { key: CHECK_HEADERS.route, value: formatterOf('route') },
            { key: CHECK_HEADERS.backend, value: formatterOf('backend') },
            { key: CHECK_HEADERS.tool, value: formatterOf('tool') },
            { key: CHECK_HEADERS.method, value: formatterOf('method') },
            { key: CHECK_HEADERS.rpcId, value: formatterOf('rpc_id_json') },
            { key: CHECK_HEADERS.deadline, value: String(timeoutMs - SESSION_CHECK_MARGIN_MS) },
            { key: CHECK_HEADERS.concurrency, value: formatterOf('concurrency') },
            { key: CHECK_HEADERS.clientAddress, value: '%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%' },
          ],
        },
        authorization_response: {
          allowed_upstream_headers: { patterns: [{ exact: 'mcp-session-id' }] },
          // A concurrency limit's refusal names the limit and when to call again (docs/quotas.md).
          allowed_client_headers: { patterns: [{ exact: 'content-type' }, { exact: 'retry-after' }, { exact: LIMIT_HEADER }] },
          dynamic_metadata_from_headers: {
            patterns: [{ exact: CHECK_HEADERS.backendSession }, { exact: CHECK_HEADERS.gatewaySession }, { exact: CHECK_HEADERS.concurrencyLease }],
          },
        },
      },
      allowed_headers: { patterns: CHECKED_CLIENT_HEADERS.map((exact) => ({ exact })) },
      filter_enabled_metadata: { filter: METADATA_NAMESPACE, path: [{ key: 'check' }], value: { bool_match: true } },
      failure_mode_allow: false,
      // Its own status for "the check could not be asked", which the local-reply mappers turn into 503 with a JSON-RPC body.
      status_on_error: { code: 'BadGateway' },
    }),
  };
}

/** Match a tools/call whose name carries this backend's prefix (the mcp filter parsed it). */
export function callMatch(path: string, backendName: string, separator: string) {
  const metadataIs = (keys: string[], string_match: Record<string, string>) => ({
    filter: MCP_METADATA_NAMESPACE,
    path: keys.map((key) => ({ key })),
    value: { string_match },
  });
  return {
    path_separated_prefix: path,
    dynamic_metadata: [metadataIs(['method'], { exact: 'tools/call' }), metadataIs(['params', 'name'], { prefix: `${backendName}${separator}` })],
  };
}

/** A Tool Service's tool limits, for the call script (docs/quotas.md). */
export interface CallLaneToolQuotas {
  toolServiceId: string;
  tools: ToolQuotaIR[];
  /** The route's and the Tool Service's per-caller concurrency limits. */
  inFlight: InFlightLimitIR[];
  /** The call's deadline unless its tool has its own: how long its concurrency slots are leased (docs/quotas.md). */
  deadlineMs: number;
  /** Shared limits leased per Envoy worker (settings.sharedLimitLeases); absent: shared limits are asked per call. */
  leases?: {
    /** Envoy workers sharing the limits. */
    workers: number;
    /** How long the script waits for the ratelimit service's answer to a lease (settings.rateLimitTimeoutMs). */
    timeoutMs: number;
    /** The route's and the Tool Service's shared call limits. */
    shared: SharedLeaseContext[];
  };
}

/**
 * The per-caller concurrency limits of a call route (docs/adr/0016-quotas.md, Concurrency), as the
 * script hands them to the session check: `<in flight>=<name>` joined by ";". Names are route keys and
 * Tool Service ids (no ";" in either); a tool's own limit is added by the script as `tool=<in flight>`.
 */
export const inFlightLimitsContext = (limits: InFlightLimitIR[]) => limits.map((limit) => `${limit.inFlight}=${limit.name}`).join(';');
/** What the script knows of a backend on every one of its routes. */
function backendContext(routeKey: string, backendName: string, separator: string, backend: CallLaneBackend | undefined): Record<string, unknown> {
  return {
    route: routeKey,
    backend: backendName,
    separator,
    scheme: schemeNameOf(backendName),
    era: backend?.era ?? 'session',
    sessionful: backend?.sessionful ?? true,
    sidecar_cluster: SIDECAR_CLUSTER_NAME,
  };
}

/** A set as the script reads it fastest: { [value] = true }. */
const asSet = (values: readonly string[]) => Object.fromEntries(values.map((value) => [value, true]));

/** An access rule as the call script reads it (control-plane/xds/lua/call-lane.lua): a list present is a condition. */
function accessRuleContext(rule: AccessRuleMessage) {
  return {
    ...(rule.required_scopes.length > 0 && { scopes: rule.required_scopes }),
    ...(rule.allow_subjects.length > 0 && { subjects: asSet(rule.allow_subjects) }),
    ...(rule.allow_groups.length > 0 && { groups: asSet(rule.allow_groups) }),
    ...(rule.allow_clients.length > 0 && { clients: asSet(rule.allow_clients) }),
  };
}

/** What the script needs of the route's auth to decide access rules and answer a scope challenge. */
function authContext(auth: RouteAuthIR) {
  return {
    auth: true,
    auth_scopes: asSet(auth.scopesSupported),
    resource_metadata: auth.metadataUrl,
  };
}

/**
 * How the script gets the backend's credentials, alike for calls and for prompts and resources
 * (docs/auth.md, Backends): made from the caller's token (token exchange, passthrough), the script
 * asks the sidecar for them (its check cluster) and its worker keeps them for as long as the answer says.
 */
function credentialContext(mode: BackendCredentials['mode']) {
  return {
    per_caller_credentials: mode === 'tokenExchange' || mode === 'passthrough',
    credential_cluster: SIDECAR_CHECK_CLUSTER_NAME,
    credential_timeout_ms: BACKEND_CREDENTIAL_TIMEOUT_MS,
    // What the audit says the request carried to its backend.
    credential_mode: mode,
  };
}

/**
 * A call route's rules for the script. A tool with limits gets the flag `q=<index>` of the Tool
 * Service's tool limit that applies, and the context `quota:<index>:<metadata key>` the values the
 * script leaves in metadata for the quota filters (docs/quotas.md).
 */
export function callRouteFilters(
  routeKey: string,
  backendName: string,
  separator: string,
  route: CallLaneRoute | undefined,
  auth: RouteAuthIR | undefined,
  options: { annotate: boolean; auditArguments: boolean; credentials: BackendCredentials['mode']; quotas?: CallLaneToolQuotas; pooledCallLane: boolean },
) {
  const backend = route?.backends.get(backendName);
  const context: Record<string, unknown> = {
    ...backendContext(routeKey, backendName, separator, backend),
    annotate: options.annotate,
    pooled_call_lane: options.pooledCallLane,
    fallback: backend?.fallbackText ?? '',
    ...credentialContext(options.credentials),
    ...(auth && authContext(auth)),
  };
  if (options.auditArguments) context.audit_arguments = true;
  const { quotas } = options;
  const limited = new Map<number, ToolQuotaIR>();
  for (const [tool, flags] of backend?.tools ?? []) {
    const quota = quotas && toolQuotaOf(quotas.tools, tool);
    if (quota) limited.set(quota.index, quota);
    context[`tool:${tool}`] = quota ? [flags, `q=${quota.index}`].filter(Boolean).join(';') : flags;
    const rule = /(?:^|;)a=(\d+)/.exec(flags)?.[1];
    const accessRule = rule && route?.accessRules[Number(rule) - 1];
    if (accessRule) context[`access:${rule}`] = accessRuleContext(accessRule);
  }
  for (const [tool, rule] of backend?.denied ?? []) context[`deny:${tool}`] = rule;
  for (const [tool, approval] of backend?.approvals ?? []) {
    // As JSON the call script hands on to the approval check unread.
    context[`approval:${tool}`] = JSON.stringify({ risk: approval.risk, ...(approval.approvers ? { approvers: approval.approvers } : {}) });
  }
  if (backend?.approvals.size) context.approval_cluster = SIDECAR_CHECK_CLUSTER_NAME;
  if (quotas && limited.size > 0) {
    context.tool_service = quotas.toolServiceId;
    for (const [index, quota] of limited) {
      for (const [key, value] of Object.entries(toolQuotaContext(quota, quotas.leases?.workers))) context[`quota:${index}:${key}`] = value;
      if (quota.concurrencyPerCaller) context[`concurrency:${index}`] = quota.concurrencyPerCaller;
    }
  }
  const leases = quotas?.leases;
  if (leases && leases.shared.length > 0) context.shared_leases = leases.shared;
  if (leases && (leases.shared.length > 0 || Object.keys(context).some((key) => key.startsWith('quota:') && key.endsWith(':leases')))) {
    context.lease_timeout_ms = leases.timeoutMs;
  }
  if (quotas && (quotas.inFlight.length > 0 || [...limited.values()].some((quota) => quota.concurrencyPerCaller))) {
    context.concurrency = inFlightLimitsContext(quotas.inFlight);
    context.concurrency_deadline_ms = quotas.deadlineMs;
  }
  return {
    'envoy.filters.http.lua': { '@type': TYPE_URL.luaPerRoute, filter_context: scriptContext(context) },
  };
}

/**
 * The rules of a route of a backend's prompts or resources: which prompts it serves, the backend's
 * credentials (as its calls'), and the route's auth (whose caller the session check's memory names).
 */
export function surfaceRouteFilters(
  routeKey: string,
  backendName: string,
  separator: string,
  backend: CallLaneBackend | undefined,
  auth: RouteAuthIR | undefined,
  credentials: BackendCredentials['mode'],
) {
  const context: Record<string, unknown> = {
    ...backendContext(routeKey, backendName, separator, backend),
    annotate: false,
    ...credentialContext(credentials),
    ...(auth && authContext(auth)),
  };
  for (const prompt of backend?.prompts ?? []) context[`prompt:${prompt}`] = '';
  return {
    'envoy.filters.http.lua': { '@type': TYPE_URL.luaPerRoute, filter_context: scriptContext(context) },
  };
}

const mcpMetadata = (keys: string[], value: Record<string, unknown>) => ({
  filter: MCP_METADATA_NAMESPACE,
  path: keys.map((key) => ({ key })),
  value,
});

/** A resource URI of this backend: <scheme>+… or ui://<scheme>+… (resource-naming.ts). */
/** Envoy matches a regex against the whole value. */
const ownUriPattern = (backendName: string) => ({ safe_regex: { regex: `(?s)(ui://)?${schemeNameOf(backendName)}\\+.*` } });

/**
 * The matches of a backend's prompt and resource routes (docs/adr/0015-federated-resources-and-prompts.md),
 * by what it serves: the mcp filter parsed params.name of prompts/get, params.uri of resources/*, and
 * params.ref of completion/complete.
 */
export function surfaceMatches(path: string, backendName: string, separator: string, serves: CallLaneBackend['serves']) {
  const named = { prefix: `${backendName}${separator}` };
  const matches: { kind: string; match: Record<string, unknown> }[] = [];
  const add = (kind: string, method: Record<string, unknown>, target: string[], value: Record<string, unknown>) =>
    matches.push({ kind, match: { path_separated_prefix: path, dynamic_metadata: [mcpMetadata(['method'], { string_match: method }), mcpMetadata(target, { string_match: value })] } });
  if (serves.prompts) add('prompt', { exact: 'prompts/get' }, ['params', 'name'], named);
  if (serves.resources) {
    const methods = serves.subscriptions ? 'read|subscribe|unsubscribe' : 'read';
    add('resource', { safe_regex: { regex: `resources/(${methods})` } }, ['params', 'uri'], ownUriPattern(backendName));
  }
  if (serves.completions) {
    add('complete_prompt', { exact: 'completion/complete' }, ['params', 'ref', 'name'], named);
    add('complete_resource', { exact: 'completion/complete' }, ['params', 'ref', 'uri'], ownUriPattern(backendName));
  }
  return matches;
}

/**
 * A DELETE on the gateway lane: the call script runs only to make this Envoy worker forget the
 * session checks it remembers of the ending session (the sidecar ends the session itself).
 */
export const SESSION_END_FILTERS = {
  'envoy.filters.http.lua': { '@type': TYPE_URL.luaPerRoute, filter_context: { ends_sessions: true } },
};

/**
 * Routes of the gateway lane: the call script does not run. The session check needs no config of its
 * own to stay off here (nor on the DELETE route): it is asked only when the script sets its flag
 * (sessionCheckFilter's filter_enabled_metadata), which the script never does on these routes; a
 * disabling config on each of thousands of routes cost Envoy megabytes (docs/adr/0008-data-path-lanes.md).
 */
export const GATEWAY_LANE_FILTERS = {
  'envoy.filters.http.lua': { '@type': TYPE_URL.luaPerRoute, disabled: true },
};
