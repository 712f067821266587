import { parseArgs } from 'node:util';
import { BenchToolServiceSpec, startBenchToolService } from './bench-tool-service';

/**
 * Runs several bench backends in one process, one port each:
 *   node dist/bench/backends/main.js --spec '[{"port":20001,"fillerTools":98,"listDelayMs":0,"prompts":20,"resources":100}]'
 * One process for a fleet of 50 keeps the machine's two cores for the systems under test.
 */
async function main(): Promise<void> {
  const { values } = parseArgs({ options: { spec: { type: 'string' }, host: { type: 'string', default: '127.0.0.1' } } });
  const specs = JSON.parse(values.spec ?? '[]') as BenchToolServiceSpec[];
  if (!Array.isArray(specs) || specs.length === 0) {
    process.stderr.write('usage: main.js --spec \'[{"port":N,"fillerTools":N,"listDelayMs":N,"prompts":N,"resources":N}, ...]\' [--host 127.0.0.1]\n');
    process.exit(2);
  }
  const servers = await Promise.all(specs.map((spec) => startBenchToolService(spec, values.host!)));
  process.stderr.write(`bench backends on ${values.host} ports ${specs.map((spec) => spec.port).join(', ')}\n`);
  const stop = () => {
    for (const server of servers) server.closeAllConnections();
    void Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve)))).then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

void main();
