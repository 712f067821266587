import { IssueRequest, runFixedRate } from '../load/load-runner';
import { McpHttpClient, answerTo, openSession } from '../load/mcp-client';
import { LatencySummary, percentileSpectrum, summarize } from '../load/stats';
import { BenchSettings } from '../settings';
import { SystemId, SystemUnderTest, inRotation } from '../systems/systems';
import { LIST_VARIANTS, ListVariant, Topology, expectedToolCount } from '../systems/topology';

/**
 * Scenario 3: tools/list of a route with 50 backends × 100 tools, with all backends up, one down
 * and one slow. Every answer is checked for the full tool count (a down backend's tools excepted).
 * The gateway's prompts/list and resources/list of the same route (50 × 20 prompts, 50 × 100
 * resources, all backends up) are measured the same way: no other system federates them.
 */

/** The lists a listing can be of, and the member of the answer that holds the entries. */
export const LIST_METHODS = { 'tools/list': 'tools', 'prompts/list': 'prompts', 'resources/list': 'resources' } as const;
export type ListMethod = keyof typeof LIST_METHODS;

/** prompts/list or resources/list of the all-up route, by the gateway. */
export interface SurfaceListRun {
  method: Exclude<ListMethod, 'tools/list'>;
  repetition: number;
  latencyMs: LatencySummary;
  pageLatencyMs: LatencySummary;
  pagesPerListing: number;
  entries: number;
  throughput: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
}

export interface ToolListRun {
  system: SystemId;
  variant: ListVariant;
  repetition: number;
  /** The whole listing, all pages, from its intended start. */
  latencyMs: LatencySummary;
  /** Each tools/list request (page) on its own. */
  pageLatencyMs: LatencySummary;
  pagesPerListing: number;
  throughput: number;
  sent: number;
  ok: number;
  errors: Record<string, number>;
}

export interface ToolListResults {
  runs: ToolListRun[];
  /** The gateway's prompts/list and resources/list (absent in results of runs before they were measured). */
  surfaceRuns?: SurfaceListRun[];
  unsupported: { system: SystemId; reason: string }[];
  expectedTools: Record<ListVariant, number>;
  /** Pooled latencies of whole listings, by variant and system (for the chart). */
  spectra: Partial<Record<ListVariant, Partial<Record<SystemId, { q: number; ms: number }[]>>>>;
}

/** Pages one listing may take at most (a bound on the loop, far above any real route). */
const MAX_PAGES = 1_000;

/**
 * A client listing one of the route's lists as an MCP client does: the list method, then again with
 * each nextCursor until there is none. The listing's latency runs from its intended start to the last
 * page; each page's own request time is kept too.
 */
async function listDriver(url: string, headers: Record<string, string>, expected: number, settings: BenchSettings, method: ListMethod = 'tools/list') {
  const member = LIST_METHODS[method];
  const client = new McpHttpClient(256);
  const session = await openSession(client, url, settings.requestTimeoutMs, headers);
  const pageLatenciesMs: number[] = [];
  let pagesPerListing = 0;
  const issue: IssueRequest = async () => {
    let cursor: string | undefined;
    let listed = 0;
    let pages = 0;
    let endMs = performance.now();
    do {
      const id = client.newId();
      const body = JSON.stringify({ jsonrpc: '2.0', id, method, ...(cursor !== undefined && { params: { cursor } }) });
      const sentMs = performance.now();
      const answer = await client.post(url, body, { headers: session, timeoutMs: settings.requestTimeoutMs });
      endMs = answer.endMs;
      pageLatenciesMs.push(endMs - sentMs);
      try {
        const result = answerTo(answer, id).result as Record<string, unknown[] | string | undefined> & { nextCursor?: string };
        listed += (result[member] as unknown[] | undefined)?.length ?? 0;
        cursor = result.nextCursor;
      } catch (error) {
        return { endMs, error: (error as Error).message };
      }
      pages++;
    } while (cursor !== undefined && pages < MAX_PAGES);
    pagesPerListing = pages;
    return { endMs, error: listed === expected ? undefined : `listed ${listed} ${member}, expected ${expected}` };
  };
  return {
    issue,
    /** Page latencies since the last call, and the pages of the last listing. */
    takePages: () => ({ latenciesMs: pageLatenciesMs.splice(0), perListing: pagesPerListing }),
    close: () => client.close(),
  };
}

/** How long a path may take to list every tool of a variant (the gateway's catalog fetches in the background). */
const COMPLETE_TIMEOUT_MS = 60_000;

/**
 * Waits until the path answers with the full tool count. A path that never does is measured all
 * the same, and its wrong answers count as errors.
 */
