import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';

import { REGISTRY_UPDATE_STEPS, RegistryUpdateStep } from '../../control-plane/admin/metrics';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { validateRegistry } from '../../control-plane/registry/validate';
import { buildSnapshot } from '../../control-plane/xds/server/snapshot';
import { translate } from '../../control-plane/xds/translate';
import { EMPTY_CALL_LANE_CATALOG } from '../../control-plane/xds/translate/call-lane';
import { defaultAccess } from '../../control-plane/xds/translate/access';
import { NO_SIGNING_KEYS } from '../../control-plane/xds/translate/auth';
import { GATEWAY_DEFAULTS } from '../../control-plane/xds/translate/settings';
import { BASE_TOOL_COUNT, ECHO_TOOL } from '../backends/bench-tool-service';
import { McpHttpClient, answerTo } from '../load/mcp-client';
import { Spread, spreadOf } from '../load/stats';
import { BenchSettings } from '../settings';
import { ProcessGroup } from '../systems/process-group';
import { threadsCpuNanosecondsOf } from './cpu-time';
import { allocatePort } from '../systems/ports';
import { startBackendProcess } from '../systems/systems';
import { HOST } from '../systems/topology';

/**
 * Scenario 4 (issue 3): how fast a registry change serves, and what 1,000 routes × 5 Tool Services
 * cost the control plane: snapshot build, push-to-ACK with a real Envoy, and memory. It runs on a
 * gateway stack of its own, fed through the dev Portal as in production.
 */

export interface RegistryChangeTrial {
  /** From the Portal change to the new route listing its tools through Envoy. */
  toolsListMs: number;
  /** From the Portal change to a tools/call on the new route answering through Envoy (RDS + CDS + catalog). */
  toolsCallMs: number;
}

export interface ProcessMemory {
  controlPlaneMb: number;
  sidecarMb: number;
  envoyMb: number;
}

/**
 * Envoy's memory after the last big route serves: its RSS each second for SETTLE_SAMPLE_MS (tcmalloc
 * gives freed pages back in the background, so a single reading depends on when it is taken), then
 * tcmalloc's own figures from the admin /memory (allocated is what the configuration holds, steadier
 * than RSS), and the size of the route table Envoy holds (its config dump, JSON bytes).
 */
export interface EnvoySettledMemory {
  rssMb: Spread;
  lastRssMb: number;
  allocatedMb: number;
  heapSizeMb: number;
  routeTableJsonBytes: number;
  routes: number;
}

export interface ConfigurationResults {
  registryChange: { trials: RegistryChangeTrial[]; toolsListMs: Spread; toolsCallMs: Spread };
  size: { routes: number; toolServicesPerRoute: number; toolServices: number; backendUrls: number; toolsPerBackend: number };
  /** The same registry translated in this process, step by step (ms over the repetitions). */
  snapshotBuildInProcessMs: Record<'validate' | 'ir' | 'translate' | 'encode' | 'total', Spread>;
  /** What the control plane's own mcpgw_xds_snapshot_build_seconds observed for the big change (mean, ms). */
  snapshotBuildMetricMs: number;
  /** From the Portal change to Envoy ACKing the new clusters and routes (wall clock). */
  changeToAckMs: number;
  /**
   * That wall clock itemised: the bench's PUT to the dev Portal (the Portal's data has changed when it
   * answers; the Portal answers the control plane's long-poll within it), then each step the control
   * plane's mcpgw_registry_update_step_seconds counted for the change (ms summed over its observations),
   * push-to-ACK of the routes, and what none of these covers (waits between steps, other work on the
   * event loops, the ACK's way back).
   */
  /**
   * CPU time each process spent from the Portal change to the ACK (every thread, /proc schedstat): on a
   * loaded machine steadier than the wall clock, which waits for cores other work holds.
   */
  cpuMsToAck: Record<'portal' | 'controlPlane' | 'envoy', number>;
  changeChainMs: { portalPut: number; steps: Record<RegistryUpdateStep, { ms: number; observations: number }>; routesPushToAck: number; notItemised: number };
  /** mcpgw_xds_push_to_ack_seconds for the big change, by xDS type: pushes answered, mean ms. */
  pushToAckMetric: Record<string, { acks: number; meanMs: number }>;
  nacks: number;
  /** From the Portal change to a tools/call on the last of the big routes answering. */
  changeToLastRouteServingMs: number | null;
  /**
   * The catalog when memory was read: backends by state, how many refreshes of new Tool Services had
   * ended (answered or failed), and how long until every route backend was served or all had.
   */
  catalog: { states: Record<string, number>; refreshesAnswered: number; settleMs: number | null };
  /** The sidecar's catalog stream (control plane → sidecar): how often it broke after the change, and why. */
  sidecarCatalogStream: { breaks: number; lastReason?: string };
  memoryBefore: ProcessMemory;
  memoryAfter: ProcessMemory;
  /** Envoy once the big change has settled: what it holds in use, against what its RSS says. */
  envoySettled: EnvoySettledMemory;
  settings: { xds: string; catalogRefreshMs: number; registrySource: string };
}

