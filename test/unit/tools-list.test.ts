import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { sidecarContext } from '../support/sidecar-context';
import { BackendCatalogMessage, CATALOG_DEFAULTS, CatalogSettings } from '../../control-plane/catalog/catalog-store';
import { decideOnBody } from '../../control-plane/sidecar/mcp-gateway';
import { ExposedToolView, RouteCatalogView, buildRouteViews, resolveTool } from '../../control-plane/sidecar/route-catalog';
import { FEDERATION_META_KEY, ToolsListResult, answerToolsList, toolsListBody } from '../../control-plane/sidecar/tools-list';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const numbered = (prefix: string, count: number) => Array.from({ length: count }, (_, index) => `${prefix}${String(index).padStart(3, '0')}`);

function routeView(backends: BackendCatalogMessage[], settings: Partial<CatalogSettings> = {}): RouteCatalogView {
  return buildRouteViews(catalogSnapshot([{ route_key: 'big', backends }], { ...CATALOG_DEFAULTS, ...settings })).get('big')!;
}

function page(view: RouteCatalogView, cursor?: string): ToolsListResult {
  const answer = answerToolsList(view, cursor === undefined ? undefined : { cursor });
  if (!answer.ok) throw new Error(answer.message);
  return answer.result;
}

/** The tools of a page as a client reads them: from the serialized answer. */
const toolsOf = (result: ToolsListResult): Tool[] => JSON.parse(toolsListBody(1, result).toString()).result.tools;
const names = (result: ToolsListResult) => toolsOf(result).map((tool) => tool.name);

describe('tools/list pagination', () => {
  const view = routeView([backendCatalog('beta', numbered('b', 5)), backendCatalog('alpha', numbered('a', 7))], { toolsListPageSize: 5 });

  it('serves pages of the page size, in order, each tool once, with an opaque base64url cursor until the last page', () => {
    const pages: string[][] = [];
    let cursor: string | undefined;
    do {
      const result = page(view, cursor);
      pages.push(names(result));
      cursor = result.nextCursor;
      if (cursor) expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    } while (cursor);
    expect(pages).toEqual([
      ['alpha__a000', 'alpha__a001', 'alpha__a002', 'alpha__a003', 'alpha__a004'],
      ['alpha__a005', 'alpha__a006', 'beta__b000', 'beta__b001', 'beta__b002'],
      ['beta__b003', 'beta__b004'],
    ]);
  });

  it('gives no cursor when the route fits one page, and serves everything at once with page size 0', () => {
    expect(page(routeView([backendCatalog('alpha', ['x'])])).nextCursor).toBeUndefined();
    const unpaged = page(routeView([backendCatalog('alpha', numbered('a', 150))], { toolsListPageSize: 0 }));
    expect(toolsOf(unpaged)).toHaveLength(150);
    expect(unpaged.nextCursor).toBeUndefined();
  });

  it('serves the tools as the backend declared them, under their exposed names', () => {
    const withSchema = backendCatalog('alpha', [], {
      tools_json: [JSON.stringify({ name: 'get', description: 'Gets.', inputSchema: { type: 'object', required: ['id'] }, annotations: { readOnlyHint: true } })],
    });
    expect(toolsOf(page(routeView([withSchema])))).toEqual([
      { name: 'alpha__get', description: 'Gets.', inputSchema: { type: 'object', required: ['id'] }, annotations: { readOnlyHint: true } },
    ]);
  });
});

describe('tools/list cursors across a catalog change', () => {
  const before = routeView([backendCatalog('alpha', numbered('a', 6)), backendCatalog('beta', ['b000', 'b001'])], { toolsListPageSize: 3 });
  const firstPage = page(before);

  it('continues after the last tool returned when tools before it have gone (an offset would skip)', () => {
    const after = routeView([backendCatalog('alpha', ['a002', 'a003', 'a004', 'a005']), backendCatalog('beta', ['b000', 'b001'])], {
      toolsListPageSize: 3,
    });
    expect(names(page(after, firstPage.nextCursor))).toEqual(['alpha__a003', 'alpha__a004', 'alpha__a005']);
  });

  it('continues after the last tool returned when tools were added before it (an offset would repeat)', () => {
    const after = routeView([backendCatalog('alpha', ['new0', 'new1', ...numbered('a', 6)]), backendCatalog('beta', ['b000'])], {
      toolsListPageSize: 3,
    });
    expect(names(page(after, firstPage.nextCursor))).toEqual(['alpha__a003', 'alpha__a004', 'alpha__a005']);
  });

  it('continues with the tool that took its place when the last tool returned has gone', () => {
    const after = routeView([backendCatalog('alpha', ['a000', 'a001', 'a003', 'a004', 'a005']), backendCatalog('beta', ['b000'])], {
      toolsListPageSize: 3,
    });
    expect(names(page(after, firstPage.nextCursor))).toEqual(['alpha__a003', 'alpha__a004', 'alpha__a005']);
  });

  it('continues with the next backend when the backend of the last tool returned has gone', () => {
    const after = routeView([backendCatalog('beta', ['b000', 'b001'])], { toolsListPageSize: 3 });
    expect(names(page(after, firstPage.nextCursor))).toEqual(['beta__b000', 'beta__b001']);
  });
});

