import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { CATALOG_DEFAULTS, CatalogStore, ToolList } from '../control-plane/catalog/catalog-store';
import { buildGatewayIR, ToolServiceIR } from '../control-plane/ir/gateway-ir';
import { projectPath } from '../control-plane/shared/paths';
import { createLogger } from '../control-plane/shared/log';
import { writeBenchResults } from './report/results-file';
import { revisionOf } from './systems/baseline';
import { benchSettings } from './settings';
import { gatewayRegistry } from './systems/systems';
import { allRoutes, planTopology } from './systems/topology';

/**
 * What the control plane's catalog spends, in its own process, on the full bench's registry (the call
 * route and three routes of 50 backends × 100 tools, 20 prompts and 100 resources) when nothing
 * changes: a re-listing of a backend that keeps failing (the bench's `fleet_down`: every ≤ 10 s) and a
 * full refresh whose listings bring what the last one did (every 30 s). Both run on the systems' core
 * in the bench, beside the Envoy that carries the streamed frames (docs/adr/0018-stream-relaying.md,
 * "The streaming tail"). The backends answer from memory (new objects each time, as a real fetch
 * parses them), so the figure is the catalog's work, not HTTP's. CPU per operation (median), this
 * tree's CatalogStore and, with --baseline, another worktree's, alternated.
 *   node dist/bench/catalog-rebuild-cost.js [--baseline <worktree>] [--rounds 5]
 * Writes bench/results/catalog-rebuild-cost.json and .md.
 */

const OPERATIONS = { relistings: 15, refreshes: 8 };

type StoreClass = typeof CatalogStore;
type Fetcher = ConstructorParameters<StoreClass>[0];

const quiet = createLogger('catalog-rebuild-cost', 'error', fs.createWriteStream('/dev/null'));

function storeClassOf(worktree: string): StoreClass {
  const module = path.join(worktree, 'dist', 'control-plane', 'catalog', 'catalog-store.js');
  const isClass = (value: unknown) => typeof value === 'function';
  return z.object({ CatalogStore: z.custom<StoreClass>(isClass, `${module} exports no CatalogStore`) }).parse(require(module)).CatalogStore;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)];

async function cpuMsPerOperation(operation: () => Promise<void>, times: number): Promise<number> {
  const samples: number[] = [];
  for (let index = 0; index < times; index++) {
    const before = process.cpuUsage();
    await operation();
    const spent = process.cpuUsage(before);
    samples.push((spent.user + spent.system) / 1000);
  }
  return median(samples);
}

async function main() {
  const { values } = parseArgs({ options: { baseline: { type: 'string' }, rounds: { type: 'string', default: '5' } } });
  const settings = benchSettings(false);
  const topology = await planTopology(settings.toolList.fleet);
  const ir = buildGatewayIR(gatewayRegistry(allRoutes(topology), { issuer: 'https://issuer.example' }));
  const down = topology.listRoutes.down.backends.at(-1)!.endpoint.url;
  const fleet = settings.toolList.fleet;
  const schema = { type: 'object', properties: { text: { type: 'string', description: 'what to echo back' }, count: { type: 'integer', minimum: 1 } }, required: ['text'] };
  const fetcher: Fetcher = async (service: ToolServiceIR): Promise<ToolList> => {
    if (service.url === down) throw new Error(`connection refused (${service.url})`);
    return {
      tools: Array.from({ length: fleet.toolsPerBackend }, (_, index): Tool => ({ name: `tool_${index}`, description: `filler tool ${index}`, inputSchema: structuredClone(schema) as Tool['inputSchema'] })),
      protocolVersion: '2025-11-25',
      sessionful: false,
      prompts: Array.from({ length: fleet.promptsPerBackend }, (_, index) => ({ name: `prompt_${index}`, description: `prompt ${index}` })),
      resources: Array.from({ length: fleet.resourcesPerBackend }, (_, index) => ({ uri: `bench://resource/${index}`, name: `resource_${index}` })),
      capabilities: { tools: {}, prompts: {}, resources: {} },
    };
  };
  const downService = ir.toolServices.find((service) => service.url === down)!;
  const revisions: [string, StoreClass][] = [['this', CatalogStore]];
  if (values.baseline) revisions.unshift(['baseline', storeClassOf(path.resolve(values.baseline))]);
  const figures: Record<string, { relisting: number[]; refresh: number[] }> = Object.fromEntries(revisions.map(([name]) => [name, { relisting: [], refresh: [] }]));
  const loadBefore = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  for (let round = 0; round < Number(values.rounds); round++) {
    for (const [name, Store] of round % 2 === 0 ? revisions : [...revisions].reverse()) {
      // Re-listings are the store's own timers: an hour away here, so that only the measured ones run.
      const store = new Store(fetcher, CATALOG_DEFAULTS, quiet, { retryMinMs: 3_600_000, retryMaxMs: 3_600_000 });
      store.setGateway(ir);
      for (let warm = 0; warm < 3; warm++) await store.refresh();
      figures[name].relisting.push(await cpuMsPerOperation(() => store.refresh([downService]), OPERATIONS.relistings));
      figures[name].refresh.push(await cpuMsPerOperation(() => store.refresh(), OPERATIONS.refreshes));
      store.close();
    }
  }
  const loadAfter = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const revisionNames = { this: revisionOf(projectPath()), ...(values.baseline && { baseline: revisionOf(path.resolve(values.baseline)) }) };
  const markdown = [
    '# Catalog: CPU per re-listing and per unchanged refresh',
    '',
    `${new Date().toISOString()}, \`node dist/bench/catalog-rebuild-cost.js${values.baseline ? ` --baseline ${values.baseline}` : ''} --rounds ${values.rounds}\`; load average ${loadBefore} at the start, ${loadAfter} at the end (2 cores, shared). The full bench's registry (${ir.routes.length} routes, ${ir.toolServices.length} Tool Services); backends answering from memory. CPU ms per operation: median of each round's median (${OPERATIONS.relistings} re-listings, ${OPERATIONS.refreshes} refreshes per round), rounds alternated.`,
    '',
    '| revision | re-listing of a backend that keeps failing (ms) | full refresh, nothing changed (ms) |',
    '| --- | --- | --- |',
    ...revisions.map(([name]) => `| ${name}: ${revisionNames[name as keyof typeof revisionNames]} | ${median(figures[name].relisting).toFixed(1)} | ${median(figures[name].refresh).toFixed(1)} |`),
    '',
  ].join('\n');
  writeBenchResults('catalog-rebuild-cost', { loadBefore, loadAfter, revisions: revisionNames, figures }, markdown, (line) => process.stdout.write(`[catalog-rebuild-cost] ${line}\n`));
}

main().catch((error: Error) => {
  process.stderr.write(`[catalog-rebuild-cost] failed: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
