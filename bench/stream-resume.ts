import * as fs from 'node:fs';
import * as os from 'node:os';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { createParser } from 'eventsource-parser';
import { projectPath } from '../control-plane/shared/paths';
import { withAskerGateway } from './asker-gateway';
import { cpuMs } from './load/process-cpu';
import { summarize } from './load/stats';

/**
 * The cost of resuming a stream (docs/adr/0018-stream-relaying.md): a call of N progress steps ran to
 * its end; a client then resumes its stream from the first event id (a GET with Last-Event-ID) and
 * reads until the result, N events replayed. Directly at the backend (the SDK v1 server's own event
 * store), and through the gateway (Envoy's streams route, a sidecar that resumes the stream at the
 * backend in the client's session with it and renames each event). Latency per resume, and the
 * sidecar's CPU per resume.
 *   node dist/bench/stream-resume.js [--resumes 30]
 * Writes bench/results/stream-resume.json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'stream-resume');
const EVENT_COUNTS = [10, 100, 1000];

interface Row {
  path: string;
  events: number;
  p50: number;
  p99: number;
  sidecarCpuMsPerResume?: number;
}

/**
 * A finished call of `events` steps in a session of its own: the session, and the backend's first event
 * id of its stream. Steps 2 ms apart: the SDK's InMemoryEventStore orders events by id, whose time part is in ms
 * (events of one ms replay in random order).
 */
async function finishedCall(url: string, tool: string, events: number): Promise<{ sessionId: string; firstEventId: string; close: () => Promise<void> }> {
  const client = new Client({ name: 'stream-resume-bench', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  let firstEventId: string | undefined;
  await client.request({ method: 'tools/call', params: { name: tool, arguments: { steps: events, interval_ms: 2 } } }, CallToolResultSchema, {
    // The backend's first event id (through the gateway, after the gateway's own priming id, which names the call, not the backend's events).
    onresumptiontoken: (token) => void (/^mcpgw-call\.[^.]*$/.test(token) || (firstEventId ??= token)),
    onprogress: () => undefined,
    timeout: 60_000,
  });
  if (!firstEventId) throw new Error('the call’s stream carried no event id');
  return { sessionId: transport.sessionId!, firstEventId, close: () => client.close() };
}

/** One resume: a GET from the first event id, read until the call's result; ms. */
async function resumeOnce(url: string, sessionId: string, lastEventId: string, events: number): Promise<number> {
  const started = performance.now();
  const controller = new AbortController();
  const response = await fetch(url, {
    headers: { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-11-25', 'last-event-id': lastEventId },
    signal: controller.signal,
  });
  if (response.status !== 200) throw new Error(`resume answered HTTP ${response.status}: ${await response.text()}`);
  let replayed = 0;
  let done = false;
  const parser = createParser({
    onEvent: (event) => {
      if (event.data.includes('"result"')) done = true;
      else if (event.data.includes('notifications/progress')) replayed++;
    },
  });
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  while (!done) {
    const { value, done: ended } = await reader.read();
    if (ended) throw new Error('the resumed stream ended before the result');
    parser.feed(value);
  }
  const elapsed = performance.now() - started;
  controller.abort();
  await reader.cancel().catch(() => undefined);
  // The SDK's example store orders events by an id whose time part is in ms: two events of one ms (a
  // late timer) may replay out of order, and one before the resume point is skipped. Not the gateway's.
  if (replayed < events * 0.99) throw new Error(`replayed ${replayed} progress events, expected ${events}`);
  return elapsed;
}

async function measure(path: string, url: string, tool: string, events: number, resumes: number, sidecarPids: number[]): Promise<Row> {
  const call = await finishedCall(url, tool, events);
  try {
    for (let warm = 0; warm < 5; warm++) await resumeOnce(url, call.sessionId, call.firstEventId, events);
    const cpuBefore = sidecarPids.reduce((sum, pid) => sum + cpuMs(pid), 0);
    const latencies: number[] = [];
    for (let resume = 0; resume < resumes; resume++) latencies.push(await resumeOnce(url, call.sessionId, call.firstEventId, events));
    const summary = summarize(latencies);
    const cpu = sidecarPids.reduce((sum, pid) => sum + cpuMs(pid), 0) - cpuBefore;
    return { path, events, p50: summary.p50, p99: summary.p99, ...(sidecarPids.length > 0 && { sidecarCpuMsPerResume: cpu / resumes }) };
  } finally {
    await call.close();
  }
}

function markdown(rows: Row[], context: { measuredAt: string; loadAverage1m: number; resumes: number }): string {
  const row = (r: Row) => `| ${r.path} | ${r.events} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.sidecarCpuMsPerResume === undefined ? '–' : r.sidecarCpuMsPerResume.toFixed(2)} |`;
  return [
    '# Replay cost of a resumed stream',
    '',
    `Measured ${context.measuredAt} on ${os.availableParallelism()} cores (load average ${context.loadAverage1m}, a machine shared with other work), by \`node dist/bench/stream-resume.js\`:`,
    `a call of N progress steps ran to its end; a client then resumed its stream from the backend's first event id ${context.resumes} times, one after another,`,
    'each read until the result (N events replayed, then the result). Direct: a GET with Last-Event-ID at the backend (SDK v1,',
    'InMemoryEventStore). Gateway: the same GET through Envoy with the event id the gateway gave; a sidecar resumes the stream at the',
    'backend in the client’s session with it and names each event (docs/adr/0018-stream-relaying.md). Sidecar CPU per resume from /proc',
    '(the one sidecar of the run).',
    '',
    '| path | events replayed | p50 ms | p99 ms | sidecar CPU ms/resume |',
    '| --- | --- | --- | --- | --- |',
    ...rows.map(row),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { resumes: { type: 'string', default: '30' } } });
  const resumes = Number(values.resumes);
  await withAskerGateway(LOG_DIR, 'resume', async ({ gateway, backend, sidecarPids }) => {
    const rows: Row[] = [];
    for (const events of EVENT_COUNTS) {
      rows.push(await measure('direct', backend.url, 'steps', events, resumes, []));
      rows.push(await measure('gateway', gateway, 'asker__steps', events, resumes, sidecarPids));
    }
    const context = { measuredAt: new Date().toISOString(), loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100, resumes };
    fs.writeFileSync(projectPath('bench', 'results', 'stream-resume.json'), `${JSON.stringify({ ...context, cores: os.availableParallelism(), rows }, null, 2)}\n`);
    fs.writeFileSync(projectPath('bench', 'results', 'stream-resume.md'), markdown(rows, context));
    process.stdout.write(markdown(rows, context));
  });
}

void main();
