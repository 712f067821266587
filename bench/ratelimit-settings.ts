import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { projectPath } from '../control-plane/shared/paths';
import { portAccepts, waitFor } from '../control-plane/devstack/processes';
import { RateLimitGrpcListener, rateLimitBinary, rateLimitConfigFile, rateLimitEnvironment } from '../control-plane/devstack/ratelimit';
import { cpuSecondsOf } from './scenarios/cpu-time';
import { dumpedInstructions } from './systems/callgrind';
import { allocatePort } from './systems/ports';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { ANSWER, any, bootstrap, listener, median, requestsCompleted, sendToolCalls, startEnvoy, staticCluster, writeWrkScript } from './systems/static-envoy';
import { HOST } from './systems/topology';
import { writeBenchResults } from './report/results-file';

/**
 * What each setting of a shared limit's path costs per request (issue 14, docs/adr/0016-quotas.md,
 * "Shared limits: settings measured"): static Envoys (one worker) with the gateway's shared-limit
 * filter and descriptors — the route's per caller [limit, scope, caller] and total [limit, scope],
 * the Tool Service's total [limit, scope] — each asking its own envoyproxy/ratelimit service, all on
 * one Redis. The variants differ in one setting each from `today` (the gateway's settings before
 * this probe); `off` has no limit filter. Every limit is far above the load: nothing is refused.
 * Per variant, measured in turn and interleaved: CPU µs per request of Envoy, of the service and of
 * Redis (from /proc), requests/s of a closed loop of 16 connections (wrk on the last core) — or, with
 * --instructions, the instructions per request of Envoy and Redis under valgrind callgrind (a fixed
 * number of requests, less what each process runs idle for as long: independent of the machine's
 * load) beside the service's CPU.
 *   node dist/bench/ratelimit-settings.js [--quick] [--instructions] [--only=a,b]
 *   writes bench/results/ratelimit-settings[-instructions][-quick].{json,md}
 */

/** One folder per mode, so that a CPU run and an instruction run may go side by side. */
const LOG_DIR = projectPath('.run', 'bench', process.argv.includes('--instructions') ? 'ratelimit-settings-instructions' : 'ratelimit-settings');
const CALLERS = 8;
const CONNECTIONS = 16;
const NEVER_REACHED = 1_000_000;
const DOMAIN = 'probe';
const IDLE_SECONDS = 5;
/** Under callgrind everything starts and answers tens of times slower. */
const INSTRUMENTED_START_MS = 600_000;
const execFileAsync = promisify(execFile);
const log = (line: string) => process.stdout.write(`[ratelimit-settings] ${line}\n`);

/** A shared limit as the gateway sends it: its name, its scope value, whether it is counted per caller. */
interface Limit {
  name: string;
  scope: string;
  perCaller: boolean;
}
const GATEWAY_LIMITS: Limit[] = [
  { name: 'route:global/calls/per-caller', scope: 'global', perCaller: true },
  { name: 'route:global/calls', scope: 'global', perCaller: false },
  { name: 'tool-service:bench-global/calls', scope: 'bench-global', perCaller: false },
];

interface Variant {
  name: string;
  what: string;
  /** No limit filter at all. */
  off?: boolean;
  /** Envoy → service over a Unix domain socket (GRPC_UDS). */
  grpcUds?: boolean;
  /** Service → Redis over Redis's Unix domain socket. */
  redisUds?: boolean;
  /** The service's environment over rateLimitEnvironment's. */
  env?: Record<string, string>;
  /** The shared-limit filter's settings over the gateway's. */
  filter?: Record<string, unknown>;
  limits?: Limit[];
  /** Limit and scope in one entry (`<name>@<scope>`, a wildcard value in the service's configuration). */
  mergedEntries?: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'off', what: 'no limit filter', off: true },
  { name: 'today', what: 'the gateway before: TCP on loopback both ways, 3 descriptors' },
  { name: 'grpc-uds', what: 'Envoy → service over a Unix socket (GRPC_UDS)', grpcUds: true },
  { name: 'redis-uds', what: 'service → Redis over a Unix socket (REDIS_SOCKET_TYPE=unix)', redisUds: true },
  { name: 'both-uds', what: 'both hops over Unix sockets', grpcUds: true, redisUds: true },
  { name: 'no-headers', what: 'no x-ratelimit-* / Retry-After / x-envoy-ratelimited headers', filter: { enable_x_ratelimit_headers: 0 /* OFF: the word would read as a YAML 1.1 boolean */, enable_retry_after_header: false, disable_x_envoy_ratelimited_header: true } },
  { name: 'log-error', what: 'LOG_LEVEL=error (today warn)', env: { LOG_LEVEL: 'error' } },
  { name: 'pipeline', what: 'REDIS_PIPELINE_WINDOW=150us, REDIS_PIPELINE_LIMIT=8', env: { REDIS_PIPELINE_WINDOW: '150us', REDIS_PIPELINE_LIMIT: '8' } },
  { name: 'gogc-100', what: 'GOGC=100 (Go default; today 400)', env: { GOGC: '100' } },
  { name: 'one-descriptor', what: '1 descriptor (the route per caller only): the cost of a descriptor', limits: GATEWAY_LIMITS.slice(0, 1) },
  { name: 'merged-entries', what: 'limit and scope as one entry (`<name>@<scope>`, wildcard value)', mergedEntries: true },
];

