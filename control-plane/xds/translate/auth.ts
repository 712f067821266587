import { GatewayIR, RouteAuthIR, RouteIR } from '../../ir/gateway-ir';
import { CALLER_CLAIM_HEADERS, CALLER_HEADER_NAMES, CallerClaim } from '../../auth/caller-identity';
import { TypedJson } from '../protobuf/proto-json';
import { TYPE_URL } from './type-urls';

/**
 * The gateway as an OAuth 2.1 resource server in Envoy (docs/auth.md, docs/adr/0011-caller-identity.md):
 * jwt_authn validates every request of a route with auth, its providers and requirements delivered by
 * ECDS (so a registry change never touches the listener), each route selecting its requirement by
 * per-route config (RDS), with the signing keys the control plane fetched inline.
 */

/** The jwt_authn entry of the listener's filters, and the name of its ECDS resource and per-route configs. */
export const JWT_FILTER_NAME = 'envoy.filters.http.jwt_authn';
/** Route metadata the 401 mappers read the route's challenge parameters from (local-replies.ts). */
export const AUTH_ROUTE_METADATA = 'mcpgw.auth';

/** An issuer's signing keys as the control plane has them, by key source name: a JWKS document (JSON). */
export type SigningKeys = ReadonlyMap<string, string>;
export const NO_SIGNING_KEYS: SigningKeys = new Map();

/**
 * The claims beyond the caller's name (iss, sub, client_id, azp: every call records them) that some
 * reader of a route needs: the groups for a rule's allowGroups, the scopes for a rule's requiredScopes
 * (the call script's access decision and scope challenge, the sidecar's tools/list), the display name
 * for an approval request. jwt_authn copies each configured claim into a header on every request
 * (a list claim as base64 of its JSON), so a route that reads none of them gets none
 * (docs/adr/0011-caller-identity.md, Numbers, session 8).
 */
function claimsRead(route: RouteIR) {
  const policies = route.backends.flatMap((backend) => (backend.policy ? [backend.policy] : []));
  const rules = policies.flatMap((policy) => policy.rules ?? []);
  return {
    groups: rules.some((rule) => rule.allowGroups),
    scopes: rules.some((rule) => rule.requiredScopes),
    // approvalOf (control-plane/approval/risk.ts) asks only with one of these two.
    username: policies.some((policy) => policy.approvalAtRisk !== undefined) || rules.some((rule) => rule.approval === 'required'),
  };
}
type ClaimsRead = ReturnType<typeof claimsRead>;

/**
 * One provider per key source, clock skew and set of claims copied: routes of one issuer share its keys
 * and differ in their audiences and in which claims their readers need (and where their groups are).
 */
function providerName(auth: RouteAuthIR, read: ClaimsRead) {
  const claims = [read.groups ? `groups:${auth.groupsClaim.join('.')}` : '', read.scopes ? 'scopes' : '', read.username ? 'username' : ''];
  return [`${auth.keys.name}_skew${auth.clockSkewSeconds}`, ...claims.filter(Boolean)].join('_');
}

/** The claims jwt_authn copies into the caller's headers: the caller's name always, the others where read. */
function claimHeaders(auth: RouteAuthIR, read: ClaimsRead) {
  const claimNames: Partial<Record<CallerClaim, string>> = {
    iss: 'iss',
    sub: 'sub',
    client_id: 'client_id',
    azp: 'azp',
    ...(read.scopes && { scope: 'scope', scp: 'scp' }),
    // A path, '.'-separated.
    ...(read.groups && { groups: auth.groupsClaim.join('.') }),
    ...(read.username && { preferred_username: 'preferred_username' }),
  };
  return Object.entries(claimNames).map(([claim, claimName]) => ({ header_name: CALLER_CLAIM_HEADERS[claim as CallerClaim], claim_name: claimName }));
}

/** The listener's jwt_authn: its configuration comes by ECDS, never in the listener itself. */
export function jwtAuthnFilter() {
  return {
    name: JWT_FILTER_NAME,
    config_discovery: {
      config_source: { ads: {}, resource_api_version: 'V3' },
      type_urls: [TYPE_URL.jwtAuthn],
    },
  };
}

/** The routes whose tokens Envoy can validate now: those with auth whose issuer's keys the control plane has. */
export const validatedRoutes = (ir: GatewayIR, keys: SigningKeys) => ir.routes.filter((route) => route.auth && keys.has(route.auth.keys.name));

/**
 * jwt_authn's configuration (the ECDS resource): a provider per issuer (keys inline, the validated
 * claims the gateway reads copied into headers, the token kept in the request for backend
 * credentials made from it), a requirement per route (that provider, the route's audiences). Always sent, also
 * with no route of auth: the listener waits for it.
 */
