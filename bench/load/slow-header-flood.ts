import * as net from 'node:net';

/**
 * A slow-header connection flood (the slowloris pattern of issue 9): many connections that each send
 * the start of a request and then one more header line every so often, never finishing. A connection
 * the gateway closes stays closed, or with `reopenAfterMs` is opened again after that long (a flood
 * that keeps its size). It stops by itself after `durationMs`, closing whatever is still open. Used by the
 * connection-flood test and the isolation bench, on 127.0.0.1 only.
 */
export interface FloodOptions {
  port: number;
  /** Connections to open, spread over the source addresses. */
  connections: number;
  /** Loopback source addresses to open them from (each has its own ephemeral ports), e.g. 127.0.0.2. */
  sourceAddresses: string[];
  /** Opened at most this many per second, so that the flood's own process keeps up. */
  openPerSecond: number;
  /** How often each connection sends one more header line. */
  trickleMs: number;
  durationMs: number;
  reopenAfterMs?: number;
}

export interface FloodReport {
  /** Connections the flood tried to open (reopened ones included). */
  attempted: number;
  /** Connections that were established (accepted by the kernel). */
  connected: number;
  /** Connections the gateway closed before the flood ended (rejected at once, or timed out). */
  closedByPeer: number;
  /** Most connections open at the same time. */
  peakOpen: number;
  /** Connections open now. */
  open: number;
}

export class SlowHeaderFlood {
  private readonly sockets = new Set<net.Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;
  /** Connections of the initial ramp opened so far. */
  private started = 0;
  private readonly report: FloodReport = { attempted: 0, connected: 0, closedByPeer: 0, peakOpen: 0, open: 0 };
  readonly done: Promise<FloodReport>;

  constructor(private readonly options: FloodOptions) {
    this.done = new Promise((resolve) => {
      this.timers.add(setTimeout(() => resolve(this.stop()), options.durationMs));
    });
    this.openInBatches();
  }

  private openInBatches(): void {
    const perTick = Math.max(1, Math.round(this.options.openPerSecond / 20));
    const tick = setInterval(() => {
      for (let index = 0; index < perTick && this.started < this.options.connections; index++) {
        this.openOne(this.options.sourceAddresses[this.started++ % this.options.sourceAddresses.length]);
      }
      if (this.started >= this.options.connections || this.stopped) clearInterval(tick);
    }, 50);
    this.timers.add(tick);
  }

  private openOne(localAddress: string): void {
    if (this.stopped) return;
    this.report.attempted++;
    const socket = net.connect({ host: '127.0.0.1', port: this.options.port, localAddress });
    this.sockets.add(socket);
    let trickle: NodeJS.Timeout | undefined;
    let connected = false;
    socket.on('connect', () => {
      connected = true;
      this.report.connected++;
      this.report.open++;
      this.report.peakOpen = Math.max(this.report.peakOpen, this.report.open);
      socket.write('POST /mcp/demo HTTP/1.1\r\nHost: gateway\r\n');
      let line = 0;
      trickle = setInterval(() => socket.write(`X-Slow-${line++}: 1\r\n`), this.options.trickleMs);
    });
    socket.on('error', () => undefined);
    socket.on('data', () => undefined);
    socket.on('close', () => {
      clearInterval(trickle);
      this.sockets.delete(socket);
      if (this.stopped) return;
      if (connected) {
        this.report.closedByPeer++;
        this.report.open--;
      }
      const { reopenAfterMs } = this.options;
      if (reopenAfterMs === undefined) return;
      const reopen = setTimeout(() => {
        this.timers.delete(reopen);
        this.openOne(localAddress);
      }, reopenAfterMs);
      this.timers.add(reopen);
    });
  }

  /** Closes every connection still open; the report of the whole flood. */
  stop(): FloodReport {
    if (!this.stopped) {
      this.stopped = true;
      for (const timer of this.timers) clearInterval(timer);
      for (const socket of this.sockets) socket.destroy();
      this.sockets.clear();
    }
    return this.report;
  }
}
