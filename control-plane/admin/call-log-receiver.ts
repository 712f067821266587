import * as net from 'node:net';
import * as tls from 'node:tls';
import { DecoderOptions, decodeMultiStream } from '@msgpack/msgpack';
import { z } from 'zod';
import { InternalTls } from '../shared/internal-tls';
import { Logger } from '../shared/log';

/**
 * The receiving end of Envoy's call log as `envoy.access_loggers.fluentd` sends it
 * (docs/adr/0008-data-path-lanes.md, "The two access logs", session 6): a TCP stream of Fluentd
 * Forward-mode messages in MessagePack, `[tag, [[time, record], …]]`, one per flush, no `chunk`
 * option and so no acknowledgement to send back. Each record is a map of the format strings the
 * listener names (the call script's record one map among them). A peer that sends what is not such a stream, or
 * more than a message may hold before one completes, is dropped with a log line.
 */

/** One call-log record: a map by its keys (each record is checked against its own schema where it is read: call-log.ts). */
export type CallLogRecord = Record<string, unknown>;

/**
 * Only that a record is a map: its keys and values are checked once, by the schema of the one who reads
 * it (call-log.ts). A z.record here walked and copied every record's 20–38 keys a second time, about
 * 4 µs per call of the control plane's CPU and as much garbage (docs/adr/0008-data-path-lanes.md).
 */
const isMap = (value: unknown): value is CallLogRecord => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Forward mode: the tag, then the entries of one flush, each its time (seconds, or an EventTime ext) and its record. */
const forwardMessageSchema = z.tuple([z.string(), z.array(z.tuple([z.unknown(), z.custom<CallLogRecord>(isMap, 'a record must be a map')]))]);

/** Counts the bytes fed to the decoder since it last completed a message, and refuses to go past the bound. */
async function* bounded(socket: AsyncIterable<Buffer>, pending: { bytes: number }, maxMessageBytes: number): AsyncGenerator<Buffer> {
  for await (const chunk of socket) {
    pending.bytes += chunk.length;
    if (pending.bytes > maxMessageBytes) throw new Error(`more than ${maxMessageBytes} bytes without a complete message`);
    yield chunk;
  }
}

/**
 * Reads one connection's Forward-mode messages, each one's records given to `deliver`, until it ends
 * or breaks its contract. `maxMessageBytes`: what one message may hold (Envoy flushes at its
 * `buffer_size_bytes`, plus the record that went past it); the decoder refuses any header that
 * announces more.
 */
export async function readCallLogStream(socket: AsyncIterable<Buffer>, deliver: (records: CallLogRecord[]) => void, maxMessageBytes: number): Promise<void> {
  const pending = { bytes: 0 };
  const limits: DecoderOptions = { maxStrLength: maxMessageBytes, maxBinLength: maxMessageBytes, maxExtLength: 64, maxArrayLength: maxMessageBytes, maxMapLength: 256 };
  for await (const message of decodeMultiStream(bounded(socket, pending, maxMessageBytes), limits)) {
    pending.bytes = 0;
    const parsed = forwardMessageSchema.safeParse(message);
    if (!parsed.success) throw new Error(`not a Forward-mode message: ${parsed.error.issues[0]?.message ?? 'unexpected shape'}`);
    deliver(parsed.data[1].map(([, record]) => record));
  }
}

export interface CallLogReceiver {
  port: number;
  close(): Promise<void>;
}

/**
 * Listens for Envoy's call log: with the closed inside's certificates (docs/adr/0017-closed-inside.md)
 * only a peer holding an Envoy certificate of the internal CA is read; without them, as the gRPC
 * server, on the address given (loopback unless the operator said otherwise).
 */
export async function startCallLogReceiver(options: {
  address: { host: string; port: number };
  internalTls?: InternalTls;
  maxMessageBytes: number;
  deliver: (records: CallLogRecord[]) => void;
  log: Logger;
}): Promise<CallLogReceiver> {
  const { internalTls, log } = options;
  const sockets = new Set<net.Socket>();
  const read = (socket: net.Socket) => {
    if (socket.destroyed) return;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    readCallLogStream(socket, options.deliver, options.maxMessageBytes).catch((error: Error) => {
      log.warn('dropped a call-log connection that broke the Forward protocol', { peer: socket.remoteAddress, problem: error.message });
      socket.destroy();
    });
  };
  let server: net.Server;
  if (internalTls) {
    const secure = tls.createServer(internalTls.serverOptions());
    internalTls.follow(secure, 'envoy');
    secure.on('secureConnection', read);
    secure.on('tlsClientError', (error, socket) => log.debug('a call-log TLS handshake failed', { peer: socket.remoteAddress, problem: error.message }));
    server = secure;
  } else {
    server = net.createServer(read);
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.address.port, options.address.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (error) => log.warn('the call-log listener failed', { error: error.message }));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
