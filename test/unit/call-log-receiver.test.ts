import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { encode } from '@msgpack/msgpack';
import { CallLogRecord, readCallLogStream, startCallLogReceiver } from '../../control-plane/admin/call-log-receiver';
import { Logger } from '../../control-plane/shared/log';

/** Records shaped as Envoy's fluentd logger sends them: numbers as numbers, an absent value as nil. */
const calls: CallLogRecord[] = [
  { route: 'a', backend: 'weather', tool: 'forecast', outcome: 'ok', status: 200, duration_ms: 12, flags: '-', lease: null },
  { route: 'a', backend: 'weather', tool: 'fail', outcome: null, status: 502, duration_ms: 3, flags: 'UpstreamConnectionFailure', answered: false },
  { route: 'b', backend: 'search', tool: 'ünïcode ✓', outcome: 'denied', status: 200, duration_ms: 0, flags: '-', reason: 'policy' },
];

/** Two Forward-mode messages, as two flushes of Envoy's buffer. */
const stream = Buffer.concat([
  encode(['mcpgw_calls', [[1764540000, calls[0]], [1764540000, calls[1]]]]),
  encode(['mcpgw_calls', [[1764540001, calls[2]]]]),
]);

async function* chunksOf(bytes: Buffer, cuts: number[]): AsyncGenerator<Buffer> {
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    yield bytes.subarray(from, cut);
    from = cut;
  }
}

/** What one message may hold here. */
const MAX_MESSAGE_BYTES = 1024 * 1024;

async function readAll(chunks: AsyncIterable<Buffer>): Promise<CallLogRecord[][]> {
  const batches: CallLogRecord[][] = [];
  await readCallLogStream(chunks, (records) => batches.push(records), MAX_MESSAGE_BYTES);
  return batches;
}

describe('the call log as Envoy\'s fluentd logger sends it', () => {
  it('reads every record whatever the byte boundaries of the stream (each one cut, and byte by byte)', async () => {
    for (let cut = 1; cut < stream.length; cut++) {
      expect(await readAll(chunksOf(stream, [cut]))).toEqual([calls.slice(0, 2), calls.slice(2)]);
    }
    const everyByte = Array.from({ length: stream.length - 1 }, (_, index) => index + 1);
    expect(await readAll(chunksOf(stream, everyByte))).toEqual([calls.slice(0, 2), calls.slice(2)]);
  });

  it('reads the bytes Envoy 1.40 sent, cut at every byte boundary', async () => {
    // Captured from Envoy 1.40's fluentd logger (envoy-1.40-fluentd-capture.yaml): three flushes of
    // five requests; a time string as a string, counts as numbers, an absent value as nil.
    const fromEnvoy = fs.readFileSync(path.join(__dirname, '../fixtures/call-log/envoy-1.40-fluentd-forward.bin'));
    const whole = await readAll(chunksOf(fromEnvoy, []));
    expect(whole.map((batch) => batch.map((record) => record.tool))).toEqual([['forecast-1 ✓'], ['forecast-2 ✓', 'forecast-3 ✓'], ['t4', 't5']]);
    expect(whole[0][0]).toMatchObject({ route: 'a/call/weather', absent: null, attempts: 0, status: 200, flags: '-', details: 'direct_response', start_ms: expect.stringMatching(/^\d{13}$/) });
    for (let cut = 1; cut < fromEnvoy.length; cut++) {
      expect(await readAll(chunksOf(fromEnvoy, [cut, Math.min(cut + 3, fromEnvoy.length - 1)].filter((at, index, all) => index === 0 || at > all[index - 1])))).toEqual(whole);
    }
  });

  it('refuses what is not a Forward-mode message, and a message that never completes within the bound', async () => {
    await expect(readAll(chunksOf(Buffer.from(encode({ not: 'forward' })), []))).rejects.toThrow(/not a Forward-mode message/);
    await expect(readAll(chunksOf(Buffer.from(encode(['tag', [[1, 'not a map']]])), []))).rejects.toThrow(/not a Forward-mode message/);
    await expect(readAll(chunksOf(Buffer.from([0xc1]), []))).rejects.toThrow();
    // A str32 header announcing 8 MiB: refused at the header, before the bytes arrive.
    await expect(readAll(chunksOf(Buffer.from([0x92, 0xdb, 0x00, 0x80, 0x00, 0x00]), []))).rejects.toThrow();
    // Many small pieces of one array that never closes.
    const endless = (async function* () {
      yield Buffer.from([0x92, 0xa1, 0x74, 0xdd, 0x00, 0x01, 0x00, 0x00]);
      for (;;) yield Buffer.from(encode([1, { filler: 'x'.repeat(1000) }]));
    })();
    await expect(readAll(endless)).rejects.toThrow(new RegExp(`more than ${MAX_MESSAGE_BYTES} bytes`));
  });
});

describe('the call-log listener', () => {
  it('drops a peer that sends garbage with a log line and keeps reading the others', async () => {
    const warnings: string[] = [];
    const log: Logger = { debug: () => undefined, info: () => undefined, error: () => undefined, warn: (message) => warnings.push(message) };
    const delivered: CallLogRecord[] = [];
    const receiver = await startCallLogReceiver({ address: { host: '127.0.0.1', port: 0 }, maxMessageBytes: MAX_MESSAGE_BYTES, deliver: (records) => delivered.push(...records), log });
    try {
      const connect = () => net.connect(receiver.port, '127.0.0.1');
      const bad = connect();
      const closed = new Promise((resolve) => bad.once('close', resolve));
      bad.write(Buffer.from([0xc1, 0xc1, 0xc1]));
      await closed;
      expect(warnings).toEqual(['dropped a call-log connection that broke the Forward protocol']);

      const good = connect();
      good.write(stream.subarray(0, 7));
      good.write(stream.subarray(7));
      await new Promise<void>((resolve) => {
        const poll = setInterval(() => delivered.length === 3 && (clearInterval(poll), resolve()), 10);
      });
      expect(delivered).toEqual(calls);
      good.destroy();
    } finally {
      await receiver.close();
    }
  });
});
