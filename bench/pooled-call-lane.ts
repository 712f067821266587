import * as fs from 'node:fs';
import * as os from 'node:os';
import { parseArgs } from 'node:util';
import { projectPath } from '../control-plane/shared/paths';
import { withAskerGateway } from './asker-gateway';
import { cpuMs } from './load/process-cpu';
import { summarize } from './load/stats';

/**
 * The cost of the pooled-call lane (docs/adr/0018-stream-relaying.md, "Gaps closed later", 1): a
 * 2026-07-28 client's call to a 2025 stateful backend goes through a sidecar, which forwards it and
 * resumes its stream if the backend ends it early. Against: a session client's call to the same
 * backend, which Envoy carries after one session check per call (the sidecar's whole share of a pooled
 * call before the lane: a pooled call was checked on every call, as a call in a backend session is).
 * Calls one after another; the sidecar's CPU per call from /proc, latency per call.
 *   node dist/bench/pooled-call-lane.js [--calls 200]
 * Writes bench/results/pooled-call-lane.json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'pooled-call-lane');
const POST_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const MODERN_HEADERS = { ...POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' };
const MODERN_META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 'p' };

interface Row {
  path: string;
  steps: number;
  p50: number;
  p99: number;
  sidecarCpuUsPerCall: number;
}

type Call = (id: number) => Promise<string>;

async function measure(path: string, steps: number, call: Call, calls: number, sidecarPids: number[]): Promise<Row> {
  const expected = `done after ${steps} steps`;
  for (let warm = 0; warm < 20; warm++) await call(warm);
  const cpuBefore = sidecarPids.reduce((sum, pid) => sum + cpuMs(pid), 0);
  const latencies: number[] = [];
  for (let index = 0; index < calls; index++) {
    const started = performance.now();
    const text = await call(1000 + index);
    latencies.push(performance.now() - started);
    if (!text.includes(expected)) throw new Error(`${path}: expected "${expected}", got ${text.slice(0, 300)}`);
  }
  const cpu = sidecarPids.reduce((sum, pid) => sum + cpuMs(pid), 0) - cpuBefore;
  const summary = summarize(latencies);
  return { path, steps, p50: summary.p50, p99: summary.p99, sidecarCpuUsPerCall: (cpu * 1000) / calls };
}

async function sessionCaller(url: string, args: Record<string, unknown>): Promise<Call> {
  const opened = await fetch(url, {
    method: 'POST',
    headers: POST_HEADERS,
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } }),
  });
  await opened.text();
  const headers = { ...POST_HEADERS, 'mcp-session-id': opened.headers.get('mcp-session-id')!, 'mcp-protocol-version': '2025-11-25' };
  await (await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).text();
  return async (id) =>
    (await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'asker__steps', arguments: args, _meta: { progressToken: 'p' } } }) })).text();
}

const modernCaller =
  (url: string, args: Record<string, unknown>): Call =>
  async (id) =>
    (await fetch(url, { method: 'POST', headers: MODERN_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'asker__steps', arguments: args, _meta: MODERN_META } }) })).text();

function markdown(rows: Row[], context: { measuredAt: string; loadAverage1m: number; calls: number }): string {
  const base = new Map(rows.filter((r) => r.path.startsWith('session')).map((r) => [r.steps, r]));
  const row = (r: Row) => {
    const against = base.get(r.steps);
    const ratio = against && !r.path.startsWith('session') ? ` (${(r.sidecarCpuUsPerCall / against.sidecarCpuUsPerCall).toFixed(1)}×)` : '';
    return `| ${r.path} | ${r.steps} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.sidecarCpuUsPerCall.toFixed(0)}${ratio} |`;
  };
  return [
    '# The pooled-call lane: sidecar cost per call',
    '',
    `Measured ${context.measuredAt} on ${os.availableParallelism()} cores (load average ${context.loadAverage1m}, a machine shared with other work), by \`node dist/bench/pooled-call-lane.js\`:`,
    `${context.calls} calls per row, one after another, of the SDK v1 backend's \`steps\` tool (N progress notifications, then the result).`,
    'Session client: a 2025-11-25 client in its own session; Envoy carries the call after one session check per call, which is all a',
    "pooled call cost the sidecar before the lane. Lane: a 2026-07-28 client's call, through the sidecar's pooled-call lane",
    '(docs/adr/0018-stream-relaying.md); "resumed": the backend closes the stream after the first step and the sidecar resumes it.',
    'Sidecar CPU per call from /proc (the one sidecar of the run), with its ratio to the session client of the same steps.',
    '',
    '| path | steps | p50 ms | p99 ms | sidecar CPU µs/call |',
    '| --- | --- | --- | --- | --- |',
    ...rows.map(row),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { calls: { type: 'string', default: '200' } } });
  const calls = Number(values.calls);
  await withAskerGateway(LOG_DIR, 'pooled', async ({ gateway, sidecarPids }) => {
    const rows: Row[] = [];
    for (const steps of [1, 10]) {
      const args = { steps, interval_ms: 0 };
      rows.push(await measure('session client (check only)', steps, await sessionCaller(gateway, args), calls, sidecarPids));
      rows.push(await measure('2026-07-28 client, lane', steps, modernCaller(gateway, args), calls, sidecarPids));
    }
    rows.push(await measure('2026-07-28 client, lane, resumed', 10, modernCaller(gateway, { steps: 10, interval_ms: 0, close_after: 1, close_anyway: true }), calls, sidecarPids));
    const context = { measuredAt: new Date().toISOString(), loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100, calls };
    fs.writeFileSync(projectPath('bench', 'results', 'pooled-call-lane.json'), `${JSON.stringify({ ...context, cores: os.availableParallelism(), rows }, null, 2)}\n`);
    fs.writeFileSync(projectPath('bench', 'results', 'pooled-call-lane.md'), markdown(rows, context));
    process.stdout.write(markdown(rows, context));
  });
}

void main();
