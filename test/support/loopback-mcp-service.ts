import * as http from 'node:http';
import { closeServer, listen } from '../../control-plane/shared/http-listen';

export const LOOPBACK = '127.0.0.1';

/** The HTTP side of an in-test Tool Service: one app on a loopback port, at /mcp, stopped with its connections. */
export abstract class LoopbackMcpService {
  private server?: http.Server;

  protected constructor(readonly port: number) {}

  get url(): string {
    return `http://${LOOPBACK}:${this.port}/mcp`;
  }

  protected async listen(app: http.RequestListener): Promise<void> {
    this.server = await listen(app, LOOPBACK, this.port);
  }

  async stop(): Promise<void> {
    if (this.server) await closeServer(this.server);
  }
}
