/**
 * The client side of MCP's Streamable HTTP transport, as small as the bench needs it: the headers of
 * a POST, and reading a response that is either one JSON body or an SSE stream of JSON-RPC messages.
 * Shared by the load driver and the naive proxy (E), which both speak it without the SDK so that
 * they can time and forward bytes themselves.
 */

export const MCP_PROTOCOL_VERSION = '2025-06-18';

export const MCP_POST_HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
} as const;

export interface JsonRpcMessage {
  jsonrpc: '2.0';
  id?: string | number | null;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

/**
 * Splits an SSE byte stream into the `data` payloads of its events as they complete. Chunks may end
 * anywhere, so an incomplete event waits for the next chunk.
 */
export class SseDataReader {
  private pending = '';

  push(chunk: string): string[] {
    this.pending += chunk;
    const payloads: string[] = [];
    for (let end = this.eventEnd(); end; end = this.eventEnd()) {
      const block = this.pending.slice(0, end.index);
      this.pending = this.pending.slice(end.index + end.length);
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5));
      // An event with an empty data field primes the client for resumption (MCP 2025-11-25): no message.
      if (data.length > 0 && data.join('\n') !== '') payloads.push(data.join('\n'));
    }
    return payloads;
  }

  private eventEnd(): { index: number; length: number } | undefined {
    const match = /\r?\n\r?\n/.exec(this.pending);
    return match ? { index: match.index, length: match[0].length } : undefined;
  }
}

export function isEventStream(contentType: string | undefined): boolean {
  return (contentType ?? '').toLowerCase().startsWith('text/event-stream');
}

/** Every JSON-RPC message of a complete response body, whichever of the two forms it came in. */
export function jsonRpcMessagesOf(contentType: string | undefined, body: string): JsonRpcMessage[] {
  if (!isEventStream(contentType)) return [JSON.parse(body) as JsonRpcMessage];
  return new SseDataReader().push(`${body}\n\n`).map((data) => JSON.parse(data) as JsonRpcMessage);
}

/** The response to request `id` among a body's messages (notifications may come before it). */
export function responseTo(messages: JsonRpcMessage[], id: string | number): JsonRpcMessage | undefined {
  return messages.find((message) => message.id === id && (message.result !== undefined || message.error !== undefined));
}
