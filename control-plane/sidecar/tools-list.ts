import { z } from 'zod';
import { accessDecision } from '../auth/access-rules';
import { CallerIdentity } from '../auth/caller-identity';
import { compareBackendNames } from '../catalog/tool-exposure';
import { JsonRpcId } from './json-rpc';
import { ExposedToolView, RouteCatalogView } from './route-catalog';

/**
 * The gateway's tools/list answer, from memory (schema: docs/tools-list.md). It is always a result:
 * a backend that is down is named in `_meta`, never turned into an error.
 */

/** The `_meta` key of the federation state: vendor prefix `mcpgw/`, as MCP's `_meta` naming rules ask. */
export const FEDERATION_META_KEY = 'mcpgw/federation';

export interface DegradedBackend {
  name: string;
  /** stale: serving its last-good tools after a failure; missing: has never answered. */
  state: 'stale' | 'missing';
  /** First failure since the last success (RFC 3339), null until a fetch has failed. */
  failingSince: string | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  /** How many tools of the route's list come from this backend (last-good copies when stale). */
  tools: number;
}

export interface FederationMeta {
  route: string;
  degradedBackends: DegradedBackend[];
  /** Present when no backend of the route is answering. */
  warning?: string;
}

/** One page of a route's tools: the tools themselves come serialized with the catalog (ExposedToolView.json). */
export interface ToolsListResult {
  page: ExposedToolView[];
  nextCursor?: string;
  _meta: { [FEDERATION_META_KEY]: FederationMeta };
}

export type ToolsListAnswer = { ok: true; result: ToolsListResult } | { ok: false; message: string };

const paramsSchema = z.looseObject({ cursor: z.string().optional() }).optional();

/**
 * A page ends after a named tool, not at an offset: when the catalog changes between two pages, the
 * next page still starts right after the last tool the client got. The backend and its position in
 * the backend's own list place the cursor when that tool itself has gone.
 */
const cursorSchema = z
  .object({
    route: z.string(),
    after: z.string(),
    backend: z.string(),
    toolIndex: z.number().int().nonnegative(),
  })
  .strict();
type Cursor = z.output<typeof cursorSchema>;

const encodeCursor = (cursor: Cursor) => Buffer.from(JSON.stringify(cursor)).toString('base64url');

function decodeCursor(text: string): Cursor | undefined {
  // Node's base64url decoder skips characters it does not know; a cursor must consist of none.
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
  try {
    const parsed = cursorSchema.safeParse(JSON.parse(Buffer.from(text, 'base64url').toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** Index of the first tool after the cursor's, in the route's current list. */
function resumeIndex(view: RouteCatalogView, cursor: Cursor): number {
  const anchor = view.toolsByName.get(cursor.after);
  if (anchor) return anchor.position + 1;
  // The last tool returned has gone: the one that followed it has moved into its place in the
  // backend's list, or the backend has gone and the next backend in the order comes next.
  const next = view.tools.findIndex((exposed) => {
    const order = compareBackendNames(exposed.backend.name, cursor.backend);
    return order > 0 || (order === 0 && exposed.toolIndex >= cursor.toolIndex);
  });
  return next === -1 ? view.tools.length : next;
}

function federationMeta(view: RouteCatalogView): FederationMeta {
  const backends = [...view.backends.values()];
  const degradedBackends = backends.flatMap((backend): DegradedBackend[] =>
    backend.state === 'ok'
      ? []
      : [
          {
            name: backend.name,
            state: backend.state,
            failingSince: backend.failingSince || null,
            lastSuccessAt: backend.lastSuccessAt || null,
            lastError: backend.lastError || null,
            tools: backend.toolNames.size,
          },
        ],
  );
  const meta: FederationMeta = { route: view.key, degradedBackends };
  if (degradedBackends.length === backends.length) {
    meta.warning =
      view.tools.length === 0
        ? `no backend of route "${view.key}" has answered tools/list: the list is empty until one does`
        : `no backend of route "${view.key}" is answering: every tool listed is a last-good copy and calls may fail`;
  }
  return meta;
}

/**
 * The JSON-RPC answer for a page, with `fields` before the tools and `meta` merged into `_meta`: the
 * tools' own JSON is joined as it was serialized once per catalog version, so a route of thousands of
 * tools costs a string join, not a serialization.
 */
export function toolsListBody(id: JsonRpcId, result: ToolsListResult, fields: Record<string, unknown> = {}, meta: Record<string, unknown> = {}): string {
  const rest = { ...fields, ...(result.nextCursor !== undefined && { nextCursor: result.nextCursor }), _meta: { ...result._meta, ...meta } };
  const tail = JSON.stringify(rest).slice(1);
  return `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"tools":[${result.page.map((exposed) => exposed.json).join(',')}],${tail}}`;
}

/**
 * The tools from `start` on that this caller may call (docs/auth.md), at most `count` of them (and
 * whether more follow): a route without access rules is a slice of the list serialized once.
 */
function pageFor(view: RouteCatalogView, caller: CallerIdentity | undefined, start: number, count: number): { page: ExposedToolView[]; more: boolean } {
  if (!view.listVariesByCaller) return { page: view.tools.slice(start, start + count), more: start + count < view.tools.length };
  const page: ExposedToolView[] = [];
  for (let index = start; index < view.tools.length; index++) {
    const exposed = view.tools[index];
    if (!accessDecision(exposed.accessRule, caller).allowed) continue;
    if (page.length === count) return { page, more: true };
    page.push(exposed);
  }
  return { page, more: false };
}

/**
 * One page of the route's tools this caller may call, or why the request's cursor is not one this
 * gateway gave out for this route.
 */
export function answerToolsList(view: RouteCatalogView, params: unknown, caller?: CallerIdentity): ToolsListAnswer {
  const parsed = paramsSchema.safeParse(params);
  if (!parsed.success) return { ok: false, message: 'tools/list params must be an object whose cursor is a string' };
  let start = 0;
  if (parsed.data?.cursor !== undefined) {
    const cursor = decodeCursor(parsed.data.cursor);
    if (cursor?.route !== view.key) {
      return { ok: false, message: `invalid cursor: use the nextCursor of an earlier tools/list answer on route "${view.key}"` };
    }
    start = resumeIndex(view, cursor);
  }
  const pageSize = view.toolsListPageSize > 0 ? view.toolsListPageSize : view.tools.length;
  const { page, more } = pageFor(view, caller, start, pageSize);
  const last = page.at(-1);
  return {
    ok: true,
    result: {
      page,
      ...(more &&
        last && { nextCursor: encodeCursor({ route: view.key, after: last.tool.name, backend: last.backend.name, toolIndex: last.toolIndex }) }),
      _meta: { [FEDERATION_META_KEY]: federationMeta(view) },
    },
  };
}
