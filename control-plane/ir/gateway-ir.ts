import { createHash } from 'node:crypto';
import { Credentials, Registry, RouteAuth, ToolPolicy, ToolService } from '../registry/model';
import { RouteQuotasIR, ToolServiceQuotasIR, routeQuotasIR, toolServiceQuotasIR } from './quotas-ir';

/**
 * The intermediate representation between a registry source and Envoy. Everything Envoy needs is
 * decided here (names, ordering, upstream addresses, effective timeouts); the translator only spells
 * it as xDS.
 */

export interface UpstreamEndpoint {
  host: string;
  port: number;
  /** Path of the backend's MCP endpoint; the gateway path /mcp/{routeKey} is rewritten to it. */
  path: string;
  /** Present for https:// Tool Services. */
  tls?: UpstreamTls;
}

/** How Envoy verifies a Tool Service (and, for mTLS, proves itself to it): files Envoy reads and watches (SDS). */
export interface UpstreamTls {
  sni: string;
  caFile: string;
  /** The gateway's client certificate and key, PEM (mTLS). */
  clientCert?: { certFile: string; keyFile: string };
}

/**
 * What a call to the Tool Service carries (docs/auth.md, Backends). `serviceAccount` is Envoy's to inject
 * (the cluster's credential injector); `tokenExchange` and `passthrough` are made per call by the
 * sidecar from the caller's validated token (the call script asks for them, docs/adr/0013-backend-credentials.md).
 */
export type BackendCredentials = Credentials;

/** Credentials taken from the caller's token on each request (the sidecar makes them). */
export const perCallerCredentials = (credentials: BackendCredentials) => credentials.mode === 'tokenExchange' || credentials.mode === 'passthrough';

/**
 * Defaults suited to MCP (docs/adr/0009-edge-hardening.md): a tools/call may stream progress for
 * minutes, or wait minutes for a person's answer to an elicitation, but never for ever: a backend that
 * never answers frees the call after the idle limit, one that only trickles after the deadline.
 */
export const TRANSPORT_DEFAULTS = {
  connectTimeoutMs: 2_000,
  requestTimeoutMs: 600_000,
  idleTimeoutMs: 300_000,
};
/** Debian's CA bundle; a Tool Service may name its own with transport.tls.caFile. */
export const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

export interface ToolServiceIR {
  id: string;
  /** Its catalog's key (`tool_service.<id>`): its own tools, fetched once for every route that maps it. */
  catalogKey: string;
  /**
   * The Envoy cluster its calls go to, shared by every Tool Service with the same upstream (endpoint,
   * TLS, connection settings): thousands of ids on a handful of backends make a handful of clusters.
   */
  clusterName: string;
  /** The MCP endpoint as registered; the catalog calls it directly. */
  url: string;
  endpoint: UpstreamEndpoint;
  timeouts: typeof TRANSPORT_DEFAULTS;
  healthCheckPath?: string;
  /**
   * Its stateless clients' calls in its pooled backend session go through the sidecars' pooled-call
   * lane, which resumes a stream the backend ends before the answer (transport.resumeCutPooledCalls).
   */
  resumeCutPooledCalls: boolean;
  /** Answer for read-only tools when every attempt failed (a degraded result). */
  fallbackText?: string;
  /** Where the token the control plane lists this Tool Service's tools with is kept; read at each listing, so it can rotate. */
  catalogBearerTokenFile?: string;
  /** Its rate and concurrency limits, over every route that maps it (docs/quotas.md). */
  quotas: ToolServiceQuotasIR;
  /** What its calls, the sidecar's requests and the catalog's listings authenticate with. */
  credentials: BackendCredentials;
}

export interface RouteBackendIR {
  /** snake_case prefix of this backend's tools inside the route. */
  name: string;
  catalogKey: string;
  clusterName: string;
  /** Which of the Tool Service's tools this route serves; all when absent. */
  policy?: ToolPolicy;
}

/** Where the control plane reads an issuer's signing keys: a JWKS URL, or the issuer's discovery document. */
export interface SigningKeySource {
  /** Stable name of the source (`jwks_<hash>`), which also names the issuer's jwt_authn provider. */
  name: string;
  issuer: string;
  /** Absent: `jwks_uri` from the issuer's discovery document. */
  jwksUri?: string;
}

