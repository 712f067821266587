import { IssueRequest, runFixedRate } from '../load/load-runner';
import { McpHttpClient, answerTo, openSession } from '../load/mcp-client';
import { LatencySummary, percentileSpectrum, summarize } from '../load/stats';
import { BenchSettings } from '../settings';
import { SystemId, SystemUnderTest, inRotation } from '../systems/systems';
import { LIST_VARIANTS, ListVariant, Topology, expectedToolCount } from '../systems/topology';

/**
 * Scenario 3: tools/list of a route with 50 backends × 100 tools, with all backends up, one down
 * and one slow. Every answer is checked for the full tool count (a down backend's tools excepted).
 */

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
  unsupported: { system: SystemId; reason: string }[];
  expectedTools: Record<ListVariant, number>;
  /** Pooled latencies of whole listings, by variant and system (for the chart). */
  spectra: Partial<Record<ListVariant, Partial<Record<SystemId, { q: number; ms: number }[]>>>>;
}

/** Pages one listing may take at most (a bound on the loop, far above any real route). */
const MAX_PAGES = 1_000;

/**
 * A client listing the route's tools as an MCP client does: tools/list, then again with each
 * nextCursor until there is none. The listing's latency runs from its intended start to the last
 * page; each page's own request time is kept too.
 */
async function listDriver(url: string, expected: number, settings: BenchSettings) {
  const client = new McpHttpClient(256);
  const session = await openSession(client, url, settings.requestTimeoutMs);
  const pageLatenciesMs: number[] = [];
  let pagesPerListing = 0;
  const issue: IssueRequest = async () => {
    let cursor: string | undefined;
    let listed = 0;
    let pages = 0;
    let endMs = performance.now();
    do {
      const id = client.newId();
      const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', ...(cursor !== undefined && { params: { cursor } }) });
      const sentMs = performance.now();
      const answer = await client.post(url, body, { headers: session, timeoutMs: settings.requestTimeoutMs });
      endMs = answer.endMs;
      pageLatenciesMs.push(endMs - sentMs);
      try {
        const result = answerTo(answer, id).result as { tools?: unknown[]; nextCursor?: string };
        listed += result.tools?.length ?? 0;
        cursor = result.nextCursor;
      } catch (error) {
        return { endMs, error: (error as Error).message };
      }
      pages++;
    } while (cursor !== undefined && pages < MAX_PAGES);
    pagesPerListing = pages;
    return { endMs, error: listed === expected ? undefined : `listed ${listed} tools, expected ${expected}` };
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
  if (outcome.error) log(`warning: ${what} tools/list still incomplete after ${COMPLETE_TIMEOUT_MS / 1000} s, measuring anyway: ${outcome.error}`);
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
        const driver = await listDriver(urls[variant], expectedTools[variant], settings);
        try {
          await waitUntilComplete(driver.issue, `${system.id} ${variant}`, log);
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
  for (const [key, samples] of pooled) {
    const [variant, system] = key.split('|') as [ListVariant, SystemId];
    (results.spectra[variant] ??= {})[system] = percentileSpectrum(samples);
  }
  return results;
}
