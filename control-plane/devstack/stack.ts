import * as fs from 'node:fs';
import * as path from 'node:path';
import { projectPath } from '../shared/paths';
import { LogLevel } from '../shared/log';
import { BASE_ID_TAKEN, ENVOY_JSON_LOG_FORMAT, OverloadSettings, XdsApiType, envoyBinary, overloadForThisHost, writeBootstrapFile } from './envoy';
import { listensOn } from './port-owner';
import { rateLimitBinary, rateLimitConfigFile, rateLimitEnvironment } from './ratelimit';
import { writeRateLimitServiceConfigIfMissing } from '../quotas/ratelimit-service-config';
import { ManagedProcess, ProcessOptions, freePorts, portAccepts } from './processes';
import Redis, { RedisOptions } from 'ioredis';
import { DEV_REDIS_USER, DevInside } from './dev-inside';
import { InternalIdentity } from '../shared/internal-tls';
import { connectionOptions, readRedisPassword } from '../shared/redis-client';

/**
 * The whole gateway as separate real processes on loopback: Redis, sample Tool Services, control
 * plane, sidecar and Envoy. `mcpgw up` and the end-to-end tests both build on it.
 */

const HOST = '127.0.0.1';
const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const SAMPLE_MAIN = projectPath('dist', 'samples', 'tool-services', 'main.js');
const DEV_PORTAL_MAIN = projectPath('dist', 'samples', 'dev-portal', 'main.js');

export interface StackPorts {
  listener: number;
  /** Envoy's egress listener: the sidecars' own requests to Tool Services. */
  egress: number;
  envoyAdmin: number;
  grpc: number;
  controlPlaneAdmin: number;
  sidecar: number;
  sidecarAdmin: number;
  redis: number;
  portal: number;
  /** The ratelimit service's HTTP (health) and debug ports (used when it runs; its gRPC is a Unix socket, rateLimitSocket). */
  rateLimitHttp: number;
  rateLimitDebug: number;
}

export interface StackOptions {
  registryFile: string;
  logDir: string;
  /** Fixed ports where given; free ports otherwise. */
  ports?: Partial<StackPorts>;
  samples?: { service: string; port: number }[];
  catalogRefreshMs?: number;
  /** The control plane's --tools-list-page-size; its default (every tool in one answer) when absent. */
  toolsListPageSize?: number;
  /** How Envoy talks ADS; state of the world by default. */
  xdsApiType?: XdsApiType;
  /**
   * 'portal' (default): a dev Portal serves registryFile and the control plane uses the Portal client,
   * as in production. 'file': the control plane reads registryFile itself (phase F1, docs/adr/0000-federation-decisions.md §10).
   */
  registrySource?: 'portal' | 'file';
  registryRefreshMs?: number;
  /** More arguments for the control plane, e.g. ['--public-url', 'https://gw.example.com'] (docs/auth.md). */
  controlPlaneArgs?: string[];
  /** Log level of the control plane and the sidecar (info by default). */
  logLevel?: LogLevel;
  /** Traces of Envoy, the control plane and the sidecar; off by default. */
  tracing?: StackTracing;
  /**
   * Envoy's base id (hot restart) when no other Envoy on this host uses it, else a dynamic one. Without
   * it Envoy always gets a dynamic base id, as several stacks on one host need.
   */
  envoyBaseId?: number;
  /** The agents' listener terminates TLS with these PEM files (gatewayUrl is then https). */
  listenerTls?: { certFile: string; keyFile: string };
  /** Envoy's overload limits, where they differ from the defaults for this host (overloadForThisHost). */
  envoyOverload?: Partial<OverloadSettings>;
  /** How long Envoy may take to be LIVE and to listen (default 20 s): longer for an Envoy run under valgrind (bench/auth-instructions.ts). */
  envoyStartTimeoutMs?: number;
  /** The control plane writes its audit to `auditFile` (true by default; false: no audit, as a control plane without --audit-log). */
  audit?: boolean;
  /** More options for the control plane and the sidecar (e.g. `--audit-log FILE`, the IdP of backend credentials), after the stack's own. */
  extraArgs?: { controlPlane?: string[]; sidecar?: string[] };
  /** Supervision (mcpgw up): every process that exits on its own is started again, and reported here. */
  onRestart?: (event: RestartEvent) => void;
  /** Sidecar replicas behind the Envoys (1 by default): every one is an endpoint of the sidecar clusters. */
  sidecars?: number;
  /** Control plane replicas (1 by default), all on the one registry; every Envoy's bootstrap lists them all. */
  controlPlanes?: number;
  /**
   * The port Envoy dials for a control plane's xDS, when something sits in between (a test's relay
   * that holds the control plane's pushes back); the control plane's own port by default.
   */
  envoyXdsPort?: (controlPlanePort: number) => number;
  /**
   * A Redis of the caller's (e.g. `sentinel://127.0.0.1:26379/mcpgw`) for the control planes and the
   * sidecars; the stack then starts no Redis of its own.
   */
  redisUrl?: string;
  /** The password of the caller's Redis (redisUrl), in a file. */
  redisPasswordFile?: string;
  /**
   * The inside as it was before it was closed: plain gRPC and HTTP between the processes, Redis
   * without a password (all on loopback). For measuring what closing it costs; closed by default
   * (docs/adr/0017-closed-inside.md).
   */
  plainInside?: boolean;
  /**
   * The Redis the stack starts serves TLS only (a server certificate of the stack's CA; the password
   * still authenticates), and the processes reach it by rediss:// with --redis-ca. Needs the closed inside.
   */
  redisTls?: boolean;
  /** How long the internal certificates the stack issues are valid (30 days by default). */
  internalCertificateTtlMinutes?: number;
  /**
   * Runs the ratelimit service (envoyproxy/ratelimit) of shared limits on the stack's Redis, and
   * gives the control plane its address and configuration file (docs/quotas.md).
   */
  rateLimit?: boolean;
  /** Another stack's ratelimit service, for this stack's Envoys to share its counts (instead of running one). */
  sharedRateLimit?: { socketPath: string; configFile: string };
  /** The control plane's --ratelimit-timeout-ms, when given. */
  rateLimitTimeoutMs?: number;
}