/** Slow enough that only the catalog round this scenario measures runs inside it. */
const CATALOG_REFRESH_MS = 600_000;
/** Route probes go through Envoy every few ms; the control plane's /metrics is read less often, since reading it costs the process being measured. */
const ROUTE_POLL_MS = 5;
const METRICS_POLL_MS = 50;
const LAST_ROUTE_GRACE_MS = 10_000;
const SETTLE_SAMPLE_MS = 20_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function registryDocument(routes: number, servicesPerRoute: number, backendUrls: string[]) {
  return {
    routes: Array.from({ length: routes }, (_, routeIndex) => {
      const key = `r${String(routeIndex + 1).padStart(4, '0')}`;
      return {
        key,
        toolServices: Array.from({ length: servicesPerRoute }, (_, serviceIndex) => ({
          // Distinct ids (one Envoy cluster each) sharing a few real backends, as docs/registry.md allows.
          id: `${key}-s${serviceIndex + 1}`,
          name: `svc_${serviceIndex + 1}`,
          url: backendUrls[(routeIndex * servicesPerRoute + serviceIndex) % backendUrls.length],
        })),
      };
    }),
  };
}

function timeBuilds(document: unknown, repetitions: number): ConfigurationResults['snapshotBuildInProcessMs'] {
  const steps = { validate: [] as number[], ir: [] as number[], translate: [] as number[], encode: [] as number[], total: [] as number[] };
  const gateway = {
    ...GATEWAY_DEFAULTS,
    listener: { address: HOST, port: 10000 },
    sidecars: [{ address: HOST, port: 18080 }],
    egress: { address: HOST, port: 10001 },
    access: defaultAccess({ address: HOST, port: 10000 }),
  };
  for (let repetition = 0; repetition < repetitions; repetition++) {
    const t0 = performance.now();
    const { registry } = validateRegistry(document);
    const t1 = performance.now();
    const ir = buildGatewayIR(registry);
    const t2 = performance.now();
    const resources = translate(ir, EMPTY_CALL_LANE_CATALOG, gateway, NO_SIGNING_KEYS);
    const t3 = performance.now();
    buildSnapshot(resources);
    const t4 = performance.now();
    steps.validate.push(t1 - t0);
    steps.ir.push(t2 - t1);
    steps.translate.push(t3 - t2);
    steps.encode.push(t4 - t3);
    steps.total.push(t4 - t0);
  }
  return Object.fromEntries(Object.entries(steps).map(([step, values]) => [step, spreadOf(values)])) as ConfigurationResults['snapshotBuildInProcessMs'];
}

