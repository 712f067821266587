import { allocatePort } from './ports';
import { BASE_TOOL_COUNT, BenchToolServiceSpec } from '../backends/bench-tool-service';

/**
 * The backends and routes every system under test is configured for, decided once so that B, C, D
 * and E are generated from the same description and cannot drift apart.
 */
export const HOST = '127.0.0.1';

export interface BackendEndpoint {
  /** Stable id: the gateway's Tool Service id and the Envoy cluster name in B and D. */
  id: string;
  port: number;
  url: string;
}

export interface RouteBackend {
  /** Tool-name prefix inside the route (`<name>__<tool>`). */
  name: string;
  endpoint: BackendEndpoint;
}

export interface RouteSpec {
  key: string;
  backends: RouteBackend[];
}

export type ListVariant = 'normal' | 'down' | 'slow';
export const LIST_VARIANTS: ListVariant[] = ['normal', 'down', 'slow'];

export interface Topology {
  /** The route of tools/call and streaming: the bench backend twice, under two names, so every MCP-aware path multiplexes. */
  callRoute: RouteSpec;
  /** The route of tools/list by variant: all backends up, one down (nothing listens), one slow. */
  listRoutes: Record<ListVariant, RouteSpec>;
  /** Processes to start: the call backend alone, and the whole fleet in a second process. */
  callBackendSpecs: BenchToolServiceSpec[];
  fleetSpecs: BenchToolServiceSpec[];
  toolsPerFleetBackend: number;
  promptsPerFleetBackend: number;
  resourcesPerFleetBackend: number;
}

export interface FleetSize {
  backends: number;
  toolsPerBackend: number;
  /** Prompts and resources each fleet backend lists (prompts/list and resources/list of the tools/list scenario). */
  promptsPerBackend: number;
  resourcesPerBackend: number;
  slowListDelayMs: number;
}

const endpoint = (id: string, port: number): BackendEndpoint => ({ id, port, url: `http://${HOST}:${port}/mcp` });

export async function planTopology(fleet: FleetSize): Promise<Topology> {
  const call = endpoint('bench', await allocatePort());
  const fillerTools = fleet.toolsPerBackend - BASE_TOOL_COUNT;
  const healthy: BackendEndpoint[] = [];
  for (let index = 1; index <= fleet.backends; index++) healthy.push(endpoint(`fleet_${index}`, await allocatePort()));
  const slow = endpoint('fleet_slow', await allocatePort());
  // Nothing ever listens here: the kernel refuses each connection, as for a crashed backend.
  const down = endpoint('fleet_down', await allocatePort());
  const named = (endpoints: BackendEndpoint[]): RouteBackend[] =>
    endpoints.map((backend, index) => ({ name: `svc_${String(index + 1).padStart(2, '0')}`, endpoint: backend }));
  const lastReplacedBy = (replacement: BackendEndpoint) => named([...healthy.slice(0, -1), replacement]);
  return {
    callRoute: { key: 'call', backends: [{ name: 'bench', endpoint: call }, { name: 'spare', endpoint: { ...call, id: 'bench_spare' } }] },
    listRoutes: {
      normal: { key: 'list', backends: named(healthy) },
      down: { key: 'list-down', backends: lastReplacedBy(down) },
      slow: { key: 'list-slow', backends: lastReplacedBy(slow) },
    },
    callBackendSpecs: [{ port: call.port, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 }],
    fleetSpecs: [
      ...healthy.map((backend) => ({ port: backend.port, fillerTools, listDelayMs: 0, prompts: fleet.promptsPerBackend, resources: fleet.resourcesPerBackend })),
      { port: slow.port, fillerTools, listDelayMs: fleet.slowListDelayMs, prompts: fleet.promptsPerBackend, resources: fleet.resourcesPerBackend },
    ],
    toolsPerFleetBackend: fleet.toolsPerBackend,
    promptsPerFleetBackend: fleet.promptsPerBackend,
    resourcesPerFleetBackend: fleet.resourcesPerBackend,
  };
}

export function allRoutes(topology: Topology): RouteSpec[] {
  return [topology.callRoute, ...LIST_VARIANTS.map((variant) => topology.listRoutes[variant])];
}

/** Distinct backends (by id) across the given routes: one cluster each. */
export function distinctEndpoints(routes: RouteSpec[]): BackendEndpoint[] {
  const byId = new Map<string, BackendEndpoint>();
  for (const route of routes) for (const backend of route.backends) byId.set(backend.endpoint.id, backend.endpoint);
  return [...byId.values()];
}

/** How many tools a correct aggregation of the route lists (a down backend has none). */
export function expectedToolCount(topology: Topology, variant: ListVariant): number {
  const backends = topology.listRoutes[variant].backends.length;
  return (variant === 'down' ? backends - 1 : backends) * topology.toolsPerFleetBackend;
}