async function waitUntilComplete(issue: IssueRequest, what: string, log: (line: string) => void): Promise<void> {
  const deadline = performance.now() + COMPLETE_TIMEOUT_MS;
  let outcome = await issue();
  while (outcome.error && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    outcome = await issue();
  }
  if (outcome.error) log(`warning: ${what} still incomplete after ${COMPLETE_TIMEOUT_MS / 1000} s, measuring anyway: ${outcome.error}`);
}

export async function runToolListScenario(
  systems: SystemUnderTest[],
  topology: Topology,
  settings: BenchSettings,
  log: (line: string) => void,
): Promise<ToolListResults> {
  const { toolList } = settings;
  const rate = toolList.ratePerSecond;
  const capable = systems.flatMap((system) => ('urls' in system.list ? [{ system, urls: system.list.urls }] : []));
  const expectedTools = Object.fromEntries(LIST_VARIANTS.map((variant) => [variant, expectedToolCount(topology, variant)])) as Record<ListVariant, number>;
  const results: ToolListResults = {
    runs: [],
    unsupported: systems.flatMap((system) => ('unsupported' in system.list ? [{ system: system.id, reason: system.list.unsupported }] : [])),
    expectedTools,
    spectra: {},
  };
  const pooled = new Map<string, number[]>();
  for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
    for (const variant of LIST_VARIANTS) {
      for (const { system, urls } of inRotation(capable, repetition)) {
        const driver = await listDriver(urls[variant], system.requestHeaders, expectedTools[variant], settings);
        try {
          await waitUntilComplete(driver.issue, `${system.id} ${variant} tools/list`, log);
          for (let index = 0; index < toolList.warmupRequests; index++) await driver.issue();
          driver.takePages();
          const result = await runFixedRate(driver.issue, { rate, durationMs: toolList.measureMs, maxInFlight: settings.maxInFlight });
          const latencyMs = summarize(result.latenciesMs);
          const pages = driver.takePages();
          results.runs.push({
            system: system.id,
            variant,
            repetition,
            latencyMs,
            pageLatencyMs: summarize(pages.latenciesMs),
            pagesPerListing: pages.perListing,
            throughput: result.throughput,
            sent: result.sent,
            ok: result.ok,
            errors: result.errors,
          });
          const key = `${variant}|${system.id}`;
          pooled.set(key, (pooled.get(key) ?? []).concat(result.latenciesMs));
          const errors = result.sent - result.ok;
          log(
            `tools/list ${system.id} ${variant} #${repetition}: p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms (${pages.perListing} page(s))${errors ? `, ${errors} errors (${Object.keys(result.errors).join('; ')})` : ''}`,
          );
        } finally {
          driver.close();
        }
      }
    }
  }
  results.surfaceRuns = await runSurfaceLists(systems, topology, settings, log);
  for (const [key, samples] of pooled) {
    const [variant, system] = key.split('|') as [ListVariant, SystemId];
    (results.spectra[variant] ??= {})[system] = percentileSpectrum(samples);
  }
  return results;
}

/** prompts/list and resources/list of the all-up route, by the gateway (C): the other paths do not federate them. */
async function runSurfaceLists(systems: SystemUnderTest[], topology: Topology, settings: BenchSettings, log: (line: string) => void): Promise<SurfaceListRun[]> {
  const gateway = systems.find((system) => system.id === 'C');
  if (!gateway || !('urls' in gateway.list)) return [];
  const url = gateway.list.urls.normal;
  const backends = topology.listRoutes.normal.backends.length;
  const expected = { 'prompts/list': backends * topology.promptsPerFleetBackend, 'resources/list': backends * topology.resourcesPerFleetBackend };
  const runs: SurfaceListRun[] = [];
  for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
    for (const method of ['prompts/list', 'resources/list'] as const) {
      const driver = await listDriver(url, gateway.requestHeaders, expected[method], settings, method);
      try {
        await waitUntilComplete(driver.issue, `C ${method}`, log);
        for (let index = 0; index < settings.toolList.warmupRequests; index++) await driver.issue();
        driver.takePages();
        const result = await runFixedRate(driver.issue, { rate: settings.toolList.ratePerSecond, durationMs: settings.toolList.measureMs, maxInFlight: settings.maxInFlight });
        const pages = driver.takePages();
        const latencyMs = summarize(result.latenciesMs);
        runs.push({ method, repetition, latencyMs, pageLatencyMs: summarize(pages.latenciesMs), pagesPerListing: pages.perListing, entries: expected[method], throughput: result.throughput, sent: result.sent, ok: result.ok, errors: result.errors });
        log(`${method} C normal #${repetition}: p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms (${pages.perListing} page(s))`);
      } finally {
        driver.close();
      }
    }
  }
  return runs;
}
