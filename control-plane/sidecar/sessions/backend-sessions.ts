import { EventSourceMessage, createParser } from 'eventsource-parser';
import { BackendCredentialsProvider } from '../../credentials/backend-credentials';
import { describeEgressFailure } from '../../shared/egress-fetch';
import type { Caller } from '../decision';
import { BackendView } from '../route-catalog';
import { GatewaySession } from './session-store';

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const SESSION_HEADER = 'mcp-session-id';
const PROTOCOL_VERSION_HEADER = 'mcp-protocol-version';

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
 * (where notifications, requests and an empty priming event may come before it); for a reply of
 * Envoy's own, why.
 */
async function responseMessage(response: Response): Promise<{ error?: { message: string } } | undefined> {
  if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const text = await response.text();
    // A reply of Envoy's own on the egress listener (the Tool Service unreachable): why.
    const egressFailure = describeEgressFailure(text);
    if (egressFailure) return { error: { message: egressFailure } };
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

/** What a backend session is opened with: the client's own declaration, and the log level it set. */
export type BackendSessionFields = Pick<GatewaySession, 'protocolVersion' | 'clientInfo' | 'clientCapabilities' | 'logLevel'>;

/** A backend session, and the client on whose behalf the sidecar uses it. */
export interface OnBehalf {
  backendSessionId: string;
  protocolVersion: string;
  caller: Caller;
}

export interface BackendAnswer {
  status: number;
  contentType: string;
  body: Buffer;
}

/**
 * The sidecar's own requests to a Tool Service, on a client's behalf (opening and renewing its backend
 * session, relaying its notifications and answers, ending the session): JSON-RPC over Streamable HTTP
 * through Envoy's egress listener, with the client's own headers (trace context) and the backend's
 * credentials for that client — the same every call to that backend carries (docs/auth.md, Backends).
 */
export class BackendRequests {
  constructor(
    /** The fetch requests to this backend go out with: Envoy's egress listener (egressFetch). */
    private readonly fetchFor: (backend: BackendView) => typeof fetch,
    private readonly credentials: Pick<BackendCredentialsProvider, 'authorizationFor'>,
    /** Limit for each exchange with the backend (an open is two). */
    private readonly timeoutMs: number,
  ) {}

  /** One request to the backend on the caller's behalf (also the backend streams': backend-streams.ts). */
  async request(backend: BackendView, caller: Caller, init: { method: string; headers: Record<string, string>; body?: string; signal: AbortSignal }): Promise<Response> {
    const authorization = await this.credentials.authorizationFor(backend, caller.authorization);
    return this.fetchFor(backend)(backend.url, {
      ...init,
      headers: { ...caller.headers, ...init.headers, ...(authorization !== undefined && { authorization }) },
    });
  }

  private post(backend: BackendView, caller: Caller, headers: Record<string, string>, body: unknown, signal: AbortSignal): Promise<Response> {
    return this.request(backend, caller, { method: 'POST', headers: { ...headers, ...MCP_HEADERS }, body: typeof body === 'string' ? body : JSON.stringify(body), signal });
  }

  /**
   * Opens this gateway session's session with one backend: `initialize` with the client's own protocol
   * version, capabilities and info, then `notifications/initialized`. Returns the backend's
   * Mcp-Session-Id, or "" when the backend runs stateless (answers without one).
   */
  async open(backend: BackendView, session: BackendSessionFields, caller: Caller): Promise<string> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    const initialize = await this.post(
      backend,
      caller,
      {},
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
    const inSession = sessionHeaders(backendSessionId, session.protocolVersion);
    const initialized = await this.post(backend, caller, inSession, { jsonrpc: '2.0', method: 'notifications/initialized' }, signal);
    await initialized.body?.cancel();
    // A level the client set with logging/setLevel before this backend session existed applies to it too.
    if (session.logLevel && backend.capabilities.logging) {
      const setLevel = await this.post(backend, caller, inSession, { jsonrpc: '2.0', id: 1, method: 'logging/setLevel', params: { level: session.logLevel } }, signal);
      await setLevel.body?.cancel();
    }
    return backendSessionId;
  }

  /** Ends one backend session (DELETE, as the spec's session termination). Failures are the caller's to log. */
  async close(backend: BackendView, onBehalf: OnBehalf): Promise<void> {
    const response = await this.request(backend, onBehalf.caller, {
      method: 'DELETE',
      headers: sessionHeaders(onBehalf.backendSessionId, onBehalf.protocolVersion),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    await response.body?.cancel();
  }

  /**
   * Posts a client's message (a notification, or its answer to a request the backend sent it) in the
   * backend session: the backend's whole HTTP answer (202 for both, as the spec says).
   */
  async relay(backend: BackendView, onBehalf: OnBehalf, message: string): Promise<BackendAnswer> {
    const response = await this.post(backend, onBehalf.caller, sessionHeaders(onBehalf.backendSessionId, onBehalf.protocolVersion), message, AbortSignal.timeout(this.timeoutMs));
    return {
      status: response.status,
      contentType: response.headers.get('content-type') ?? 'application/json',
      body: Buffer.from(await response.arrayBuffer()),
    };
  }
}