const entriesOf = (limit: Limit, merged: boolean) => [
  ...(merged
    ? [{ generic_key: { descriptor_key: 'limit', descriptor_value: `${limit.name}@${limit.scope}` } }]
    : [{ generic_key: { descriptor_key: 'limit', descriptor_value: limit.name } }, { generic_key: { descriptor_key: 'scope', descriptor_value: limit.scope } }]),
  ...(limit.perCaller ? [{ request_headers: { header_name: 'x-caller', descriptor_key: 'caller' } }] : []),
];

/** The service's configuration: wildcard scope and caller values, as the control plane writes it. */
function serviceConfig(limits: Limit[], merged: boolean) {
  const rateLimit = (limit: Limit) => ({ unit: 'second', requests_per_unit: NEVER_REACHED, name: limit.name });
  const tail = (limit: Limit) => (limit.perCaller ? { descriptors: [{ key: 'caller', rate_limit: rateLimit(limit) }] } : { rate_limit: rateLimit(limit) });
  return {
    domain: DOMAIN,
    descriptors: limits.map((limit) =>
      merged ? { key: 'limit', value: `${limit.name}@*`, ...tail(limit) } : { key: 'limit', value: limit.name, descriptors: [{ key: 'scope', ...tail(limit) }] },
    ),
  };
}

/** The gateway's shared-limit filter (control-plane/xds/translate/quotas.ts), fail open. */
const rateLimitFilter = (overrides: Record<string, unknown> = {}) => ({
  name: 'probe.ratelimit',
  typed_config: any('envoy.extensions.filters.http.ratelimit.v3.RateLimit', {
    domain: DOMAIN,
    stage: 10,
    stat_prefix: 'probe_shared',
    timeout: '0.2s',
    enable_x_ratelimit_headers: 'DRAFT_VERSION_03',
    enable_retry_after_header: true,
    rate_limit_service: { grpc_service: { envoy_grpc: { cluster_name: 'ratelimit' } }, transport_api_version: 'V3' },
    ...overrides,
  }),
});

/** A process and, under callgrind, the prefix of its dump files. */
interface Measured {
  pid: number;
  callgrindOut?: string;
}

interface Started {
  variant: Variant;
  envoy: Measured;
  service?: Measured;
  port: number;
  adminPort: number;
}

interface Measurement {
  variant: string;
  requests: number;
  requestsPerSecond: number;
  envoyCpuUsPerRequest: number;
  serviceCpuUsPerRequest: number;
  redisCpuUsPerRequest: number;
  non2xx: number;
}

interface InstructionMeasurement {
  variant: string;
  requests: number;
  envoyInstructionsPerRequest: number;
  /** The service runs natively: its CPU µs per request, less its idle CPU for as long. */
  serviceCpuUsPerRequest: number;
  redisInstructionsPerRequest: number;
  non2xx: number;
}

const cpuMicros = (process: Measured | undefined) => (process === undefined ? 0 : cpuSecondsOf(process.pid) * 1_000_000);

/** `command`, under callgrind (its dumps at `<callgrindOut>.<pid>`, on any core) when `callgrindOut` is given. */
function spawnMeasured(group: ProcessGroup, name: string, command: string[], callgrindOut?: string) {
  if (!callgrindOut) return group.spawn(name, command[0], command.slice(1));
  return group.spawnUnpinned(name, 'valgrind', ['--tool=callgrind', `--callgrind-out-file=${callgrindOut}.%p`, ...command]);
}

interface Redis extends Measured {
  port: number;
  socket: string;
}

