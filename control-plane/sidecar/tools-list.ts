import { z } from 'zod';
import { ClientNeed, allows } from '../catalog/client-needs';
import type { AccessRuleMessage } from '../catalog/catalog-store';
import { accessDecision } from '../auth/access-rules';
import { CallerIdentity } from '../auth/caller-identity';
import { compareBackendNames } from '../catalog/tool-exposure';
import { PartedBody } from './decision';
import { JsonRpcId } from './json-rpc';
import { BackendView, CatalogList, LIST_METHODS, ListKind, ListMethod, ListedItem, RouteCatalogView, listOf } from './route-catalog';

/**
 * The gateway's answers to tools/list, prompts/list, resources/list and resources/templates/list,
 * from memory (schema: docs/tools-list.md, docs/catalog.md). Each is always a result: a backend that
 * is down is named in `_meta`, never turned into an error.
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

/** One page of a route's list: the entries themselves come serialized with the catalog (ListedItem.json). */
export interface CatalogListResult<T extends ListedItem = ListedItem> {
  page: T[];
  /** The page's entries as they go in the answer's array (UTF-8, comma-separated, no brackets). */
  entries: Buffer;
  nextCursor?: string;
  _meta: { [FEDERATION_META_KEY]: FederationMeta };
}
export type ToolsListResult = CatalogListResult;

export type CatalogListAnswer = { ok: true; result: CatalogListResult } | { ok: false; message: string };
export type ToolsListAnswer = CatalogListAnswer;

/** Who is asking, as far as the list depends on it: the client capabilities it declared (client-needs.ts). */
export interface ListAudience {
  /** What the client's declared capabilities offer to each backend; undefined: everything (no filter). */
  offeredBy?: (backend: BackendView) => ReadonlySet<ClientNeed>;
  /** Who asks (docs/auth.md): tools with an access rule are listed only to callers it admits. */
  caller?: CallerIdentity;
}

const paramsSchema = z.looseObject({ cursor: z.string().optional() }).optional();

/**
 * A page ends after a named entry, not at an offset: when the catalog changes between two pages, the
 * next page still starts right after the last entry the client got. The backend and the entry's
 * position in the backend's own list place the cursor when that entry itself has gone. `list` names
 * the list of a cursor that is not one of tools/list, so that no cursor is taken by another list.
 */
