import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { stringify } from 'yaml';
import { projectPath } from '../control-plane/shared/paths';
import { portAccepts, waitFor } from '../control-plane/devstack/processes';
import { rateLimitBinary, rateLimitConfigFile, rateLimitEnvironment } from '../control-plane/devstack/ratelimit';
import { ENVOY_PROTO_INCLUDE_DIRS } from '../control-plane/xds/protobuf/envoy-protos';
import { cpuSecondsOf } from './scenarios/cpu-time';
import { dumpedInstructions } from './systems/callgrind';
import { allocatePort } from './systems/ports';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { HOST } from './systems/topology';
import { ANSWER, REQUEST, any, bootstrap, listener, median, requestsCompleted, sendToolCalls, startEnvoy, staticCluster, writeWrkScript } from './systems/static-envoy';
import { RESULTS_DIR, writeBenchResults } from './report/results-file';

/**
 * What a shared limit costs Envoy per request, by mechanism (issue 14, docs/adr/0016-quotas.md,
 * "Shared limits by RLQS"): the same request through static Envoys that differ only in their limit
 * filters, measured in turn, interleaved —
 *   off        no limit filter;
 *   local      three local_ratelimit filters (a limit name and the caller, wildcard values), as the
 *              gateway's per-instance slots;
 *   ratelimit  one ratelimit filter, three descriptors per request to the real envoyproxy/ratelimit
 *              on Redis (one gRPC call per request), as the gateway's shared limits today (envoy_grpc);
 *   ratelimit-google  the same through Envoy's google_grpc client;
 *   rlqs1/3    one or three rate_limit_quota filters (RLQS): each request is matched to a bucket
 *              (limit name + caller) and counted against the token bucket the quota server assigned;
 *              usage goes to the server once per reporting interval over one stream per Envoy.
 * Each limit is far above the load (nothing is refused). The upstream is a second Envoy answering
 * directly (not measured). Per variant: Envoy's user-space instructions and CPU per request
 * (`perf stat -p`, load-independent), requests/s at a closed loop of 16 connections (noisy on a
 * shared machine), and the CPU per request of what the variant talks to.
 *   scripts/bench.sh rlqs-probe [--quick]   (node dist/bench/rlqs-probe.js) writes bench/results/rlqs-probe.json and .md;
 *   node dist/bench/rlqs-probe.js --behaviour   what the filter does with what the gateway needs: bench/results/rlqs-behaviour.md
 * The quota server here is a probe (assignments split evenly between the Envoys that report a
 * bucket), not the gateway's: it shows what Envoy's side costs.
 */

const LOG_DIR = projectPath('.run', 'bench', 'rlqs-probe');
const CALLERS = 8;
const CONNECTIONS = 16;
const NEVER_REACHED = 1_000_000;
const LIMITS = ['route-per-caller', 'route-total', 'service-total'];
const REPORTING_INTERVAL_S = 1;
const IDLE_SECONDS = 5;
const execFileAsync = promisify(execFile);
const log = (line: string) => process.stdout.write(`[rlqs-probe] ${line}\n`);

type VariantName = 'off' | 'local' | 'ratelimit' | 'ratelimit-google' | 'rlqs1' | 'rlqs3';
const VARIANTS: VariantName[] = ['off', 'local', 'ratelimit', 'ratelimit-google', 'rlqs1', 'rlqs3'];

const callerInput = any('envoy.type.matcher.v3.HttpRequestHeaderMatchInput', { header_name: 'x-caller' });


/** A descriptor per limit: its name and the caller (the header stands in for the token's subject). */
const rateLimitActions = (limit: string) => [
  { generic_key: { descriptor_key: 'limit', descriptor_value: limit } },
  { request_headers: { header_name: 'x-caller', descriptor_key: 'caller' } },
];