describe('tools/list with an invalid cursor', () => {
  const view = routeView([backendCatalog('alpha', numbered('a', 4))], { toolsListPageSize: 2 });
  const base64url = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
  const otherRouteCursor = page(buildRouteViews(catalogSnapshot([{ route_key: 'other', backends: [backendCatalog('alpha', numbered('a', 4))] }], { ...CATALOG_DEFAULTS, toolsListPageSize: 2 })).get('other')!).nextCursor!;

  it.each([
    ['not base64url', 'abc+/='],
    ['not JSON', base64url('hello')],
    ['JSON of another shape', base64url({ offset: 3 })],
    ['a cursor with an unknown field', base64url({ route: 'big', after: 'alpha__a001', backend: 'alpha', toolIndex: 1, extra: true })],
    ['a cursor of another route', otherRouteCursor],
    ['an empty string', ''],
  ])('rejects %s with -32602 on HTTP 200', (_case, cursor) => {
    expect(answerToolsList(view, { cursor })).toEqual({
      ok: false,
      message: 'invalid cursor: use the nextCursor of an earlier tools/list answer on route "big"',
    });
  });

  it('rejects params that are not an object with a string cursor', () => {
    expect(answerToolsList(view, { cursor: 3 }).ok).toBe(false);
    expect(answerToolsList(view, ['x']).ok).toBe(false);
    expect(answerToolsList(view, { _meta: { progressToken: 1 } }).ok).toBe(true);
  });

  it('answers through the sidecar as a JSON-RPC error -32602 with HTTP 200', async () => {
    const head = { method: 'POST', path: '/mcp/big', headers: new Map<string, string>() };
    const request = { jsonrpc: '2.0', id: 9, method: 'tools/list', params: { cursor: 'bogus!' } };
    const decision = await decideOnBody(head, Buffer.from(JSON.stringify(request)), sidecarContext(new Map([['big', view]])).context);
    if (decision.kind !== 'respond') throw new Error(`expected a response, got ${decision.kind}`);
    expect(decision.status).toBe(200);
    expect(JSON.parse(decision.body.toString())).toEqual({
      jsonrpc: '2.0',
      id: 9,
      error: { code: -32602, message: 'invalid cursor: use the nextCursor of an earlier tools/list answer on route "big"' },
    });
  });
});

describe('tools/list degraded metadata', () => {
  const stale = (name: string, tools: string[]) =>
    backendCatalog(name, tools, {
      state: 'stale',
      last_error: 'connect ECONNREFUSED 127.0.0.1:18101',
      failing_since: '2026-12-01T10:00:00.000Z',
    });
  const missing = (name: string) =>
    backendCatalog(name, [], { state: 'missing', last_success_at: '', last_error: 'fetch failed', failing_since: '2026-12-01T10:00:05.000Z' });
  const meta = (result: ToolsListResult) => result._meta[FEDERATION_META_KEY];

  it('names no backend when all answer', () => {
    expect(page(routeView([backendCatalog('alpha', ['x'])]))._meta).toEqual({ 'mcpgw/federation': { route: 'big', degradedBackends: [] } });
  });

  it('names stale and missing backends: since when, why, and how many tools each still contributes', () => {
    const result = page(routeView([backendCatalog('alpha', ['x']), stale('beta', ['y', 'z', 'bad name']), missing('gamma')]));
    expect(names(result)).toEqual(['alpha__x', 'beta__y', 'beta__z']);
    expect(meta(result)).toEqual({
      route: 'big',
      degradedBackends: [
        {
          name: 'beta',
          state: 'stale',
          failingSince: '2026-12-01T10:00:00.000Z',
          lastSuccessAt: '2026-11-30T00:00:00.000Z',
          lastError: 'connect ECONNREFUSED 127.0.0.1:18101',
          tools: 2,
        },
        { name: 'gamma', state: 'missing', failingSince: '2026-12-01T10:00:05.000Z', lastSuccessAt: null, lastError: 'fetch failed', tools: 0 },
      ],
    });
  });

  it('answers an empty list with a warning when no backend has ever answered', () => {
    const result = page(routeView([missing('alpha'), missing('beta')]));
    expect(toolsOf(result)).toEqual([]);
    expect(result.nextCursor).toBeUndefined();
    expect(meta(result).warning).toBe('no backend of route "big" has answered tools/list: the list is empty until one does');
    expect(meta(result).degradedBackends.map((backend) => backend.name)).toEqual(['alpha', 'beta']);
  });

  it('warns when every backend is down but last-good tools are still listed', () => {
    const result = page(routeView([stale('alpha', ['x']), missing('beta')]));
    expect(names(result)).toEqual(['alpha__x']);
    expect(meta(result).warning).toBe('no backend of route "big" is answering: every tool listed is a last-good copy and calls may fail');
  });

  it('carries the metadata on every page', () => {
    const view = routeView([stale('alpha', numbered('a', 3))], { toolsListPageSize: 2 });
    const first = page(view);
    expect(meta(page(view, first.nextCursor))).toEqual(meta(first));
  });
});