async function startRedis(group: ProcessGroup, instrumented: boolean): Promise<Redis> {
  const port = await allocatePort();
  const socket = path.join(LOG_DIR, 'redis.sock');
  const callgrindOut = instrumented ? path.join(LOG_DIR, 'callgrind.redis') : undefined;
  const command = ['redis-server', '--port', String(port), '--bind', HOST, '--unixsocket', socket, '--unixsocketperm', '700', '--save', '', '--appendonly', 'no'];
  const redis = spawnMeasured(group, 'redis', command, callgrindOut);
  await waitFor('redis', () => portAccepts(port), { timeoutMs: INSTRUMENTED_START_MS });
  return { pid: redis.child.pid!, callgrindOut, port, socket };
}

async function startVariant(group: ProcessGroup, variant: Variant, redis: Redis, backendPort: number, instrumented: boolean): Promise<Started> {
  const limits = variant.limits ?? GATEWAY_LIMITS;
  const merged = variant.mergedEntries === true;
  let service: Measured | undefined;
  let serviceAt: number | string = 0;
  if (!variant.off) {
    const binary = rateLimitBinary();
    if (!binary) throw new Error('envoyproxy/ratelimit not built: scripts/test-tools.sh builds it into .tools/bin/ratelimit');
    const dir = path.join(LOG_DIR, variant.name);
    const configFile = rateLimitConfigFile(dir);
    fs.mkdirSync(path.dirname(configFile), { recursive: true });
    fs.writeFileSync(configFile, stringify(serviceConfig(limits, merged)));
    const grpc: RateLimitGrpcListener = variant.grpcUds ? { socketPath: path.join(LOG_DIR, `${variant.name}.grpc.sock`) } : { port: await allocatePort() };
    const ports = { grpc, http: await allocatePort(), debug: await allocatePort() };
    const env = { ...rateLimitEnvironment(dir, ports, variant.redisUds ? { socketPath: redis.socket } : { host: HOST, port: redis.port }), ...variant.env };
    // Never under callgrind: an idle Go process does not take callgrind_control's dump request for minutes
    // (and needs GODEBUG=asyncpreemptoff=1 to run at all); its CPU is measured instead.
    const process = group.spawn(`ratelimit-${variant.name}`, 'env', [...Object.entries(env).map(([key, value]) => `${key}=${value}`), binary]);
    await waitFor(`ratelimit service ${variant.name}`, () => portAccepts(ports.http));
    service = { pid: process.child.pid! };
    serviceAt = 'socketPath' in grpc ? grpc.socketPath : grpc.port;
  }
  const port = await allocatePort();
  const adminPort = await allocatePort();
  const clusters = [staticCluster('backend', backendPort, false), ...(variant.off ? [] : [staticCluster('ratelimit', serviceAt, true)])];
  const route = { route: { cluster: 'backend', ...(!variant.off && { rate_limits: limits.map((limit) => ({ stage: 10, actions: entriesOf(limit, merged) })) }) } };
  const filters = variant.off ? [] : [rateLimitFilter(variant.filter)];
  const envoyOut = instrumented ? path.join(LOG_DIR, `callgrind.envoy-${variant.name}`) : undefined;
  const envoyPid = await startEnvoy(group, `envoy-${variant.name}`, bootstrap(adminPort, listener(port, filters, route), clusters), adminPort, envoyOut);
  return { variant, envoy: { pid: envoyPid, callgrindOut: envoyOut }, service, port, adminPort };
}

