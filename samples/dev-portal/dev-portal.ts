import * as fs from 'node:fs';
import * as http from 'node:http';
import express from 'express';
import { parse as parseYaml } from 'yaml';
import { Logger, createLogger } from '../../control-plane/shared/log';

/**
 * A development Portal: serves the registry contract (docs/portal-contract.md) from a YAML or JSON
 * file, so the demo and the tests exercise the gateway's real Portal client. It serves the document
 * as it is, unvalidated: validating is the gateway's job, and tests need to send it bad routes.
 *
 * Test hooks: PUT /v1/registry replaces the document; PUT /dev/outage {"status": 503} makes every
 * registry request fail with that status until {"status": 0}.
 */
export interface DevPortal {
  server: http.Server;
  setDocument(document: unknown): void;
}

const MAX_WAIT_SECONDS = 60;

export function startDevPortal(options: { file?: string; host: string; port: number; token?: string; log?: Logger }): Promise<DevPortal> {
  const log = options.log ?? createLogger('dev-portal');
  let document: unknown = { routes: [] };
  let revision = 0;
  let outageStatus = 0;
  const waiters = new Set<() => void>();

  const setDocument = (next: unknown) => {
    document = next;
    revision += 1;
    for (const wake of [...waiters]) wake();
  };
  const loadFile = () => {
    if (!options.file) return;
    try {
      setDocument(parseYaml(fs.readFileSync(options.file, 'utf8')));
    } catch (error) {
      log.warn('cannot load the registry file; serving the previous document', { file: options.file, error: (error as Error).message });
    }
  };
  loadFile();
  if (options.file) fs.watchFile(options.file, { interval: 250, persistent: false }, loadFile);

  const app = express();
  app.use(express.json({ limit: '50mb' }));
  app.use('/v1', (req, res, next) => {
    if (options.token && req.headers.authorization !== `Bearer ${options.token}`) {
      res.status(401).json({ error: 'missing or wrong bearer token' });
      return;
    }
    if (outageStatus) {
      res.status(outageStatus).json({ error: 'simulated Portal outage' });
      return;
    }
    next();
  });

  app.get('/v1/registry', (req, res) => {
    const etag = () => `"${revision}"`;
    const answer = () => {
      if (req.headers['if-none-match'] === etag()) {
        res.status(304).end();
      } else {
        res.setHeader('etag', etag());
        res.json({ revision: String(revision), ...(document as object) });
      }
    };
    const waitSeconds = Math.min(Number(req.query.wait ?? 0) || 0, MAX_WAIT_SECONDS);
    if (req.headers['if-none-match'] !== etag() || waitSeconds <= 0) {
      answer();
      return;
    }
    const wake = () => {
      clearTimeout(timer);
      waiters.delete(wake);
      if (!res.writableEnded && !res.destroyed) answer();
    };
    const timer = setTimeout(wake, waitSeconds * 1000);
    waiters.add(wake);
    req.on('close', wake);
  });

  app.put('/v1/registry', (req, res) => {
    setDocument(req.body);
    res.json({ revision: String(revision) });
  });

  app.put('/dev/outage', (req, res) => {
    outageStatus = Number(req.body?.status) || 0;
    res.json({ status: outageStatus });
  });

  return new Promise((resolve, reject) => {
    const server = http.createServer(app);
    server.once('error', reject);
    server.on('close', () => options.file && fs.unwatchFile(options.file));
    server.listen(options.port, options.host, () => resolve({ server, setDocument }));
  });
}
