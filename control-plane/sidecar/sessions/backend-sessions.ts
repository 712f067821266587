import { backendFetch } from '../../shared/backend-fetch';
import { BackendView } from '../route-catalog';
import { GatewaySession } from './session-store';

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

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
export async function openBackendSession(backend: BackendView, session: GatewaySession, timeoutMs: number): Promise<string> {
  const signal = AbortSignal.timeout(timeoutMs);
  const fetchBackend = backendFetch(backend.tls);
  const initialize = await fetchBackend(backend.url, {
    method: 'POST',
    headers: MCP_HEADERS,
    signal,
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: session.protocolVersion, capabilities: session.clientCapabilities, clientInfo: session.clientInfo },
    }),
  });
  const reply = await firstMessage(initialize);
  if (!initialize.ok || !reply || reply.error) {
    throw new Error(`initialize answered ${initialize.status}${reply?.error ? `: ${reply.error.message}` : ''}`);
  }
  const backendSessionId = initialize.headers.get('mcp-session-id') ?? '';
  const sessionHeaders: Record<string, string> = backendSessionId ? { 'mcp-session-id': backendSessionId } : {};
  const initialized = await fetchBackend(backend.url, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...sessionHeaders, 'mcp-protocol-version': session.protocolVersion },
    signal,
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  await initialized.body?.cancel();
  return backendSessionId;
}

/** Ends one backend session (DELETE, as the spec's session termination). Failures are the caller's to log. */
export async function closeBackendSession(backend: BackendView, backendSessionId: string, protocolVersion: string, timeoutMs: number): Promise<void> {
  const response = await backendFetch(backend.tls)(backend.url, {
    method: 'DELETE',
    headers: { 'mcp-session-id': backendSessionId, 'mcp-protocol-version': protocolVersion },
    signal: AbortSignal.timeout(timeoutMs),
  });
  await response.body?.cancel();
}
