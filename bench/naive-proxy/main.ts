import * as fs from 'node:fs';
import { parseArgs } from 'node:util';
import { NaiveProxyConfig, startNaiveProxy } from './naive-proxy';

/** Runs system E: node dist/bench/naive-proxy/main.js --config FILE.json --port N */
async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { config: { type: 'string' }, port: { type: 'string' }, host: { type: 'string', default: '127.0.0.1' } },
  });
  const port = Number(values.port);
  if (!values.config || !Number.isInteger(port) || port <= 0) {
    process.stderr.write('usage: main.js --config FILE.json --port N [--host 127.0.0.1]\n');
    process.exit(2);
  }
  const config = JSON.parse(fs.readFileSync(values.config, 'utf8')) as NaiveProxyConfig;
  const server = await startNaiveProxy(config, values.host!, port);
  process.stderr.write(`naive proxy at http://${values.host}:${port}/mcp/{route}\n`);
  const stop = () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

void main();
