import { parseArgs } from 'node:util';
import { createLogger, logProcessEvents } from '../../control-plane/shared/log';
import { startDevPortal } from './dev-portal';

/** node dist/samples/dev-portal/main.js --file registry/default.yaml --port 18100 */
async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      file: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      token: { type: 'string' },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port <= 0) {
    process.stderr.write('usage: main.js --port N [--file registry.yaml] [--host 127.0.0.1] [--token T]\n');
    process.exit(2);
  }
  const log = createLogger('dev-portal');
  logProcessEvents(log);
  const portal = await startDevPortal({ file: values.file, host: values.host!, port, token: values.token, log });
  log.info('dev portal listening', { url: `http://${values.host}:${port}/v1/registry`, file: values.file });
  const stop = () => {
    portal.server.closeAllConnections();
    portal.server.close(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

void main();
