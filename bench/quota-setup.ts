import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { GatewayStack, StackOptions } from '../control-plane/devstack/stack';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { allocatePort } from './systems/ports';
import { ProcessGroup } from './systems/process-group';
import { startBackendProcess } from './systems/systems';
import { HOST } from './systems/topology';

/**
 * The gateway of the quota benches (bench/quota-cost.ts, bench/quota-instructions.ts): one bench
 * backend behind four routes, `off`, `local`, `global` and `concurrency` (docs/adr/0016-quotas.md).
 */

export const NEVER_REACHED = '1000000/second';
export const IN_FLIGHT_NEVER_REACHED = 100_000;

/** Envoy's workers in the bench: its default, one per core of the machine (the gateway is pinned, Envoy's thread count is not). */
export const ENVOY_WORKERS = os.availableParallelism();
/**
 * --leased: the gateway told of Envoy's workers; --leased=<n>: of n workers instead, e.g. so many that
 * every lease is one token (the script's per-call cost of asking, beside the ratelimit filter's).
 */
export function leaseWorkersOf(argv: string[]): number | undefined {
  const flag = argv.find((arg) => arg === '--leased' || arg.startsWith('--leased='));
  if (flag === undefined) return undefined;
  if (flag === '--leased') return ENVOY_WORKERS;
  const workers = Number(flag.slice('--leased='.length));
  if (!Number.isInteger(workers) || workers < 1) throw new Error(`--leased=<n>: n must be a positive integer, not ${flag.slice('--leased='.length)}`);
  return workers;
}

export function quotaRegistry(backendUrl: string) {
  const service = (id: string, quotas?: unknown) => ({ id, name: 'bench', url: backendUrl, ...(quotas ? { quotas } : {}) });
  const shared = { rate: NEVER_REACHED, shared: true };
  return {
    routes: [
      { key: 'off', toolServices: [service('bench')] },
      {
        key: 'local',
        quotas: { calls: { perCaller: NEVER_REACHED, total: NEVER_REACHED } },
        toolServices: [service('bench-local', { calls: { total: NEVER_REACHED }, tools: [{ tools: [ECHO_TOOL], calls: { perCaller: NEVER_REACHED } }] })],
      },
      {
        key: 'global',
        quotas: { calls: { perCaller: shared, total: shared } },
        toolServices: [service('bench-global', { calls: { total: shared } })],
      },
      { key: 'concurrency', quotas: { concurrency: { perCaller: IN_FLIGHT_NEVER_REACHED } }, toolServices: [service('bench-concurrency')] },
    ],
  };
}

/**
 * The bench backend and the gateway of the quota benches in `group`, with the ratelimit service; shared
 * limits leased per Envoy worker when `leaseWorkers` is given (--shared-limit-lease-workers).
 */
export async function startQuotaGateway(group: ProcessGroup, logDir: string, leaseWorkers: number | undefined, extra: Partial<StackOptions> = {}): Promise<GatewayStack> {
  const backendPort = await allocatePort();
  await startBackendProcess(group, 'backend', [{ port: backendPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 }]);
  const registryFile = path.join(logDir, 'registry.yaml');
  fs.writeFileSync(registryFile, stringify(quotaRegistry(`http://${HOST}:${backendPort}/mcp`)));
  return group.startGateway('gateway', {
    ...extra,
    registryFile,
    logDir,
    rateLimit: true,
    ...(leaseWorkers !== undefined && { controlPlaneArgs: ['--shared-limit-lease-workers', String(leaseWorkers)] }),
  });
}
