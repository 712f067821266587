import * as fs from 'node:fs';
import * as net from 'node:net';
import { ChildProcess, spawn } from 'node:child_process';

function listenOn(port: number, host: string): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

/**
 * Where free ports are looked for: below the kernel's ephemeral range. A port from that range can be
 * taken meanwhile as the local port of any outgoing connection, and a connection to a port nobody
 * listens on in that range can even connect to itself (TCP self-connect), which would make a process
 * that failed to bind look started.
 */
function findPortPool(): { low: number; high: number } | undefined {
  let ephemeralLow = 32768;
  try {
    ephemeralLow = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || ephemeralLow;
  } catch {
    // Not Linux: keep the usual default.
  }
  const low = 15000;
  return ephemeralLow - 1 > low + 1000 ? { low, high: ephemeralLow - 1 } : undefined;
}

const PORT_POOL = findPortPool();

/** Ports this process has handed out: never twice, even after the process using one has let it go. */
const handedOut = new Set<number>();

/**
 * `count` distinct free ports on loopback, picked at random below the ephemeral range (kernel-chosen
 * ones where that range leaves no room). They are held open together until all are found.
 */
export async function freePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: net.Server[] = [];
  try {
    for (let attempt = 0; servers.length < count; attempt++) {
      if (attempt > 1000 + count * 10) throw new Error(`no ${count} free ports on ${host}`);
      const candidate = PORT_POOL ? PORT_POOL.low + Math.floor(Math.random() * (PORT_POOL.high - PORT_POOL.low + 1)) : 0;
      if (handedOut.has(candidate)) continue;
      const server = await listenOn(candidate, host).catch(() => undefined);
      if (!server) continue;
      servers.push(server);
      handedOut.add((server.address() as net.AddressInfo).port);
    }
    return servers.map((server) => (server.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

export async function freePort(host = '127.0.0.1'): Promise<number> {
  const [port] = await freePorts(1, host);
  return port;
}

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  { timeoutMs = 20000, intervalMs = 100 } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}

export function portAccepts(port: number, host = '127.0.0.1'): Promise<boolean | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(undefined));
  });
}

export interface ProcessOptions {
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** Where stdout and stderr go; each line is prefixed with the process name. */
  logFile?: string;
  echo?: boolean;
  /**
   * Runs in a process group of its own and is stopped as a whole: for launcher scripts (Keycloak's
   * kc.sh) whose server is a child of theirs.
   */
  processGroup?: boolean;
}

/** A child process that is always stopped by whoever started it: SIGTERM, then SIGKILL. */
export class ManagedProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  private readonly log?: fs.WriteStream;

  constructor(readonly options: ProcessOptions) {
    this.log = options.logFile ? fs.createWriteStream(options.logFile, { flags: 'a' }) : undefined;
    this.child = spawn(options.command, options.args, {
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: options.processGroup ?? false,
    });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.write(`[exited code=${code} signal=${signal}]\n`);
        resolve(code);
      }),
    );
    this.child.once('error', (error) => this.write(`[spawn failed: ${error.message}]\n`));
    for (const stream of [this.child.stdout!, this.child.stderr!]) {
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => this.write(chunk));
    }
  }

  private write(chunk: string): void {
    const prefixed = chunk.replace(/^(?=.)/gm, `[${this.options.name}] `);
    this.log?.write(prefixed);
    if (this.options.echo) process.stdout.write(prefixed);
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  private signal(signal: NodeJS.Signals): void {
    if (!this.options.processGroup || this.child.pid === undefined) {
      this.child.kill(signal);
      return;
    }
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // The group is gone already.
    }
  }

  async stop(graceMs = 5000): Promise<void> {
    if (this.running) {
      this.signal('SIGTERM');
      const timer = setTimeout(() => this.signal('SIGKILL'), graceMs);
      await this.exited;
      clearTimeout(timer);
    }
    await new Promise<void>((resolve) => (this.log ? this.log.end(resolve) : resolve()));
  }
}