/** The gateway's own Redis key prefix (the processes' --redis-prefix default). */
const REDIS_PREFIX = 'mcpgw:';
/** Every Envoy of a stack shares one internal certificate, named so; its node ids are envoy/<…>. */
const ENVOY_CERTIFICATE = { role: 'envoy', name: 'envoy' } as const;

/** Where one replica of a part listens: its main port (the sidecar's --listen, the control plane's --grpc) and its admin port. */
export interface ReplicaPorts {
  main: number;
  admin: number;
}

/** A control plane replica's ports: also where Envoy's call log arrives. */
export interface ControlPlanePorts extends ReplicaPorts {
  callLog: number;
}

/** Where every component sends its spans, and the share of new traces kept (docs/observability.md#traces). */
export interface StackTracing {
  otlpEndpoint: string;
  samplingRatio: number;
}

/** A supervised process exited on its own and was started again, or a try to do so failed. */
export interface RestartEvent {
  name: string;
  /** How it ended, e.g. "signal SIGKILL" or "code 1", and the last thing it said. */
  exit: string;
  lastWords?: string;
  /** Restarts of this process so far. */
  restarts: number;
  /** Set when it serves again: time from its exit to ready. */
  downMs?: number;
  /** Set when this try failed: why, and when the next one comes. */
  failure?: string;
  retryInMs?: number;
}

/**
 * Restart backoff: the first restart after 250 ms, doubling up to 10 s while the process keeps
 * exiting; a process that served for 30 s starts over at 250 ms.
 */
const RESTART_BACKOFF = { firstMs: 250, maxMs: 10_000, stableAfterMs: 30_000 };
const restartDelayMs = (streak: number) => Math.min(RESTART_BACKOFF.maxMs, RESTART_BACKOFF.firstMs * 2 ** streak);

