import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { exposeResourceUri, splitResourceUri } from '../control-plane/catalog/resource-naming';
import { ManagedProcess, freePorts, portAccepts, waitFor } from '../control-plane/devstack/processes';
import { GatewayStack } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';
import { readEvents } from '../control-plane/sidecar/sessions/backend-sessions';
import { cpuMs } from './load/process-cpu';
import { summarize } from './load/stats';

/**
 * Which part should carry resources/read (docs/adr/0015-federated-resources-and-prompts.md): Envoy,
 * routing by the URI's prefix under the call script (what the gateway does), or a Node process on the
 * byte path that reads the backend's whole answer and renames its URIs (what a sidecar relay would
 * do, session lookup left out). One MCP client reads one resource after another (closed loop) from a
 * bench backend, directly, through the gateway, and through such a relay; each path's latency and
 * the CPU its middle process spends per read.
 *   node dist/bench/resource-read-lanes.js [--reads 300]
 * Writes bench/results/resource-read-lanes.json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'resource-read-lanes');
const SIZES = [1024, 256 * 1024, 1024 * 1024];
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** The relay role: resources/read of `<backend>+<uri>` to the backend, its answer read whole, URIs renamed. */
async function relay(port: number, backendUrl: string): Promise<void> {
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: number; params: { uri: string } };
    const own = splitResourceUri(message.params.uri)!.own;
    const answer = await fetch(backendUrl, { method: 'POST', headers: HEADERS, body: JSON.stringify({ ...message, params: { ...message.params, uri: own } }) });
    let result: { result: { contents: { uri: string }[] } } | undefined;
    if ((answer.headers.get('content-type') ?? '').includes('text/event-stream')) {
      await readEvents(answer.body!, (event) => {
        if (event.data.trim()) result = JSON.parse(event.data);
      });
    } else result = (await answer.json()) as typeof result;
    for (const content of result!.result.contents) content.uri = exposeResourceUri('bench', content.uri)!;
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(result));
  });
  server.keepAliveTimeout = 120_000;
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
}

function envoyPid(): number {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const command = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (command.includes('envoy') && command.includes(LOG_DIR)) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error('no Envoy of this run found');
}

interface PathResult {
  path: string;
  bytes: number;
  p50: number;
  p99: number;
  cpuMsPerRead?: number;
}

async function measure(path: string, url: string, uri: string, bytes: number, reads: number, middlePid?: number): Promise<PathResult> {
  const read = async (id: number) => {
    const response = await fetch(url, { method: 'POST', headers: HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id, method: 'resources/read', params: { uri } }) });
    const text = await response.text();
    if (!text.includes('"contents"')) throw new Error(`${path}: no contents in ${text.slice(0, 200)}`);
  };
  for (let id = 0; id < 20; id++) await read(id);
  const cpuBefore = middlePid ? cpuMs(middlePid) : 0;
  const latencies: number[] = [];
  for (let id = 0; id < reads; id++) {
    const started = performance.now();
    await read(id);
    latencies.push(performance.now() - started);
  }
  const summary = summarize(latencies);
  return { path, bytes, p50: summary.p50, p99: summary.p99, ...(middlePid && { cpuMsPerRead: (cpuMs(middlePid) - cpuBefore) / reads }) };
}

function markdown(results: PathResult[], context: { measuredAt: string; loadAverage1m: number; reads: number }): string {
  const row = (result: PathResult) =>
    `| ${result.path} | ${result.bytes / 1024} KiB | ${result.p50.toFixed(2)} | ${result.p99.toFixed(2)} | ${result.cpuMsPerRead === undefined ? '–' : result.cpuMsPerRead.toFixed(3)} |`;
  return [
    '# resources/read: Envoy lane or a Node relay',
    '',
    `Measured ${context.measuredAt} on ${os.availableParallelism()} cores (load average ${context.loadAverage1m}), by \`node dist/bench/resource-read-lanes.js\`:`,
    `one client, ${context.reads} reads per row one after another, of a text resource of the bench backend (SDK v1, SSE answers).`,
    'A: the backend directly. C: through the gateway (Envoy routes by the URI prefix; the call script strips it,',
    "renames the answer's URIs as it streams). N: a Node relay in front of the backend that reads the answer whole",
    'and renames its URIs, as a sidecar on the byte path would (no session lookup, no Envoy in front of it).',
    'CPU: the middle process (Envoy for C, the relay for N) per read, from /proc.',
    '',
    '| path | size | p50 ms | p99 ms | middle CPU ms/read |',
    '| --- | --- | --- | --- | --- |',
    ...results.map(row),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { reads: { type: 'string', default: '300' }, relay: { type: 'string' }, backend: { type: 'string' } } });
  if (values.relay) return relay(Number(values.relay), values.backend!);
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const [backendPort, relayPort, weather, jobs] = await freePorts(4);
  const backendUrl = `http://127.0.0.1:${backendPort}/mcp`;
  const processes: ManagedProcess[] = [];
  let stack: GatewayStack | undefined;
  try {
    const backend = new ManagedProcess({
      name: 'bench-backend',
      command: process.execPath,
      args: [projectPath('dist', 'bench', 'backends', 'main.js'), '--spec', JSON.stringify([{ port: backendPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 1 }])],
      logFile: `${LOG_DIR}/backend.log`,
    });
    processes.push(backend);
    await waitFor('the bench backend', () => portAccepts(backendPort));
    const relayProcess = new ManagedProcess({
      name: 'relay',
      command: process.execPath,
      args: [__filename, '--relay', String(relayPort), '--backend', backendUrl],
      logFile: `${LOG_DIR}/relay.log`,
    });
    processes.push(relayProcess);
    await waitFor('the relay', () => portAccepts(relayPort));
    const registryFile = `${LOG_DIR}/registry.yaml`;
    fs.writeFileSync(registryFile, stringify({ routes: [{ key: 'read', toolServices: [{ name: 'bench', url: backendUrl }] }] }));
    stack = await GatewayStack.start({ registryFile, logDir: LOG_DIR, samples: [{ service: 'weather', port: weather }, { service: 'jobs', port: jobs }] });
    const gateway = stack.gatewayUrl('read');
    await waitFor('the gateway to read the backend’s resources', async () => {
      const response = await fetch(gateway, { method: 'POST', headers: HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: `bench+bench://${backendPort}/size/10` } }) });
      return (await response.text()).includes('"contents"') ? true : undefined;
    }, { timeoutMs: 60_000, intervalMs: 200 });
    const envoy = envoyPid();
    const reads = Number(values.reads);
    const results: PathResult[] = [];
    for (const bytes of SIZES) {
      const own = `bench://${backendPort}/size/${bytes}`;
      results.push(await measure('A direct', backendUrl, own, bytes, reads));
      results.push(await measure('C gateway (Envoy lane)', gateway, `bench+${own}`, bytes, reads, envoy));
      results.push(await measure('N Node relay', `http://127.0.0.1:${relayPort}/mcp`, `bench+${own}`, bytes, reads, relayProcess.child.pid));
    }
    const context = { measuredAt: new Date().toISOString(), loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100, reads };
    fs.writeFileSync(projectPath('bench', 'results', 'resource-read-lanes.json'), `${JSON.stringify({ ...context, cores: os.availableParallelism(), results }, null, 2)}\n`);
    fs.writeFileSync(projectPath('bench', 'results', 'resource-read-lanes.md'), markdown(results, context));
    process.stdout.write(markdown(results, context));
  } finally {
    await stack?.stop();
    for (const child of processes) await child.stop();
  }
}

void main();