/** A route's OAuth 2.1 resource-server settings, every default resolved (docs/auth.md). */
export interface RouteAuthIR {
  keys: SigningKeySource;
  issuer: string;
  /** The route's resource identifier (RFC 8707, RFC 9728 `resource`): <publicUrl>/mcp/<key>. */
  resource: string;
  /** Where its protected-resource metadata document is served (RFC 9728 §3.1: the well-known path inserted before the resource's path). */
  metadataUrl: string;
  /** Path of that document on the gateway. */
  metadataPath: string;
  audiences: string[];
  clockSkewSeconds: number;
  /** Scopes the 401 challenge names (`scope=`); empty: none. */
  challengeScopes: string[];
  /** `scopes_supported` of the metadata document. */
  scopesSupported: string[];
  authorizationServers: string[];
  /** The claim holding the caller's groups, as a path of names. */
  groupsClaim: string[];
}

export interface RouteIR {
  key: string;
  /** Gateway path agents register: /mcp/{key}. */
  path: string;
  backends: RouteBackendIR[];
  /** Its rate and concurrency limits, the document's defaults included (docs/quotas.md). */
  quotas: RouteQuotasIR;
  /** Present when callers must present a valid token. */
  auth?: RouteAuthIR;
}

/** Gateway settings the IR resolves registry defaults with. */
export interface IRSettings {
  /** The gateway's public origin (scheme://host[:port]): resource URLs are <publicUrl>/mcp/<key>. */
  publicUrl: string;
}

/** The public origin of a gateway listening on 127.0.0.1:10000, `mcpgw up`'s default. */
export const DEFAULT_IR_SETTINGS: IRSettings = { publicUrl: 'http://127.0.0.1:10000' };

export const AUTH_DEFAULTS = { clockSkewSeconds: 60, groupsClaim: ['groups'] };
/** RFC 9728 §3: the well-known URI suffix of protected-resource metadata. */
export const PROTECTED_RESOURCE_WELL_KNOWN = '/.well-known/oauth-protected-resource';

function signingKeySource(auth: RouteAuth): SigningKeySource {
  const identity = JSON.stringify([auth.issuer, auth.jwksUri ?? null]);
  return { name: `jwks_${createHash('sha256').update(identity).digest('hex').slice(0, 12)}`, issuer: auth.issuer, ...(auth.jwksUri && { jwksUri: auth.jwksUri }) };
}

function routeAuthIR(auth: RouteAuth, path: string, rulesScopes: string[], settings: IRSettings): RouteAuthIR {
  const publicUrl = auth.publicUrl ?? settings.publicUrl;
  const resource = `${publicUrl}${path}`;
  const metadataPath = `${PROTECTED_RESOURCE_WELL_KNOWN}${path}`;
  return {
    keys: signingKeySource(auth),
    issuer: auth.issuer,
    resource,
    metadataUrl: `${publicUrl}${metadataPath}`,
    metadataPath,
    audiences: auth.audiences ?? [resource],
    clockSkewSeconds: auth.clockSkewSeconds ?? AUTH_DEFAULTS.clockSkewSeconds,
    challengeScopes: auth.scopes ?? [],
    scopesSupported: [...new Set([...(auth.scopes ?? []), ...rulesScopes])],
    authorizationServers: auth.authorizationServers ?? [auth.issuer],
    groupsClaim: auth.groupsClaim ?? AUTH_DEFAULTS.groupsClaim,
  };
}

export interface GatewayIR {
  routes: RouteIR[];
  toolServices: ToolServiceIR[];
  /** One Tool Service per distinct Envoy cluster, whose upstream settings make it. */
  clusters: ToolServiceIR[];
}

/** Catalog keys come from the stable Tool Service id, never from a position in a list. */
const CATALOG_KEY_PREFIX = 'tool_service.';
export const catalogKeyFor = (toolServiceId: string) => `${CATALOG_KEY_PREFIX}${toolServiceId}`;
/** The Tool Service id a catalog key was made from: what operators know it by, and the metrics' tool_service label. */
export const toolServiceIdOf = (catalogKey: string) => catalogKey.slice(CATALOG_KEY_PREFIX.length);

/**
 * A cluster is named after what it connects to, so the same upstream is one cluster whatever ids and
 * routes use it, and a change of any of its settings is another cluster. A Tool Service with a
 * concurrency limit has a cluster of its own, whose circuit breaker is that limit. No dots: Envoy's
 * stat tag extraction would split the name (the name is the `envoy_cluster_name` label as it is).
 */
