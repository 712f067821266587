import * as net from 'node:net';

const LOOPBACK = '127.0.0.1';

/**
 * A loopback TCP relay whose answers (target → client) can be held back: kept in order and delivered
 * on release. Between Envoy and the control plane's xDS port it holds back what the control plane
 * pushes, and so Envoy's ACKs, as a loaded host can; it reads none of the bytes (TLS passes as is).
 */
export class HoldableRelay {
  private target?: number;
  private holding = false;
  private held: { to: net.Socket; chunk: Buffer }[] = [];
  private readonly sockets = new Set<net.Socket>();

  private constructor(private readonly server: net.Server) {}

  static async start(): Promise<HoldableRelay> {
    const server = net.createServer();
    const relay = new HoldableRelay(server);
    server.on('connection', (client) => relay.relay(client));
    await new Promise<void>((resolve) => server.listen(0, LOOPBACK, resolve));
    return relay;
  }

  /** The port to dial instead of `target` (a stack's envoyXdsPort). */
  to(target: number): number {
    this.target = target;
    return (this.server.address() as net.AddressInfo).port;
  }

  hold(): void {
    this.holding = true;
  }

  release(): void {
    this.holding = false;
    for (const { to, chunk } of this.held) if (!to.destroyed) to.write(chunk);
    this.held = [];
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(client: net.Socket): void {
    if (this.target === undefined) {
      client.destroy();
      return;
    }
    const upstream = net.connect(this.target, LOOPBACK);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    }
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => (this.holding ? this.held.push({ to: client, chunk }) : client.write(chunk)));
    // Either side gone: the other goes too, as a broken connection would.
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  }
}
