import * as path from 'node:path';
import Redis from 'ioredis';
import { ManagedProcess, freePort, portAccepts, waitFor } from '../../control-plane/devstack/processes';

/** A real redis-server of the test's own on a free loopback port, which the test can freeze (SIGSTOP) and thaw. */
export class TestRedis {
  private constructor(
    readonly port: number,
    private readonly process: ManagedProcess,
  ) {}

  static async start(logDir: string, extraArgs: string[] = []): Promise<TestRedis> {
    const port = await freePort();
    const process = new ManagedProcess({
      name: `redis-${port}`,
      command: 'redis-server',
      // --dir: a replica writes the snapshot its primary sends (dump.rdb) there, not into the working tree.
      args: ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', logDir, ...extraArgs],
      logFile: path.join(logDir, `redis-${port}.log`),
    });
    await waitFor('redis to accept connections', () => portAccepts(port));
    return new TestRedis(port, process);
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** A plain client for the test's own look at the keys. */
  client(): Redis {
    return new Redis(this.url, { maxRetriesPerRequest: 1 });
  }

  /** As a hung Redis: the port still accepts connections, nothing is answered. */
  freeze(): void {
    this.process.child.kill('SIGSTOP');
  }

  thaw(): void {
    this.process.child.kill('SIGCONT');
  }

  /** As a crashed host: SIGKILL, nothing flushed, every connection cut. */
  async kill(): Promise<void> {
    this.process.child.kill('SIGKILL');
    await this.process.exited;
  }

  async stop(): Promise<void> {
    this.thaw();
    await this.process.stop();
  }
}
