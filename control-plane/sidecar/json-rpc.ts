/** JSON-RPC 2.0 error codes the gateway answers with (MCP reuses the JSON-RPC ones). */
export const JSON_RPC = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
} as const;

export type JsonRpcId = string | number | null;

export type JsonObject = Record<string, unknown>;
/** A JSON object (not an array, not null): what a JSON-RPC message, its params, result or `_meta` must be. */
export const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

export function jsonRpcError(id: JsonRpcId, code: number, message: string, data?: unknown) {
  return { jsonrpc: '2.0' as const, id, error: { code, message, ...(data !== undefined && { data }) } };
}

export function jsonRpcResult(id: JsonRpcId, result: unknown) {
  return { jsonrpc: '2.0' as const, id, result };
}

/** The ids the gateway accepts in either lane: a string of at most MAX_ID_BYTES or an integer JSON keeps exactly. */
export const MAX_ID_BYTES = 256;
export const ID_RULE = `id must be a string of at most ${MAX_ID_BYTES} bytes or an integer`;

/**
 * Why a request's id is not one the gateway accepts, or undefined (also for a notification, which has
 * none). The call lane's script applies the same rule (control-plane/xds/lua/call-lane.lua).
 */
export function idProblem(id: unknown): string | undefined {
  if (id === undefined) return undefined;
  if (typeof id === 'string') return Buffer.byteLength(id) <= MAX_ID_BYTES ? undefined : ID_RULE;
  return Number.isSafeInteger(id) ? undefined : ID_RULE;
}

/**
 * JSON nested deeper than Envoy's mcp filter parses (it refuses more than 100 levels before the sidecar
 * sees a request): checked again here for a request that reaches the sidecar some other way, since the
 * session store's JSON.stringify of such a document would run out of stack.
 */
export const MAX_JSON_DEPTH = 100;

/** Whether the JSON text nests objects and arrays deeper than `limit` (strings skipped; the text need not be valid). */
export function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const char = text.charCodeAt(index);
    if (inString) {
      if (char === 0x5c) index++;
      else if (char === 0x22) inString = false;
    } else if (char === 0x22) {
      inString = true;
    } else if (char === 0x7b || char === 0x5b) {
      if (++depth > limit) return true;
    } else if (char === 0x7d || char === 0x5d) {
      depth--;
    }
  }
  return false;
}
