import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { ManagedProcess, portAccepts, waitFor } from '../../control-plane/devstack/processes';
import { projectPath } from '../../control-plane/shared/paths';
import { BenchToolServiceSpec } from '../backends/bench-tool-service';
import { NaiveProxyConfig } from '../naive-proxy/naive-proxy';
import { nativeMcpRouterBootstrap, plainEnvoyBootstrap } from './envoy-bootstraps';
import { allocatePort } from './ports';
import { ProcessGroup } from './process-group';
import { GATEWAY_AUDIENCE, Issuer, startIssuer } from './issuer';
import { HOST, LIST_VARIANTS, ListVariant, RouteSpec, Topology, allRoutes } from './topology';

export type SystemId = 'A' | 'B' | 'C' | 'D' | 'E';

export interface SystemUnderTest {
  id: SystemId;
  name: string;
  /** Where tools/call goes, and the prefix the tool name needs on this path. */
  callUrl: string;
  toolPrefix: string;
  /** tools/list of the 50-backend route by variant, or why this path cannot answer it. */
  list: { urls: Record<ListVariant, string> } | { unsupported: string };
  /** What the agent sends with every request on this path: its bearer token (the same token to every system; only C validates it). */
  requestHeaders: Record<string, string>;
}

/**
 * The systems in the order repetition `repetition` (from 1) measures them: each repetition starts one
 * system later, so that none is always measured right after the same neighbour (whose backlog or
 * background work could spill over) or always first.
 */
export function inRotation<T>(systems: T[], repetition: number): T[] {
  const shift = (repetition - 1) % systems.length;
  return [...systems.slice(shift), ...systems.slice(0, shift)];
}

export interface RunningSystems {
  systems: SystemUnderTest[];
  /** Extra facts about how each system was started, for the results. */
  notes: Record<SystemId, string>;
}

const BACKENDS_MAIN = projectPath('dist', 'bench', 'backends', 'main.js');
const NAIVE_PROXY_MAIN = projectPath('dist', 'bench', 'naive-proxy', 'main.js');

const httpOk = async (url: string) => ((await fetch(url)).ok ? true : undefined);

/** One process serving every backend of `specs`, each on its port. */
export async function startBackendProcess(group: ProcessGroup, name: string, specs: BenchToolServiceSpec[]): Promise<ManagedProcess> {
  const backend = group.spawn(name, process.execPath, [BACKENDS_MAIN, '--spec', JSON.stringify(specs)]);
  for (const spec of specs) await waitFor(`${name} port ${spec.port}`, () => portAccepts(spec.port));
  return backend;
}

/**
 * The variant benches' backend: the bench backend alone in its process, and a registry file (in
 * `dir`) with one route `bench` to it, for every gateway the bench compares.
 */
export async function startSingleBackendRoute(group: ProcessGroup, dir: string): Promise<{ registryFile: string; backendUrl: string; backendPid: number }> {
  const port = await allocatePort();
  const backend = await startBackendProcess(group, 'backend', [{ port, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 }]);
  const backendUrl = `http://${HOST}:${port}/mcp`;
  const registryFile = path.join(dir, 'registry.yaml');
  fs.writeFileSync(registryFile, stringify({ routes: [{ key: 'bench', toolServices: [{ name: 'bench', url: backendUrl }] }] }));
  return { registryFile, backendUrl, backendPid: backend.child.pid! };
}

export async function startBackends(group: ProcessGroup, topology: Topology): Promise<{ call: ManagedProcess; fleet: ManagedProcess }> {
  const call = await startBackendProcess(group, 'backend-call', topology.callBackendSpecs);
  return { call, fleet: await startBackendProcess(group, 'backend-fleet', topology.fleetSpecs) };
}

/** A static Envoy of the bench, with `config` as its bootstrap. */
export async function startEnvoy(
  group: ProcessGroup,
  name: string,
  config: unknown,
  adminPort: number,
  listenerPorts: number[],
  /** Longer for an Envoy under valgrind on a busy machine. */
  { timeoutMs }: { timeoutMs?: number } = {},
): Promise<ManagedProcess> {
  const file = path.join(group.logDir, `${name}.yaml`);
  fs.writeFileSync(file, stringify(config));
  // Same binary and flags as the gateway's Envoy (control-plane/devstack/stack.ts).
  const envoy = group.spawn(name, envoyBinary(), ['-c', file, '--use-dynamic-base-id', '--log-level', 'warn']);
  await waitFor(`${name} to be LIVE`, () => httpOk(`http://${HOST}:${adminPort}/ready`), { timeoutMs });
  for (const port of listenerPorts) await waitFor(`${name} listener ${port}`, () => portAccepts(port), { timeoutMs });
  return envoy;
}

const routeUrl = (port: number, key: string) => `http://${HOST}:${port}/mcp/${key}`;

function listUrls(urlOf: (route: RouteSpec) => string, topology: Topology): Record<ListVariant, string> {
  return Object.fromEntries(LIST_VARIANTS.map((variant) => [variant, urlOf(topology.listRoutes[variant])])) as Record<ListVariant, string>;
}

/**
 * The gateway's registry of the given routes, each Tool Service with the endpoint's id as its own. With
 * `issuer`, the gateway as users run it (issue 10's measuring conditions): every route validates the
 * agent's token (issuer, signature, audience, expiry) and every Tool Service has a per-tool rule, a
 * scope and a group the token must carry, applied to each tools/call and to what tools/list shows.
 */
const BENCH_ACCESS_RULE = { tools: ['*'], requiredScopes: ['tools:call'], allowGroups: ['bench'] };

