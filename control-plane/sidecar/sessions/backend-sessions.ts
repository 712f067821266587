import { EventSourceMessage, createParser } from 'eventsource-parser';
import { backendFetch } from '../../shared/backend-fetch';
import { BackendView } from '../route-catalog';
import { GatewaySession } from './session-store';

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const SESSION_HEADER = 'mcp-session-id';
const PROTOCOL_VERSION_HEADER = 'mcp-protocol-version';

/**
 * The sidecar's own requests to a Tool Service (sessions, relayed notifications, resent calls):
 * JSON-RPC over Streamable HTTP, carrying the client's own headers (identity, trace context), since
 * they are made on the client's behalf.
 */
function postToBackend(backend: BackendView, headers: Record<string, string>, body: unknown, signal: AbortSignal): Promise<Response> {
  return backendFetch(backend.tls)(backend.url, {
    method: 'POST',
    headers: { ...headers, ...MCP_HEADERS },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}

function sessionHeaders(backendSessionId: string, protocolVersion: string): Record<string, string> {
  return { ...(backendSessionId && { [SESSION_HEADER]: backendSessionId }), [PROTOCOL_VERSION_HEADER]: protocolVersion };
}

/**
 * The events of an SSE body as the spec reads them (multi-line `data:` fields, comments, `id:` and
 * `retry:`, CR, LF or CRLF line ends), each handed over as it completes; resolves when the body ends.
 */
export async function readEvents(body: ReadableStream<Uint8Array>, onEvent: (event: EventSourceMessage) => void): Promise<void> {
  const parser = createParser({ onEvent });
  const decoder = new TextDecoder();
  for await (const chunk of body) parser.feed(decoder.decode(chunk, { stream: true }));
  parser.feed(decoder.decode());
}

/**
 * The JSON-RPC response of a Streamable HTTP answer, whether sent as JSON or inside an SSE stream
 * (where notifications, requests and an empty priming event may come before it).
 */
async function responseMessage(response: Response): Promise<{ error?: { message: string } } | undefined> {
  if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const text = await response.text();
    return text ? JSON.parse(text) : undefined;
  }
  let found: { error?: { message: string } } | undefined;
  if (response.body) {
    await readEvents(response.body, (event) => {
      if (found || event.data.trim() === '') return;
      const message = JSON.parse(event.data) as Record<string, unknown>;
      if ('result' in message || 'error' in message) found = message;
    });
  }
  return found;
}

/**
 * Opens this gateway session's session with one backend: `initialize` with the client's own protocol
 * version, capabilities and info, then `notifications/initialized`. Returns the backend's
 * Mcp-Session-Id, or "" when the backend runs stateless (answers without one).
 */
export async function openBackendSession(
  backend: BackendView,
  session: BackendSessionFields,
  clientHeaders: Record<string, string>,
  timeoutMs: number,
): Promise<string> {
  const signal = AbortSignal.timeout(timeoutMs);
  const initialize = await postToBackend(
    backend,
    clientHeaders,
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: session.protocolVersion, capabilities: session.clientCapabilities, clientInfo: session.clientInfo },
    },
    signal,
  );
  const reply = await responseMessage(initialize);
  if (!initialize.ok || !reply || reply.error) {
    throw new Error(`initialize answered ${initialize.status}${reply?.error ? `: ${reply.error.message}` : ''}`);
  }
  const backendSessionId = initialize.headers.get(SESSION_HEADER) ?? '';
  const initialized = await postToBackend(
    backend,
    inSession({ backendSessionId, protocolVersion: session.protocolVersion, clientHeaders }),
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    signal,
  );
  await initialized.body?.cancel();
  // A level the client set with logging/setLevel before this backend session existed applies to it too.
  if (session.logLevel && backend.capabilities.logging) {
    const setLevel = await postToBackend(
      backend,
      inSession({ backendSessionId, protocolVersion: session.protocolVersion, clientHeaders }),
      { jsonrpc: '2.0', id: 1, method: 'logging/setLevel', params: { level: session.logLevel } },
      signal,
    );
    await setLevel.body?.cancel();
  }
  return backendSessionId;
}

/** What a backend session is opened with: the client's own declaration, and the log level it set. */
export type BackendSessionFields = Pick<GatewaySession, 'protocolVersion' | 'clientInfo' | 'clientCapabilities' | 'logLevel'>;

/** A backend session, and the client on whose behalf the sidecar uses it. */
export interface OnBehalf {
  backendSessionId: string;
  protocolVersion: string;
  /** The client's own headers (identity, trace context). */
  clientHeaders: Record<string, string>;
}

const inSession = ({ backendSessionId, protocolVersion, clientHeaders }: OnBehalf) => ({
  ...clientHeaders,
  ...sessionHeaders(backendSessionId, protocolVersion),
});

/** Ends one backend session (DELETE, as the spec's session termination). Failures are the caller's to log. */
export async function closeBackendSession(backend: BackendView, onBehalf: OnBehalf, timeoutMs: number): Promise<void> {
  const response = await backendFetch(backend.tls)(backend.url, {
    method: 'DELETE',
    headers: inSession(onBehalf),
    signal: AbortSignal.timeout(timeoutMs),
  });
  await response.body?.cancel();
}

export interface BackendAnswer {
  status: number;
  contentType: string;
  body: Buffer;
}

/**
 * Posts a client's message (a notification, or its answer to a request the backend sent it) in the
 * backend session: the backend's whole HTTP answer (202 for both, as the spec says).
 */
export async function postToBackendSession(backend: BackendView, onBehalf: OnBehalf, message: string, timeoutMs: number): Promise<BackendAnswer> {
  const response = await postToBackend(backend, inSession(onBehalf), message, AbortSignal.timeout(timeoutMs));
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? 'application/json',
    body: Buffer.from(await response.arrayBuffer()),
  };
}
