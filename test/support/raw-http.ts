import * as http2 from 'node:http2';
import * as net from 'node:net';

/** What a client that speaks HTTP by hand gets back: the status line's code, headers and body (JSON when it is). */
export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** How the exchange ended: the peer closed, or the test gave up waiting. */
  ended: 'closed' | 'timeout';
  elapsedMs: number;
}

/** Parses one HTTP/1.x response (Content-Length or close-delimited; Envoy's local replies are both). */
function parseResponse(raw: string): Pick<RawAnswer, 'status' | 'headers' | 'body'> {
  const headEnd = raw.indexOf('\r\n\r\n');
  const head = headEnd < 0 ? raw : raw.slice(0, headEnd);
  const [statusLine, ...lines] = head.split('\r\n');
  const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  return { status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0), headers, body: headEnd < 0 ? '' : raw.slice(headEnd + 4) };
}

/**
 * Sends bytes as they are over a new connection (what no HTTP library would send: HTTP/1.0, conflicting
 * lengths, a request that stops half-way) and reads until the peer closes, or `waitMs`.
 */
export function sendRaw(port: number, parts: (string | { pauseMs: number })[], waitMs = 5_000): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const startedAt = performance.now();
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    let settled = false;
    const finish = (ended: RawAnswer['ended']) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ ...parseResponse(received), ended, elapsedMs: performance.now() - startedAt });
    };
    const timer = setTimeout(() => finish('timeout'), waitMs);
    socket.on('data', (chunk) => (received += chunk.toString('utf8')));
    socket.on('close', () => finish('closed'));
    socket.on('error', () => finish('closed'));
    socket.on('connect', async () => {
      for (const part of parts) {
        if (settled) return;
        if (typeof part === 'string') socket.write(part);
        else await new Promise((resolve) => setTimeout(resolve, part.pauseMs));
      }
    });
  });
}

/**
 * One POST over HTTP/2 with prior knowledge (h2c), its body sent in `chunks` (every `pauseMs`), without
 * a content-length unless given: the status, body and whether Envoy answered before the body was all sent.
 */
export async function postHttp2(
  port: number,
  path: string,
  chunks: Buffer[],
  options: { contentLength?: number; pauseMs?: number; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: string; chunksSent: number }> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    return await new Promise((resolve, reject) => {
      const stream = session.request({
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...(options.contentLength !== undefined && { 'content-length': String(options.contentLength) }),
        ...options.headers,
      });
      let status = 0;
      let body = '';
      let sent = 0;
      let answered = false;
      stream.on('response', (headers) => {
        status = Number(headers[':status']);
        answered = true;
      });
      stream.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      stream.on('end', () => resolve({ status, body, chunksSent: sent }));
      // Envoy resets the stream once it has answered a request it refused mid-body: the answer stands.
      stream.on('error', (error) => (answered ? resolve({ status, body, chunksSent: sent }) : reject(error)));
      void (async () => {
        for (const chunk of chunks) {
          if (answered || stream.destroyed) return;
          await new Promise<void>((done) => (stream.write(chunk) ? done() : stream.once('drain', done)));
          sent++;
          if (options.pauseMs) await new Promise((done) => setTimeout(done, options.pauseMs));
        }
        if (!answered && !stream.destroyed) stream.end();
      })().catch(() => undefined);
    });
  } finally {
    session.destroy();
  }
}