async function resolvePorts(requested: Partial<StackPorts> = {}): Promise<StackPorts> {
  const names: (keyof StackPorts)[] = [
    'listener', 'egress', 'envoyAdmin', 'grpc', 'controlPlaneAdmin', 'sidecar', 'sidecarAdmin', 'redis', 'portal', 'rateLimitHttp', 'rateLimitDebug',
  ];
  const fresh = await freePorts(names.length);
  return Object.fromEntries(names.map((name, index) => [name, requested[name] ?? fresh[index]])) as unknown as StackPorts;
}

async function httpOk(url: string): Promise<true | undefined> {
  const response = await fetch(url);
  return response.ok ? true : undefined;
}

/**
 * A readiness probe: the port accepts connections and it is `process` that listens on it (a port
 * another process holds accepts too, while ours fails to bind).
 */
function listening(process: ManagedProcess, port: number): () => Promise<boolean | undefined> {
  return async () => (process.child.pid !== undefined && listensOn(process.child.pid, port) ? portAccepts(port) : undefined);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class GatewayStack {
  readonly processes = new Map<string, ManagedProcess>();
  /** Node id of each Envoy (by process name), as the control plane's /status lists it. */
  readonly envoyNodeIds = new Map<string, string>();
  /** The base id the stack's Envoys were last started with. */
  envoyBaseId: number | 'dynamic' = 'dynamic';
  private envoyStarts = 0;
  private stopping = false;
  private readonly supervision = new Map<string, { restarts: number; streak: number; readyAt: number }>();

  private constructor(
    readonly options: StackOptions,
    readonly ports: StackPorts,
    /** Every sidecar replica's ports, the first one's being ports.sidecar and ports.sidecarAdmin. */
    readonly sidecarPorts: ReplicaPorts[],
    /** Every control plane replica's ports, the first one's being ports.grpc and ports.controlPlaneAdmin. */
    readonly controlPlanePorts: ControlPlanePorts[],
    /** The stack's CA, certificates and Redis password; none with plainInside. */
    readonly inside: DevInside | undefined,
  ) {}

  static async start(options: StackOptions): Promise<GatewayStack> {
    const stack = await GatewayStack.prepare(options);
    await stack.startAll();
    return stack;
  }

  /** A stack with its ports chosen and nothing started yet, so that it can be stopped while it starts. */
  static async prepare(options: StackOptions): Promise<GatewayStack> {
    fs.mkdirSync(options.logDir, { recursive: true });
    const ports = await resolvePorts(options.ports);
    const morePorts = async (count: number): Promise<ReplicaPorts[]> => {
      const free = await freePorts(2 * Math.max(0, count - 1));
      return Array.from({ length: Math.max(0, count - 1) }, (_, index) => ({ main: free[2 * index], admin: free[2 * index + 1] }));
    };
    const controlPlanes = [{ main: ports.grpc, admin: ports.controlPlaneAdmin }, ...(await morePorts(options.controlPlanes ?? 1))];
    const callLogPorts = await freePorts(controlPlanes.length);
    return new GatewayStack(
      options,
      ports,
      [{ main: ports.sidecar, admin: ports.sidecarAdmin }, ...(await morePorts(options.sidecars ?? 1))],
      controlPlanes.map((replica, index) => ({ ...replica, callLog: callLogPorts[index] })),
      options.plainInside ? undefined : DevInside.create(path.join(options.logDir, 'inside'), options.internalCertificateTtlMinutes ?? 30 * 24 * 60),
    );
  }

  /** The process name of a replica: `sidecar`, `sidecar-2`, … */
  static replicaName(part: 'sidecar' | 'control-plane', replica: number): string {
    return replica === 0 ? part : `${part}-${replica + 1}`;
  }

  /**
   * Starts what does not depend on anything at once (Redis, the sample Tool Services, the dev Portal),
   * then the control plane, then the sidecar and Envoy together; any failure stops what started.
   */
  async startAll(): Promise<void> {
    try {
      await Promise.all([
        ...(this.options.redisUrl ? [] : [this.startRedis()]),
        ...(this.options.samples ?? []).map((sample) => this.startSample(sample.service, sample.port)),
        ...(this.usesPortal ? [this.startPortal()] : []),
      ]);
      if (this.options.rateLimit) await this.startRateLimit();
      await Promise.all(this.controlPlanePorts.map((_, replica) => this.startControlPlane(replica)));
      await Promise.all([...this.sidecarPorts.map((_, replica) => this.startSidecar(replica)), this.startEnvoy()]);
    } catch (error) {
      await this.stop();
      throw error;
    }
  }
  gatewayUrl(routeKey: string): string {
    return `${this.options.listenerTls ? 'https' : 'http'}://${HOST}:${this.ports.listener}/mcp/${routeKey}`;
  }

  get envoyAdminUrl(): string {
    return `http://${HOST}:${this.ports.envoyAdmin}`;
  }

  get controlPlaneAdminUrl(): string {
    return `http://${HOST}:${this.ports.controlPlaneAdmin}`;
  }

  get sidecarAdminUrl(): string {
    return `http://${HOST}:${this.ports.sidecarAdmin}`;
  }

  get portalUrl(): string {
    return `http://${HOST}:${this.ports.portal}`;
  }

  /** The address the processes get: with the stack's own Redis and a closed inside, its ACL user (the password is in a file). */
  get redisUrl(): string {
    return this.options.redisUrl ?? `${this.redisTls ? 'rediss' : 'redis'}://${this.inside ? `${DEV_REDIS_USER}@` : ''}${HOST}:${this.ports.redis}`;
  }

  /** The TLS files of the Redis the stack starts, when it serves TLS (StackOptions.redisTls). */
  private get redisTls(): { certFile: string; keyFile: string; caFile: string } | undefined {
    if (!this.options.redisTls || this.options.redisUrl) return undefined;
    if (!this.inside) throw new Error('redisTls needs the closed inside (its certificate comes from the stack CA)');
    return this.inside.redisTlsFiles();
  }

  /** The file with the Redis password the processes read, if any. */
  get redisPasswordFile(): string | undefined {
    return this.options.redisPasswordFile ?? (this.options.redisUrl ? undefined : this.inside?.redisPasswordFile);
  }

  /** A client of the stack's Redis logged in as the gateway's processes are (for tests and checks). */
  redisClient(options: RedisOptions = {}): Redis {
    const password = this.redisPasswordFile ? readRedisPassword(this.redisPasswordFile) : undefined;
    return new Redis({ ...connectionOptions(this.redisUrl, { password, tlsCaFile: this.redisTls?.caFile }), maxRetriesPerRequest: 1, ...options });
  }

  /** The internal certificate directory of one of the stack's processes (issued on first use). */
  internalTlsDir(identity: InternalIdentity): string {
    if (!this.inside) throw new Error('this stack runs with a plain inside (plainInside)');
    return this.inside.certificateDir(identity);
  }

  /** How the processes log in to Redis and check its certificate, besides its address. */
  private get redisAuthArgs(): string[] {
    return [...(this.redisPasswordFile ? ['--redis-password-file', this.redisPasswordFile] : []), ...(this.redisTls ? ['--redis-ca', this.redisTls.caFile] : [])];
  }

  private internalTlsArgs(identity: InternalIdentity): string[] {
    return this.inside ? ['--internal-tls', this.internalTlsDir(identity)] : [];
  }

  /** The control plane's audit file: one JSON line per tools/call and refused request. */
  get auditFile(): string {
    return path.join(this.options.logDir, 'audit.jsonl');
  }

  /** The log file of one of the stack's processes. */
  logFileOf(name: string): string {
    return path.join(this.options.logDir, `${name}.log`);
  }

  /** The process name of a sample Tool Service. */
  sampleName(sample: { service: string; port: number }): string {
    return `tool-service-${sample.service}-${sample.port}`;
  }

  get usesPortal(): boolean {
    return (this.options.registrySource ?? 'portal') === 'portal';
  }

  /** Replaces the document the dev Portal serves (the mapping change a Portal user would make). */
  async setPortalRegistry(document: unknown): Promise<void> {
    await this.putPortal('/v1/registry', document);
  }

  /** Makes the dev Portal answer every registry request with `status` (0 ends the outage). */
  async setPortalOutage(status: number): Promise<void> {
    await this.putPortal('/dev/outage', { status });
  }

  private async putPortal(path: string, body: unknown): Promise<void> {
    const response = await fetch(`${this.portalUrl}${path}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw new Error(`dev portal ${path} answered ${response.status}`);
  }

  private spawn(name: string, command: string, args: string[], output: Pick<ProcessOptions, 'stdoutFile' | 'textLines'> = {}): ManagedProcess {
    return this.spawnWith(name, command, args, undefined, output);
  }

  private spawnWith(name: string, command: string, args: string[], env: NodeJS.ProcessEnv | undefined, output: Pick<ProcessOptions, 'stdoutFile' | 'textLines'> = {}): ManagedProcess {
    if (this.stopping) throw new Error(`not starting ${name}: the stack is stopping`);
    // A second process under a taken name would be orphaned: stop() could never reach it.
    if (this.processes.get(name)?.running) throw new Error(`a process named ${name} is already running`);
    const process = new ManagedProcess({ name, command, args, env, logFile: this.logFileOf(name), ...output });
    this.processes.set(name, process);
    return process;
  }

  /** Starts a process with `start` (which resolves once it serves) and, under supervision, keeps it running. */
  private async launch(name: string, start: () => Promise<ManagedProcess>): Promise<void> {
    const process = await start();
    if (!this.options.onRestart) return;
    const state = this.supervision.get(name) ?? { restarts: 0, streak: 0, readyAt: 0 };
    state.readyAt = Date.now();
    this.supervision.set(name, state);
    void process.exited.then(() => this.restart(name, process, start));
  }

  private async restart(name: string, exited: ManagedProcess, start: () => Promise<ManagedProcess>): Promise<void> {
    // A process stopped on purpose has left the map (or the whole stack is stopping).
    if (this.stopping || this.processes.get(name) !== exited) return;
    const report = this.options.onRestart!;
    const state = this.supervision.get(name)!;
    const exitedAt = Date.now();
    if (exitedAt - state.readyAt >= RESTART_BACKOFF.stableAfterMs) state.streak = 0;
    // What a process said last explains an exit of its own (a code), not a kill by a signal.
    const exit = { name, exit: exited.exitDescription, lastWords: exited.child.signalCode ? undefined : exited.lastWords };
    for (;;) {
      await sleep(restartDelayMs(state.streak));
      state.streak += 1;
      if (this.stopping) return;
      try {
        state.restarts += 1;
        await this.launch(name, start);
        report({ ...exit, restarts: state.restarts, downMs: Date.now() - exitedAt });
        return;
      } catch (error) {
        if (this.stopping) return;
        await this.processes.get(name)?.stop();
        report({ ...exit, restarts: state.restarts, failure: (error as Error).message, retryInMs: restartDelayMs(state.streak) });
      }
    }
  }

  async startRedis(): Promise<void> {
    await this.launch('redis', async () => {
      const redis = this.spawn(
        'redis',
        'redis-server',
        [
          // The ACL user and its password, from an owner-only file (not on this command line).
          ...(this.inside ? [this.inside.redisConfigFile(REDIS_PREFIX)] : []),
          '--bind', HOST, '--save', '', '--appendonly', 'no',
          // The ratelimit service's way in: a socket only this user can open (its commands still authenticate).
          ...(this.options.rateLimit ? ['--unixsocket', this.redisSocket, '--unixsocketperm', '600'] : []),
          ...(this.redisTls
            ? ['--port', '0', '--tls-port', String(this.ports.redis), '--tls-cert-file', this.redisTls.certFile, '--tls-key-file', this.redisTls.keyFile, '--tls-auth-clients', 'no']
            : ['--port', String(this.ports.redis)]),
          // A snapshot it is asked for (a replica's sync, BGSAVE) goes beside the logs, not into the working tree.
          '--dir', this.options.logDir,
          // Bounded, evicting only keys with a TTL (idle sessions), never last-good state: docs/hardening.md.
          '--maxmemory', '256mb', '--maxmemory-policy', 'volatile-lru',
        ],
        { textLines: 'all' },
      );
      await redis.untilReady('redis to accept connections', listening(redis, this.ports.redis));
      return redis;
    });
  }

  /**
   * Starts a sample Tool Service: `jsonResponse` makes it answer in one JSON body instead of SSE,
   * `tls` (PEM file paths) serves it over https.
   */
  async startSample(service: string, port: number, options: { jsonResponse?: boolean; tls?: { certFile: string; keyFile: string } } = {}): Promise<void> {
    const args = [
      SAMPLE_MAIN, '--service', service, '--port', String(port),
      ...(options.jsonResponse ? ['--json-response'] : []),
      ...(options.tls ? ['--tls-cert', options.tls.certFile, '--tls-key', options.tls.keyFile] : []),
    ];
    const name = this.sampleName({ service, port });
    await this.launch(name, async () => {
      const sample = this.spawn(name, process.execPath, args);
      await sample.untilReady(`sample tool service ${service} to listen on ${HOST}:${port}`, listening(sample, port));
      return sample;
    });
  }

  /** The ratelimit service, on the stack's Redis (started before it). */
  async startRateLimit(): Promise<void> {
    const binary = rateLimitBinary();
    if (!binary) throw new Error('the ratelimit service is not installed: run scripts/test-tools.sh (builds .tools/bin/ratelimit) or set RATELIMIT_BIN');
    if (this.options.redisUrl) throw new Error('the stack runs the ratelimit service on its own Redis only');
    writeRateLimitServiceConfigIfMissing(rateLimitConfigFile(this.options.logDir));
    await this.launch('ratelimit', async () => {
      const socketPath = this.rateLimitSocket;
      // A socket file left by a service that was killed would make its listen fail.
      fs.rmSync(socketPath, { force: true });
      const ports = { grpc: { socketPath }, http: this.ports.rateLimitHttp, debug: this.ports.rateLimitDebug };
      // Over Unix sockets both ways (Envoy's checks, its Redis pipeline): no port left open on the inside,
      // and Redis a few µs cheaper per call (docs/adr/0016-quotas.md); the commands still authenticate.
      const redis = { socketPath: this.redisSocket, ...(this.inside && { user: DEV_REDIS_USER, password: readRedisPassword(this.inside.redisPasswordFile) }) };
      const service = this.spawnWith('ratelimit', binary, [], rateLimitEnvironment(this.options.logDir, ports, redis, HOST));
      await service.untilReady('the ratelimit service to answer /healthcheck', async () =>
        listensOn(service.child.pid!, ports.http) && fs.existsSync(socketPath) ? httpOk(`http://${HOST}:${ports.http}/healthcheck`) : undefined,
      );
      return service;
    });
  }

  /**
   * The stack's Unix sockets (the ratelimit service's gRPC, Redis's second way in): in a directory only
   * this user may enter, so that no other local user can reach them whatever the sockets' own modes.
   */
  private get socketDir(): string {
    const dir = path.join(this.options.logDir, 'sockets');
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  /** The ratelimit service's gRPC socket (when the stack runs one): Envoy's cluster points at it. */
  get rateLimitSocket(): string {
    return path.join(this.socketDir, 'ratelimit.sock');
  }

  private get redisSocket(): string {
    return path.join(this.socketDir, 'redis.sock');
  }

  /** Where the control plane writes the ratelimit service's configuration (when the stack runs one). */
  get rateLimitConfigFile(): string {
    return rateLimitConfigFile(this.options.logDir);
  }

  /** The ratelimit service this stack's control plane configures Envoy with: its own, another stack's, or none. */
  private get rateLimitArgs(): string[] {
    const shared = this.options.sharedRateLimit;
    if (shared) return ['--ratelimit', `unix:${shared.socketPath}`, '--ratelimit-config', shared.configFile];
    return this.options.rateLimit ? ['--ratelimit', `unix:${this.rateLimitSocket}`, '--ratelimit-config', this.rateLimitConfigFile] : [];
  }

  async startPortal(): Promise<void> {
    await this.launch('portal', async () => {
      const portal = this.spawn('portal', process.execPath, [DEV_PORTAL_MAIN, '--file', this.options.registryFile, '--port', String(this.ports.portal)]);
      await portal.untilReady('the dev portal to listen', listening(portal, this.ports.portal));
      return portal;
    });
  }

  /** The agents' listener's certificate, when it terminates TLS (docs/auth.md). */
  private get listenerTlsArgs(): string[] {
    const tls = this.options.listenerTls;
    return tls ? ['--listener-tls-cert', tls.certFile, '--listener-tls-key', tls.keyFile] : [];
  }

  private get logLevelArgs(): string[] {
    return this.options.logLevel ? ['--log-level', this.options.logLevel] : [];
  }

  private get tracingArgs(): string[] {
    const tracing = this.options.tracing;
    return tracing ? ['--otlp-endpoint', tracing.otlpEndpoint, '--trace-sampling', String(tracing.samplingRatio)] : [];
  }

  /**
   * The command line (after `node`) of a control plane replica: the stack's registry source, Redis,
   * internal certificate and addresses, and the stack's options. A test may start one with more.
   */
  controlPlaneArgs(replica = 0): string[] {
    const name = GatewayStack.replicaName('control-plane', replica);
    const { main: grpcPort, admin: adminPort, callLog: callLogPort } = this.controlPlanePorts[replica];
    return [
      CLI, 'control-plane',
      ...(this.usesPortal ? ['--portal', this.portalUrl] : ['--registry', this.options.registryFile]),
      '--redis', this.redisUrl,
      ...this.redisAuthArgs,
      ...this.internalTlsArgs({ role: 'control-plane', name }),
      ...(this.inside ? ['--envoy-internal-tls', this.internalTlsDir(ENVOY_CERTIFICATE)] : []),
      '--grpc', `${HOST}:${grpcPort}`,
      '--call-log', `${HOST}:${callLogPort}`,
      '--admin', `${HOST}:${adminPort}`,
      '--listener', `${HOST}:${this.ports.listener}`,
      '--sidecar', this.sidecarPorts.map(({ main }) => `${HOST}:${main}`).join(','),
      '--egress', `${HOST}:${this.ports.egress}`,
      ...this.listenerTlsArgs,
      // The audit (docs/approval-and-audit.md) beside the logs, as a deployment would keep it.
      ...(this.options.audit === false ? [] : ['--audit-log', this.auditFile]),
      ...(this.options.catalogRefreshMs ? ['--catalog-refresh-ms', String(this.options.catalogRefreshMs)] : []),
      ...(this.options.toolsListPageSize !== undefined ? ['--tools-list-page-size', String(this.options.toolsListPageSize)] : []),
      ...(this.options.registryRefreshMs ? ['--registry-refresh-ms', String(this.options.registryRefreshMs)] : []),
      ...this.rateLimitArgs,
      ...(this.options.rateLimitTimeoutMs ? ['--ratelimit-timeout-ms', String(this.options.rateLimitTimeoutMs)] : []),
      ...(this.options.controlPlaneArgs ?? []),
      ...this.logLevelArgs,
      ...(this.options.extraArgs?.controlPlane ?? []),
      ...this.tracingArgs,
    ];
  }

  async startControlPlane(replica = 0): Promise<void> {
    const name = GatewayStack.replicaName('control-plane', replica);
    const adminPort = this.controlPlanePorts[replica].admin;
    await this.launch(name, async () => {
      const controlPlane = this.spawn(name, process.execPath, this.controlPlaneArgs(replica));
      await controlPlane.untilReady(`${name} admin to answer /healthz`, async () =>
        listensOn(controlPlane.child.pid!, adminPort) ? httpOk(`http://${HOST}:${adminPort}/healthz`) : undefined,
      );
      return controlPlane;
    });
  }

  /** A sidecar replica, on the catalog stream of the control plane of the same number (or the first). */
  async startSidecar(replica = 0): Promise<void> {
    const name = GatewayStack.replicaName('sidecar', replica);
    const { main: port, admin: adminPort } = this.sidecarPorts[replica];
    const controlPlane = this.controlPlanePorts[replica % this.controlPlanePorts.length];
    await this.launch(name, async () => {
      const sidecar = this.spawn(name, process.execPath, [
        CLI, 'sidecar', '--listen', `${HOST}:${port}`, '--control-plane', `${HOST}:${controlPlane.main}`, '--id', name,
        '--egress', `${HOST}:${this.ports.egress}`,
        '--redis', this.redisUrl, ...this.redisAuthArgs, ...this.internalTlsArgs({ role: 'sidecar', name }),
        '--admin', `${HOST}:${adminPort}`,
        // Below ManagedProcess's SIGKILL grace, so that a stop is always the sidecar's own.
        '--drain-timeout-ms', '2000',
        ...this.logLevelArgs,
        ...(this.options.extraArgs?.sidecar ?? []),
        ...this.tracingArgs,
      ]);
      await sidecar.untilReady(`${name} to listen`, listening(sidecar, port));
      return sidecar;
    });
  }

  /**
   * Starts the stack's Envoy, or with another name and admin port an additional one: every Envoy
   * gets the same listener (Envoy binds it with SO_REUSEPORT) and its own node id. Its own log goes
   * to <name>.log, its access log to <name>-access.log, both JSON lines.
   */
  async startEnvoy(name = 'envoy', adminPort = this.ports.envoyAdmin): Promise<void> {
    await this.launch(name, async () => {
      const instance = `mcpgw-${this.ports.listener}-${this.envoyStarts++}`;
      // With a closed inside every Envoy shares the certificate named `envoy`, which vouches for node ids envoy/<…>.
      const nodeId = this.inside ? `${ENVOY_CERTIFICATE.name}/${instance}` : instance;
      const bootstrap = writeBootstrapFile(
        {
          nodeId,
          adsApiType: this.options.xdsApiType ?? 'GRPC',
          adminAddress: HOST,
          adminPort,
          xds: this.controlPlanePorts.map(({ main }) => ({ host: HOST, port: this.options.envoyXdsPort?.(main) ?? main })),
          callLog: this.controlPlanePorts.map(({ callLog }) => ({ host: HOST, port: callLog })),
          ...(this.inside && { internalTls: { certDir: this.internalTlsDir(ENVOY_CERTIFICATE), sdsDir: path.join(this.options.logDir, `${instance}-sds`) } }),
          overload: { ...overloadForThisHost(), ...this.options.envoyOverload },
        },
        path.join(this.options.logDir, `bootstrap-${instance}.yaml`),
      );
      this.envoyNodeIds.set(name, nodeId);
      const startWith = async (baseId: number | 'dynamic') => {
        const envoy = this.spawn(
          name,
          envoyBinary(),
          [
            '-c', bootstrap,
            ...(baseId === 'dynamic' ? ['--use-dynamic-base-id'] : ['--base-id', String(baseId)]),
            '--log-level', 'warn', '--log-format', ENVOY_JSON_LOG_FORMAT, '--drain-time-s', '5',
          ],
          { stdoutFile: path.join(this.options.logDir, `${name}-access.log`), textLines: 'not-json' },
        );
        const startTimeout = { timeoutMs: this.options.envoyStartTimeoutMs };
        await envoy.untilReady(`${name} to be LIVE`, async () => (listensOn(envoy.child.pid!, adminPort) ? httpOk(`http://${HOST}:${adminPort}/ready`) : undefined), startTimeout);
        await envoy.untilReady('the gateway listener from LDS', listening(envoy, this.ports.listener), startTimeout);
        this.envoyBaseId = baseId;
        return envoy;
      };
      const fixed = this.options.envoyBaseId;
      if (fixed === undefined) return startWith('dynamic');
      return startWith(fixed).catch((error: Error) => {
        if (!BASE_ID_TAKEN.test(this.processes.get(name)?.lastWords ?? '')) throw error;
        return startWith('dynamic');
      });
    });
  }

  async stopProcess(name: string): Promise<void> {
    const process = this.processes.get(name);
    // Out of the map first: supervision restarts only what exits on its own.
    this.processes.delete(name);
    await process?.stop();
  }

  /** Stops in reverse start order, so nothing outlives what it depends on by more than a moment. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const name of [...this.processes.keys()].reverse()) await this.stopProcess(name);
  }
}