function localFilter(limit: string, stage: number) {
  return {
    name: `probe.local.${limit}`,
    typed_config: any('envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit', {
      stat_prefix: `local_${stage}`,
      stage,
      token_bucket: { max_tokens: NEVER_REACHED, tokens_per_fill: NEVER_REACHED, fill_interval: '1s' },
      filter_enabled: { default_value: { numerator: 100 }, runtime_key: `local_${stage}_enabled` },
      filter_enforced: { default_value: { numerator: 100 }, runtime_key: `local_${stage}_enforced` },
      max_dynamic_descriptors: 10_000,
      descriptors: [
        {
          entries: [{ key: 'limit', value: limit }, { key: 'caller' }],
          token_bucket: { max_tokens: NEVER_REACHED, tokens_per_fill: NEVER_REACHED, fill_interval: '1s' },
        },
      ],
    }),
  };
}

type BlanketRule = 'ALLOW_ALL' | 'DENY_ALL';
interface BucketOptions {
  /** Where the bucket's caller comes from: a request header, or dynamic metadata (where jwt_authn and the call script leave theirs). */
  caller: 'header' | 'metadata';
  /** A new bucket before the server's first assignment. */
  noAssignment: BlanketRule;
  /** A bucket whose assignment lapsed (the server gone). */
  expired: BlanketRule;
}
const PROBE_BUCKETS: BucketOptions = { caller: 'header', noAssignment: 'ALLOW_ALL', expired: 'ALLOW_ALL' };
const callerFromMetadata = any('envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput', { filter: 'mcpgw', path: [{ key: 'caller' }] });

function rlqsFilter(limit: string, options: BucketOptions = PROBE_BUCKETS) {
  const bucketCaller = options.caller === 'header' ? callerInput : callerFromMetadata;
  return {
    name: `probe.rlqs.${limit}`,
    typed_config: any('envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig', {
      rlqs_server: { envoy_grpc: { cluster_name: 'rlqs' } },
      domain: 'probe',
      bucket_matchers: {
        matcher_list: {
          matchers: [
            {
              predicate: { single_predicate: { input: { name: 'caller', typed_config: callerInput }, value_match: { prefix: 'caller-' } } },
              on_match: {
                action: {
                  name: 'bucket',
                  typed_config: any('envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings', {
                    bucket_id_builder: { bucket_id_builder: { limit: { string_value: limit }, caller: { custom_value: { name: 'caller', typed_config: bucketCaller } } } },
                    reporting_interval: `${REPORTING_INTERVAL_S}s`,
                    deny_response_settings: {
                      http_status: { code: 429 },
                      response_headers_to_add: [{ header: { key: 'x-mcpgw-limit', value: limit } }, { header: { key: 'retry-after', value: '1' } }],
                    },
                    no_assignment_behavior: { fallback_rate_limit: { blanket_rule: options.noAssignment } },
                    expired_assignment_behavior: { expired_assignment_behavior_timeout: '60s', fallback_rate_limit: { blanket_rule: options.expired } },
                  }),
                },
              },
            },
          ],
        },
      },
    }),
  };
}

function rateLimitFilter(grpcService: object) {
  return {
    name: 'probe.ratelimit',
    typed_config: any('envoy.extensions.filters.http.ratelimit.v3.RateLimit', {
      domain: 'probe',
      stage: 0,
      timeout: '0.2s',
      failure_mode_deny: false,
      enable_x_ratelimit_headers: 'DRAFT_VERSION_03',
      rate_limit_service: { grpc_service: grpcService, transport_api_version: 'V3' },
    }),
  };
}

function limitFilters(variant: VariantName, ports: Ports) {
  switch (variant) {
    case 'off':
      return [];
    case 'local':
      return LIMITS.map((limit, stage) => localFilter(limit, stage));
    case 'ratelimit':
      return [rateLimitFilter({ envoy_grpc: { cluster_name: 'ratelimit' } })];
    case 'ratelimit-google':
      return [rateLimitFilter({ google_grpc: { target_uri: `${HOST}:${ports.ratelimit}`, stat_prefix: 'ratelimit' } })];
    case 'rlqs1':
      return [rlqsFilter(LIMITS[0])];
    case 'rlqs3':
      return LIMITS.map((limit) => rlqsFilter(limit));
  }
}