function clusterNameOf(endpoint: UpstreamEndpoint, connectTimeoutMs: number, healthCheckPath: string | undefined, credentials: BackendCredentials, concurrencyOf?: { id: string; limit: number }): string {
  const parts: unknown[] = [endpoint.host, endpoint.port, endpoint.tls ?? null, connectTimeoutMs, healthCheckPath ?? null];
  // The credential is part of the upstream: a service-account cluster injects its token, a per-caller
  // one keeps the token the session check set. (Without credentials, the name is what it always was.)
  if (credentials.mode === 'serviceAccount') parts.push(['serviceAccount', credentials.tokenFile]);
  else if (perCallerCredentials(credentials)) parts.push('per-caller');
  // A Tool Service with a concurrency limit has a cluster of its own: the limit is its circuit breaker.
  if (concurrencyOf) parts.push(concurrencyOf);
  const identity = JSON.stringify(parts);
  const hash = createHash('sha256').update(identity).digest('hex').slice(0, 8);
  return `backend_${endpoint.host.replace(/[^A-Za-z0-9]+/g, '_')}_${endpoint.port}_${hash}`;
}

function toolServiceIR(service: ToolService): ToolServiceIR {
  const parsed = new URL(service.url);
  const tls = parsed.protocol === 'https:';
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const { tls: tlsSettings, healthCheckPath, resumeCutPooledCalls = false, ...timeouts } = service.transport ?? {};
  const clientCert = tlsSettings?.clientCertFile && tlsSettings.clientKeyFile ? { certFile: tlsSettings.clientCertFile, keyFile: tlsSettings.clientKeyFile } : undefined;
  const endpoint: UpstreamEndpoint = {
    host,
    port: parsed.port ? Number(parsed.port) : tls ? 443 : 80,
    path: parsed.pathname || '/',
    ...(tls && { tls: { sni: tlsSettings?.sni ?? host, caFile: tlsSettings?.caFile ?? SYSTEM_CA_BUNDLE, ...(clientCert && { clientCert }) } }),
  };
  const effectiveTimeouts = { ...TRANSPORT_DEFAULTS, ...timeouts };
  const credentials = service.credentials ?? { mode: 'none' };
  const quotas = toolServiceQuotasIR(service.id, service.quotas);
  const concurrencyOf = quotas.concurrency === undefined ? undefined : { id: service.id, limit: quotas.concurrency };
  return {
    id: service.id,
    catalogKey: catalogKeyFor(service.id),
    clusterName: clusterNameOf(endpoint, effectiveTimeouts.connectTimeoutMs, healthCheckPath, credentials, concurrencyOf),
    url: service.url,
    endpoint,
    timeouts: effectiveTimeouts,
    credentials,
    ...(healthCheckPath && { healthCheckPath }),
    resumeCutPooledCalls,
    ...(service.fallback && { fallbackText: service.fallback.text }),
    quotas,
  };
}

const byKey = <T>(key: (item: T) => string) => (a: T, b: T) => key(a).localeCompare(key(b));

/** Sorted throughout, so that the same registry in any order yields byte-identical xDS. */
export function buildGatewayIR(registry: Registry, settings: IRSettings = DEFAULT_IR_SETTINGS): GatewayIR {
  const toolServices = new Map<string, ToolServiceIR>();
  const routes = registry.routes.map((route): RouteIR => ({
    key: route.key,
    path: `/mcp/${route.key}`,
    quotas: routeQuotasIR(route.key, route.quotas),
    ...(route.auth && {
      auth: routeAuthIR(
        route.auth,
        `/mcp/${route.key}`,
        route.toolServices.flatMap((service) => service.policy?.rules?.flatMap((rule) => rule.requiredScopes ?? []) ?? []),
        settings,
      ),
    }),
    backends: route.toolServices
      .map((service) => {
        const ir = toolServiceIR(service);
        toolServices.set(service.id, ir);
        return { name: service.name, catalogKey: ir.catalogKey, clusterName: ir.clusterName, ...(service.policy && { policy: service.policy }) };
      })
      .sort(byKey((backend) => backend.name)),
  }));
  const sortedServices = [...toolServices.values()].sort(byKey((service) => service.catalogKey));
  const clusters = new Map<string, ToolServiceIR>();
  for (const service of sortedServices) if (!clusters.has(service.clusterName)) clusters.set(service.clusterName, service);
  return {
    routes: routes.sort(byKey((route) => route.key)),
    toolServices: sortedServices,
    clusters: [...clusters.values()].sort(byKey((service) => service.clusterName)),
  };
}
