import { JsonObject, JsonRpcId, isObject } from './json-rpc';

/** Where a call's outcome goes: `result._meta` of a result, `error.data` of a backend's own error. */
export const OUTCOME_META_KEY = 'mcpgw/outcome';

/** The reliability seed's outcome vocabulary (docs/errors.md). */
export type CallOutcomeName = 'ok' | 'failed' | 'degraded' | 'denied';

/** The reliability seed's per-call metadata (docs/errors.md), as the caller sees it. */
export interface CallOutcome {
  outcome: 'ok' | 'failed';
  backend: string;
  tool: string;
  attempts: number;
  elapsed_ms: number;
  fallback_used: false;
  /** The backend's own JSON-RPC error message, when it answered with one. */
  last_error?: string;
}

/** What the response path knows about the tools/call it carries. */
export interface ProxiedToolCall {
  rpcId: JsonRpcId;
  backend: string;
  tool: string;
  /** Asked in MCP 2026-07-28, whose results carry a resultType. */
  modern?: boolean;
}

export interface ResponseFacts {
  attempts: number;
  elapsedMs: () => number;
}

/** ok, or failed with the last error; degraded (fallback) answers come from Envoy's local replies. */
export function outcomeOf(call: ProxiedToolCall, facts: ResponseFacts, lastError?: string): CallOutcome {
  return {
    outcome: lastError === undefined ? 'ok' : 'failed',
    backend: call.backend,
    tool: call.tool,
    attempts: facts.attempts,
    elapsed_ms: facts.elapsedMs(),
    fallback_used: false,
    ...(lastError !== undefined && { last_error: lastError }),
  };
}


/**
 * Gives the gateway's id to a request a backend sends its client (sampling, elicitation, roots) inside
 * a tools/call stream, so the client's answer can be routed back to that backend: ids of different
 * backends would collide, and any sidecar replica must be able to route the answer without shared state.
 */
export function scopeServerRequestId(backend: string, id: string | number): string {
  return `mcpgw:${backend}:${JSON.stringify(id)}`;
}

/** The backend and its own id behind a scoped id; undefined for an id the gateway did not hand out. */
export function parseServerRequestId(id: unknown): { backend: string; id: string | number } | undefined {
  if (typeof id !== 'string') return undefined;
  const match = /^mcpgw:([a-z0-9_]+):(.+)$/s.exec(id);
  if (!match) return undefined;
  try {
    const own = JSON.parse(match[2]) as unknown;
    return typeof own === 'string' || typeof own === 'number' ? { backend: match[1], id: own } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Rewrites one JSON-RPC message of a tools/call response; undefined leaves it untouched. The final
 * response gets the call's outcome; requests from the backend get scoped ids. An outcome already
 * present (Envoy's own JSON-RPC replies carry theirs) is never overwritten.
 */
export function annotateMessage(message: unknown, call: ProxiedToolCall, facts: ResponseFacts): JsonObject | undefined {
  if (!isObject(message) || message.jsonrpc !== '2.0') return undefined;
  if (typeof message.method === 'string') {
    const id = message.id;
    return typeof id === 'string' || typeof id === 'number' ? { ...message, id: scopeServerRequestId(call.backend, id) } : undefined;
  }
  if (message.id !== call.rpcId) return undefined;
  const outcome = (lastError?: string) => outcomeOf(call, facts, lastError);
  if (isObject(message.result)) {
    const meta = isObject(message.result._meta) ? message.result._meta : {};
    // A stateless backend asking the client for input: the call is not over, it has no outcome yet.
    if (OUTCOME_META_KEY in meta || message.result.resultType === 'input_required') return undefined;
    const resultType = call.modern && message.result.resultType === undefined ? { resultType: 'complete' } : {};
    return { ...message, result: { ...resultType, ...message.result, _meta: { ...meta, [OUTCOME_META_KEY]: outcome() } } };
  }
  if (isObject(message.error)) {
    const data = message.error.data;
    // Envoy's replies (docs/errors.md) carry the outcome at the top of data; a backend's own data that is not an object stays as sent.
    if ((data !== undefined && !isObject(data)) || (isObject(data) && ('outcome' in data || OUTCOME_META_KEY in data))) return undefined;
    const message_ = typeof message.error.message === 'string' ? message.error.message : 'error';
    return { ...message, error: { ...message.error, data: { ...(data ?? {}), [OUTCOME_META_KEY]: outcome(message_) } } };
  }
  return undefined;
}

/**
 * A backend's answer meaning it does not know the session a call came in, or wants one, so it ran
 * nothing: 404, as the spec says, or the 400 "No valid session ID" / "Server not initialized" of
 * servers built on the MCP SDK and its examples (server-everything among them).
 */
export function saysSessionUnknown(status: number, body?: Buffer): boolean {
  if (status === 404) return true;
  if (status !== 400 || !body) return false;
  try {
    const message = (JSON.parse(body.toString('utf8')) as { error?: { message?: unknown } }).error?.message;
    return typeof message === 'string' && /session|not initialized/i.test(message);
  } catch {
    return false;
  }
}

/**
 * The outcome a final answer carries, once annotated: ours in `_meta` or `error.data`, or the one
 * at the top of `error.data` of Envoy's failure replies. undefined for any other message.
 */
export function finalOutcome(message: unknown, rpcId: JsonRpcId): CallOutcomeName | undefined {
  if (!isObject(message) || message.id !== rpcId || typeof message.method === 'string') return undefined;
  const carried = isObject(message.result) ? message.result._meta : isObject(message.error) ? message.error.data : undefined;
  if (!isObject(carried)) return isObject(message.error) ? 'failed' : undefined;
  const outcome = isObject(carried[OUTCOME_META_KEY]) ? carried[OUTCOME_META_KEY].outcome : carried.outcome;
  return outcome === 'ok' || outcome === 'failed' || outcome === 'degraded' || outcome === 'denied' ? outcome : undefined;
}

export type MessageRewrite = (message: unknown) => JsonObject | undefined;

/** Rewrites a response body as it passes, chunk by chunk; each call returns the bytes to send on now. */
export interface ResponseRewriter {
  push(chunk: Buffer, endOfStream: boolean): Buffer;
}

/** Past this size an answer (JSON), or one event of it (SSE), is sent on untouched rather than held in the sidecar's memory. */
const MAX_HELD_BYTES = 16 * 1024 * 1024;

/** A JSON answer is one message: held until complete, then rewritten once. */
export class JsonResponseRewriter implements ResponseRewriter {
  private held: Buffer[] = [];
  private heldBytes = 0;
  private passThrough = false;

  constructor(
    private readonly rewrite: MessageRewrite,
    private readonly maxBytes = MAX_HELD_BYTES,
  ) {}

  push(chunk: Buffer, endOfStream: boolean): Buffer {
    if (this.passThrough) return chunk;
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes > this.maxBytes) {
      this.passThrough = true;
      return this.release();
    }
    if (!endOfStream) return Buffer.alloc(0);
    const body = this.release();
    try {
      const rewritten = this.rewrite(JSON.parse(body.toString('utf8')));
      return rewritten ? Buffer.from(JSON.stringify(rewritten)) : body;
    } catch {
      return body;
    }
  }

  private release(): Buffer {
    const body = Buffer.concat(this.held);
    this.held = [];
    return body;
  }
}

const EVENT_END = /\r\n\r\n|\n\n|\r\r/g;
/** The longest event terminator, less one: how far back a new chunk may complete one. */
const TERMINATOR_OVERLAP = 3;

/** How many leading bytes of a chunk are whole UTF-8 characters: the rest waits for the next chunk. */
function wholeUtf8Length(bytes: Buffer): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back++) {
    const byte = bytes[bytes.length - back];
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const needed = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return needed > back ? bytes.length - back : bytes.length;
  }
  return bytes.length;
}

