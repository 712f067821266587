import {
  JsonResponseRewriter,
  SseResponseRewriter,
  annotateMessage,
  parseServerRequestId,
  saysSessionUnknown,
  scopeServerRequestId,
} from '../../control-plane/sidecar/call-response';

const call = { rpcId: 7, backend: 'jobs', tool: 'run_job' };
const facts = { attempts: 2, elapsedMs: () => 41 };
const outcome = { outcome: 'ok', backend: 'jobs', tool: 'run_job', attempts: 2, elapsed_ms: 41, fallback_used: false };
const annotate = (message: unknown) => annotateMessage(message, call, facts);

describe('outcome of a tools/call answer', () => {
  it.each<[string, unknown, unknown]>([
    [
      'a result gets the outcome in _meta, next to what the backend put there',
      { jsonrpc: '2.0', id: 7, result: { content: [], _meta: { trace: 'x' } } },
      { jsonrpc: '2.0', id: 7, result: { content: [], _meta: { trace: 'x', 'mcpgw/outcome': outcome } } },
    ],
    [
      "a backend's own error gets a failed outcome in data",
      { jsonrpc: '2.0', id: 7, error: { code: -32602, message: 'bad steps' } },
      { jsonrpc: '2.0', id: 7, error: { code: -32602, message: 'bad steps', data: { 'mcpgw/outcome': { ...outcome, outcome: 'failed', last_error: 'bad steps' } } } },
    ],
    [
      'a request from the backend gets a scoped id',
      { jsonrpc: '2.0', id: 0, method: 'sampling/createMessage', params: {} },
      { jsonrpc: '2.0', id: 'mcpgw:jobs:0', method: 'sampling/createMessage', params: {} },
    ],
    ['an input_required answer (the call goes on) is left alone', { jsonrpc: '2.0', id: 7, result: { resultType: 'input_required', requestState: 's' } }, undefined],
    ['an answer to another id is left alone', { jsonrpc: '2.0', id: 8, result: {} }, undefined],
    ['a notification is left alone', { jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } }, undefined],
    ["Envoy's own failure reply keeps its outcome", { jsonrpc: '2.0', id: 7, error: { code: -32004, message: 'x', data: { outcome: 'failed' } } }, undefined],
    ['a degraded fallback keeps its outcome', { jsonrpc: '2.0', id: 7, result: { _meta: { 'mcpgw/outcome': { outcome: 'degraded' } } } }, undefined],
    ["a backend's error data that is not an object stays as sent", { jsonrpc: '2.0', id: 7, error: { code: 1, message: 'x', data: 'text' } }, undefined],
    ['something that is not JSON-RPC', { id: 7, result: {} }, undefined],
  ])('%s', (_case, message, expected) => {
    expect(annotate(message)).toEqual(expected);
  });

  it.each<[string | number]>([[0], [42], ['req-1'], ['with:colons']])('scopes and unscopes id %p', (id) => {
    expect(parseServerRequestId(scopeServerRequestId('jobs', id))).toEqual({ backend: 'jobs', id });
  });

  it.each([[7], ['7'], ['mcpgw:jobs:{"a":1}'], ['mcpgw:Jobs:1'], ['mcpgw:jobs:not json']])('does not take %p for a scoped id', (id) => {
    expect(parseServerRequestId(id)).toBeUndefined();
  });
});

