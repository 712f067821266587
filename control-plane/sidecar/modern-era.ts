import { JSON_RPC, JsonObject, JsonRpcId, isObject, jsonRpcError } from './json-rpc';

/**
 * MCP 2026-07-28, the stateless revision (docs/adr/0007-mcp-2026-07-28.md): every request names its
 * protocol version and the client's capabilities in `_meta`, and repeats method and name in headers
 * that intermediaries may route on.
 */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';
export const MODERN_PROTOCOL_VERSIONS = [MODERN_PROTOCOL_VERSION];

export const MODERN_META = {
  protocolVersion: 'io.modelcontextprotocol/protocolVersion',
  clientCapabilities: 'io.modelcontextprotocol/clientCapabilities',
  clientInfo: 'io.modelcontextprotocol/clientInfo',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
} as const;

/** The spec's own error codes (2026-07-28), all answered with HTTP 400. */
export const MODERN_ERROR = {
  HEADER_MISMATCH: -32020,
  UNSUPPORTED_PROTOCOL_VERSION: -32022,
} as const;

/** Methods whose name is repeated in `Mcp-Name`, and the param it repeats. */
const NAMED_PARAM: Record<string, string> = { 'tools/call': 'name', 'prompts/get': 'name', 'resources/read': 'uri' };

export interface ModernMessage {
  id?: JsonRpcId;
  method: string;
  params?: Record<string, unknown>;
}


/** The protocol version a request claims in its `_meta`: present only on requests of the stateless revision. */
export function modernVersionClaim(params: unknown): string | undefined {
  const meta = isObject(params) ? params._meta : undefined;
  const claim = isObject(meta) ? meta[MODERN_META.protocolVersion] : undefined;
  return typeof claim === 'string' ? claim : undefined;
}

/** Header values that are not plain printable ASCII travel as `=?base64?…?=` (UTF-8). */
export function encodeMcpHeaderValue(value: string): string {
  return /^[\x20-\x7e]*$/.test(value) && !value.startsWith('=?') ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`;
}

export function decodeMcpHeaderValue(value: string): string {
  const encoded = /^=\?base64\?(.*)\?=$/.exec(value);
  return encoded ? Buffer.from(encoded[1], 'base64').toString('utf8') : value;
}

export interface ModernProblem {
  status: number;
  body: ReturnType<typeof jsonRpcError>;
}

const problem = (id: JsonRpcId, code: number, message: string, data?: unknown): ModernProblem => ({
  status: 400,
  body: jsonRpcError(id, code, message, data),
});

/**
 * What is wrong with a request of the stateless revision, if anything: a version the gateway does not
 * serve, a missing `_meta` key, or headers that disagree with the body (which intermediaries routing
 * on the headers would then misroute).
 */
export function modernRequestProblem(message: ModernMessage, headers: Map<string, string>): ModernProblem | undefined {
  const id = message.id ?? null;
  const meta = (message.params?._meta ?? {}) as JsonObject;
  const claim = meta[MODERN_META.protocolVersion] as string;
  if (!MODERN_PROTOCOL_VERSIONS.includes(claim)) {
    return problem(id, MODERN_ERROR.UNSUPPORTED_PROTOCOL_VERSION, `unsupported protocol version "${claim}"`, {
      supported: MODERN_PROTOCOL_VERSIONS,
      requested: claim,
    });
  }
  if (!isObject(meta[MODERN_META.clientCapabilities])) {
    return problem(id, JSON_RPC.INVALID_PARAMS, `params._meta["${MODERN_META.clientCapabilities}"] is required (an object; {} for none)`);
  }
  // Header rules for notifications are left open by the spec.
  if (message.id === undefined) return undefined;
  const mismatch = (header: string, expected: string) => {
    const sent = headers.get(header);
    return sent === undefined || decodeMcpHeaderValue(sent) !== expected
      ? problem(id, MODERN_ERROR.HEADER_MISMATCH, `header ${header} must be ${JSON.stringify(expected)}, as in the body (got ${JSON.stringify(sent ?? null)})`)
      : undefined;
  };
  const named = NAMED_PARAM[message.method];
  const name = named === undefined ? undefined : message.params?.[named];
  return (
    mismatch('mcp-protocol-version', claim) ??
    mismatch('mcp-method', message.method) ??
    (typeof name === 'string' ? mismatch('mcp-name', name) : undefined)
  );
}

/** `_meta` without the stateless revision's envelope: what a backend spoken to in a session-based revision gets. */
export function withoutModernEnvelope(params: JsonObject): JsonObject {
  if (!isObject(params._meta)) return params;
  const meta = Object.fromEntries(
    Object.entries(params._meta).filter(([key]) => !(Object.values(MODERN_META) as string[]).includes(key)),
  );
  return { ...params, _meta: meta };
}
