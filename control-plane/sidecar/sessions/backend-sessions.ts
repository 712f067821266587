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

/** The JSON-RPC message of a Streamable HTTP response, whether sent as JSON or as one SSE event. */
async function firstMessage(response: Response): Promise<{ error?: { message: string } } | undefined> {
  const text = await response.text();
  if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) return text ? JSON.parse(text) : undefined;
  // Servers with resumability send an empty priming event first.
  const data = text
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(5).trim())
    .find((payload) => payload.length > 0);
  return data ? JSON.parse(data) : undefined;
}

/**
 * Opens this gateway session's session with one backend: `initialize` with the client's own protocol
 * version, capabilities and info, then `notifications/initialized`. Returns the backend's
 * Mcp-Session-Id, or "" when the backend runs stateless (answers without one).
 */
export async function openBackendSession(
  backend: BackendView,
  session: Pick<GatewaySession, 'protocolVersion' | 'clientInfo' | 'clientCapabilities'>,
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
  const reply = await firstMessage(initialize);
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
  return backendSessionId;
}

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
