import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { GatewayStack } from '../control-plane/devstack/stack';
import { buildGatewayIR } from '../control-plane/ir/gateway-ir';
import { loadRegistryFile } from '../control-plane/registry/static-file';
import { egressFetch } from '../control-plane/shared/egress-fetch';
import { InternalTls } from '../control-plane/shared/internal-tls';
import { projectPath } from '../control-plane/shared/paths';
import { quietLogger } from '../test/support/quiet-logger';
import { LatencySummary, summarize } from './load/stats';
import { benchSettings } from './settings';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startSingleBackendRoute } from './systems/systems';
import { HOST } from './systems/topology';
import { ProcessIds, VariantRun, cpuMicros, measureVariants, targetsVerdict, variantTable } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * What the closed inside costs a tools/call (issue 14, docs/adr/0017-closed-inside.md): two gateways
 * on one bench backend, `plain` (the inside as it was: plain HTTP from Envoy to the sidecar's session
 * check, plain gRPC, Redis without a password) and `closed` (mutual TLS 1.3 on Envoy → sidecar and
 * on ADS / the catalog stream, Redis ACL user), measured in the same run, interleaved, at fixed rates
 * (p50/p99) and at saturation. Every tools/call crosses the session check (Envoy → sidecar) once.
 *   scripts/bench.sh inside [--quick]     (node dist/bench/inside-cost.js [--quick])
 * Writes bench/results/inside.json and .md (a --quick run: inside-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'inside');
/** Ours, not the (it sets none for the inside): about the auth bench's, for a cost of the same kind. */
const TARGETS = { p50Ratio: 1.05, saturationRatio: 0.95 };
type Variant = 'plain' | 'closed';
const VARIANTS: Variant[] = ['plain', 'closed'];

const log = (line: string) => process.stdout.write(`[bench inside] ${line}\n`);

/** Requests through each egress listener, in blocks of EGRESS_BLOCK per variant in turn; the first block of each warms up. */
const EGRESS_REQUESTS = { full: 3000, quick: 300 };
const EGRESS_BLOCK = 100;

interface EgressHop {
  variant: Variant;
  latencyMs: LatencySummary;
  /** Envoy's CPU per request (its egress listener, the cluster, the backend connection). */
  envoyCpuUsPerRequest: number;
  /** This process's CPU per request: the client's side, as the sidecar pays it (TLS included). */
  clientCpuUsPerRequest: number;
}

/** `initialize` through each gateway's egress listener, as the sidecar sends it: plain, or with the sidecar's certificate. */
async function measureEgressHop(stacks: Map<Variant, GatewayStack>, registryFile: string, backendUrl: string, requests: number): Promise<EgressHop[]> {
  const cluster = buildGatewayIR(loadRegistryFile(registryFile)).clusters[0].clusterName;
  const initialize = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } });
  const senders = VARIANTS.map((variant) => {
    const stack = stacks.get(variant)!;
    const tls = stack.inside ? new InternalTls(stack.internalTlsDir({ role: 'sidecar', name: 'sidecar' }), 'sidecar', quietLogger) : undefined;
    return { variant, tls, send: egressFetch(`${HOST}:${stack.ports.egress}`, cluster, tls), envoyPid: stack.processes.get('envoy')!.child.pid!, latencies: [] as number[], envoyCpu: 0, clientCpu: 0 };
  });
  try {
    for (let block = 0; block <= requests / EGRESS_BLOCK; block++) {
      for (const sender of block % 2 === 0 ? senders : [...senders].reverse()) {
        const envoyBefore = cpuMicros(sender.envoyPid);
        const clientBefore = process.cpuUsage();
        const latencies: number[] = [];
        for (let index = 0; index < EGRESS_BLOCK; index++) {
          const started = performance.now();
          const answer = await sender.send(backendUrl, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: initialize });
          await answer.text();
          if (!answer.ok) throw new Error(`initialize through ${sender.variant}'s egress listener answered ${answer.status}`);
          latencies.push(performance.now() - started);
        }
        if (block === 0) continue;
        const client = process.cpuUsage(clientBefore);
        sender.latencies.push(...latencies);
        sender.envoyCpu += cpuMicros(sender.envoyPid) - envoyBefore;
        sender.clientCpu += client.user + client.system;
      }
    }
    return senders.map((sender) => ({
      variant: sender.variant,
      latencyMs: summarize(sender.latencies),
      envoyCpuUsPerRequest: sender.envoyCpu / sender.latencies.length,
      clientCpuUsPerRequest: sender.clientCpu / sender.latencies.length,
    }));
  } finally {
    for (const sender of senders) sender.tls?.close();
  }
}