/**
 * A text/event-stream answer: each complete event goes on as soon as it is complete, rewritten if its
 * data is a message to rewrite, byte for byte otherwise. Only an incomplete event is held back, since
 * no client can act on half an event anyway; one that grows past maxBytes (a backend that never ends
 * its event) is sent on as it is, and so is the rest of the stream.
 */
export class SseResponseRewriter implements ResponseRewriter {
  /** Whole characters of the incomplete event. */
  private pending = '';
  /** The first bytes of a character the next chunk completes. */
  private carry: Buffer = Buffer.alloc(0);
  private passThrough = false;

  constructor(
    private readonly rewrite: MessageRewrite,
    private readonly maxBytes = MAX_HELD_BYTES,
  ) {}

  push(chunk: Buffer, endOfStream: boolean): Buffer {
    if (this.passThrough) return chunk;
    const bytes = this.carry.length ? Buffer.concat([this.carry, chunk]) : chunk;
    const whole = wholeUtf8Length(bytes);
    this.carry = bytes.subarray(whole);
    // Only the new text (and a terminator it may complete) needs searching: the rest had none.
    EVENT_END.lastIndex = Math.max(0, this.pending.length - TERMINATOR_OVERLAP);
    this.pending += bytes.toString('utf8', 0, whole);
    let out = '';
    let consumed = 0;
    for (let match = EVENT_END.exec(this.pending); match; match = EVENT_END.exec(this.pending)) {
      out += this.rewriteEvent(this.pending.slice(consumed, match.index), match[0]);
      consumed = match.index + match[0].length;
    }
    this.pending = this.pending.slice(consumed);
    if (endOfStream || this.holdsTooMuch()) {
      this.passThrough = !endOfStream;
      const rest = Buffer.concat([Buffer.from(out + this.pending, 'utf8'), this.carry]);
      this.pending = '';
      this.carry = Buffer.alloc(0);
      return rest;
    }
    return Buffer.from(out, 'utf8');
  }

  /** A character is 1 to 3 UTF-16 units' worth of 1 to 4 bytes: count bytes only when it matters. */
  private holdsTooMuch(): boolean {
    if (this.pending.length * 3 <= this.maxBytes) return false;
    return this.pending.length > this.maxBytes || Buffer.byteLength(this.pending) > this.maxBytes;
  }

  private rewriteEvent(event: string, terminator: string): string {
    const lines = event.split(/\r\n|\n|\r/);
    const dataLines = lines.filter((line) => line.startsWith('data:'));
    if (dataLines.length === 0) return event + terminator;
    const data = dataLines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n');
    let rewritten: JsonObject | undefined;
    try {
      rewritten = this.rewrite(JSON.parse(data));
    } catch {
      rewritten = undefined;
    }
    if (!rewritten) return event + terminator;
    // The rewritten message takes the place of the first data line; the other fields (event, id) stay.
    const firstData = lines.findIndex((line) => line.startsWith('data:'));
    const kept = lines.flatMap((line, index) =>
      index === firstData ? [`data: ${JSON.stringify(rewritten)}`] : line.startsWith('data:') ? [] : [line],
    );
    return kept.join('\n') + '\n\n';
  }
}
