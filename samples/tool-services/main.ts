import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { createLogger, logProcessEvents } from '../../control-plane/shared/log';
import { isSampleServiceName, startSampleToolService } from './sample-tool-services';

/** Runs one sample Tool Service: node dist/samples/tool-services/main.js --service jobs --port 18102 */
async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      service: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      'json-response': { type: 'boolean', default: false },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
    },
  });
  const service = values.service ?? '';
  const port = Number(values.port);
  if (!isSampleServiceName(service) || !Number.isInteger(port) || port <= 0) {
    process.stderr.write('usage: main.js --service weather|jobs --port N [--host 127.0.0.1] [--json-response] [--tls-cert PEM --tls-key PEM]\n');
    process.exit(2);
  }
  const log = createLogger(`tool-service-${service}`);
  logProcessEvents(log);
  const tls = values['tls-cert'] && values['tls-key'] ? { cert: fs.readFileSync(values['tls-cert']), key: fs.readFileSync(values['tls-key']) } : undefined;
  const server = await startSampleToolService(service, values.host!, port, { jsonResponse: values['json-response'], tls });
  log.info('sample tool service listening', { url: `${tls ? 'https' : 'http'}://${values.host}:${port}/mcp` });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

void main();