function egressTable(hops: EgressHop[]): string[] {
  const [plain, closed] = (['plain', 'closed'] as const).map((variant) => hops.find((hop) => hop.variant === variant)!);
  const pair = (pick: (hop: EgressHop) => number, digits: number) => `${pick(plain).toFixed(digits)} / ${pick(closed).toFixed(digits)} (${(pick(closed) / pick(plain)).toFixed(2)}×)`;
  return [
    `The egress hop: \`initialize\` through each gateway's egress listener as the sidecar sends it (connections kept open), ${plain.latencyMs.n} requests per variant in interleaved blocks; plain / closed (ratio):`,
    '',
    '| p50 ms | p99 ms | Envoy CPU µs/request | client (sidecar side) CPU µs/request |',
    '| --- | --- | --- | --- |',
    `| ${pair((hop) => hop.latencyMs.p50, 3)} | ${pair((hop) => hop.latencyMs.p99, 3)} | ${pair((hop) => hop.envoyCpuUsPerRequest, 0)} | ${pair((hop) => hop.clientCpuUsPerRequest, 0)} |`,
  ];
}

function markdown(runs: VariantRun[], egress: EgressHop[], context: { measuredAt: string; mode: string; cores: number; load: number[]; pinned: boolean }): string {
  return [
    '# The closed inside: tools/call with a plain and a mutually authenticated inside',
    '',
    `Measured ${context.measuredAt} (${context.mode} run) on ${context.cores} cores, load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min)${context.pinned ? '; load generator on the last core, the gateways on the others' : ''}, by \`scripts/bench.sh inside\`.`,
    'Two gateways (Envoy 1.40, control plane, sidecar, Redis each) on one stateless bench backend, measured in turn in the same run:',
    '`plain` (plain HTTP/1.1 session check Envoy → sidecar, plain gRPC, Redis without a password) and `closed` (the default: mutual TLS 1.3 on the session check and the gateway lane with certificates from SDS, on ADS and the catalog stream; Redis ACL user).',
    'tools/call `bench__echo` in 8 sessions; each call crosses the session check once; figures are medians over the repetitions; latency in ms, plain / closed (ratio).',
    '',
    ...variantTable(runs, 'plain', ['closed']),
    '',
    targetsVerdict(runs, 'plain', 'closed', TARGETS, 'Targets (ours)'),
    '',
    ...egressTable(egress),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  // As the auth bench: rates below saturation and five repetitions (the variants differ by little).
  const base = benchSettings(quick);
  const settings = { ...base, repetitions: quick ? 1 : 5, toolCall: { ...base.toolCall, ratesPerSecond: [100, 250] } };
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  let runs: VariantRun[];
  let egress: EgressHop[];
  try {
    const { registryFile, backendUrl } = await startSingleBackendRoute(group, LOG_DIR);
    const stacks = new Map<Variant, GatewayStack>();
    for (const variant of VARIANTS) {
      stacks.set(variant, await group.startGateway(variant, { registryFile, logDir: path.join(LOG_DIR, variant), plainInside: variant === 'plain' }));
    }
    const pids = (variant: string): ProcessIds => {
      const stack = stacks.get(variant as Variant)!;
      return { envoy: stack.processes.get('envoy')!.child.pid!, sidecar: stack.processes.get('sidecar')!.child.pid! };
    };
    runs = await measureVariants(VARIANTS.map((variant) => ({ name: variant, url: stacks.get(variant)!.gatewayUrl('bench') })), settings, pids, log);
    log('the egress hop: initialize through each egress listener');
    egress = await measureEgressHop(stacks, registryFile, backendUrl, quick ? EGRESS_REQUESTS.quick : EGRESS_REQUESTS.full);
  } finally {
    await group.stopAll();
  }
  const name = quick ? 'inside-quick' : 'inside';
  const context = { measuredAt: new Date().toISOString(), mode: settings.mode, cores, load: os.loadavg().slice(0, 2), pinned: cpuPlan.pinned };
  writeBenchResults(name, { ...context, settings: settings.toolCall, repetitions: settings.repetitions, runs, egress }, markdown(runs, egress, context), log);
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench inside] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