describe('SSE answers, rewritten event by event', () => {
  const final = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [] } });
  const progress = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } });
  const annotatedFinal = `data: ${JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [], _meta: { 'mcpgw/outcome': outcome } } })}`;

  function run(chunks: string[]): string[] {
    const rewriter = new SseResponseRewriter(annotate);
    return chunks.map((chunk, index) => rewriter.push(Buffer.from(chunk), index === chunks.length - 1).toString('utf8'));
  }

  it('passes other events byte for byte and as soon as they are complete', () => {
    expect(run([`event: message\ndata: ${progress}\n\n`, `event: message\nid: e2\ndata: ${final}\n\n`])).toEqual([
      `event: message\ndata: ${progress}\n\n`,
      `event: message\nid: e2\n${annotatedFinal}\n\n`,
    ]);
  });

  it('holds back only an incomplete event, across any split', () => {
    const stream = `event: message\ndata: ${progress}\n\nevent: message\ndata: ${final}\n\n`;
    for (let cut = 1; cut < stream.length; cut += 7) {
      const out = run([stream.slice(0, cut), stream.slice(cut)]).join('');
      expect(out).toBe(`event: message\ndata: ${progress}\n\nevent: message\n${annotatedFinal}\n\n`);
    }
  });

  it('reads CRLF line ends, data split over several lines, and a priming event without data', () => {
    const split = `{"jsonrpc":"2.0",\r\ndata: "id":7,"result":{"content":[]}}`;
    expect(run([`id: p\r\ndata:\r\n\r\n`, `data: ${split}\r\n\r\n`]).join('')).toBe(`id: p\r\ndata:\r\n\r\n${annotatedFinal}\n\n`);
  });

  it('keeps multi-byte characters split between chunks intact', () => {
    const text = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { data: '날씨 ☀' } });
    const bytes = Buffer.from(`data: ${text}\n\n`);
    const rewriter = new SseResponseRewriter(annotate);
    const out = Buffer.concat([rewriter.push(bytes.subarray(0, 30), false), rewriter.push(bytes.subarray(30), true)]);
    expect(out.equals(bytes)).toBe(true);
  });

  it('sends on, byte for byte, an event that outgrows the limit and the rest of the stream', () => {
    const rewriter = new SseResponseRewriter(annotate, 64);
    const head = Buffer.from(`data: ${progress}\n\ndata: ${'날'.repeat(30)}`);
    const tail = Buffer.from(`${'x'.repeat(10)}\n\ndata: ${final}\n\n`);
    // Split inside a multi-byte character, so that nothing may be decoded early.
    const out = [rewriter.push(head.subarray(0, head.length - 1), false), rewriter.push(Buffer.concat([head.subarray(head.length - 1), tail]), true)];
    expect(Buffer.concat(out).equals(Buffer.concat([head, tail]))).toBe(true);
    // Nothing waits for the end: once over the limit, what was held goes on at once (the split character's first bytes too).
    expect(out[0].equals(head.subarray(0, head.length - 1))).toBe(true);
  });

  it('sends on an unfinished event when the stream ends, and data that is not JSON untouched', () => {
    expect(run(['data: not json\n\n', 'data: {"half"']).join('')).toBe('data: not json\n\ndata: {"half"');
  });
});

describe('JSON answers', () => {
  const answer = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [] } });

  it('are held until complete, then annotated', () => {
    const rewriter = new JsonResponseRewriter(annotate);
    expect(rewriter.push(Buffer.from(answer.slice(0, 10)), false).length).toBe(0);
    const out = JSON.parse(rewriter.push(Buffer.from(answer.slice(10)), true).toString('utf8'));
    expect(out.result._meta['mcpgw/outcome']).toEqual(outcome);
  });

  it('pass untouched past the size limit, without losing a byte', () => {
    const rewriter = new JsonResponseRewriter(annotate, 16);
    const out = [answer.slice(0, 10), answer.slice(10, 30), answer.slice(30)].map((part, index, all) =>
      rewriter.push(Buffer.from(part), index === all.length - 1).toString('utf8'),
    );
    expect(out).toEqual(['', answer.slice(0, 30), answer.slice(30)]);
  });

  it('pass untouched when they are not JSON', () => {
    expect(new JsonResponseRewriter(annotate).push(Buffer.from('oops'), true).toString('utf8')).toBe('oops');
  });
});

describe('a backend that does not know the session', () => {
  it.each<[string, number, string | undefined, boolean]>([
    ['404, as the spec says', 404, undefined, true],
    ["the SDK examples' 400", 400, '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}', true],
    ["the SDK's 400 for a call without initialize", 400, '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}', true],
    ['another 400', 400, '{"jsonrpc":"2.0","error":{"code":-32602,"message":"bad arguments"},"id":1}', false],
    ['a 400 that is not JSON', 400, 'no session', false],
    ['a 500 about sessions', 500, '{"error":{"message":"session store down"}}', false],
  ])('%s', (_case, status, body, unknown) => {
    expect(saysSessionUnknown(status, body === undefined ? undefined : Buffer.from(body))).toBe(unknown);
  });
});
