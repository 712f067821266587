import { Registry, ToolPolicy, ToolService } from '../registry/model';

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
  tls?: { sni: string; caFile: string };
}

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
  clusterName: string;
  /** The MCP endpoint as registered; the catalog calls it directly. */
  url: string;
  endpoint: UpstreamEndpoint;
  timeouts: typeof TRANSPORT_DEFAULTS;
  healthCheckPath?: string;
  /** Answer for read-only tools when every attempt failed (a degraded result). */
  fallbackText?: string;
  /** Where the token the control plane lists this Tool Service's tools with is kept; read at each listing, so it can rotate. */
  catalogBearerTokenFile?: string;
}

export interface RouteBackendIR {
  /** snake_case prefix of this backend's tools inside the route. */
  name: string;
  clusterName: string;
  /** Which of the Tool Service's tools this route serves; all when absent. */
  policy?: ToolPolicy;
}

export interface RouteIR {
  key: string;
  /** Gateway path agents register: /mcp/{key}. */
  path: string;
  backends: RouteBackendIR[];
}

export interface GatewayIR {
  routes: RouteIR[];
  toolServices: ToolServiceIR[];
}

/** Cluster names come from the stable Tool Service id, never from a position in a list. */
export function clusterNameFor(toolServiceId: string): string {
  return `tool_service.${toolServiceId}`;
}

function toolServiceIR(service: ToolService): ToolServiceIR {
  const parsed = new URL(service.url);
  const tls = parsed.protocol === 'https:';
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const { tls: tlsSettings, healthCheckPath, catalogBearerTokenFile, ...timeouts } = service.transport ?? {};
  return {
    id: service.id,
    clusterName: clusterNameFor(service.id),
    url: service.url,
    endpoint: {
      host,
      port: parsed.port ? Number(parsed.port) : tls ? 443 : 80,
      path: parsed.pathname || '/',
      ...(tls && { tls: { sni: tlsSettings?.sni ?? host, caFile: tlsSettings?.caFile ?? SYSTEM_CA_BUNDLE } }),
    },
    timeouts: { ...TRANSPORT_DEFAULTS, ...timeouts },
    ...(healthCheckPath && { healthCheckPath }),
    ...(catalogBearerTokenFile && { catalogBearerTokenFile }),
    ...(service.fallback && { fallbackText: service.fallback.text }),
  };
}

const byKey = <T>(key: (item: T) => string) => (a: T, b: T) => key(a).localeCompare(key(b));

/** Sorted throughout, so that the same registry in any order yields byte-identical xDS. */
export function buildGatewayIR(registry: Registry): GatewayIR {
  const toolServices = new Map<string, ToolServiceIR>();
  const routes = registry.routes.map((route) => ({
    key: route.key,
    path: `/mcp/${route.key}`,
    backends: route.toolServices
      .map((service) => {
        toolServices.set(service.id, toolServiceIR(service));
        return { name: service.name, clusterName: clusterNameFor(service.id), ...(service.policy && { policy: service.policy }) };
      })
      .sort(byKey((backend) => backend.name)),
  }));
  return {
    routes: routes.sort(byKey((route) => route.key)),
    toolServices: [...toolServices.values()].sort(byKey((service) => service.clusterName)),
  };
}