/** Prometheus text → value, summed over every series of `name` whose labels include `labels`. */
function metric(text: string, name: string, labels: Record<string, string> = {}): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .filter((line) => Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`)))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

/** The control plane's metrics: every family, or only those named (far cheaper for the process being measured). */
async function metricsText(stack: GatewayStack, families: string[] = []): Promise<string> {
  const query = new URLSearchParams(families.map((family): [string, string] => ['name', family]));
  const response = await fetch(`${stack.controlPlaneAdminUrl}/metrics${families.length ? `?${query}` : ''}`);
  if (!response.ok) throw new Error(`control plane /metrics answered ${response.status}: ${await response.text()}`);
  return response.text();
}

/** What the polls during the change read: with 5,000 Tool Services a whole scrape costs the control plane tens of ms. */
const XDS_PROGRESS_FAMILIES = ['mcpgw_xds_acks_total', 'mcpgw_xds_pushes_total', 'mcpgw_xds_nacks_total'];
const CATALOG_PROGRESS_FAMILIES = ['mcpgw_catalog_refreshes_total', 'mcpgw_catalog_backends'];

function rssMb(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const line = fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((entry) => entry.startsWith('VmRSS:'));
  return line ? Number(line.replace(/\D+/g, '')) / 1024 : Number.NaN;
}

/** How often the sidecar's catalog stream broke, and the last reason it gave (from its log). */
function catalogStreamBreaks(stack: GatewayStack): { breaks: number; lastReason?: string } {
  const file = path.join(stack.options.logDir, 'sidecar.log');
  const breaks = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter((line) => line.includes('catalog stream ended')) : [];
  const lastReason = breaks.length ? (/"status":"([^"]*)"/.exec(breaks[breaks.length - 1])?.[1] ?? breaks[breaks.length - 1]) : undefined;
  return { breaks: breaks.length, ...(lastReason && { lastReason }) };
}

function memoryOf(stack: GatewayStack): ProcessMemory {
  const pid = (name: string) => stack.processes.get(name)?.child.pid;
  return { controlPlaneMb: rssMb(pid('control-plane')), sidecarMb: rssMb(pid('sidecar')), envoyMb: rssMb(pid('envoy')) };
}

async function envoySettledMemory(stack: GatewayStack): Promise<EnvoySettledMemory> {
  const envoyPid = stack.processes.get('envoy')?.child.pid;
  const samples: number[] = [];
  for (let elapsed = 0; elapsed < SETTLE_SAMPLE_MS; elapsed += 1000) {
    samples.push(rssMb(envoyPid));
    await sleep(1000);
  }
  const lastRssMb = rssMb(envoyPid);
  const memory = (await (await fetch(`${stack.envoyAdminUrl}/memory`)).json()) as { allocated: string; heap_size: string };
  // Read last: the dump itself costs Envoy memory for a moment.
  const dump = await (await fetch(`${stack.envoyAdminUrl}/config_dump?resource=dynamic_route_configs`)).text();
  const routes = (JSON.parse(dump) as { configs: { route_config: { virtual_hosts?: { routes?: unknown[] }[] } }[] }).configs
    .flatMap((config) => config.route_config.virtual_hosts ?? [])
    .reduce((count, host) => count + (host.routes?.length ?? 0), 0);
  const mb = (bytes: string) => Number(bytes) / 1024 / 1024;
  return {
    rssMb: spreadOf(samples),
    lastRssMb,
    allocatedMb: mb(memory.allocated),
    heapSizeMb: mb(memory.heap_size),
    routeTableJsonBytes: Buffer.byteLength(dump),
    routes,
  };
}

/** Polls `probe` until it holds; the time it took from `sinceMs`, or null at the deadline. */
async function timeUntil(sinceMs: number, timeoutMs: number, probe: () => Promise<boolean>, pollMs = ROUTE_POLL_MS): Promise<number | null> {
  while (performance.now() - sinceMs < timeoutMs) {
    if (await probe().catch(() => false)) return performance.now() - sinceMs;
    await sleep(pollMs);
  }
  return null;
}

function routeProbes(client: McpHttpClient, url: string, tool: string, timeoutMs: number) {
  const ask = async (method: string, params?: unknown) => {
    const id = client.newId();
    const answer = await client.post(url, JSON.stringify({ jsonrpc: '2.0', id, method, params }), { timeoutMs });
    return answerTo(answer, id).result ?? {};
  };
  return {
    lists: async () => ((await ask('tools/list')).tools as { name: string }[] | undefined)?.some((listed) => listed.name === tool) ?? false,
    calls: async () => ((await ask('tools/call', { name: tool, arguments: { text: 'x' } })).content as { text?: string }[] | undefined)?.[0]?.text === 'x',
  };
}

export async function runConfigurationScenario(group: ProcessGroup, settings: BenchSettings, log: (line: string) => void): Promise<ConfigurationResults> {
  const config = settings.configuration;
  const backendPorts: number[] = [];
  for (let index = 0; index < config.backendUrls; index++) backendPorts.push(await allocatePort());
  const backendUrls = backendPorts.map((port) => `http://${HOST}:${port}/mcp`);
  const bigDocument = registryDocument(config.routes, config.toolServicesPerRoute, backendUrls);

  log(`configuration: timing ${config.buildRepetitions} in-process snapshot builds of ${config.routes} routes × ${config.toolServicesPerRoute} Tool Services`);
  const snapshotBuildInProcessMs = timeBuilds(bigDocument, config.buildRepetitions);

  await startBackendProcess(
    group,
    'backend-config',
    backendPorts.map((port) => ({ port, fillerTools: config.toolsPerBackend - BASE_TOOL_COUNT, listDelayMs: 0, prompts: 0, resources: 0 })),
  );
  const dir = path.join(group.logDir, 'gateway-config');
  fs.mkdirSync(dir, { recursive: true });
  const seed = { key: 'seed', toolServices: [{ id: 'seed', name: 'svc', url: backendUrls[0] }] };
  const registryFile = path.join(dir, 'registry.yaml');
  fs.writeFileSync(registryFile, stringify({ routes: [seed] }));
  const stack = await group.startGateway('gateway-config', { registryFile, logDir: dir, catalogRefreshMs: CATALOG_REFRESH_MS });
  const client = new McpHttpClient(16);
  const probeTimeoutMs = 10_000;
  try {
    const seedProbe = routeProbes(client, stack.gatewayUrl('seed'), `svc__${ECHO_TOOL}`, settings.requestTimeoutMs);
    if ((await timeUntil(performance.now(), 30_000, seedProbe.calls)) === null) throw new Error('the seed route of the configuration gateway never answered');

    const trials: RegistryChangeTrial[] = [];
    const routes = [seed];
    for (let trial = 1; trial <= config.changeTrials; trial++) {
      const key = `added-${trial}`;
      // A new route with a new Tool Service id: a new cluster (CDS), route (RDS) and catalog entry.
      routes.push({ key, toolServices: [{ id: key, name: 'svc', url: backendUrls[trial % backendUrls.length] }] });
      const probe = routeProbes(client, stack.gatewayUrl(key), `svc__${ECHO_TOOL}`, settings.requestTimeoutMs);
      const changedAt = performance.now();
      await stack.setPortalRegistry({ routes });
      const [toolsListMs, toolsCallMs] = await Promise.all([timeUntil(changedAt, probeTimeoutMs, probe.lists), timeUntil(changedAt, probeTimeoutMs, probe.calls)]);
      if (toolsListMs === null || toolsCallMs === null) throw new Error(`route ${key} did not answer within ${probeTimeoutMs} ms of the Portal change`);
      trials.push({ toolsListMs, toolsCallMs });
      log(`registry change #${trial}: tools/list after ${toolsListMs.toFixed(0)} ms, tools/call after ${toolsCallMs.toFixed(0)} ms`);
    }

    const memoryBefore = memoryOf(stack);
    const breaksBefore = catalogStreamBreaks(stack).breaks;
    const before = await metricsText(stack);
    const types = ['Cluster', 'RouteConfiguration', 'Listener'];
    const bigRoutes = [...routes, ...bigDocument.routes];
    // Each new Tool Service is fetched once when it appears (the periodic round is 10 min away).
    const newServices = config.routes * config.toolServicesPerRoute;
    const lastRoute = bigDocument.routes[bigDocument.routes.length - 1];
    const lastProbe = routeProbes(client, stack.gatewayUrl(lastRoute.key), `svc_1__${ECHO_TOOL}`, settings.requestTimeoutMs);
    log(`configuration: pushing ${bigDocument.routes.length} routes × ${config.toolServicesPerRoute} Tool Services through the dev Portal`);
    const cpuNanos = () => {
      const of = (name: string) => threadsCpuNanosecondsOf(stack.processes.get(name)!.child.pid!);
      return { portal: of('portal'), controlPlane: of('control-plane'), envoy: of('envoy') };
    };
    const cpuBefore = cpuNanos();
    const changedAt = performance.now();
    await stack.setPortalRegistry({ routes: bigRoutes });
    const portalPutMs = performance.now() - changedAt;
    let latest = before;
    const acked = (type: string) => metric(latest, 'mcpgw_xds_acks_total', { type }) > metric(before, 'mcpgw_xds_acks_total', { type });
    const pushed = (type: string) => metric(latest, 'mcpgw_xds_pushes_total', { type }) > metric(before, 'mcpgw_xds_pushes_total', { type });
    const nacked = () => metric(latest, 'mcpgw_xds_nacks_total') > metric(before, 'mcpgw_xds_nacks_total');
    // Routes always change; clusters only when the new Tool Services bring a new upstream (ids that
    // share the seed's backends share its clusters, so no Cluster is pushed and none can be ACKed).
    // Both are pushed from one snapshot, so once the routes are ACKed a Cluster push would be counted.
    const changeToAckMs = await timeUntil(changedAt, config.settleTimeoutMs, async () => {
      latest = await metricsText(stack, XDS_PROGRESS_FAMILIES);
      return nacked() || (acked('RouteConfiguration') && (acked('Cluster') || !pushed('Cluster')));
    }, METRICS_POLL_MS);
    const cpuAtAck = cpuNanos();
    const cpuMsToAck = Object.fromEntries(
      Object.entries(cpuAtAck).map(([name, nanos]) => [name, (nanos - cpuBefore[name as keyof typeof cpuBefore]) / 1e6]),
    ) as ConfigurationResults['cpuMsToAck'];
    const refreshes = (text: string) => metric(text, 'mcpgw_catalog_refreshes_total');
    // Every route backend of the new registry has answered at least once (or was served from a listing
    // it shares with one that had: docs/tools-list.md), or every new Tool Service's refresh has ended.
    const routeBackends = bigRoutes.reduce((count, route) => count + route.toolServices.length, 0);
    const served = (text: string) => metric(text, 'mcpgw_catalog_backends', { state: 'ok' }) + metric(text, 'mcpgw_catalog_backends', { state: 'stale' });
    const catalogSettleMs = await timeUntil(changedAt, config.settleTimeoutMs, async () => {
      latest = await metricsText(stack, CATALOG_PROGRESS_FAMILIES);
      return refreshes(latest) - refreshes(before) >= newServices || served(latest) >= routeBackends;
    }, METRICS_POLL_MS);
    // The catalog reaches the sidecar only once every new Tool Service has been listed (or its listing
    // has timed out), so the last route cannot serve earlier; give it a little longer than that, not the whole timeout.
    const changeToLastRouteServingMs = await timeUntil(changedAt, (catalogSettleMs ?? config.settleTimeoutMs) + LAST_ROUTE_GRACE_MS, lastProbe.calls);
    latest = await metricsText(stack);
    const memoryAfter = memoryOf(stack);
    const streamAfter = catalogStreamBreaks(stack);
    const envoySettled = await envoySettledMemory(stack);
    const delta = (name: string, labels: Record<string, string> = {}) => metric(latest, name, labels) - metric(before, name, labels);
    const buildCount = delta('mcpgw_xds_snapshot_build_seconds_count');
    const steps = Object.fromEntries(
      REGISTRY_UPDATE_STEPS.map((step) => [
        step,
        { ms: delta('mcpgw_registry_update_step_seconds_sum', { step }) * 1000, observations: delta('mcpgw_registry_update_step_seconds_count', { step }) },
      ]),
    ) as ConfigurationResults['changeChainMs']['steps'];
    const routesPushToAck = delta('mcpgw_xds_push_to_ack_seconds_sum', { type: 'RouteConfiguration' }) * 1000;
    const itemised = portalPutMs + Object.values(steps).reduce((sum, step) => sum + step.ms, 0) + routesPushToAck;
    const result: ConfigurationResults = {
      registryChange: {
        trials,
        toolsListMs: spreadOf(trials.map((trial) => trial.toolsListMs)),
        toolsCallMs: spreadOf(trials.map((trial) => trial.toolsCallMs)),
      },
      size: {
        routes: config.routes,
        toolServicesPerRoute: config.toolServicesPerRoute,
        toolServices: newServices,
        backendUrls: config.backendUrls,
        toolsPerBackend: config.toolsPerBackend,
      },
      snapshotBuildInProcessMs,
      snapshotBuildMetricMs: buildCount > 0 ? (delta('mcpgw_xds_snapshot_build_seconds_sum') / buildCount) * 1000 : Number.NaN,
      changeToAckMs: changeToAckMs ?? Number.NaN,
      cpuMsToAck,
      changeChainMs: { portalPut: portalPutMs, steps, routesPushToAck, notItemised: (changeToAckMs ?? Number.NaN) - itemised },
      pushToAckMetric: Object.fromEntries(
        types.map((type) => {
          const acks = delta('mcpgw_xds_push_to_ack_seconds_count', { type });
          return [type, { acks, meanMs: acks > 0 ? (delta('mcpgw_xds_push_to_ack_seconds_sum', { type }) / acks) * 1000 : Number.NaN }];
        }),
      ),
      nacks: delta('mcpgw_xds_nacks_total'),
      changeToLastRouteServingMs,
      catalog: {
        states: Object.fromEntries(['ok', 'stale', 'missing'].map((state) => [state, metric(latest, 'mcpgw_catalog_backends', { state })])),
        refreshesAnswered: refreshes(latest) - refreshes(before),
        settleMs: catalogSettleMs,
      },
      sidecarCatalogStream: { breaks: streamAfter.breaks - breaksBefore, lastReason: streamAfter.lastReason },
      memoryBefore,
      memoryAfter,
      envoySettled,
      settings: { xds: 'state of the world (GRPC)', catalogRefreshMs: CATALOG_REFRESH_MS, registrySource: 'dev Portal (ETag long-poll)' },
    };
    log(
      `configuration: ACK after ${result.changeToAckMs.toFixed(0)} ms, last route serving after ${changeToLastRouteServingMs?.toFixed(0) ?? 'never'} ms, control plane ${memoryAfter.controlPlaneMb.toFixed(0)} MB, sidecar ${memoryAfter.sidecarMb.toFixed(0)} MB`,
    );
    return result;
  } finally {
    client.close();
  }
}
