import * as fs from 'node:fs';
import { listenOn } from './processes';

const LISTEN_STATE = '0A';

/** Inodes of the TCP sockets listening on `port` (Linux /proc/net/tcp and tcp6). */
function listeningSocketInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      const localPort = Number.parseInt(fields[1]?.split(':')[1] ?? '', 16);
      if (localPort === port && fields[3] === LISTEN_STATE) inodes.add(fields[9]);
    }
  }
  return inodes;
}

/** "pid 1234 (python3)" for the process listening on a TCP port, when this user may see it (Linux). */
export function portOwner(port: number): string | undefined {
  const sockets = new Set([...listeningSocketInodes(port)].map((inode) => `socket:[${inode}]`));
  if (sockets.size === 0) return undefined;
  for (const pid of fs.readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    let descriptors: string[];
    try {
      descriptors = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    const holds = descriptors.some((fd) => {
      try {
        return sockets.has(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      } catch {
        return false;
      }
    });
    if (holds) return `pid ${pid} (${fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()})`;
  }
  return undefined;
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
