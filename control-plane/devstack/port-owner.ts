import * as fs from 'node:fs';
import * as path from 'node:path';
import { listenOn } from './processes';

const LISTEN_STATE = '0A';

/** Inodes of the TCP sockets listening on `port` (Linux /proc/net/tcp and tcp6); undefined where there is no /proc. */
function listeningSocketInodes(port: number): Set<string> | undefined {
  const tables = ['/proc/net/tcp', '/proc/net/tcp6'].filter((table) => fs.existsSync(table));
  if (tables.length === 0) return undefined;
  const inodes = new Set<string>();
  for (const table of tables) {
    for (const line of fs.readFileSync(table, 'utf8').split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      const localPort = Number.parseInt(fields[1]?.split(':')[1] ?? '', 16);
      if (localPort === port && fields[3] === LISTEN_STATE) inodes.add(`socket:[${fields[9]}]`);
    }
  }
  return inodes;
}

/** Whether process `pid` holds one of `sockets` (as /proc/<pid>/fd links name them). */
function holdsAny(pid: string | number, sockets: Set<string>): boolean {
  let descriptors: string[];
  try {
    descriptors = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  return descriptors.some((fd) => {
    try {
      return sockets.has(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      return false;
    }
  });
}

/**
 * The name a process was started by: its argv[0]'s file name, up to the first space (servers such as
 * redis-server append their address to their title). Not /proc/<pid>/comm: that is the main thread's
 * name, which Node 24 sets to "MainThread".
 */
function processName(pid: string): string {
  const argv0 = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] ?? '';
  return path.basename(argv0).split(' ')[0] || fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
}

/** "pid 1234 (python3)" for the process listening on a TCP port, when this user may see it (Linux). */
export function portOwner(port: number): string | undefined {
  const sockets = listeningSocketInodes(port);
  if (!sockets?.size) return undefined;
  const pid = fs.readdirSync('/proc').find((entry) => /^\d+$/.test(entry) && holdsAny(entry, sockets));
  return pid && `pid ${pid} (${processName(pid)})`;
}

/**
 * Whether process `pid` itself listens on `port`: a port that accepts connections may be another
 * process's. Without /proc (not Linux) it cannot be told, and a listening port has to do.
 */
export function listensOn(pid: number, port: number): boolean {
  const sockets = listeningSocketInodes(port);
  return sockets === undefined || holdsAny(pid, sockets);
}

/**
 * Why `port` on `host` cannot be listened on, as one sentence naming the port, what it is for, who
 * holds it and what to do; undefined when it is free.
 */
export async function portProblem(port: number, host: string, role: string, fix: string): Promise<string | undefined> {
  try {
    const server = await listenOn(port, host);
    await new Promise((resolve) => server.close(resolve));
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'EADDRINUSE') return `cannot listen on ${host}:${port} (${role}): ${(error as Error).message}; ${fix}`;
    const owner = portOwner(port);
    return `port ${port} (${role}) is already in use${owner ? ` by ${owner}` : ''}: ${fix}`;
  }
}