function routeRateLimits(variant: VariantName) {
  if (variant === 'local') return LIMITS.map((limit, stage) => ({ stage, actions: rateLimitActions(limit) }));
  if (variant.startsWith('ratelimit')) return LIMITS.map((limit) => ({ stage: 0, actions: rateLimitActions(limit) }));
  return [];
}




interface Ports {
  backend: number;
  rlqs: number;
  ratelimit: number;
}

interface StartedEnvoy {
  variant: VariantName;
  pid: number;
  port: number;
  adminPort: number;
  /** Under callgrind: the prefix of its dump files. */
  callgrindOut?: string;
}


interface UsageReports {
  bucket_quota_usages: { bucket_id: { bucket: Record<string, string> } }[];
}

/** The quota server of this probe: every bucket gets a token bucket of its rate, split between the streams (Envoys) that report it. */
interface Assignment {
  /** Tokens of each bucket, split between the Envoys that report it. */
  tokens: number;
  fillSeconds: number;
  timeToLiveSeconds: number;
}
const NEVER_REACHED_ASSIGNMENT: Assignment = { tokens: NEVER_REACHED, fillSeconds: 1, timeToLiveSeconds: 60 };

function startQuotaServer(port: number, assignment: Assignment = NEVER_REACHED_ASSIGNMENT): Promise<{ server: grpc.Server; usageReports: () => number }> {
  const loaded = grpc.loadPackageDefinition(
    protoLoader.loadSync('envoy/service/rate_limit_quota/v3/rlqs.proto', { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: ENVOY_PROTO_INCLUDE_DIRS }),
  );
  const service = (loaded.envoy as grpc.GrpcObject).service as grpc.GrpcObject;
  const rlqs = ((service.rate_limit_quota as grpc.GrpcObject).v3 as grpc.GrpcObject).RateLimitQuotaService as grpc.ServiceClientConstructor;
  const reportersOf = new Map<string, Set<grpc.ServerDuplexStream<UsageReports, unknown>>>();
  let reports = 0;
  const server = new grpc.Server();
  server.addService(rlqs.service, {
    StreamRateLimitQuotas: (stream: grpc.ServerDuplexStream<UsageReports, unknown>) => {
      stream.on('data', (message: UsageReports) => {
        reports += 1;
        const actions = message.bucket_quota_usages.flatMap(({ bucket_id }) => {
          const key = JSON.stringify(Object.entries(bucket_id.bucket).sort());
          const reporters = reportersOf.get(key) ?? new Set();
          reportersOf.set(key, reporters);
          if (reporters.has(stream)) return [];
          reporters.add(stream);
          const share = Math.floor(assignment.tokens / reporters.size);
          return [
            {
              bucket_id,
              quota_assignment_action: {
                assignment_time_to_live: { seconds: assignment.timeToLiveSeconds },
                rate_limit_strategy: { token_bucket: { max_tokens: share, tokens_per_fill: { value: share }, fill_interval: { seconds: assignment.fillSeconds } } },
              },
            },
          ];
        });
        if (actions.length > 0) stream.write({ bucket_action: actions });
      });
      stream.on('end', () => stream.end());
      stream.on('error', () => undefined);
    },
  });
  return new Promise((resolve, reject) =>
    server.bindAsync(`${HOST}:${port}`, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve({ server, usageReports: () => reports }))),
  );
}

