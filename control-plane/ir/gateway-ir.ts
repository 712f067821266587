import { Registry } from '../registry/model';

/**
 * The intermediate representation between a registry source and Envoy. Everything Envoy needs is
 * decided here (names, ordering, upstream addresses); the translator only spells it as xDS.
 */

export interface UpstreamEndpoint {
  tls: boolean;
  host: string;
  port: number;
  /** Path of the backend's MCP endpoint; the gateway path /mcp/{routeKey} is rewritten to it. */
  path: string;
}

export interface ToolServiceIR {
  id: string;
  clusterName: string;
  endpoint: UpstreamEndpoint;
}

export interface RouteBackendIR {
  /** snake_case prefix of this backend's tools inside the route. */
  name: string;
  clusterName: string;
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

function endpointOf(url: string): UpstreamEndpoint {
  const parsed = new URL(url);
  const tls = parsed.protocol === 'https:';
  return {
    tls,
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: parsed.port ? Number(parsed.port) : tls ? 443 : 80,
    path: parsed.pathname || '/',
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
        const clusterName = clusterNameFor(service.id);
        toolServices.set(service.id, { id: service.id, clusterName, endpoint: endpointOf(service.url) });
        return { name: service.name, clusterName };
      })
      .sort(byKey((backend) => backend.name)),
  }));
  return {
    routes: routes.sort(byKey((route) => route.key)),
    toolServices: [...toolServices.values()].sort(byKey((service) => service.clusterName)),
  };
}