export function jwtAuthnConfig(ir: GatewayIR, keys: SigningKeys): TypedJson {
  const providers: Record<string, unknown> = {};
  const requirements: Record<string, unknown> = {};
  for (const route of validatedRoutes(ir, keys)) {
    const auth = route.auth!;
    const read = claimsRead(route);
    providers[providerName(auth, read)] = {
      issuer: auth.issuer,
      local_jwks: { inline_string: keys.get(auth.keys.name) },
      // MCP: the token travels in the Authorization header only, never in the query string.
      from_headers: [{ name: 'authorization', value_prefix: 'Bearer ' }],
      // Kept in the request once validated: backend credentials are made from it (token exchange's
      // subject token, docs/adr/0013-backend-credentials.md). It never reaches a backend: every call
      // route removes it as the request leaves, and the sidecar's own requests never carry it.
      forward: true,
      // Only the claims the gateway reads, as headers (not the payload in dynamic metadata: every
      // reader of the metadata, the call log's copy of all of it above all, cost ~100 µs of Envoy CPU
      // per call; docs/adr/0011-caller-identity.md, Numbers).
      claim_to_headers: claimHeaders(auth, read),
      clock_skew_seconds: auth.clockSkewSeconds,
      // Agents send the same token on every request: a verified token is kept (its expiry is still
      // checked on every use), so its signature and JSON are not worked through again per request.
      jwt_cache_config: { jwt_cache_size: 1000 },
    };
    requirements[route.key] = { provider_and_audiences: { provider_name: providerName(auth, read), audiences: auth.audiences } };
  }
  return {
    '@type': TYPE_URL.typedExtensionConfig,
    name: JWT_FILTER_NAME,
    typed_config: { '@type': TYPE_URL.jwtAuthn, providers, requirement_map: requirements, bypass_cors_preflight: true },
  };
}

/** A quoted parameter of a WWW-Authenticate challenge (values here never hold a quote or backslash). */
const param = (name: string, value: string) => `${name}="${value}"`;

/** The per-route config and metadata that make jwt_authn validate a route's requests, and the 401s name its metadata. */
export function authenticatedRouteParts(route: RouteIR) {
  const auth = route.auth!;
  const challenge = [param('resource_metadata', auth.metadataUrl), ...(auth.challengeScopes.length > 0 ? [param('scope', auth.challengeScopes.join(' '))] : [])];
  return {
    metadata: { filter_metadata: { [AUTH_ROUTE_METADATA]: { challenge: challenge.join(', ') } } },
    filters: { [JWT_FILTER_NAME]: { '@type': TYPE_URL.jwtAuthnPerRoute, requirement_name: route.key } },
  };
}

/**
 * Where a request leaves toward a backend (a call route), the caller's claim headers are removed:
 * a backend never sees the caller's claims (nor, on an open route, whatever a client sent by those names).
 */
export const CALLER_HEADERS_REMOVED = { request_headers_to_remove: [...CALLER_HEADER_NAMES] };

/** RFC 9728 protected-resource metadata of a route, served by Envoy at its well-known path. */
export function metadataDocumentRoute(route: RouteIR) {
  const auth = route.auth!;
  const document = {
    resource: auth.resource,
    authorization_servers: auth.authorizationServers,
    ...(auth.scopesSupported.length > 0 && { scopes_supported: auth.scopesSupported }),
    bearer_methods_supported: ['header'],
    resource_name: `MCP route ${route.key}`,
  };
  return {
    name: `${route.key}/metadata`,
    match: { path: auth.metadataPath },
    direct_response: { status: 200, body: { inline_string: JSON.stringify(document) } },
    response_headers_to_add: [{ header: { key: 'content-type', value: 'application/json' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
  };
}

/**
 * A route with auth whose issuer's signing keys the control plane has not had yet (the identity
 * provider never answered since the route appeared, and no copy was kept): nothing can be validated,
 * so every request of the route is refused with 503 (in JSON-RPC form by the local-reply mappers),
 * never let through.
 */
/** How the refusal of a route without keys begins (mcpgw up recognizes it as the gateway's own answer). */
export const KEYS_UNAVAILABLE = 'cannot validate tokens yet';

export function keysUnavailableRoute(route: RouteIR) {
  return {
    name: `${route.key}/keys_unavailable`,
    match: { path_separated_prefix: route.path },
    direct_response: {
      status: 503,
      body: {
        inline_string: `route ${route.key} ${KEYS_UNAVAILABLE}: the gateway has no signing keys of ${route.auth!.issuer} (its identity provider has not answered); try again`,
      },
    },
  };
}

type JwtAuthnJson = { typed_config: { providers: Record<string, unknown>; requirement_map: Record<string, unknown> } };

/**
 * jwt_authn's configuration that still has what `next` drops from `previous` (a removed route's
 * requirement, an issuer no route uses any more), or undefined when nothing is dropped: published
 * until every Envoy has the routes that no longer name them (make before break, like clusters).
 */
export function jwtAuthnKeepingRemoved(previous: TypedJson | undefined, next: TypedJson): TypedJson | undefined {
  if (!previous) return undefined;
  const before = (previous as unknown as JwtAuthnJson).typed_config;
  const after = (next as unknown as JwtAuthnJson).typed_config;
  const dropped = (from: Record<string, unknown>, to: Record<string, unknown>) => Object.keys(from).some((name) => !(name in to));
  if (!dropped(before.requirement_map, after.requirement_map) && !dropped(before.providers, after.providers)) return undefined;
  return {
    ...next,
    typed_config: {
      ...after,
      providers: { ...before.providers, ...after.providers },
      requirement_map: { ...before.requirement_map, ...after.requirement_map },
    },
  } as TypedJson;
}
