import { CatalogSnapshotMessage } from '../../control-plane/catalog/catalog-store';
import { Decision, RequestHead, decideOnBody, decideOnHead } from '../../control-plane/sidecar/mcp-gateway';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const snapshot: CatalogSnapshotMessage = catalogSnapshot([
  { route_key: 'demo', backends: [backendCatalog('weather', ['get_forecast']), backendCatalog('jobs', ['run_job', 'echo'])] },
]);
const views = buildRouteViews(snapshot);
const lookup = (key: string) => views.get(key);

const POST_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const head = (method = 'POST', path = '/mcp/demo', headers: Record<string, string> = POST_HEADERS): RequestHead => ({
  method,
  path,
  headers: new Map(Object.entries(headers)),
});
const body = (message: unknown) => Buffer.from(typeof message === 'string' ? message : JSON.stringify(message));
const responded = (decision: Decision) => {
  if (decision.kind !== 'respond') throw new Error(`expected a response, got ${decision.kind}`);
  return { status: decision.status, message: decision.body ? JSON.parse(decision.body) : undefined };
};

describe('sidecar decisions on the request head', () => {
  it.each([
    ['/mcp without a route key', head('POST', '/mcp'), 400, -32600, 'route key is required: use /mcp/{routeKey}'],
    ['/mcp/ without a route key', head('POST', '/mcp/?x=1'), 400, -32600, 'route key is required: use /mcp/{routeKey}'],
    ['an unknown route key', head('POST', '/mcp/other'), 404, -32600, 'unknown route key "other"'],
    ['a path outside /mcp', head('POST', '/admin'), 404, -32600, 'not an MCP route: use /mcp/{routeKey}'],
    ['GET (no standalone SSE stream yet)', head('GET'), 405, -32600, 'method GET is not allowed on this endpoint'],
    ['a wrong Content-Type', head('POST', '/mcp/demo', { ...POST_HEADERS, 'content-type': 'text/plain' }), 415, -32600, 'Content-Type must be application/json'],
    ['a missing Accept', head('POST', '/mcp/demo', { 'content-type': 'application/json' }), 406, -32600, 'Accept must list both application/json and text/event-stream'],
  ])('answers %s itself', (_case, request, status, code, message) => {
    expect(responded(decideOnHead(request, lookup))).toEqual({ status, message: { jsonrpc: '2.0', id: null, error: { code, message } } });
  });

  it('reads the body of a well-formed POST, with a query string or a charset', () => {
    expect(decideOnHead(head('POST', '/mcp/demo?trace=1', { ...POST_HEADERS, 'content-type': 'application/json; charset=utf-8' }), lookup)).toEqual({
      kind: 'read-body',
    });
  });
});

describe('sidecar decisions on the JSON-RPC body', () => {
  it.each([
    ['malformed JSON', '{"jsonrpc":', 400, -32700],
    ['a batch', [{ jsonrpc: '2.0', id: 1, method: 'ping' }], 400, -32600],
    ['a non-JSON-RPC object', { id: 1, method: 'ping' }, 400, -32600],
  ])('rejects %s', (_case, message, status, code) => {
    const { status: actual, message: reply } = responded(decideOnBody(head(), body(message), lookup));
    expect(actual).toBe(status);
    expect(reply.error.code).toBe(code);
  });

  it('accepts notifications with 202 and no body', () => {
    expect(responded(decideOnBody(head(), body({ jsonrpc: '2.0', method: 'notifications/initialized' }), lookup))).toEqual({
      status: 202,
      message: undefined,
    });
  });

  it.each([
    ['2025-06-18', '2025-06-18'],
    ['2025-11-25', '2025-11-25'],
    ['1999-01-01', '2025-11-25'],
  ])('answers initialize for protocol %s with %s', (requested, negotiated) => {
    const { message } = responded(
      decideOnBody(head(), body({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: requested } }), lookup),
    );
    expect(message.result.protocolVersion).toBe(negotiated);
    expect(message.result.capabilities).toEqual({ tools: { listChanged: false } });
  });

  it('answers tools/list from memory, prefixed and ordered by backend', () => {
    const { status, message } = responded(decideOnBody(head(), body({ jsonrpc: '2.0', id: 'a', method: 'tools/list' }), lookup));
    expect(status).toBe(200);
    expect(message.id).toBe('a');
    expect(message.result.tools.map((tool: { name: string }) => tool.name)).toEqual(['jobs__run_job', 'jobs__echo', 'weather__get_forecast']);
  });

  it('forwards tools/call to the one backend its prefix names, with the prefix stripped', () => {
    const call = { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'jobs__run_job', arguments: { steps: 2 }, _meta: { progressToken: 9 } } };
    const decision = decideOnBody(head(), body(call), lookup);
    expect(decision).toEqual({
      kind: 'forward',
      cluster: 'tool_service.jobs',
      body: JSON.stringify({ ...call, params: { ...call.params, name: 'run_job' } }),
      headers: {},
      metadata: { route: 'demo', method: 'tools/call', rpc_id: 3, backend: 'jobs', tool: 'run_job' },
    });
  });

  it.each([
    ['an unprefixed name', 'get_forecast', 'tool "get_forecast" has no backend prefix: call it as <backend>__<tool>'],
    ['an unknown backend', 'ghost__get_forecast', 'unknown backend "ghost" on route "demo" (tool "ghost__get_forecast")'],
    ['an unknown tool', 'weather__get_rain', 'backend "weather" has no tool "get_rain" on route "demo"'],
  ])('rejects tools/call with %s as invalid params', (_case, name, text) => {
    const { status, message } = responded(
      decideOnBody(head(), body({ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name } }), lookup),
    );
    expect(status).toBe(200);
    expect(message).toEqual({ jsonrpc: '2.0', id: 4, error: { code: -32602, message: text } });
  });

  it('answers methods it does not serve with method-not-found', () => {
    const { message } = responded(decideOnBody(head(), body({ jsonrpc: '2.0', id: 5, method: 'resources/list' }), lookup));
    expect(message.error.code).toBe(-32601);
  });
});
