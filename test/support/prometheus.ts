import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { ManagedProcess, freePort } from '../../control-plane/devstack/processes';
import { tools } from './tools';

export interface Prometheus {
  /** The server's HTTP API, e.g. `${url}/api/v1/alerts`. */
  url: string;
  stop(): Promise<void>;
}

/**
 * A Prometheus v0.316.0 server on a free loopback port with `config` as its prometheus.yml (an object
 * or YAML text) and its data under `dir`. Rule files the config names are the caller's to write into
 * `dir` (relative paths in the config resolve against it).
 */
export async function startPrometheus(dir: string, config: string | object): Promise<Prometheus> {
  fs.mkdirSync(dir, { recursive: true });
  const configFile = path.join(dir, 'prometheus.yml');
  fs.writeFileSync(configFile, typeof config === 'string' ? config : stringify(config));
  const port = await freePort();
  const prometheus = new ManagedProcess({
    name: 'prometheus',
    command: tools().prometheus,
    args: [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--web.enable-lifecycle',
      // Targets reach the scrape manager every 5 s by default: a test would wait that long for its first sample.
      '--scrape.discovery-reload-interval=500ms',
    ],
    logFile: path.join(dir, 'prometheus.log'),
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await prometheus.untilReady('Prometheus is ready', async () => (await fetch(`${url}/-/ready`)).ok || undefined);
  } catch (error) {
    await prometheus.stop();
    throw error;
  }
  return { url, stop: () => prometheus.stop() };
}