async function startRateLimitService(group: ProcessGroup, ports: Ports): Promise<{ ratelimit: number; redis: number }> {
  const binary = rateLimitBinary();
  if (!binary) throw new Error('envoyproxy/ratelimit not built: scripts/test-tools.sh builds it into .tools/bin/ratelimit');
  const redisPort = await allocatePort();
  const redis = group.spawn('redis', 'redis-server', ['--port', String(redisPort), '--bind', HOST, '--save', '', '--appendonly', 'no']);
  await waitFor('redis', () => portAccepts(redisPort));
  const configFile = rateLimitConfigFile(LOG_DIR);
  fs.mkdirSync(path.dirname(configFile), { recursive: true });
  const perLimit = (limit: string) => ({
    key: 'limit',
    value: limit,
    descriptors: [{ key: 'caller', rate_limit: { unit: 'second', requests_per_unit: NEVER_REACHED } }],
  });
  fs.writeFileSync(configFile, stringify({ domain: 'probe', descriptors: LIMITS.map(perLimit) }));
  const env = rateLimitEnvironment(LOG_DIR, { grpc: { port: ports.ratelimit }, http: await allocatePort(), debug: await allocatePort() }, { host: HOST, port: redisPort });
  const service = group.spawn('ratelimit', 'env', [...Object.entries(env).map(([key, value]) => `${key}=${value}`), binary]);
  await waitFor('ratelimit service', () => portAccepts(ports.ratelimit));
  return { ratelimit: service.child.pid!, redis: redis.child.pid! };
}

const cpuMicros = (pid: number) => cpuSecondsOf(pid) * 1_000_000;


interface CpuMeasurement {
  variant: VariantName;
  requests: number;
  requestsPerSecond: number;
  envoyCpuUsPerRequest: number;
  /** CPU µs per request of the ratelimit service + Redis (ratelimit*). */
  serviceCpuUsPerRequest: number;
  non2xx: number;
}

interface InstructionMeasurement {
  variant: VariantName;
  requests: number;
  /** Every thread of Envoy (main, worker, gRPC clients) per request, less its idle work for as long. */
  envoyInstructionsPerRequest: number;
  /** Idle: timers, stats, the RLQS filter's usage reports. */
  idleInstructionsPerSecond: number;
  non2xx: number;
}

