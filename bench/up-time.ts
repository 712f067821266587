import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { freePorts } from '../control-plane/devstack/processes';
import { projectPath } from '../control-plane/shared/paths';

/**
 * How long `mcpgw up` takes from its start to printing the first route URL (issue 16's first-run
 * target: 5 s on a set-up clone), on free ports so that it never meets another run. With
 * --with-setup each run first times scripts/setup.sh, as scripts/up.sh runs it.
 *   node dist/bench/up-time.js [--runs 5] [--with-setup]
 * Writes bench/results/up-time.json.
 */

const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const FIRST_URL = /^route \S+: http:\/\/\S+/m;
const GIVE_UP_MS = 60_000;

async function timeUp(dir: string): Promise<number> {
  const [listener, weather, jobs] = await freePorts(3);
  const registry = path.join(dir, 'registry.yaml');
  fs.writeFileSync(
    registry,
    stringify({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: `http://127.0.0.1:${weather}/mcp` }, { name: 'jobs', url: `http://127.0.0.1:${jobs}/mcp` }] }] }),
  );
  const startedAt = performance.now();
  const up = spawn(process.execPath, [CLI, 'up', '--registry', registry, '--listener-port', String(listener), '--sample-ports', `${weather},${jobs}`, '--log-dir', path.join(dir, 'logs')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  try {
    return await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no URL after ${GIVE_UP_MS} ms:\n${output}`)), GIVE_UP_MS);
      up.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (FIRST_URL.test(output)) {
          clearTimeout(timer);
          resolve(performance.now() - startedAt);
        }
      });
      up.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      up.once('exit', (code) => reject(new Error(`up exited ${code}:\n${output}`)));
    });
  } finally {
    up.kill('SIGTERM');
    await new Promise((resolve) => (up.exitCode === null ? up.once('exit', resolve) : resolve(undefined)));
  }
}

function timeSetup(): number {
  const startedAt = performance.now();
  execFileSync(projectPath('scripts', 'setup.sh'), { stdio: 'ignore' });
  return performance.now() - startedAt;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, 'with-setup': { type: 'boolean', default: false } } });
  const runs = Number(values.runs);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-up-time-'));
  const results: { setupMs?: number; upToUrlMs: number }[] = [];
  try {
    for (let run = 0; run < runs; run++) {
      const setupMs = values['with-setup'] ? timeSetup() : undefined;
      results.push({ ...(setupMs !== undefined && { setupMs }), upToUrlMs: await timeUp(dir) });
      process.stdout.write(`[up-time] run ${run + 1}: ${JSON.stringify(results[run])}\n`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const totals = results.map((result) => (result.setupMs ?? 0) + result.upToUrlMs).sort((a, b) => a - b);
  const summary = {
    measuredAt: new Date().toISOString(),
    withSetup: values['with-setup'],
    cores: os.availableParallelism(),
    loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100,
    runs: results.map((result) => ({ ...result, upToUrlMs: Math.round(result.upToUrlMs), ...(result.setupMs !== undefined && { setupMs: Math.round(result.setupMs) }) })),
    medianToFirstUrlMs: Math.round(totals[Math.floor(totals.length / 2)]),
    targetMs: 5000,
  };
  fs.writeFileSync(projectPath('bench', 'results', `up-time${values['with-setup'] ? '-with-setup' : ''}.json`), `${JSON.stringify(summary, null, 2)}\n`);
  process.stdout.write(`[up-time] median to the first URL: ${summary.medianToFirstUrlMs} ms (load average ${summary.loadAverage1m})\n`);
}

void main();
