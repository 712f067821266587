import { text as readText } from 'node:stream/consumers';
import * as http from 'node:http';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { JSON_RPC, JsonRpcId, jsonRpcError, jsonRpcResult } from '../../control-plane/sidecar/json-rpc';
import { MCP_POST_HEADERS, JsonRpcMessage, jsonRpcMessagesOf, responseTo } from '../mcp/streamable-http';

/**
 * System E: the naive Node.js aggregating proxy of "option A" (docs/adr/0000-federation-decisions.md §8), written the way one would
 * without Envoy: it parses every request itself, answers initialize/ping, fans tools/list out to
 * every backend of the route on each request (no catalog), and forwards tools/call to the one
 * backend its `<backend>__` prefix names, streaming the response back chunk by chunk.
 */
export interface NaiveProxyConfig {
  /** Route key → its backends, each with the tool-name prefix it gets and its MCP URL. */
  routes: Record<string, { name: string; url: string }[]>;
  /** How long a backend may take to answer a fanned-out tools/list before it is left out. */
  listTimeoutMs: number;
}

const SEPARATOR = '__';
/** Request headers that reach the backend unchanged; the rest are hop-by-hop or rewritten. */
const FORWARDED_HEADERS = ['accept', 'authorization', 'mcp-protocol-version', 'mcp-session-id', 'traceparent', 'tracestate'];

// One pool of kept-alive connections per backend host, as an HTTP client library would keep.
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

function answer(res: http.ServerResponse, status: number, payload: unknown): void {
  const body = JSON.stringify(payload);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}


function forwardedHeaders(req: http.IncomingMessage, body: string): http.OutgoingHttpHeaders {
  const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
  for (const name of FORWARDED_HEADERS) if (req.headers[name] !== undefined) headers[name] = req.headers[name];
  return headers;
}

/** Sends tools/call on to one backend and streams whatever it answers (JSON or SSE) back as it comes. */
function forwardCall(req: http.IncomingMessage, res: http.ServerResponse, url: string, body: string, id: JsonRpcId): void {
  const upstream = http.request(url, { method: 'POST', agent, headers: forwardedHeaders(req, body) }, (response) => {
    const headers: http.OutgoingHttpHeaders = {};
    for (const name of ['content-type', 'cache-control', 'mcp-session-id']) {
      if (response.headers[name] !== undefined) headers[name] = response.headers[name];
    }
    res.writeHead(response.statusCode ?? 502, headers);
    res.flushHeaders();
    response.pipe(res);
  });
  upstream.on('error', (error) => {
    if (res.headersSent) res.destroy(error);
    else answer(res, 200, jsonRpcError(id, JSON_RPC.INTERNAL_ERROR, `backend ${url} failed: ${error.message}`));
  });
  // The client went away mid-answer: stop the backend's work too. (After a complete answer the
  // upstream connection goes back to the pool instead.)
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
  upstream.end(body);
}

/** One backend's tools/list, read whole; rejects on any failure so the caller can leave it out. */
function listBackendTools(url: string, timeoutMs: number): Promise<{ name: string }[]> {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  return new Promise((resolve, reject) => {
    const request = http.request(
      url,
      { method: 'POST', agent, headers: { ...MCP_POST_HEADERS, 'content-length': Buffer.byteLength(body) }, signal: AbortSignal.timeout(timeoutMs) },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', reject);
        response.on('end', () => {
          try {
            const message = responseTo(jsonRpcMessagesOf(response.headers['content-type'], Buffer.concat(chunks).toString('utf8')), 1);
            const tools = message?.result?.tools;
            if (!Array.isArray(tools)) throw new Error(`no tools in the answer of ${url} (status ${response.statusCode})`);
            resolve(tools as { name: string }[]);
          } catch (error) {
            reject(error);
          }
        });
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

async function listRouteTools(backends: NaiveProxyConfig['routes'][string], timeoutMs: number): Promise<{ name: string }[]> {
  const lists = await Promise.allSettled(backends.map((backend) => listBackendTools(backend.url, timeoutMs)));
  return lists.flatMap((list, index) =>
    list.status === 'fulfilled' ? list.value.map((tool) => ({ ...tool, name: `${backends[index].name}${SEPARATOR}${tool.name}` })) : [],
  );
}

async function handle(config: NaiveProxyConfig, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const routeKey = /^\/mcp\/([^/?]+)\/?(\?|$)/.exec(req.url ?? '')?.[1];
  const backends = routeKey === undefined ? undefined : config.routes[routeKey];
  if (!backends) return answer(res, 404, jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `unknown route ${req.url}`));
  if (req.method !== 'POST') return answer(res, 405, jsonRpcError(null, JSON_RPC.INVALID_REQUEST, `method ${req.method} not allowed`));
  let message: JsonRpcMessage;
  try {
    message = JSON.parse(await readText(req)) as JsonRpcMessage;
  } catch (error) {
    return answer(res, 400, jsonRpcError(null, JSON_RPC.PARSE_ERROR, `Parse error: ${(error as Error).message}`));
  }
  const id = message.id;
  if (id === undefined) {
    res.writeHead(202).end();
    return;
  }
  switch (message.method) {
    case 'initialize': {
      const requested = message.params?.protocolVersion;
      const protocolVersion = typeof requested === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;
      return answer(res, 200, jsonRpcResult(id, { protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'naive-proxy', version: '1.0.0' } }));
    }
    case 'ping':
      return answer(res, 200, jsonRpcResult(id, {}));
    case 'tools/list':
      return answer(res, 200, jsonRpcResult(id, { tools: await listRouteTools(backends, config.listTimeoutMs) }));
    case 'tools/call': {
      const name = String(message.params?.name ?? '');
      const at = name.indexOf(SEPARATOR);
      const backend = at > 0 ? backends.find((candidate) => candidate.name === name.slice(0, at)) : undefined;
      if (!backend) return answer(res, 200, jsonRpcError(id, JSON_RPC.INVALID_PARAMS, `unknown tool "${name}"`));
      const body = JSON.stringify({ ...message, params: { ...message.params, name: name.slice(at + SEPARATOR.length) } });
      return forwardCall(req, res, backend.url, body, id);
    }
    default:
      return answer(res, 200, jsonRpcError(id, JSON_RPC.METHOD_NOT_FOUND, `method "${message.method}" is not supported`));
  }
}

export function startNaiveProxy(config: NaiveProxyConfig, host: string, port: number): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    handle(config, req, res).catch((error: Error) => {
      if (!res.headersSent) answer(res, 500, jsonRpcError(null, JSON_RPC.INTERNAL_ERROR, error.message));
      else res.destroy(error);
    });
  });
  server.keepAliveTimeout = 120_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