function runWrk(envoy: StartedEnvoy, seconds: number, wrkScript: string, loadCpu: string) {
  return execFileAsync('taskset', ['-c', loadCpu, 'wrk', '-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '-s', wrkScript, `http://${HOST}:${envoy.port}/mcp`]);
}
const non2xxOf = (wrkOutput: string) => Number(/Non-2xx or 3xx responses: (\d+)/.exec(wrkOutput)?.[1] ?? 0);

async function measureCpu(envoy: StartedEnvoy, seconds: number, servicePids: number[], wrkScript: string, loadCpu: string): Promise<CpuMeasurement> {
  const before = await requestsCompleted(envoy.adminPort);
  const envoyBefore = cpuMicros(envoy.pid);
  const serviceBefore = servicePids.reduce((sum, pid) => sum + cpuMicros(pid), 0);
  const wrk = await runWrk(envoy, seconds, wrkScript, loadCpu);
  const requests = (await requestsCompleted(envoy.adminPort)) - before;
  const envoyMicros = cpuMicros(envoy.pid) - envoyBefore;
  const serviceMicros = servicePids.reduce((sum, pid) => sum + cpuMicros(pid), 0) - serviceBefore;
  return {
    variant: envoy.variant,
    requests,
    requestsPerSecond: requests / seconds,
    envoyCpuUsPerRequest: envoyMicros / requests,
    serviceCpuUsPerRequest: serviceMicros / requests,
    non2xx: non2xxOf(wrk.stdout),
  };
}

/** What callgrind counted in this Envoy since its last dump. */
const callgrindDump = (envoy: StartedEnvoy) => dumpedInstructions(envoy.pid, LOG_DIR, path.basename(`${envoy.callgrindOut!}.${envoy.pid}.`));

/**
 * Instructions per request under load, less what the same Envoy spends idle for as long (timers, stats,
 * the RLQS filter's usage reports): under callgrind the requests served per second vary with the
 * machine's load, and idle work spread over fewer requests would read as a cost per request.
 */

/**
 * Instructions per request for a fixed number of requests, less what the same Envoy spends idle for
 * as long (timers, stats, the RLQS filter's usage reports), measured just before.
 */
async function measureInstructions(envoy: StartedEnvoy, count: number): Promise<InstructionMeasurement> {
  await callgrindDump(envoy);
  const idleStarted = Date.now();
  await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
  const idleInstructions = await callgrindDump(envoy);
  const idlePerSecond = idleInstructions / ((Date.now() - idleStarted) / 1000);
  const loadStarted = Date.now();
  const before = await requestsCompleted(envoy.adminPort);
  const non2xx = await sendToolCalls(envoy.port, count, CONNECTIONS, CALLERS);
  const requests = (await requestsCompleted(envoy.adminPort)) - before;
  const instructions = await callgrindDump(envoy);
  const loadSeconds = (Date.now() - loadStarted) / 1000;
  return {
    variant: envoy.variant,
    requests,
    envoyInstructionsPerRequest: (instructions - idlePerSecond * loadSeconds) / requests,
    idleInstructionsPerSecond: idlePerSecond,
    non2xx,
  };
}


interface Context {
  measuredAt: string;
  /** Usage reports the quota server received in the whole run, from every rlqs Envoy. */
  usageReports: number;
  load: number[];
  cores: number;
  cpuRepetitions: number;
  cpuSeconds: number;
  instructionRepetitions: number;
  instructionRequests: number;
}

const signed = (value: number, digits = 1) => `${value >= 0 ? '+' : ''}${value.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits })}`;

function markdown(cpuRuns: CpuMeasurement[], instructionRuns: InstructionMeasurement[], context: Context): string {
  const of = <T extends { variant: VariantName }>(runs: T[], variant: VariantName, pick: (run: T) => number) => median(runs.filter((run) => run.variant === variant).map(pick));
  const instructions = (variant: VariantName) => of(instructionRuns, variant, (run) => run.envoyInstructionsPerRequest);
  const cpu = (variant: VariantName) => of(cpuRuns, variant, (run) => run.envoyCpuUsPerRequest);
  const rows = VARIANTS.map((variant) => {
    const service = variant.startsWith('ratelimit') ? of(cpuRuns, variant, (run) => run.serviceCpuUsPerRequest).toFixed(1) : variant.startsWith('rlqs') ? 'usage reports only' : '—';
    const idle = of(instructionRuns, variant, (run) => run.idleInstructionsPerSecond);
    return `| ${variant} | ${Math.round(instructions(variant)).toLocaleString('en')} (${signed(Math.round(instructions(variant) - instructions('off')), 0)}) | ${(idle / 1e6).toFixed(1)} M | ${cpu(variant).toFixed(1)} (${signed(cpu(variant) - cpu('off'))}) | ${service} |`;
  });
  const failed = [...cpuRuns, ...instructionRuns].reduce((sum, run) => sum + run.non2xx, 0);
  return [
    '# Shared limits by mechanism: what Envoy pays per request (bench/rlqs-probe.ts)',
    '',
    `Measured ${context.measuredAt}; load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min) on ${context.cores} cores shared with other work.`,
    `Static Envoy 1.40 (one worker) per variant, ${CONNECTIONS} connections, ${CALLERS} callers by header; upstream a second Envoy answering directly. Every limit ${NEVER_REACHED}/s: nothing refused.`,
    `Instructions: the same Envoys under valgrind callgrind (every thread, ${context.instructionRepetitions} × ${context.instructionRequests} requests per variant, medians), less what the same Envoy spends idle for as long (measured for ${IDLE_SECONDS} s before each, its own column: timers, stats, the RLQS usage reports) — independent of the machine's load.`,
    `CPU µs (from /proc): native Envoys on core 0 under wrk on the last core, ${context.cpuRepetitions} × ${context.cpuSeconds} s per variant, interleaved, medians, while the callgrind Envoys start beside them: indicative only, it moves with the load (requests/s likewise, in the JSON only).`,
    `Service CPU: envoyproxy/ratelimit + Redis per request for \`ratelimit*\`; the probe's quota server works per usage report, not per request (${context.usageReports} reports in the whole run, one per bucket per second and Envoy).`,
    '',
    '| variant | Envoy instructions per request (added) | Envoy idle instructions per second | Envoy CPU µs per request (added), indicative | service CPU µs per request |',
    '| --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Refused or failed answers: ${failed}.`,
    '',
  ].join('\n');
}


/** A Lua filter standing in for the call script: the caller into dynamic metadata, as jwt_authn's `sub` is. */
const callerIntoMetadata = {
  name: 'probe.caller',
  typed_config: any('envoy.extensions.filters.http.lua.v3.Lua', {
    default_source_code: { inline_string: 'function envoy_on_request(h) h:streamInfo():dynamicMetadata():set("mcpgw", "caller", h:headers():get("x-caller")) end' },
  }),
};

/** What each call of a caller answers: 200, or the refusal's status with its x-mcpgw-limit and Retry-After. */
async function callsOf(port: number, caller: string, count: number): Promise<string> {
  const answers: string[] = [];
  for (let call = 0; call < count; call++) {
    const response = await fetch(`http://${HOST}:${port}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-caller': caller }, body: REQUEST });
    await response.arrayBuffer();
    answers.push(response.status === 200 ? '200' : `${response.status} (${response.headers.get('x-mcpgw-limit')}, Retry-After ${response.headers.get('retry-after')})`);
  }
  return `${caller}: ${answers.join(', ')}`;
}

/**
 * `--behaviour`: what Envoy 1.40's rate_limit_quota does with what the gateway needs (ADR-0016,
 * "Shared limits by RLQS"): a tight assignment (3 calls a minute per bucket, for 2 s), buckets keyed
 * on a header or on dynamic metadata, fail closed before the first assignment, the server gone, a
 * per-route configuration. Writes bench/results/rlqs-behaviour.md.
 */
async function behaviour(): Promise<void> {
  const group = new ProcessGroup(LOG_DIR, claimCpus());
  const lines: string[] = [];
  const note = (line: string) => {
    lines.push(`- ${line}`);
    log(line);
  };
  const tight: Assignment = { tokens: 3, fillSeconds: 60, timeToLiveSeconds: 2 };
  try {
    const backendPort = await allocatePort();
    const backendAdmin = await allocatePort();
    await startEnvoy(group, 'backend', bootstrap(backendAdmin, listener(backendPort, [], { direct_response: { status: 200, body: { inline_string: ANSWER } } }), []), backendAdmin);
    const scenario = async (name: string, options: BucketOptions, route: object = {}) => {
      const quotaPort = await allocatePort();
      const quota = await startQuotaServer(quotaPort, tight);
      const port = await allocatePort();
      const adminPort = await allocatePort();
      const clusters = [staticCluster('backend', backendPort, false), staticCluster('rlqs', quotaPort, true)];
      const filters = [callerIntoMetadata, rlqsFilter('route:demo/calls/per-caller', options)];
      try {
        await startEnvoy(group, `envoy-${name}`, bootstrap(adminPort, listener(port, filters, { route: { cluster: 'backend' }, ...route }), clusters), adminPort);
      } catch (error) {
        quota.server.forceShutdown();
        throw error;
      }
      return { port, quota: quota.server };
    };

    const byHeader = await scenario('header', PROBE_BUCKETS);
    note(`buckets by header, 3 calls a minute assigned: ${await callsOf(byHeader.port, 'caller-alice', 6)}; ${await callsOf(byHeader.port, 'caller-bob', 2)}`);
    byHeader.quota.forceShutdown();
    await new Promise((resolve) => setTimeout(resolve, (tight.timeToLiveSeconds + 1) * 1000));
    note(`quota server stopped, assignments lapsed, expired → ALLOW_ALL: ${await callsOf(byHeader.port, 'caller-alice', 2)}`);

    const closed = await scenario('closed', { caller: 'header', noAssignment: 'DENY_ALL', expired: 'DENY_ALL' });
    note(`no assignment → DENY_ALL, server up: ${await callsOf(closed.port, 'caller-alice', 6)}; ${await callsOf(closed.port, 'caller-bob', 2)}`);
    closed.quota.forceShutdown();
    await new Promise((resolve) => setTimeout(resolve, (tight.timeToLiveSeconds + 1) * 1000));
    note(`quota server stopped, expired → DENY_ALL: ${await callsOf(closed.port, 'caller-bob', 2)}`);

    const byMetadata = await scenario('metadata', { ...PROBE_BUCKETS, caller: 'metadata' });
    note(`buckets by dynamic metadata (DynamicMetadataInput), 3 calls a minute assigned: ${await callsOf(byMetadata.port, 'caller-alice', 6)}`);
    byMetadata.quota.forceShutdown();

    const override = any('envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaOverride', { domain: 'other' });
    const perRoute = await scenario('per-route', PROBE_BUCKETS, { typed_per_filter_config: { 'probe.rlqs.route:demo/calls/per-caller': override } }).then(
      () => 'accepted',
      (error: Error) => `refused: ${/doesn't support[^;]*/.exec(error.message)?.[0] ?? error.message.slice(0, 200)}`,
    );
    note(`a per-route RateLimitQuotaOverride: ${perRoute}`);
  } finally {
    await group.stopAll();
  }
  const file = path.join(RESULTS_DIR, 'rlqs-behaviour.md');
  fs.writeFileSync(
    file,
    [
      '# What Envoy 1.40\'s rate_limit_quota (RLQS) does with what the gateway needs (`node dist/bench/rlqs-probe.js --behaviour`)',
      '',
      `Run ${new Date().toISOString()}. One rate_limit_quota filter, a bucket per (limit, caller); the probe's quota server assigns each bucket ${tight.tokens} calls per ${tight.fillSeconds} s for ${tight.timeToLiveSeconds} s. Refusals: 429 with the bucket's static headers. Each caller's calls in order:`,
      '',
      ...lines,
      '',
    ].join('\n'),
  );
  log(`wrote ${file}`);
}

/** `--report <results json>`: the table again from a run's JSON (after a change to the table, not to what is measured). */
function reportAgain(file: string): void {
  const { cpuRuns, instructionRuns, ...context } = JSON.parse(fs.readFileSync(file, 'utf8')) as Context & { cpuRuns: CpuMeasurement[]; instructionRuns: InstructionMeasurement[] };
  const markdownFile = file.replace(/\.json$/, '.md');
  fs.writeFileSync(markdownFile, markdown(cpuRuns, instructionRuns, context));
  log(`wrote ${markdownFile}`);
}

async function main(): Promise<void> {
  const reportIndex = process.argv.indexOf('--report');
  if (reportIndex > 0) return reportAgain(process.argv[reportIndex + 1]);
  if (process.argv.includes('--behaviour')) return behaviour();
  const quick = process.argv.includes('--quick');
  const cores = os.availableParallelism();
  const plan = quick
    ? { cpuRepetitions: 2, cpuSeconds: 4, instructionRepetitions: 1, instructionRequests: 400 }
    : { cpuRepetitions: 5, cpuSeconds: 8, instructionRepetitions: 2, instructionRequests: 1500 };
  const cpuPlan = claimCpus();
  const loadCpu = cpuPlan.loadGenerator === 'any' ? '0' : cpuPlan.loadGenerator;
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void group.stopAll().then(() => process.exit(130)));
  const wrkScript = path.join(LOG_DIR, 'tools-call.lua');
  writeWrkScript(wrkScript, CALLERS);
  const cpuRuns: CpuMeasurement[] = [];
  const instructionRuns: InstructionMeasurement[] = [];
  let quotaServer: grpc.Server | undefined;
  let usageReports = 0;
  try {
    const ports: Ports = { backend: await allocatePort(), rlqs: await allocatePort(), ratelimit: await allocatePort() };
    const backendAdmin = await allocatePort();
    await startEnvoy(group, 'backend', bootstrap(backendAdmin, listener(ports.backend, [], { direct_response: { status: 200, body: { inline_string: ANSWER } } }), []), backendAdmin);
    const quota = await startQuotaServer(ports.rlqs);
    quotaServer = quota.server;
    const services = await startRateLimitService(group, ports);
    const startVariant = async (variant: VariantName, instrumented: boolean): Promise<StartedEnvoy> => {
      const port = await allocatePort();
      const adminPort = await allocatePort();
      const clusters = [staticCluster('backend', ports.backend, false), staticCluster('rlqs', ports.rlqs, true), staticCluster('ratelimit', ports.ratelimit, true)];
      const route = { route: { cluster: 'backend', ...(routeRateLimits(variant).length > 0 && { rate_limits: routeRateLimits(variant) }) } };
      const name = `envoy-${variant}${instrumented ? '-callgrind' : ''}`;
      const callgrindOut = instrumented ? path.join(LOG_DIR, `callgrind.${name}`) : undefined;
      const pid = await startEnvoy(group, name, bootstrap(adminPort, listener(port, limitFilters(variant, ports), route), clusters), adminPort, callgrindOut);
      return { variant, pid, port, adminPort, callgrindOut };
    };
    const warm = (envoy: StartedEnvoy) => execFileAsync('wrk', ['-t1', '-c4', '-d2s', '-s', wrkScript, `http://${HOST}:${envoy.port}/mcp`]);

    const envoys: StartedEnvoy[] = [];
    for (const variant of VARIANTS) envoys.push(await startVariant(variant, false));
    // Under callgrind Envoy takes minutes to start: those start now, while the native ones are measured.
    const instrumentedStarting = Promise.all(VARIANTS.map((variant) => startVariant(variant, true)));
    instrumentedStarting.catch(() => undefined);
    const servicePidsOf = (variant: VariantName) => (variant.startsWith('ratelimit') ? [services.ratelimit, services.redis] : []);
    for (const envoy of envoys) await warm(envoy);
    for (let repetition = 0; repetition < plan.cpuRepetitions; repetition++) {
      for (const envoy of envoys) {
        const run = await measureCpu(envoy, plan.cpuSeconds, servicePidsOf(envoy.variant), wrkScript, loadCpu);
        cpuRuns.push(run);
        log(`${run.variant} #${repetition + 1}: ${run.envoyCpuUsPerRequest.toFixed(1)} µs Envoy, ${run.serviceCpuUsPerRequest.toFixed(1)} µs service per request, ${Math.round(run.requestsPerSecond)}/s`);
      }
    }

    log('waiting for the same variants under callgrind');
    const instrumented = await instrumentedStarting;
    for (const envoy of instrumented) await warm(envoy);
    for (let repetition = 0; repetition < plan.instructionRepetitions; repetition++) {
      for (const envoy of instrumented) {
        const run = await measureInstructions(envoy, plan.instructionRequests);
        instructionRuns.push(run);
        log(`${run.variant} #${repetition + 1}: ${Math.round(run.envoyInstructionsPerRequest)} instructions per request (${run.requests} requests), ${Math.round(run.idleInstructionsPerSecond)} per second idle`);
      }
    }
    usageReports = quota.usageReports();
  } finally {
    await group.stopAll();
    quotaServer?.forceShutdown();
  }
  const context: Context = { measuredAt: new Date().toISOString(), usageReports, load: os.loadavg().slice(0, 2), cores, ...plan };
  const name = quick ? 'rlqs-probe-quick' : 'rlqs-probe';
  writeBenchResults(name, { ...context, cpuRuns, instructionRuns }, markdown(cpuRuns, instructionRuns, context));
}

main().catch((error: unknown) => {
  process.stderr.write(`[rlqs-probe] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
