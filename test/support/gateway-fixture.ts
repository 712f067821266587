import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { GatewayStack, StackOptions } from '../../control-plane/devstack/stack';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { freePorts, waitFor } from '../../control-plane/devstack/processes';
import { projectPath } from '../../control-plane/shared/paths';
import { ROUTE_CONFIG_NAME } from '../../control-plane/xds/translate/settings';

export interface SampleBackends {
  weather: string;
  jobs: string;
  ports: { weather: number; jobs: number };
}

/** Free ports for the two sample Tool Services and their MCP URLs. */
export async function sampleBackends(): Promise<SampleBackends> {
  const [weather, jobs] = await freePorts(2);
  const ports = { weather, jobs };
  return {
    weather: `http://127.0.0.1:${ports.weather}/mcp`,
    jobs: `http://127.0.0.1:${ports.jobs}/mcp`,
    ports,
  };
}

/** A per-test directory under .run/test/ for the registry file and every process's log. */
export function testDir(name: string): string {
  const dir = projectPath('.run', 'test', name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export function writeRegistry(dir: string, registry: unknown, file = 'registry.yaml'): string {
  const target = path.join(dir, file);
  fs.writeFileSync(target, stringify(registry));
  return target;
}

export async function startGateway(
  name: string,
  registry: (backends: SampleBackends) => unknown,
  extra: Partial<StackOptions> = {},
): Promise<{ stack: GatewayStack; backends: SampleBackends; dir: string }> {
  const dir = testDir(name);
  const backends = await sampleBackends();
  const stack = await GatewayStack.start({
    registryFile: writeRegistry(dir, registry(backends)),
    logDir: dir,
    samples: [
      { service: 'weather', port: backends.ports.weather },
      { service: 'jobs', port: backends.ports.jobs },
    ],
    ...extra,
  });
  return { stack, backends, dir };
}

/** One tools/call through the gateway, by a client in a session of its own: the result's content. */
export async function callToolContent(url: string, name: string, args: Record<string, unknown>): Promise<unknown> {
  const client = await connectClient(url);
  try {
    return (await client.callTool({ name, arguments: args })).content;
  } finally {
    await client.close();
  }
}

/** A real MCP SDK client connected to one gateway route. */
export async function connectClient(url: string): Promise<Client> {
  const client = new Client({ name: 'e2e-test-client', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/**
 * An SDK client whose standalone GET stream the gateway holds: the SDK opens it after initialization,
 * and the sidecar answers 200 once it has registered it for the route's notifications, so a change
 * after this is told on it.
 */
export async function connectClientHoldingStream(url: string): Promise<Client> {
  let streamHeld = false;
  const notingStream = async (input: string | URL | Request, init?: RequestInit) => {
    const response = await fetch(input, init);
    if (init?.method === 'GET' && response.ok) streamHeld = true;
    return response;
  };
  const client = new Client({ name: 'e2e-test-client', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: notingStream }));
  await waitFor("the client's GET stream to be held", async () => (streamHeld ? true : undefined));
  return client;
}

/** The Envoy cluster a Tool Service at this URL goes to, with default transport settings (clusters are named after their upstream). */
export function clusterOf(url: string): string {
  return buildGatewayIR({ routes: [{ key: 'x', toolServices: [{ id: 'x', name: 'x', url }] }] }).clusters[0].clusterName;
}

export const MCP_POST_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** A raw JSON-RPC POST, for what an SDK client would never send. */
export async function postJsonRpc(url: string, body: unknown, headers: Record<string, string> = MCP_POST_HEADERS) {
  const response = await fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await response.text();
  return { status: response.status, contentType: response.headers.get('content-type'), headers: response.headers, text, json: () => JSON.parse(text) };
}

/** Tool names a route lists, read through Envoy with a raw tools/list (no client session needed). */
export async function listedTools(url: string, token?: string): Promise<string[] | undefined> {
  const response = await postJsonRpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { ...MCP_POST_HEADERS, ...(token && { authorization: `Bearer ${token}` }) });
  if (response.status !== 200) return undefined;
  return (response.json().result.tools as { name: string }[]).map((tool) => tool.name);
}

/** The route's tools once it lists any (for waitFor: an empty list is a catalog not there yet). */
export async function listedToolsOnceServed(url: string): Promise<string[] | undefined> {
  const tools = await listedTools(url);
  return tools?.length ? tools : undefined;
}

/** The control plane's /status document. */
export async function controlPlaneStatus(stack: GatewayStack): Promise<any> {
  return (await fetch(`${stack.controlPlaneAdminUrl}/status`)).json();
}

/** One counter or gauge from the control plane's /metrics, summed over the label sets that match. */
export async function metricValue(
  stack: GatewayStack,
  name: string,
  labels: Record<string, string> = {},
  adminUrl = stack.controlPlaneAdminUrl,
): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .filter((line) => Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`)))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

/** Envoy's access-log entries (JSON lines of its stdout, in <name>-access.log) for tools/call requests. */
export function toolCallAccessLog(dir: string, envoyName = 'envoy'): Record<string, unknown>[] {
  return fs
    .readFileSync(path.join(dir, `${envoyName}-access.log`), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((entry) => entry.rpc_method === 'tools/call');
}

/** Names of the clusters an Envoy (the stack's, by default) has from CDS, from its admin config_dump. */
export async function envoyDynamicClusters(stack: GatewayStack, adminUrl = stack.envoyAdminUrl): Promise<string[]> {
  const dump = (await (await fetch(`${adminUrl}/config_dump?resource=dynamic_active_clusters`)).json()) as {
    configs: { cluster: { name: string } }[];
  };
  return dump.configs.map((entry) => entry.cluster.name).sort();
}

/** Route names an Envoy has from RDS, in order. */
export async function envoyRouteNames(adminUrl: string): Promise<string[]> {
  const dump = (await (await fetch(`${adminUrl}/config_dump?resource=dynamic_route_configs`)).json()) as {
    configs: { route_config: { name: string; virtual_hosts: { routes: { name: string }[] }[] } }[];
  };
  // The gateway listener's routes, not the egress listener's.
  return dump.configs
    .filter((entry) => entry.route_config.name === ROUTE_CONFIG_NAME)
    .flatMap((entry) => entry.route_config.virtual_hosts.flatMap((host) => host.routes.map((route) => route.name)));
}

/** Envoy's own counters and gauges, e.g. listener_manager.listener_modified. */
export async function envoyStat(stack: GatewayStack, name: string): Promise<number> {
  const stats = (await (await fetch(`${stack.envoyAdminUrl}/stats?format=json&filter=${encodeURIComponent(`^${name}$`)}`)).json()) as {
    stats: { name: string; value: number }[];
  };
  return stats.stats.find((stat) => stat.name === name)?.value ?? 0;
}

/** The version of each xDS resource an Envoy holds (listeners, clusters, routes, secrets), by name: unchanged means not one was updated. */
export async function envoyConfigVersions(stack: GatewayStack, adminUrl = stack.envoyAdminUrl): Promise<Record<string, string>> {
  const dump = (await (await fetch(`${adminUrl}/config_dump?include_eds`)).json()) as { configs: Record<string, unknown>[] };
  const versions: Record<string, string> = {};
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) return value.forEach(visit);
    if (typeof value !== 'object' || value === null) return;
    const entry = value as Record<string, unknown>;
    const named = (entry.cluster ?? entry.listener ?? entry.route_config) as { name?: string } | undefined;
    const name = named?.name ?? (entry.name as string | undefined);
    if (typeof entry.version_info === 'string' && name) versions[name] = entry.version_info;
    Object.values(entry).forEach(visit);
  };
  visit(dump.configs);
  return versions;
}
