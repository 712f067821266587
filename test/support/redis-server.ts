import * as path from 'node:path';
import Redis from 'ioredis';
import { ManagedProcess, freePort, portAccepts, waitFor } from '../../control-plane/devstack/processes';

/** A server certificate, its key and the CA a client checks it against (DevInside.redisTlsFiles()). */
export interface RedisTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

/** A real redis-server of the test's own on a free loopback port, which the test can freeze (SIGSTOP) and thaw. */
export class TestRedis {
  private constructor(
    readonly port: number,
    private readonly process: ManagedProcess,
  ) {}

  /** With `tls`: TLS only, on the same port (no client certificates; replication over TLS). */
  static async start(logDir: string, extraArgs: string[] = [], tls?: RedisTlsFiles): Promise<TestRedis> {
    const port = await freePort();
    const tlsArgs = tls
      ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.certFile, '--tls-key-file', tls.keyFile, '--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', 'no', '--tls-replication', 'yes']
      : [];
    const process = new ManagedProcess({
      name: `redis-${port}`,
      command: 'redis-server',
      // --dir: a replica writes the snapshot its primary sends (dump.rdb) there, not into the working tree.
      args: ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', logDir, ...tlsArgs, ...extraArgs],
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
