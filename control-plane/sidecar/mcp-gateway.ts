import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { callPolicy } from './call-policy';
import { JSON_RPC, JsonRpcId, jsonRpcError, jsonRpcResult } from './json-rpc';
import { RouteCatalogView, resolveTool } from './route-catalog';
import { answerToolsList } from './tools-list';

/** The sidecar's answer to one request: answer it here, or send it on to exactly one backend. */
export type Decision =
  | { kind: 'respond'; status: number; headers: Record<string, string>; body: string; reason: string; metadata?: RequestMetadata }
  | { kind: 'forward'; cluster: string; body: string; headers: Record<string, string>; metadata: RequestMetadata }
  | { kind: 'read-body' };

/**
 * What the sidecar tells Envoy about a request, as dynamic metadata: the access log and the JSON-RPC
 * local replies (docs/errors.md) read it.
 */
export interface RequestMetadata {
  route?: string;
  method?: string;
  rpc_id?: JsonRpcId;
  backend?: string;
  tool?: string;
  /** Text of the degraded result Envoy answers with if every attempt of a read-only tool fails. */
  fallback?: string;
}

export interface RequestHead {
  method: string;
  path: string;
  headers: Map<string, string>;
}

export const GATEWAY_SERVER_INFO = { name: 'mcp-federation-gateway', version: '0.1.0' };

const JSON_HEADERS = { 'content-type': 'application/json' };

function respondJson(status: number, payload: unknown, reason: string, headers: Record<string, string> = {}): Decision {
  return { kind: 'respond', status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(payload), reason };
}

function respondError(status: number, id: JsonRpcId, code: number, message: string, reason: string, headers?: Record<string, string>) {
  return respondJson(status, jsonRpcError(id, code, message), reason, headers);
}

type RouteLookup = (routeKey: string) => RouteCatalogView | undefined;

/** Extracts the route key from /mcp/{routeKey}; the key comes only from the URI, never from a default. */
function routeKeyOf(path: string): { key?: string; error?: Decision } {
  const pathOnly = path.split('?', 1)[0];
  const match = /^\/mcp(?:\/([^/]*))?\/?$/.exec(pathOnly);
  if (!match) {
    return { error: respondError(404, null, JSON_RPC.INVALID_REQUEST, 'not an MCP route: use /mcp/{routeKey}', 'not_mcp_path') };
  }
  if (!match[1]) {
    return {
      error: respondError(400, null, JSON_RPC.INVALID_REQUEST, 'route key is required: use /mcp/{routeKey}', 'route_key_required'),
    };
  }
  return { key: decodeURIComponent(match[1]) };
}

/**
 * Decides on the request line and headers. Only well-formed POSTs to a known route go on to the body.
 */
export function decideOnHead(head: RequestHead, lookup: RouteLookup): Decision {
  const { key, error } = routeKeyOf(head.path);
  if (error) return error;
  if (!lookup(key!)) {
    return respondError(404, null, JSON_RPC.INVALID_REQUEST, `unknown route key "${key}"`, 'unknown_route');
  }
  if (head.method !== 'POST') {
    // No standalone SSE stream (GET) or session to end (DELETE) is offered yet; the spec says 405.
    return respondError(405, null, JSON_RPC.INVALID_REQUEST, `method ${head.method} is not allowed on this endpoint`, 'method_not_allowed', {
      allow: 'POST',
    });
  }
  const contentType = head.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(contentType)) {
    return respondError(415, null, JSON_RPC.INVALID_REQUEST, 'Content-Type must be application/json', 'unsupported_media_type');
  }
  const accept = head.headers.get('accept') ?? '';
  if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
    return respondError(
      406,
      null,
      JSON_RPC.INVALID_REQUEST,
      'Accept must list both application/json and text/event-stream',
      'not_acceptable',
    );
  }
  return { kind: 'read-body' };
}

interface JsonRpcMessage {
  jsonrpc?: unknown;
  id?: JsonRpcId;
  method?: unknown;
  params?: Record<string, unknown>;
}

function negotiatedVersion(requested: unknown): string {
  return typeof requested === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;
}

/** Decides on the whole JSON-RPC body of a POST whose head passed decideOnHead. */
export function decideOnBody(head: RequestHead, body: Buffer, lookup: RouteLookup): Decision {
  const view = lookup(routeKeyOf(head.path).key!);
  if (!view) return decideOnHead(head, lookup);
  let message: JsonRpcMessage;
  try {
    message = JSON.parse(body.toString('utf8')) as JsonRpcMessage;
  } catch (error) {
    return respondError(400, null, JSON_RPC.PARSE_ERROR, `Parse error: ${(error as Error).message}`, 'parse_error');
  }
  if (Array.isArray(message)) {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'JSON-RPC batches are not supported', 'batch');
  }
  if (typeof message !== 'object' || message === null || message.jsonrpc !== '2.0') {
    return respondError(400, null, JSON_RPC.INVALID_REQUEST, 'not a JSON-RPC 2.0 message', 'invalid_request');
  }
  const metadata: RequestMetadata = {
    route: view.key,
    ...(typeof message.method === 'string' && { method: message.method }),
    ...(message.id !== undefined && { rpc_id: message.id }),
  };
  const decision = decideOnMessage(message, view);
  if (decision.kind === 'read-body') return decision;
  return { ...decision, metadata: { ...metadata, ...decision.metadata } };
}

function decideOnMessage(message: JsonRpcMessage, view: RouteCatalogView): Decision {
  const id = message.id;
  if (id === undefined) {
    // Notifications and responses from the client need no answer beyond 202.
    return { kind: 'respond', status: 202, headers: {}, body: '', reason: 'accepted' };
  }
  if (typeof message.method !== 'string') {
    return { kind: 'respond', status: 202, headers: {}, body: '', reason: 'accepted' };
  }
  switch (message.method) {
    case 'initialize':
      return respondJson(
        200,
        jsonRpcResult(id, {
          protocolVersion: negotiatedVersion(message.params?.protocolVersion),
          capabilities: { tools: { listChanged: false } },
          serverInfo: GATEWAY_SERVER_INFO,
          instructions: `Tools of route "${view.key}", named <backend>${view.toolNameSeparator}<tool>.`,
        }),
        'initialize',
      );
    case 'ping':
      return respondJson(200, jsonRpcResult(id, {}), 'ping');
    case 'tools/list': {
      const answer = answerToolsList(view, message.params);
      return answer.ok
        ? respondJson(200, jsonRpcResult(id, answer.result), 'tools_list')
        : respondError(200, id, JSON_RPC.INVALID_PARAMS, answer.message, 'invalid_cursor');
    }
    case 'tools/call':
      return decideToolCall(message, id, view);
    default:
      return respondError(200, id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not supported by this gateway`, 'method_not_found');
  }
}

function decideToolCall(message: JsonRpcMessage, id: JsonRpcId, view: RouteCatalogView): Decision {
  const name = message.params?.name;
  if (typeof name !== 'string') {
    return respondError(200, id, JSON_RPC.INVALID_PARAMS, 'tools/call needs params.name', 'invalid_params');
  }
  const resolution = resolveTool(view, name);
  if (!resolution.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, resolution.message, 'unknown_tool');
  const forwarded = { ...message, params: { ...message.params, name: resolution.toolName } };
  const policy = callPolicy(resolution.tool, resolution.backend);
  return {
    kind: 'forward',
    cluster: resolution.backend.cluster,
    body: JSON.stringify(forwarded),
    headers: policy.headers,
    metadata: { backend: resolution.backend.name, tool: resolution.toolName, ...(policy.fallback && { fallback: policy.fallback }) },
  };
}