describe('tools/call resolution by exact exposed name', () => {
  it('resolves names the control plane exposed, even when the tool\'s own name holds the separator', () => {
    const view = routeView([backendCatalog('svc', ['a__b', 'plain'])]);
    expect(resolveTool(view, 'svc__a__b')).toMatchObject({ ok: true, toolName: 'a__b', backend: { name: 'svc', toolService: 'tool_service.svc' } });
  });

  it('uses the separator of the catalog, not a built-in one', () => {
    const view = routeView([backendCatalog('svc', ['echo'])], { toolNameSeparator: '.', toolNamePolicy: 'warn' });
    expect(resolveTool(view, 'svc.echo')).toMatchObject({ ok: true, toolName: 'echo' });
    expect(resolveTool(view, 'svc__echo')).toEqual({ ok: false, message: 'tool "svc__echo" has no backend prefix: call it as <backend>.<tool>' });
    expect(resolveTool(view, 'svc.nope')).toEqual({ ok: false, message: 'backend "svc" has no tool "nope" on route "big"' });
    expect(resolveTool(view, 'ghost.echo')).toEqual({ ok: false, message: 'unknown backend "ghost" on route "big" (tool "ghost.echo")' });
  });

  it('does not resolve a tool the rules left out', () => {
    const view = routeView([backendCatalog('svc', ['a.b', 'ok'])]);
    expect(resolveTool(view, 'svc__a.b')).toEqual({ ok: false, message: 'backend "svc" has no tool "a.b" on route "big"' });
  });
});

describe('the serialized tools/list answer', () => {
  const view = routeView([backendCatalog('alpha', ['a', 'b'])]);
  it.each<[string, string | number]>([
    ['a number id', 7],
    ['a string id that needs escaping', 'he said "hi"'],
  ])('is the JSON of the same answer built as objects, for %s', (_case, id) => {
    const result = page(view);
    const body = toolsListBody(id, result, { resultType: 'complete' }, { 'io.modelcontextprotocol/serverInfo': { name: 'gw' } });
    expect(JSON.parse(body.toString())).toEqual({
      jsonrpc: '2.0',
      id,
      result: {
        tools: result.page.map((exposed) => (exposed as ExposedToolView).tool),
        resultType: 'complete',
        _meta: { ...result._meta, 'io.modelcontextprotocol/serverInfo': { name: 'gw' } },
      },
    });
  });
});

describe('the whole list, serialized once per catalog version', () => {
  it('copies none of the list into an answer: 20 answers of 5,000 tools held at once take less memory outside the heap than one copy of the list', () => {
    // The bench route: 50 backends × 100 tools. A copy per answer is megabytes of garbage outside V8's
    // heap, whose pressure makes V8 mark and compact the whole heap every few answers.
    const view = routeView(Array.from({ length: 50 }, (_, backend) => backendCatalog(`svc_${backend}`, numbered('tool_with_a_longer_name_', 100))));
    const listBytes = page(view).entries.length;
    const outsideHeap = () => process.memoryUsage().arrayBuffers;
    const before = outsideHeap();
    const bodies = Array.from({ length: 20 }, (_, id) => toolsListBody(id, page(view)));
    expect(outsideHeap() - before).toBeLessThan(listBytes);
    expect(bodies.every((body) => body.length > listBytes)).toBe(true);
  });

  it('answers every request for the whole list from the same bytes, and a page of it from its own', () => {
    const backends = [backendCatalog('alpha', numbered('a', 3)), backendCatalog('beta', numbered('b', 2))];
    const view = routeView(backends);
    const first = page(view);
    expect(page(view).entries).toBe(first.entries);
    expect(names(first)).toEqual(['alpha__a000', 'alpha__a001', 'alpha__a002', 'beta__b000', 'beta__b001']);
    // A new catalog version is a new view: its bytes are made from it, never the old version's.
    const next = routeView([backendCatalog('alpha', numbered('a', 1)), backends[1]]);
    expect(names(page(next))).toEqual(['alpha__a000', 'beta__b000', 'beta__b001']);
    const paged = routeView(backends, { toolsListPageSize: 2 });
    const firstPage = page(paged);
    expect(names(firstPage)).toEqual(['alpha__a000', 'alpha__a001']);
    expect(names(page(paged, firstPage.nextCursor))).toEqual(['alpha__a002', 'beta__b000']);
  });
});
