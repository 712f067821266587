import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { Readable } from 'node:stream';
import { ChildProcess, spawn } from 'node:child_process';
import { Logger, createLogger } from '../shared/log';

export function listenOn(port: number, host: string): Promise<net.Server> {
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
  { timeoutMs = 20000, intervalMs = 100, signal }: { timeoutMs?: number; intervalMs?: number; signal?: AbortSignal } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    signal?.throwIfAborted();
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  signal?.throwIfAborted();
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
  /** Where stderr goes, and stdout too unless stdoutFile is given. */
  logFile?: string;
  /** A file of its own for stdout (Envoy's access log). */
  stdoutFile?: string;
  /**
   * Which lines of what goes to logFile are plain text, each written there as a JSON log line of its
   * own: 'all' (Redis logs only text) or 'not-json' (Envoy: its JSON log format does not cover what it
   * prints before its logger starts or after it stops). Otherwise the output is written as it comes.
   */
  textLines?: 'all' | 'not-json';
}

export function onPath(command: string): string | undefined {
  return (process.env.PATH ?? '')
    .split(path.delimiter)
    .map((dir) => path.join(dir, command))
    .find((candidate) => {
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}

/**
 * util-linux's setpriv sets the kernel's parent-death signal (prctl PR_SET_PDEATHSIG, which Node
 * cannot set itself) and then execs the command in place, so the child keeps its pid and its own
 * signals and exit codes. Whatever ends the process that started it, SIGKILL included, the kernel
 * kills the child at that moment: nothing is orphaned. Where setpriv is missing, children are
 * started plainly and only a clean stop of their parent stops them.
 */
const SETPRIV = onPath('setpriv');

export const CHILDREN_DIE_WITH_PARENT = SETPRIV !== undefined;

/** The end of a process's output kept in memory, to say why it stopped. */
const KEPT_OUTPUT_CHARS = 8192;

function isJsonObject(line: string): boolean {
  if (!line.startsWith('{')) return false;
  try {
    return typeof JSON.parse(line) === 'object';
  } catch {
    return false;
  }
}

const LAST_WORDS_CHARS = 300;

/** The last thing a process said: a log line's error or message, or the line itself. */
function lastWordsOf(output: string): string | undefined {
  const line = output.split('\n').map((entry) => entry.trim()).filter(Boolean).pop();
  if (line === undefined) return undefined;
  let said = line;
  try {
    const entry = JSON.parse(line) as { message?: unknown; error?: unknown };
    const logged = typeof entry.error === 'string' ? entry.error.split('\n')[0] : entry.message;
    if (typeof logged === 'string') said = logged;
  } catch {
    // Not a JSON log line: the line says it.
  }
  return said.slice(0, LAST_WORDS_CHARS);
}

/**
 * A child process that is always stopped by whoever started it: SIGTERM, then SIGKILL. It runs in a
 * process group of its own, so a Ctrl-C in the terminal reaches only its parent, which stops its
 * children in order, and a stop reaches anything the child started.
 */
export class ManagedProcess {
  readonly child: ChildProcess;
  /** Resolves when the process has exited and its output is written (or it could not be started). */
  readonly exited: Promise<void>;
  private readonly logFile?: fs.WriteStream;
  private readonly stdoutFile?: fs.WriteStream;
  private readonly log?: Logger;
  private recentOutput = '';
  private spawnError?: Error;

  constructor(readonly options: ProcessOptions) {
    this.logFile = options.logFile ? fs.createWriteStream(options.logFile, { flags: 'a' }) : undefined;
    this.stdoutFile = options.stdoutFile ? fs.createWriteStream(options.stdoutFile, { flags: 'a' }) : undefined;
    this.log = this.logFile && createLogger(options.name, 'info', this.logFile);
    const [command, args] = SETPRIV
      ? [SETPRIV, ['--pdeathsig', 'KILL', '--', options.command, ...options.args]]
      : [options.command, options.args];
    this.child = spawn(command, args, {
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    this.exited = new Promise((resolve) => {
      this.child.once('close', () => {
        this.log?.info('process exited', { exit: this.exitDescription });
        resolve();
      });
      this.child.once('error', (error) => {
        this.spawnError = error;
        this.log?.error('process could not be started', { error: error.message });
        resolve();
      });
    });
    if (this.stdoutFile) this.capture(this.child.stdout!, this.stdoutFile);
    else this.captureToLog(this.child.stdout!, 'stdout');
    this.captureToLog(this.child.stderr!, 'stderr');
  }

  private capture(stream: Readable, file: fs.WriteStream | undefined): void {
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      this.recentOutput = (this.recentOutput + chunk).slice(-KEPT_OUTPUT_CHARS);
      file?.write(chunk);
    });
  }

  /** Into logFile: as it comes, or line by line with plain text made JSON log lines (level error on stderr). */
  private captureToLog(stream: Readable, name: 'stdout' | 'stderr'): void {
    const { textLines } = this.options;
    if (!textLines) return this.capture(stream, this.logFile);
    this.capture(stream, undefined);
    readline.createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => {
      if (textLines === 'not-json' && isJsonObject(line)) this.logFile?.write(`${line}\n`);
      else if (name === 'stderr') this.log?.error(line, { stream: name });
      else this.log?.info(line, { stream: name });
    });
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null && this.spawnError === undefined;
  }

  /** How the process ended, e.g. "code 1" or "signal SIGKILL". */
  get exitDescription(): string {
    if (this.spawnError) return `not started: ${this.spawnError.message}`;
    return this.child.signalCode ? `signal ${this.child.signalCode}` : `code ${this.child.exitCode}`;
  }

  /** The last line the process wrote, for saying why it stopped. */
  get lastWords(): string | undefined {
    return lastWordsOf(this.recentOutput);
  }

  /**
   * Waits until `probe` answers, as waitFor does, but fails at once when the process exits first,
   * with how it ended and the last thing it said (e.g. the port it could not bind).
   */
  async untilReady<T>(what: string, probe: () => Promise<T | undefined>, options: { timeoutMs?: number } = {}): Promise<T> {
    const exited = new AbortController();
    void this.exited.then(() => {
      const said = this.lastWords;
      const log = this.options.logFile ? `; its log: ${this.options.logFile}` : '';
      exited.abort(new Error(`${this.options.name} exited (${this.exitDescription}) before ${what}${said ? `: ${said}` : ''}${log}`));
    });
    return waitFor(what, probe, { ...options, signal: exited.signal });
  }

  private signalGroup(signal: NodeJS.Signals): void {
    try {
      process.kill(-this.child.pid!, signal);
    } catch {
      // Already gone.
    }
  }

  async stop(graceMs = 5000): Promise<void> {
    if (this.running) this.signalGroup('SIGTERM');
    const timer = setTimeout(() => this.signalGroup('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
    await Promise.all([this.logFile, this.stdoutFile].map((file) => new Promise<void>((resolve) => (file ? file.end(resolve) : resolve()))));
  }
}
