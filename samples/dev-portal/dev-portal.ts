import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import express from 'express';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_FILE_SETTLE_MS, readSettledFile } from '../../control-plane/registry/file-source';
import { Logger, createLogger } from '../../control-plane/shared/log';

/**
 * A development Portal: serves the registry contract (docs/portal-contract.md) from a YAML or JSON
 * file, so the demo and the tests exercise the gateway's real Portal client. It serves the document
 * as it is, unvalidated: validating is the gateway's job, and tests need to send it bad routes.
 *
 * Revisions (the ETag and the body's `revision`) are a hash of the document's content, so they
 * survive a restart: a restarted dev Portal never answers 304 to an ETag it issued for another
 * document, and edits made while it was down reach the gateway.
 *
 * Test hooks: PUT /v1/registry replaces the document; PUT /dev/registry-text (text/plain) makes it
 * answer with exactly that body, as a Portal gone wrong would; PUT /dev/outage {"status": 503} makes
 * every registry request fail with that status until {"status": 0}.
 */
export interface DevPortal {
  server: http.Server;
  setDocument(document: unknown): void;
}

const MAX_WAIT_SECONDS = 60;

/** What the registry endpoint answers with: exactly this body, under this ETag. */
interface Served {
  body: string;
  etag: string;
}

const contentHash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);

function servedDocument(document: unknown): Served {
  const revision = contentHash(JSON.stringify(document ?? null));
  return { etag: `"${revision}"`, body: JSON.stringify({ revision, ...(document as object) }) };
}

const servedText = (text: string): Served => ({ etag: `"${contentHash(text)}"`, body: text });

export async function startDevPortal(options: { file?: string; host: string; port: number; token?: string; settleMs?: number; log?: Logger }): Promise<DevPortal> {
  const log = options.log ?? createLogger('dev-portal');
  let served = servedDocument({ routes: [] });
  let outageStatus = 0;
  const waiters = new Set<() => void>();
  const watching = new AbortController();

  const publish = (next: Served) => {
    served = next;
    for (const wake of [...waiters]) wake();
  };
  const setDocument = (document: unknown) => publish(servedDocument(document));

  // A file being written is read once it has settled, as the gateway's own file source does.
  let loading = Promise.resolve();
  const loadFile = (file: string) => {
    loading = loading.then(async () => {
      try {
        setDocument(parseYaml(await readSettledFile(file, options.settleMs ?? DEFAULT_FILE_SETTLE_MS, watching.signal)));
      } catch (error) {
        if (!watching.signal.aborted) log.warn('cannot load the registry file; serving the previous document', { file, error: (error as Error).message });
      }
    });
    return loading;
  };
  if (options.file) {
    const file = options.file;
    await loadFile(file);
    fs.watchFile(file, { interval: 250, persistent: false }, () => void loadFile(file));
  }

  const app = express();
  app.use(express.json({ limit: '50mb' }));
  app.use('/dev/registry-text', express.text({ type: '*/*', limit: '50mb' }));
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
    const answer = () => {
      if (req.headers['if-none-match'] === served.etag) {
        res.status(304).end();
      } else {
        res.setHeader('etag', served.etag);
        res.type('application/json').send(served.body);
      }
    };
    const waitSeconds = Math.min(Number(req.query.wait ?? 0) || 0, MAX_WAIT_SECONDS);
    if (req.headers['if-none-match'] !== served.etag || waitSeconds <= 0) {
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
    res.json({ etag: served.etag });
  });

  app.put('/dev/registry-text', (req, res) => {
    publish(servedText(typeof req.body === 'string' ? req.body : ''));
    res.json({ etag: served.etag });
  });

  app.put('/dev/outage', (req, res) => {
    outageStatus = Number(req.body?.status) || 0;
    res.json({ status: outageStatus });
  });

  return new Promise((resolve, reject) => {
    const server = http.createServer(app);
    server.once('error', reject);
    server.on('close', () => {
      watching.abort();
      if (options.file) fs.unwatchFile(options.file);
    });
    server.listen(options.port, options.host, () => resolve({ server, setDocument }));
  });
}
