import * as http from 'node:http';
import express from 'express';
import { Logger } from '../shared/log';
import { closeServer, listenAt } from '../shared/http-listen';
import { SESSION_HEADER, sessionNotFound } from './decision';
import { RouteCatalogView } from './route-catalog';
import { SessionStore } from './sessions/session-store';

/** Envoy cuts a stream silent for longer than its stream_idle_timeout (600 s): a comment well before. */
const KEEPALIVE_MS = 30_000;

const LIST_CHANGED = `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' })}\n\n`;

/** What a route serves, as far as a client's tools/list can tell: the names, in order. */
export function servedNames(view: RouteCatalogView): string {
  return view.tools.map((exposed) => exposed.tool.name).join('\n');
}

/**
 * Clients' standalone GET streams (the sidecar steered them here after checking their session), held
 * open so that each can be told when its route's tools change. Every replica holds its own streams
 * and learns of changes from its own catalog stream: nothing is shared.
 */
export class ListChangedStreams {
  private readonly byRoute = new Map<string, Set<http.ServerResponse>>();
  private server?: http.Server;

  constructor(
    private readonly sessions: SessionStore,
    private readonly log: Logger,
  ) {}

  async listen(address: string): Promise<void> {
    const app = express();
    app.get('/mcp/:route', (req, res) => void this.open(req.params.route, req, res));
    this.server = await listenAt(app, address);
  }

  private async open(route: string, req: express.Request, res: express.Response): Promise<void> {
    // The sidecar checked the session before steering here; checked again, since this port is reachable on its own.
    const id = req.header(SESSION_HEADER);
    const session = id === undefined ? undefined : await this.sessions.get(id).catch(() => undefined);
    if (!session || session.route !== route) {
      const notFound = sessionNotFound(null);
      res.status(notFound.status).set(notFound.headers).send(notFound.body);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const streams = this.byRoute.get(route) ?? new Set();
    this.byRoute.set(route, streams);
    streams.add(res);
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
    res.on('close', () => {
      clearInterval(keepalive);
      streams.delete(res);
    });
  }

  /** Tells every client holding a stream of these routes that their tools changed. */
  toolsChanged(routes: string[]): void {
    for (const route of routes) {
      const streams = this.byRoute.get(route);
      if (!streams?.size) continue;
      this.log.info('telling clients their tools changed', { route, streams: streams.size });
      for (const res of streams) res.write(LIST_CHANGED);
    }
  }

  async close(): Promise<void> {
    for (const streams of this.byRoute.values()) for (const res of streams) res.end();
    if (this.server) await closeServer(this.server);
  }
}
