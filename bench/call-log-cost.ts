import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Worker } from 'node:worker_threads';
import { encode } from '@msgpack/msgpack';
import * as client from 'prom-client';
import { z } from 'zod';
import { CallLog, CallLogConsumer, CallLogWireRecord, CallMetrics, callLogDelivery } from '../control-plane/admin/call-log';
import { readCallLogStream, startCallLogReceiver } from '../control-plane/admin/call-log-receiver';
import { AUDIT_DEFAULTS, AuditLog } from '../control-plane/audit/audit-log';
import { projectPath } from '../control-plane/shared/paths';
import { Logger } from '../control-plane/shared/log';
import { spreadOf } from './load/stats';

/**
 * The control plane's CPU per call-log record, its receiving path alone (issue 10,
 * docs/adr/0008-data-path-lanes.md, "every process counted"): Forward-mode messages of records shaped
 * as Envoy's fluentd logger sends a bench call (the record of the listener's CALL_LOG_RECORD with the
 * audit's fields, absent values nil), read by readCallLogStream, checked and given to the consumers
 * the control plane has (CallLog with its metrics, and the audit writing to a file), 40 records a
 * message by default (what one of Envoy's two workers batches in 250 ms at 300 calls/s; --per-message
 * to vary it: the per-message part of the cost, without a socket). No Envoy, no socket, no other process:
 * main-thread CPU per record is steady on a loaded machine, so two revisions compare here when a full
 * run cannot tell them apart.
 * With --no-audit the same path without the audit consumer: the difference is the audit's price.
 * With --socket the messages come over loopback TCP from another thread, each in a wake-up of its own
 * (no TLS): with --per-message, what a batch costs beside its records. The process figure then also
 * counts the sending thread: read the main thread's.
 *   node dist/bench/call-log-cost.js [--records N] [--per-message N] [--no-audit] [--socket]      (writes nothing; prints the figures)
 */

const RECORDS_PER_MESSAGE = 40;
const DEFAULT_RECORDS = 20_000;
const Option = z.union([
  z.tuple([z.enum(['--records', '--per-message']), z.coerce.number().int().positive()]),
  z.tuple([z.enum(['--no-audit', '--socket'])]),
]);

/** With --socket: the pause between two messages, so that each arrives in a wake-up of its own, as Envoy's batches do. */
const SOCKET_GAP_MS = 2;

/**
 * Sends the messages to the receiver over loopback TCP from a thread of its own (its CPU is not the
 * main thread's), one every SOCKET_GAP_MS.
 */
const SENDER = `
const net = require('node:net');
const { workerData } = require('node:worker_threads');
const socket = net.connect(workerData.port, '127.0.0.1', async () => {
  for (const message of workerData.messages) {
    socket.write(Buffer.from(message));
    await new Promise((resolve) => setTimeout(resolve, workerData.gapMs));
  }
  socket.end();
});`;
const ROUNDS = 5;

/** A bench call's record as Envoy formats it, the audit on. */
function benchRecord(index: number): Record<keyof CallLogWireRecord, unknown> {
  return {
    script: {
      route: 'bench', method: 'tools/call', backend: 'bench', tool: 'echo', rpc_id: index, rpc_id_json: String(index), digest: '3q2+7wABAgMEBQYHCAkKCw',
      session_present: true, arguments: '{"text":"bench"}', quota_tool_scope: 'bench/echo', started_ms: 1_796_084_749_370 + index, credential: 'none', outcome: 'ok',
    },
    rpc_method: 'tools/call', lease: null, start_ms: String(1_796_084_749_370 + index), duration_ms: 2, status: 200, details: 'via_upstream', flags: '-', attempts: 1,
    envoy_route: 'bench/call/bench', upstream: '127.0.0.1:25333', upstream_tls_failure: null, limit: null, ratelimit_limit: null,
    rpc_tool: 'bench__echo', request_id: '77eb8aa0-044d-4b7e-82a2-639dd12fcd0d', path: '/mcp/bench', claim_iss: null, claim_sub: null, claim_client_id: null, claim_azp: null,
  };
}

const revision = () => execFileSync('git', ['-C', projectPath(), 'log', '-1', '--format=%h'], { encoding: 'utf8' }).trim();

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