export function gatewayRegistry(routes: RouteSpec[], issuer?: Pick<Issuer, 'issuer'>) {
  return {
    routes: routes.map((route) => ({
      key: route.key,
      ...(issuer && { auth: { issuer: issuer.issuer, audiences: [GATEWAY_AUDIENCE] } }),
      toolServices: route.backends.map((backend) => ({
        id: backend.endpoint.id,
        name: backend.name,
        url: backend.endpoint.url,
        ...(issuer && { policy: { rules: [BENCH_ACCESS_RULE] } }),
      })),
    })),
  };
}

/** D: Envoy's mcp_router with one listener per route; returns each route key's port. */
export async function startMcpRouter(group: ProcessGroup, routes: RouteSpec[]): Promise<{ router: ManagedProcess; routerPort: Map<string, number> }> {
  const routerAdmin = await allocatePort();
  const routerListeners: { port: number; route: RouteSpec }[] = [];
  for (const route of routes) routerListeners.push({ port: await allocatePort(), route });
  const routerPort = new Map(routerListeners.map((entry) => [entry.route.key, entry.port]));
  const router = await startEnvoy(group, 'envoy-mcp-router', nativeMcpRouterBootstrap(routerAdmin, routerListeners), routerAdmin, [...routerPort.values()]);
  return { router, routerPort };
}

export async function startSystems(group: ProcessGroup, topology: Topology, options: { naiveListTimeoutMs: number }): Promise<RunningSystems> {
  const call = topology.callRoute;
  const direct = call.backends[0].endpoint;

  const plain = { admin: await allocatePort(), listener: await allocatePort() };
  await startEnvoy(group, 'envoy-plain', plainEnvoyBootstrap(plain.admin, plain.listener, call), plain.admin, [plain.listener]);

  const gatewayDir = path.join(group.logDir, 'gateway');
  fs.mkdirSync(gatewayDir, { recursive: true });
  const issuer = await startIssuer();
  group.adoptBeside('issuer', undefined, issuer.stop);
  const registryFile = path.join(gatewayDir, 'registry.yaml');
  // Every Tool Service's rule written out in full: the dev Portal refuses YAML aliases.
  fs.writeFileSync(registryFile, stringify(gatewayRegistry(allRoutes(topology), issuer), { aliasDuplicateObjects: false }));
  const gateway = await group.startGateway('gateway', { registryFile, logDir: gatewayDir });
  const requestHeaders = { authorization: `Bearer ${issuer.token(gateway.gatewayUrl(call.key))}` };

  const { routerPort } = await startMcpRouter(group, allRoutes(topology));

  const naivePort = await allocatePort();
  const naiveConfig: NaiveProxyConfig = {
    routes: Object.fromEntries(allRoutes(topology).map((route) => [route.key, route.backends.map((backend) => ({ name: backend.name, url: backend.endpoint.url }))])),
    listTimeoutMs: options.naiveListTimeoutMs,
  };
  const naiveConfigFile = path.join(group.logDir, 'naive-proxy.json');
  fs.writeFileSync(naiveConfigFile, JSON.stringify(naiveConfig, null, 2));
  group.spawn('naive-proxy', process.execPath, [NAIVE_PROXY_MAIN, '--config', naiveConfigFile, '--port', String(naivePort)]);
  await waitFor('naive proxy', () => portAccepts(naivePort));

  const prefix = (route: RouteSpec) => `${route.backends[0].name}__`;
  return {
    systems: [
      {
        id: 'A',
        name: 'backend direct',
        callUrl: direct.url,
        toolPrefix: '',
        list: { unsupported: 'one MCP backend cannot list the tools of 50 others' },
        requestHeaders,
      },
      {
        id: 'B',
        name: 'plain Envoy',
        callUrl: routeUrl(plain.listener, call.key),
        toolPrefix: '',
        list: { unsupported: 'plain Envoy has no MCP awareness: it forwards a request to one backend and cannot aggregate tools/list' },
        requestHeaders,
      },
      {
        id: 'C',
        name: 'this gateway',
        callUrl: gateway.gatewayUrl(call.key),
        toolPrefix: prefix(call),
        list: { urls: listUrls((route) => gateway.gatewayUrl(route.key), topology) },
        requestHeaders,
      },
      {
        id: 'D',
        name: 'Envoy mcp_router',
        callUrl: routeUrl(routerPort.get(call.key)!, call.key),
        toolPrefix: prefix(call),
        list: { urls: listUrls((route) => routeUrl(routerPort.get(route.key)!, route.key), topology) },
        requestHeaders,
      },
      {
        id: 'E',
        name: 'naive Node proxy',
        callUrl: routeUrl(naivePort, call.key),
        toolPrefix: prefix(call),
        list: { urls: listUrls((route) => routeUrl(naivePort, route.key), topology) },
        requestHeaders,
      },
    ],
    notes: {
      A: `bench/backends: MCP SDK Server + StreamableHTTPServerTransport (stateless: a fresh server and transport per request; SSE answers), ${direct.url}`,
      B: 'Envoy 1.40, static bootstrap: HCM + router, one STATIC cluster, route timeout 0s, default worker count',
      C: 'GatewayStack: Redis, dev Portal, control plane (catalog refresh 30 s default), sidecar (gateway lane and session check), Envoy (call lane) over SotW ADS; every route validates the agent\'s RS256 token (a local issuer, keys by ECDS) and every Tool Service has a per-tool rule (scope tools:call, group bench)',
      D: 'Envoy 1.40, static bootstrap: envoy.filters.http.mcp + envoy.filters.http.mcp_router (terminal), one listener per route, per-backend timeout 5 s (its default)',
      E: `bench/naive-proxy: node:http, keep-alive agent, tools/list fanned out per request (per-backend timeout ${options.naiveListTimeoutMs} ms), tools/call piped`,
    },
  };
}
