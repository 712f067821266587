import * as fs from 'node:fs';
import * as path from 'node:path';
import Redis from 'ioredis';
import { ManagedProcess, freePort, portAccepts } from '../../control-plane/devstack/processes';
import { RedisTlsFiles, TestRedis } from './redis-server';
import { tools } from './tools';

export interface RedisSentinel {
  port: number;
  /** The primary this sentinel reports for `masterName`, as HOST:PORT. */
  primaryAddress(): Promise<string>;
  stop(): Promise<void>;
}

/**
 * One Redis Sentinel (Debian's redis-sentinel) on a free loopback port, watching the primary at
 * 127.0.0.1:`primaryPort` under `masterName`, quick to declare it down (1 s). Sentinel rewrites its
 * config file, so it lives in `dir`. With `tls`, as the chart's with redis.sentinel.tls: TLS only, to
 * its clients and to the Redis it watches.
 */
export async function startRedisSentinel(
  dir: string,
  { primaryPort, masterName = 'mcpgw', tls }: { primaryPort: number; masterName?: string; tls?: RedisTlsFiles },
): Promise<RedisSentinel> {
  fs.mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const configFile = path.join(dir, `sentinel-${port}.conf`);
  fs.writeFileSync(
    configFile,
    [
      ...(tls
        ? ['port 0', `tls-port ${port}`, `tls-cert-file ${tls.certFile}`, `tls-key-file ${tls.keyFile}`, `tls-ca-cert-file ${tls.caFile}`, 'tls-auth-clients no', 'tls-replication yes']
        : [`port ${port}`]),
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${masterName} 127.0.0.1 ${primaryPort} 1`,
      `sentinel down-after-milliseconds ${masterName} 1000`,
      `sentinel failover-timeout ${masterName} 5000`,
      '',
    ].join('\n'),
  );
  const sentinel = new ManagedProcess({
    name: 'redis-sentinel',
    command: tools().redisSentinel,
    args: [configFile],
    logFile: path.join(dir, `sentinel-${port}.log`),
    textLines: 'all',
  });
  const client = new Redis({ host: '127.0.0.1', port, ...(tls && { tls: { ca: fs.readFileSync(tls.caFile) } }), lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => 200 });
  const primaryAddress = async () => {
    const reply = (await client.call('SENTINEL', 'get-master-addr-by-name', masterName)) as [string, string] | null;
    if (!reply) throw new Error(`sentinel on port ${port} knows no primary ${masterName}`);
    return `${reply[0]}:${reply[1]}`;
  };
  try {
    await sentinel.untilReady(`redis-sentinel listens on port ${port}`, () => portAccepts(port));
    await client.connect();
    await sentinel.untilReady(`redis-sentinel on port ${port} knows its primary`, primaryAddress);
  } catch (error) {
    client.disconnect();
    await sentinel.stop();
    throw error;
  }
  return {
    port,
    primaryAddress,
    stop: async () => {
      client.disconnect();
      await sentinel.stop();
    },
  };
}

/** A Redis primary, one replica of it and a Sentinel watching them: what a failover needs. */
export interface ReplicatedRedis {
  primary: TestRedis;
  replica: TestRedis;
  sentinel: RedisSentinel;
  masterName: string;
  /** The gateway's --redis for this setup: sentinel://127.0.0.1:PORT/NAME. */
  address: string;
  /** Resolves with the new primary's HOST:PORT once the Sentinel names another one than `before`. */
  untilFailedOver(before: string, timeoutMs: number): Promise<string>;
  stop(): Promise<void>;
}

export async function startReplicatedRedis(dir: string, masterName = 'mcpgw'): Promise<ReplicatedRedis> {
  fs.mkdirSync(dir, { recursive: true });
  const primary = await TestRedis.start(dir);
  const started: { stop(): Promise<void> }[] = [primary];
  try {
    const replica = await TestRedis.start(dir, ['--replicaof', '127.0.0.1', String(primary.port)]);
    started.push(replica);
    await untilReplicaInSync(primary);
    const sentinel = await startRedisSentinel(dir, { primaryPort: primary.port, masterName });
    started.push(sentinel);
    await untilSentinelKnowsReplica(sentinel.port, masterName);
    return {
      primary,
      replica,
      sentinel,
      masterName,
      address: `sentinel://127.0.0.1:${sentinel.port}/${masterName}`,
      untilFailedOver: async (before, timeoutMs) => {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const now = await sentinel.primaryAddress().catch(() => before);
          if (now !== before) return now;
          if (Date.now() > deadline) throw new Error(`Sentinel still names ${before} as the primary after ${timeoutMs} ms`);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      },
      stop: async () => {
        for (const part of started.reverse()) await part.stop();
      },
    };
  } catch (error) {
    for (const part of started.reverse()) await part.stop();
    throw error;
  }
}

async function untilReplicaInSync(primary: TestRedis): Promise<void> {
  const client = primary.client();
  try {
    for (let attempt = 0; attempt < 100; attempt++) {
      const info = await client.info('replication');
      if (/slave0:.*state=online/.test(info)) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the replica of 127.0.0.1:${primary.port} never came online`);
  } finally {
    client.disconnect();
  }
}

/** A Sentinel learns of replicas from the primary's INFO: a failover before that would find none to promote. */
async function untilSentinelKnowsReplica(port: number, masterName: string): Promise<void> {
  const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0 });
  try {
    for (let attempt = 0; attempt < 300; attempt++) {
      const replicas = (await client.call('SENTINEL', 'replicas', masterName)) as unknown[];
      if (replicas.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`the Sentinel on port ${port} never learnt of a replica of ${masterName}`);
  } finally {
    client.disconnect();
  }
}