async function* oneMessageATurn(messages: Buffer[]): AsyncGenerator<Buffer> {
  for (const message of messages) {
    yield message;
    // As from a socket: each message in a turn of its own.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Main-thread and whole-process CPU µs per record of one pass over `messages`. */
async function oneRound(messages: Buffer[], records: number, auditFile: string | undefined, socket: boolean): Promise<{ mainThread: number; process: number }> {
  const registry = new client.Registry();
  const audit = auditFile ? new AuditLog({ kind: 'file', file: auditFile, rotateSize: AUDIT_DEFAULTS.rotateSize, maxFiles: 1 }, registry, quiet) : undefined;
  const consumers: CallLogConsumer[] = [new CallLog([new CallMetrics(registry)]), ...(audit ? [audit] : [])];
  const deliver = callLogDelivery(consumers, quiet);
  let delivered = 0;
  const thread = process.threadCpuUsage();
  const whole = process.cpuUsage();
  if (socket) {
    let allDelivered: () => void = () => undefined;
    const done = new Promise<void>((resolve) => (allDelivered = resolve));
    const receiver = await startCallLogReceiver({
      address: { host: '127.0.0.1', port: 0 },
      maxMessageBytes: 1 << 20,
      deliver: (batch) => {
        delivered += batch.length;
        deliver(batch);
        if (delivered === records) allDelivered();
      },
      log: quiet,
    });
    const sender = new Worker(SENDER, { eval: true, workerData: { port: receiver.port, messages, gapMs: SOCKET_GAP_MS } });
    await done;
    await sender.terminate();
    await receiver.close();
  } else {
    await readCallLogStream(oneMessageATurn(messages), (batch) => ((delivered += batch.length), deliver(batch)), 1 << 20);
  }
  await audit?.close();
  const threadUsed = process.threadCpuUsage(thread);
  const wholeUsed = process.cpuUsage(whole);
  if (delivered !== records) throw new Error(`${delivered} of ${records} records delivered`);
  return { mainThread: (threadUsed.user + threadUsed.system) / records, process: (wholeUsed.user + wholeUsed.system) / records };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const options = [];
  const takesValue = (arg: string | undefined) => arg === '--records' || arg === '--per-message';
  for (let at = 0; at < args.length; at += takesValue(args[at]) ? 2 : 1) options.push(Option.safeParse(takesValue(args[at]) ? args.slice(at, at + 2) : [args[at]]));
  if (options.some((option) => !option.success)) {
    process.stderr.write('usage: node dist/bench/call-log-cost.js [--records N] [--per-message N] [--no-audit] [--socket]\n');
    process.exit(2);
  }
  const given = options.map((option) => option.data!);
  const records = given.find((option) => option[0] === '--records')?.[1] ?? DEFAULT_RECORDS;
  const perMessage = given.find((option) => option[0] === '--per-message')?.[1] ?? RECORDS_PER_MESSAGE;
  const audit = !given.some((option) => option[0] === '--no-audit');
  const socket = given.some((option) => option[0] === '--socket');
  const messages: Buffer[] = [];
  for (let first = 0; first < records; first += perMessage) {
    const entries = Array.from({ length: Math.min(perMessage, records - first) }, (_, offset) => [Math.floor(Date.now() / 1000), benchRecord(first + offset)]);
    messages.push(Buffer.from(encode(['mcpgw_calls', entries])));
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-call-log-cost-'));
  try {
    const rounds: { mainThread: number; process: number }[] = [];
    // The first round warms the JIT and is left out.
    for (let round = 0; round <= ROUNDS; round++) {
      const measured = await oneRound(messages, records, audit ? path.join(dir, `audit-${round}.jsonl`) : undefined, socket);
      if (round > 0) rounds.push(measured);
    }
    const median = (pick: (round: { mainThread: number; process: number }) => number) => spreadOf(rounds.map(pick));
    const main = median((round) => round.mainThread);
    const whole = median((round) => round.process);
    process.stdout.write(
      `call-log receiving path at ${revision()}, ${records} records, ${perMessage} a message, ${audit ? 'audit to a file' : 'no audit'}${socket ? `, over loopback TCP one every ${SOCKET_GAP_MS} ms` : ''}, ${ROUNDS} rounds, load average ${os.loadavg()[0].toFixed(2)}:\n` +
        `  main thread ${main.median.toFixed(1)} µs per record (${main.min.toFixed(1)}–${main.max.toFixed(1)}); process ${whole.median.toFixed(1)} µs (${whole.min.toFixed(1)}–${whole.max.toFixed(1)})\n`,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench call-log-cost] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