const cursorSchema = z
  .object({
    route: z.string(),
    list: z.enum(['prompts', 'resources', 'resourceTemplates']).optional(),
    after: z.string(),
    backend: z.string(),
    index: z.number().int().nonnegative(),
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

/** Index of the first entry after the cursor's, in the route's current list. */
function resumeIndex(list: CatalogList, cursor: Cursor): number {
  const anchor = list.byKey.get(cursor.after);
  if (anchor) return anchor.position + 1;
  // The last entry returned has gone: the one that followed it has moved into its place in the
  // backend's list, or the backend has gone and the next backend in the order comes next.
  const next = list.items.findIndex((item) => {
    const order = compareBackendNames(item.backend.name, cursor.backend);
    return order > 0 || (order === 0 && item.index >= cursor.index);
  });
  return next === -1 ? list.items.length : next;
}

const LIST_WORDS: Record<ListKind, { method: string; entry: string; use: string }> = {
  tools: { method: 'tools/list', entry: 'tool', use: 'calls' },
  prompts: { method: 'prompts/list', entry: 'prompt', use: 'prompts/get' },
  resources: { method: 'resources/list', entry: 'resource', use: 'reads' },
  resourceTemplates: { method: 'resources/templates/list', entry: 'resource template', use: 'reads' },
};

function federationMeta(view: RouteCatalogView, kind: ListKind): FederationMeta {
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
    const words = LIST_WORDS[kind];
    meta.warning =
      listOf(view, kind).items.length === 0
        ? `no backend of route "${view.key}" has answered ${words.method}: the list is empty until one does`
        : `no backend of route "${view.key}" is answering: every ${words.entry} listed is a last-good copy and ${words.use} may fail`;
  }
  return meta;
}

/**
 * The JSON-RPC answer for a page, with `fields` before the entries and `meta` merged into `_meta`: the
 * entries go in as the bytes answerList gave (serialized once per catalog version), between a head and
 * an end made per answer, and are never copied into the answer (PartedBody).
 */
export function listBody(member: string, id: JsonRpcId, result: CatalogListResult, fields: Record<string, unknown> = {}, meta: Record<string, unknown> = {}): PartedBody {
  const rest = { ...fields, ...(result.nextCursor !== undefined && { nextCursor: result.nextCursor }), _meta: { ...result._meta, ...meta } };
  const tail = JSON.stringify(rest).slice(1);
  return new PartedBody([Buffer.from(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"${member}":[`), result.entries, Buffer.from(`],${tail}}`)]);
}

/**
 * The whole entries of a list, or of what one audience is shown of it, as bytes: made by the first
 * answer that serves them all, then shared by every answer that does (the common case: a client whose
 * capabilities and caller keep the same entries). A view is built anew for each catalog version, so the
 * bytes go with the version they were made from.
 */
const wholeEntries = new WeakMap<{ items: ListedItem[] }, Buffer>();

const joined = (page: ListedItem[]) => Buffer.from(page.map((item) => item.json).join(','));

/** A page's entries as bytes: the bytes of all of `shown` when the page is all of it (pages keep its order). */
function entriesOf(shown: { items: ListedItem[] }, page: ListedItem[]): Buffer {
  if (page.length === 0 || page.length !== shown.items.length) return joined(page);
  let whole = wholeEntries.get(shown);
  if (!whole) {
    whole = joined(page);
    wholeEntries.set(shown, whole);
  }
  return whole;
}

export const toolsListBody = (id: JsonRpcId, result: CatalogListResult, fields?: Record<string, unknown>, meta?: Record<string, unknown>) =>
  listBody('tools', id, result, fields, meta);

/**
 * What decides, for a list whose entries depend on who asks, which entries an audience is shown: the
 * list's distinct access rules (one decision each per caller) and its distinct (backend, needs) pairs
 * (one decision each per client's capabilities). Audiences that decide alike on all of them are shown
 * the same entries, so they share one `shown` list — and its bytes — per catalog version.
 */
interface ListDeciders {
  rules: AccessRuleMessage[];
  needs: { backend: BackendView; needs: readonly string[] }[];
  /** By an entry's position in the list: the index of its rule in `rules`, of its needs in `needs`; -1 for none. */
  ruleOf: number[];
  needsOf: number[];
  /** The entries shown, by the decisions that select them; the most recently used few. */
  shown: Map<string, { items: ListedItem[] }>;
}

/** Audiences of distinct decisions whose entries a list keeps at once (each may hold its bytes: a 5,000-tool list is ≈1.7 MB). */
const SHOWN_LISTS_KEPT = 8;

const decidersByList = new WeakMap<CatalogList, ListDeciders>();

function decidersOf(list: CatalogList): ListDeciders {
  let deciders = decidersByList.get(list);
  if (!deciders) {
    const ruleIndex = new Map<AccessRuleMessage, number>();
    const needsIndex = new Map<string, number>();
    deciders = { rules: [], needs: [], ruleOf: [], needsOf: [], shown: new Map() };
    for (const item of list.items) {
      let rule = -1;
      if (item.accessRule) {
        rule = ruleIndex.get(item.accessRule) ?? deciders.rules.push(item.accessRule) - 1;
        ruleIndex.set(item.accessRule, rule);
      }
      let needs = -1;
      if (item.needs.length > 0) {
        const key = `${item.backend.name}\n${item.needs.join('\n')}`;
        needs = needsIndex.get(key) ?? deciders.needs.push({ backend: item.backend, needs: item.needs }) - 1;
        needsIndex.set(key, needs);
      }
      deciders.ruleOf.push(rule);
      deciders.needsOf.push(needs);
    }
    decidersByList.set(list, deciders);
  }
  return deciders;
}

/** The entries of `list` this audience is shown: each rule decided once for its caller, each need once for its capabilities. */
function shownTo(list: CatalogList, audience: ListAudience, byCapabilities: boolean): { items: ListedItem[] } {
  const { offeredBy, caller } = audience;
  const { rules, needs, ruleOf, needsOf, shown: kept } = decidersOf(list);
  const ruleAllows = rules.map((rule) => accessDecision(rule, caller).allowed);
  const needsMet = needs.map((entry) => !byCapabilities || allows(offeredBy!(entry.backend), entry.needs));
  const key = `${ruleAllows.map(Number).join('')}|${needsMet.map(Number).join('')}`;
  let shown = kept.get(key);
  if (shown) {
    kept.delete(key);
  } else {
    shown = { items: list.items.filter((_item, index) => (ruleOf[index] < 0 || ruleAllows[ruleOf[index]]) && (needsOf[index] < 0 || needsMet[needsOf[index]])) };
    if (kept.size >= SHOWN_LISTS_KEPT) kept.delete(kept.keys().next().value!);
  }
  kept.set(key, shown);
  return shown;
}

/** Index of the first of `items` (in the list's order) at or after position `start` of the whole list. */
function firstFrom(items: ListedItem[], start: number): number {
  let low = 0;
  let high = items.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (items[middle].position < start) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * The entries from `start` (a position in the whole list) on this audience may use, at most `count` of
 * them, whether more follow, and the list they are a page of: what its declared capabilities allow, and
 * what its caller may call (docs/auth.md).
 */
function pageFor(list: CatalogList, audience: ListAudience, start: number, count: number): { page: ListedItem[]; more: boolean; of: { items: ListedItem[] } } {
  const byCapabilities = audience.offeredBy !== undefined && list.conditional;
  const of = byCapabilities || list.byCaller ? shownTo(list, audience, byCapabilities) : list;
  const from = firstFrom(of.items, start);
  return { page: of.items.slice(from, from + count), more: from + count < of.items.length, of };
}

/**
 * One page of one of the route's lists for this audience, or why the request's cursor is not one this
 * gateway gave out for this list of this route.
 */
export function answerList(view: RouteCatalogView, method: ListMethod, params: unknown, audience: ListAudience = {}): CatalogListAnswer {
  const { kind } = LIST_METHODS[method];
  const list = listOf(view, kind);
  const parsed = paramsSchema.safeParse(params);
  if (!parsed.success) return { ok: false, message: `${method} params must be an object whose cursor is a string` };
  let start = 0;
  const listName = kind === 'tools' ? undefined : kind;
  if (parsed.data?.cursor !== undefined) {
    const cursor = decodeCursor(parsed.data.cursor);
    if (cursor?.route !== view.key || cursor.list !== listName) {
      return { ok: false, message: `invalid cursor: use the nextCursor of an earlier ${method} answer on route "${view.key}"` };
    }
    start = resumeIndex(list, cursor);
  }
  const pageSize = view.toolsListPageSize > 0 ? view.toolsListPageSize : list.items.length;
  const { page, more, of } = pageFor(list, audience, start, pageSize);
  const last = page.at(-1);
  return {
    ok: true,
    result: {
      page,
      entries: entriesOf(of, page),
      ...(more && last && { nextCursor: encodeCursor({ route: view.key, ...(listName && { list: listName }), after: last.key, backend: last.backend.name, index: last.index }) }),
      _meta: { [FEDERATION_META_KEY]: federationMeta(view, kind) },
    },
  };
}

export const answerToolsList = (view: RouteCatalogView, params: unknown, audience?: ListAudience) => answerList(view, 'tools/list', params, audience);
