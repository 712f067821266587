import * as fs from 'node:fs';
import * as path from 'node:path';
import Redis from 'ioredis';
import { ManagedProcess, freePort, portAccepts } from '../../control-plane/devstack/processes';
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
 * config file, so it lives in `dir`.
 */
export async function startRedisSentinel(dir: string, { primaryPort, masterName = 'mcpgw' }: { primaryPort: number; masterName?: string }): Promise<RedisSentinel> {
  fs.mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const configFile = path.join(dir, `sentinel-${port}.conf`);
  fs.writeFileSync(
    configFile,
    [
      `port ${port}`,
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
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => 200 });
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
