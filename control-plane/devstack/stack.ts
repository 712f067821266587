import * as fs from 'node:fs';
import * as path from 'node:path';
import { projectPath } from '../shared/paths';
import { XdsApiType, envoyBinary, writeBootstrap } from './envoy';
import { ManagedProcess, freePorts, portAccepts, waitFor } from './processes';

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
  envoyAdmin: number;
  grpc: number;
  controlPlaneAdmin: number;
  sidecar: number;
  sidecarAdmin: number;
  sidecarStreams: number;
  redis: number;
  portal: number;
}

export interface StackOptions {
  registryFile: string;
  logDir: string;
  /** Fixed ports where given; free ports otherwise. */
  ports?: Partial<StackPorts>;
  samples?: { service: string; port: number }[];
  echo?: boolean;
  catalogRefreshMs?: number;
  /** How Envoy talks ADS; state of the world by default. */
  xdsApiType?: XdsApiType;
  /**
   * 'portal' (default): a dev Portal serves registryFile and the control plane uses the Portal client,
   * as in production. 'file': the control plane reads registryFile itself (ADR-0041 F1).
   */
  registrySource?: 'portal' | 'file';
  registryRefreshMs?: number;
}

/** A throwaway Redis on loopback: nothing saved to disk. */
export function redisServerArgs(port: number): string[] {
  return ['--bind', HOST, '--port', String(port), '--save', '', '--appendonly', 'no'];
}

async function resolvePorts(requested: Partial<StackPorts> = {}): Promise<StackPorts> {
  const names: (keyof StackPorts)[] = ['listener', 'envoyAdmin', 'grpc', 'controlPlaneAdmin', 'sidecar', 'sidecarAdmin', 'sidecarStreams', 'redis', 'portal'];
  const fresh = await freePorts(names.length);
  return Object.fromEntries(names.map((name, index) => [name, requested[name] ?? fresh[index]])) as unknown as StackPorts;
}

async function httpOk(url: string): Promise<true | undefined> {
  const response = await fetch(url);
  return response.ok ? true : undefined;
}

export class GatewayStack {
  readonly processes = new Map<string, ManagedProcess>();
  private envoyRestarts = 0;

  private constructor(
    readonly options: StackOptions,
    readonly ports: StackPorts,
  ) {}

  static async start(options: StackOptions): Promise<GatewayStack> {
    fs.mkdirSync(options.logDir, { recursive: true });
    const stack = new GatewayStack(options, await resolvePorts(options.ports));
    try {
      await stack.startRedis();
      for (const sample of options.samples ?? []) await stack.startSample(sample.service, sample.port);
      if (stack.usesPortal) await stack.startPortal();
      await stack.startControlPlane();
      await stack.startSidecar();
      await stack.startEnvoy();
    } catch (error) {
      await stack.stop();
      throw error;
    }
    return stack;
  }

  gatewayUrl(routeKey: string): string {
    return `http://${HOST}:${this.ports.listener}/mcp/${routeKey}`;
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

  get redisUrl(): string {
    return `redis://${HOST}:${this.ports.redis}`;
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

  private spawn(name: string, command: string, args: string[]): ManagedProcess {
    // A second process under a taken name would be orphaned: stop() could never reach it.
    if (this.processes.get(name)?.running) throw new Error(`a process named ${name} is already running`);
    const process = new ManagedProcess({
      name,
      command,
      args,
      logFile: path.join(this.options.logDir, `${name}.log`),
      echo: this.options.echo,
    });
    this.processes.set(name, process);
    return process;
  }

  async startRedis(): Promise<void> {
    this.spawn('redis', 'redis-server', redisServerArgs(this.ports.redis));
    await waitFor('redis to accept connections', () => portAccepts(this.ports.redis));
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
    this.spawn(`tool-service-${service}-${port}`, process.execPath, args);
    await waitFor(`sample tool service ${service}`, () => portAccepts(port));
  }

  async startPortal(): Promise<void> {
    this.spawn('portal', process.execPath, [DEV_PORTAL_MAIN, '--file', this.options.registryFile, '--port', String(this.ports.portal)]);
    await waitFor('dev portal', () => portAccepts(this.ports.portal));
  }

  async startControlPlane(): Promise<void> {
    this.spawn('control-plane', process.execPath, [
      CLI, 'control-plane',
      ...(this.usesPortal ? ['--portal', this.portalUrl] : ['--registry', this.options.registryFile]),
      '--redis', this.redisUrl,
      '--grpc', `${HOST}:${this.ports.grpc}`,
      '--admin', `${HOST}:${this.ports.controlPlaneAdmin}`,
      '--listener', `${HOST}:${this.ports.listener}`,
      '--sidecar', `${HOST}:${this.ports.sidecar}`,
      '--sidecar-streams', `${HOST}:${this.ports.sidecarStreams}`,
      ...(this.options.catalogRefreshMs ? ['--catalog-refresh-ms', String(this.options.catalogRefreshMs)] : []),
      ...(this.options.registryRefreshMs ? ['--registry-refresh-ms', String(this.options.registryRefreshMs)] : []),
    ]);
    await waitFor('control plane admin /healthz', () => httpOk(`${this.controlPlaneAdminUrl}/healthz`));
  }

  async startSidecar(): Promise<void> {
    this.spawn('sidecar', process.execPath, [
      CLI, 'sidecar', '--ext-proc', `${HOST}:${this.ports.sidecar}`, '--control-plane', `${HOST}:${this.ports.grpc}`,
      '--redis', this.redisUrl, '--admin', `${HOST}:${this.ports.sidecarAdmin}`,
      // Below ManagedProcess's SIGKILL grace, so that a stop is always the sidecar's own.
      '--drain-timeout-ms', '2000',
      '--streams', `${HOST}:${this.ports.sidecarStreams}`,
    ]);
    await waitFor('sidecar ext_proc port', () => portAccepts(this.ports.sidecar));
  }

  /**
   * Starts the stack's Envoy, or with another name and admin port an additional one: every Envoy
   * gets the same listener (Envoy binds it with SO_REUSEPORT) and its own node id.
   */
  async startEnvoy(name = 'envoy', adminPort = this.ports.envoyAdmin): Promise<void> {
    const bootstrap = writeBootstrap(
      {
        nodeId: `mcpgw-${this.ports.listener}-${this.envoyRestarts++}`,
        adsApiType: this.options.xdsApiType ?? 'GRPC',
        adminAddress: HOST,
        adminPort,
        xdsHost: HOST,
        xdsPort: this.ports.grpc,
      },
      this.options.logDir,
    );
    this.spawn(name, envoyBinary(), [
      '-c', bootstrap, '--use-dynamic-base-id', '--log-level', 'warn', '--drain-time-s', '5',
    ]);
    await waitFor(`${name} to be LIVE`, () => httpOk(`http://${HOST}:${adminPort}/ready`));
    await waitFor('the gateway listener from LDS', () => portAccepts(this.ports.listener));
  }

  async stopProcess(name: string): Promise<void> {
    await this.processes.get(name)?.stop();
    this.processes.delete(name);
  }

  /** Stops in reverse start order, so nothing outlives what it depends on by more than a moment. */
  async stop(): Promise<void> {
    for (const name of [...this.processes.keys()].reverse()) await this.stopProcess(name);
  }
}