async function measure(started: Started, redis: Measured, seconds: number, wrkScript: string, loadCpu: string): Promise<Measurement> {
  const before = await requestsCompleted(started.adminPort);
  const cpuBefore = [cpuMicros(started.envoy), cpuMicros(started.service), cpuMicros(redis)];
  const wrk = await execFileAsync('taskset', ['-c', loadCpu, 'wrk', '-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '-s', wrkScript, `http://${HOST}:${started.port}/mcp`]);
  const requests = (await requestsCompleted(started.adminPort)) - before;
  const [envoy, service, redisMicros] = [cpuMicros(started.envoy), cpuMicros(started.service), cpuMicros(redis)].map((after, index) => (after - cpuBefore[index]) / requests);
  return {
    variant: started.variant.name,
    requests,
    requestsPerSecond: requests / seconds,
    envoyCpuUsPerRequest: envoy,
    serviceCpuUsPerRequest: service,
    redisCpuUsPerRequest: started.variant.off ? 0 : redisMicros,
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(wrk.stdout)?.[1] ?? 0),
  };
}

/** What callgrind counted in `process` since its last dump (0 for a process that is not there). */
const countedBy = (process: Measured | undefined) =>
  process?.callgrindOut ? dumpedInstructions(process.pid, LOG_DIR, `${path.basename(process.callgrindOut)}.${process.pid}.`) : Promise.resolve(0);

/**
 * Instructions per request of Envoy, the service and Redis for a fixed number of requests, each less
 * what the same process runs idle for as long (timers, the Go runtime, Redis's cron), measured just before.
 */
async function measureInstructions(started: Started, redis: Measured, count: number): Promise<InstructionMeasurement> {
  const processes = [started.envoy, redis];
  const dumpAll = () => Promise.all(processes.map(countedBy));
  await dumpAll();
  const idleStarted = Date.now();
  const serviceIdleFrom = cpuMicros(started.service);
  await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
  const idle = await dumpAll();
  const serviceIdle = cpuMicros(started.service) - serviceIdleFrom;
  const idleSeconds = (Date.now() - idleStarted) / 1000;
  const loadStarted = Date.now();
  const serviceFrom = cpuMicros(started.service);
  const before = await requestsCompleted(started.adminPort);
  const non2xx = await sendToolCalls(started.port, count, CONNECTIONS, CALLERS);
  const requests = (await requestsCompleted(started.adminPort)) - before;
  const serviceLoaded = cpuMicros(started.service) - serviceFrom;
  const loaded = await dumpAll();
  const loadSeconds = (Date.now() - loadStarted) / 1000;
  const lessIdle = (counted: number, idleCounted: number) => (counted - (idleCounted / idleSeconds) * loadSeconds) / requests;
  const [envoy, redisInstructions] = loaded.map((instructions, index) => lessIdle(instructions, idle[index]));
  return {
    variant: started.variant.name,
    requests,
    envoyInstructionsPerRequest: envoy,
    serviceCpuUsPerRequest: lessIdle(serviceLoaded, serviceIdle),
    redisInstructionsPerRequest: started.variant.off ? 0 : redisInstructions,
    non2xx,
  };
}

interface Context {
  measuredAt: string;
  load: number[];
  cores: number;
  mode: 'cpu' | 'instructions';
  repetitions: number;
  /** Seconds of wrk per measurement (cpu), or requests per measurement (instructions). */
  amount: number;
}

/** A row per variant: each pick per request (Envoy, service, Redis), their sum (per repetition), the sum against `today`. */
function table<T extends { variant: string }>(runs: T[], picks: ((run: T) => number)[], format: (value: number) => string, extra: (variant: string) => string[] = () => []): string[] {
  const of = (variant: string, pick: (run: T) => number) => median(runs.filter((run) => run.variant === variant).map(pick));
  const total = (run: T) => picks.reduce((sum, pick) => sum + pick(run), 0);
  const today = runs.some((run) => run.variant === 'today');
  return VARIANTS.filter((variant) => runs.some((run) => run.variant === variant.name)).map((variant) => {
    const added = of(variant.name, total) - of('today', total);
    const perRepetition = runs.filter((run) => run.variant === variant.name).map((run) => format(total(run))).join(', ');
    const againstToday = variant.off || !today ? '—' : `${added >= 0 ? '+' : '−'}${format(Math.abs(added))} (${((100 * added) / of('today', total)).toFixed(1)} %)`;
    return `| ${[variant.name, variant.what, ...picks.map((pick) => format(of(variant.name, pick))), `${format(of(variant.name, total))} (${perRepetition})`, againstToday, ...extra(variant.name)].join(' | ')} |`;
  });
}

function markdown(runs: Measurement[], instructionRuns: InstructionMeasurement[], context: Context): string {
  const failed = [...runs, ...instructionRuns].reduce((sum, run) => sum + run.non2xx, 0);
  const how =
    context.mode === 'cpu'
      ? [
          `${context.repetitions} × ${context.amount} s of wrk (${CONNECTIONS} connections, ${CALLERS} callers by header, on the last core) per variant, interleaved; medians of CPU µs per request from /proc (per-repetition sums in brackets): they move with the machine's load.`,
          '',
          '| variant | what differs from `today` | Envoy µs | service µs | Redis µs | all µs (per repetition) | all against today | requests/s |',
          '| --- | --- | --- | --- | --- | --- | --- | --- |',
          ...table(runs, [(run) => run.envoyCpuUsPerRequest, (run) => run.serviceCpuUsPerRequest, (run) => run.redisCpuUsPerRequest], (value) => value.toFixed(1), (variant) => [
            String(Math.round(median(runs.filter((run) => run.variant === variant).map((run) => run.requestsPerSecond)))),
          ]),
        ]
      : [
          `Envoy and Redis under valgrind callgrind, the service natively (an idle Go process does not take callgrind's dump request in time); ${context.repetitions} × ${context.amount} requests (${CONNECTIONS} connections, ${CALLERS} callers by header) per variant, interleaved; per request, each process less what it runs idle for as long (${IDLE_SECONDS} s measured just before); medians (per-repetition sums in brackets). Instructions are independent of the machine's load; the service's CPU µs (at the low rate callgrind allows) is not.`,
          '',
          '| variant | what differs from `today` | Envoy instructions | Redis instructions | Envoy + Redis (per repetition) | Envoy + Redis against today | service CPU µs |',
          '| --- | --- | --- | --- | --- | --- | --- |',
          ...table(instructionRuns, [(run) => run.envoyInstructionsPerRequest, (run) => run.redisInstructionsPerRequest], (value) => Math.round(value).toLocaleString('en'), (variant) => [
            median(instructionRuns.filter((run) => run.variant === variant).map((run) => run.serviceCpuUsPerRequest)).toFixed(1),
          ]),
        ];
  return [
    '# Shared limits: what each setting of the path costs per request (bench/ratelimit-settings.ts)',
    '',
    `Measured ${context.measuredAt}; load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min) on ${context.cores} cores shared with other work.`,
    `Static Envoy 1.40 (one worker) per variant with the gateway's shared-limit filter, each asking its own envoyproxy/ratelimit, all on one Redis. Every limit ${NEVER_REACHED}/s: nothing refused.`,
    ...how,
    '',
    `Refused or failed answers: ${failed}.`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const instrumented = process.argv.includes('--instructions');
  const only = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length).split(',');
  const variants = only ? VARIANTS.filter((variant) => only.includes(variant.name)) : VARIANTS;
  const plan = instrumented ? { repetitions: quick ? 1 : 2, amount: quick ? 300 : 1000 } : { repetitions: quick ? 2 : 5, amount: quick ? 3 : 6 };
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  const loadCpu = cpuPlan.loadGenerator === 'any' ? '0' : cpuPlan.loadGenerator;
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const wrkScript = path.join(LOG_DIR, 'tools-call.lua');
  writeWrkScript(wrkScript, CALLERS);
  const runs: Measurement[] = [];
  const instructionRuns: InstructionMeasurement[] = [];
  try {
    const backendPort = await allocatePort();
    const backendAdmin = await allocatePort();
    await startEnvoy(group, 'backend', bootstrap(backendAdmin, listener(backendPort, [], { direct_response: { status: 200, body: { inline_string: ANSWER } } }), []), backendAdmin);
    const redis = await startRedis(group, instrumented);
    // Under callgrind each start takes minutes: all at once.
    const started = await Promise.all(variants.map((variant) => startVariant(group, variant, redis, backendPort, instrumented)));
    for (const each of started) await execFileAsync('wrk', ['-t1', '-c4', instrumented ? '-d10s' : '-d2s', '-s', wrkScript, `http://${HOST}:${each.port}/mcp`]);
    for (let repetition = 0; repetition < plan.repetitions; repetition++) {
      // Each repetition in another order, so that no variant always follows the same one.
      const order = repetition % 2 === 0 ? started : [...started].reverse();
      for (const each of order) {
        if (instrumented) {
          const run = await measureInstructions(each, redis, plan.amount);
          instructionRuns.push(run);
          log(`${run.variant} #${repetition + 1}: Envoy ${Math.round(run.envoyInstructionsPerRequest)}, Redis ${Math.round(run.redisInstructionsPerRequest)} instructions, service ${run.serviceCpuUsPerRequest.toFixed(1)} µs CPU per request`);
        } else {
          const run = await measure(each, redis, plan.amount, wrkScript, loadCpu);
          runs.push(run);
          log(`${run.variant} #${repetition + 1}: Envoy ${run.envoyCpuUsPerRequest.toFixed(1)}, service ${run.serviceCpuUsPerRequest.toFixed(1)}, Redis ${run.redisCpuUsPerRequest.toFixed(1)} µs per request, ${Math.round(run.requestsPerSecond)}/s`);
        }
      }
    }
  } finally {
    await group.stopAll();
  }
  const context: Context = { measuredAt: new Date().toISOString(), load: os.loadavg().slice(0, 2), cores, mode: instrumented ? 'instructions' : 'cpu', ...plan };
  const name = `ratelimit-settings${instrumented ? '-instructions' : ''}${quick ? '-quick' : ''}`;
  writeBenchResults(name, { ...context, runs, instructionRuns }, markdown(runs, instructionRuns, context));
}

main().catch((error: unknown) => {
  process.stderr.write(`[ratelimit-settings] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
