import { Prompt, ServerCapabilities, Tool } from '@modelcontextprotocol/sdk/types.js';
import { AccessRuleMessage, BackendCredentialsMessage, BackendState, CatalogSnapshotMessage } from '../catalog/catalog-store';
import { ExposedResourceMessage } from '../catalog/surface-exposure';
import { schemeNameOf } from '../catalog/resource-naming';

export interface BackendView {
  name: string;
  /** The Tool Service behind this backend (`tool_service.<id>`). */
  toolService: string;
  state: BackendState;
  /** Unprefixed names of the backend's tools this route serves. */
  toolNames: Set<string>;
  /** RFC 3339 times and the last error as the control plane reported them; empty when there is none. */
  lastSuccessAt: string;
  lastError: string;
  failingSince: string;
  /** The backend's MCP endpoint, for opening its sessions. */
  url: string;
  /** The Envoy cluster its requests go to: the sidecar names it on Envoy's egress listener. */
  cluster: string;
  /** What the gateway authenticates to it with on a caller's behalf. */
  credentials: BackendCredentialsMessage;
  /** Degraded answer for its read-only tools when it cannot be reached; empty for none. */
  fallbackText: string;
  /** The backend's own names of tools the route's policy denies, with the rule that does. */
  deniedTools: Map<string, string>;
  /** The protocol revision the backend speaks; "" before the control plane has heard from it. */
  protocolVersion: string;
  /** It hands out sessions (it did when it was listed). */
  sessionful: boolean;
  /** Listed in a session-based revision, it answers the stateless one too: a stateless client's requests go to it in that one. */
  alsoModern: boolean;
  /** The server capabilities it declared when it was listed; {} before it has answered. */
  capabilities: ServerCapabilities;
  /** Its name as the scheme prefix of its resources' URIs (resource-naming.ts). */
  schemeName: string;
}

/** One entry of a list the route serves (a tool, prompt, resource or resource template), and where it comes from. */
export interface ListedItem {
  /** What agents see it as: a tool's or prompt's exposed name, a resource's URI, a template's URI template. A cursor names it. */
  key: string;
  /** The entry as agents see it, serialized once per catalog version: a list answer is these joined, never re-serialized. */
  json: string;
  backend: BackendView;
  /** Position in the backend's own list, to place a cursor whose entry has gone. */
  index: number;
  /** Position in the route's list. */
  position: number;
  /** What it needs of a client (client-needs.ts): a client lacking it is not offered it. Empty: nothing. */
  needs: readonly string[];
  /** Who may call it and see it listed (docs/auth.md; tools only); none: every caller the route admits. */
  accessRule?: AccessRuleMessage;
}

/** One tool the route serves. */
export interface ExposedToolView extends ListedItem {
  /** The backend's Tool object under its exposed name. */
  tool: Tool;
  /** The backend's own name for the tool: what tools/call sends on. */
  toolName: string;
}

/** A list the route serves, in its order, and by key. */
export interface CatalogList<T extends ListedItem = ListedItem> {
  items: T[];
  byKey: Map<string, T>;
  /** Some entry needs something of clients: what a client is offered depends on its capabilities. */
  conditional: boolean;
  /** Some entry has an access rule: what a client is offered depends on its caller (docs/auth.md). */
  byCaller: boolean;
}

/** What the sidecar needs to answer for one route, computed once per catalog update. */
export interface RouteCatalogView {
  key: string;
  backends: Map<string, BackendView>;
  /** The tools the control plane decided this route serves, in its order: by backend name, then by the backend's own order. */
  tools: ExposedToolView[];
  toolsByName: Map<string, ExposedToolView>;
  /** The same tools as a list like the others. */
  toolList: CatalogList<ExposedToolView>;
  toolNameSeparator: string;
  /** Most tools in one tools/list answer; 0 means all of them. */
  toolsListPageSize: number;
  prompts: CatalogList;
  resources: CatalogList;
  resourceTemplates: CatalogList;
  /** Backends by the scheme prefix of their resources' URIs. */
  backendsBySchemeName: Map<string, BackendView>;
  /** What the route can serve, from its backends' capabilities: what initialize and server/discover declare. */
  capabilities: ServerCapabilities;
  /** Where callers' groups are in the route's tokens; undefined when the route takes no token (open). */
  groupsClaim?: string[];
  /** Some tool has an access rule: what tools/list shows depends on the caller. */
  listVariesByCaller: boolean;
}

const NO_CREDENTIALS: BackendCredentialsMessage = { mode: 'none', audience: '', resource: '', scopes: [] };

/** The lists of a route a client can ask for, by their list method. */
export const LIST_METHODS = {
  'tools/list': { kind: 'tools', member: 'tools' },
  'prompts/list': { kind: 'prompts', member: 'prompts' },
  'resources/list': { kind: 'resources', member: 'resources' },
  'resources/templates/list': { kind: 'resourceTemplates', member: 'resourceTemplates' },
} as const;
export type ListMethod = keyof typeof LIST_METHODS;
export type ListKind = (typeof LIST_METHODS)[ListMethod]['kind'];

export function listOf(view: RouteCatalogView, kind: ListKind): CatalogList {
  return kind === 'tools' ? view.toolList : view[kind];
}

/**
 * What the route serves, declared to its clients: tools always (the gateway answers tools/list
 * whatever its backends do); prompts, resources (subscriptions where a backend takes them),
 * completions and logging where any backend declared them. Every list is announced as changing:
 * the gateway tells clients when its catalog does (docs/catalog.md).
 */
function routeCapabilities(backends: BackendView[]): ServerCapabilities {
  const declared = (key: keyof ServerCapabilities) => backends.some((backend) => backend.capabilities[key] !== undefined);
  return {
    tools: { listChanged: true },
    ...(declared('prompts') && { prompts: { listChanged: true } }),
    ...(declared('resources') && {
      resources: { subscribe: backends.some((backend) => backend.capabilities.resources?.subscribe === true), listChanged: true },
    }),
    ...(declared('completions') && { completions: {} }),
    ...(declared('logging') && { logging: {} }),
  };
}

const parseJson = <T>(json: string, fallback: T): T => {
  try {
    return json ? (JSON.parse(json) as T) : fallback;
  } catch {
    return fallback;
  }
};

/** A list of prompts, resources or templates, from the control plane's exposed entries and the backends' own JSON. */
function buildList(
  exposed: { key: string; backend: string; index: number }[],
  backends: Map<string, BackendView>,
  ownJson: (backend: string) => string[] | undefined,
  asExposed: (own: Record<string, unknown>, key: string) => Record<string, unknown>,
  needsOf: (backend: string, own: Record<string, unknown>) => readonly string[],
): CatalogList {
  const items: ListedItem[] = [];
  const byKey = new Map<string, ListedItem>();
  for (const entry of exposed) {
    const backend = backends.get(entry.backend);
    const json = ownJson(entry.backend)?.[entry.index];
    // The control plane sends consistent catalogs; an entry pointing nowhere is skipped, never served half-made.
    if (!backend || json === undefined) continue;
    const own = JSON.parse(json) as Record<string, unknown>;
    const item = { key: entry.key, json: JSON.stringify(asExposed(own, entry.key)), backend, index: entry.index, position: items.length, needs: needsOf(entry.backend, own) };
    items.push(item);
    byKey.set(entry.key, item);
  }
  return { items, byKey, conditional: items.some((item) => item.needs.length > 0), byCaller: false };
}

const resourceEntries = (entries: ExposedResourceMessage[]) => entries.map((entry) => ({ key: entry.uri, backend: entry.backend, index: entry.index }));

export function buildRouteViews(snapshot: CatalogSnapshotMessage): Map<string, RouteCatalogView> {
  const views = new Map<string, RouteCatalogView>();
  for (const route of snapshot.routes) {
    const backends = new Map<string, BackendView>();
    const declared = new Map<string, string[]>();
    const byName = new Map(route.backends.map((backend) => [backend.name, backend]));
    const needs = new Map(route.backends.map((backend) => [backend.name, parseJson<Record<string, string[]>>(backend.needs_json, {})]));
    const needsOf = (backend: string, key: string): readonly string[] => needs.get(backend)?.[key] ?? [];
    for (const backend of route.backends) {
      declared.set(backend.name, backend.tools_json);
      backends.set(backend.name, {
        name: backend.name,
        toolService: backend.tool_service,
        state: backend.state,
        toolNames: new Set(),
        lastSuccessAt: backend.last_success_at,
        lastError: backend.last_error,
        failingSince: backend.failing_since,
        url: backend.url,
        fallbackText: backend.fallback_text,
        deniedTools: new Map((backend.denied_tools ?? []).map((denied) => [denied.tool, denied.rule])),
        protocolVersion: backend.protocol_version ?? '',
        sessionful: backend.sessionful ?? true,
        alsoModern: backend.also_modern ?? false,
        cluster: backend.cluster,
        credentials: backend.credentials ?? NO_CREDENTIALS,
        capabilities: parseJson<ServerCapabilities>(backend.capabilities_json, {}),
        schemeName: schemeNameOf(backend.name),
      });
    }
    const tools: ExposedToolView[] = [];
    const toolsByName = new Map<string, ExposedToolView>();
    for (const exposed of route.tools) {
      const backend = backends.get(exposed.backend);
      const json = declared.get(exposed.backend)?.[exposed.tool_index];
      // The control plane sends consistent catalogs; an entry pointing nowhere is skipped, never served half-made.
      if (!backend || json === undefined) continue;
      const own = JSON.parse(json) as Tool;
      const tool = { ...own, name: exposed.name };
      const accessRule = exposed.access_rule > 0 ? route.access_rules[exposed.access_rule - 1] : undefined;
      const view = {
        key: exposed.name,
        tool,
        json: JSON.stringify(tool),
        backend,
        toolName: own.name,
        index: exposed.tool_index,
        position: tools.length,
        needs: needsOf(exposed.backend, `tool:${own.name}`),
        ...(accessRule && { accessRule }),
      };
      backend.toolNames.add(own.name);
      tools.push(view);
      toolsByName.set(exposed.name, view);
    }
    views.set(route.route_key, {
      key: route.route_key,
      backends,
      tools,
      toolsByName,
      toolList: {
        items: tools,
        byKey: toolsByName,
        conditional: tools.some((exposed) => exposed.needs.length > 0),
        byCaller: tools.some((exposed) => exposed.accessRule !== undefined),
      },
      toolNameSeparator: snapshot.tool_name_separator,
      toolsListPageSize: snapshot.tools_list_page_size,
      prompts: buildList(
        route.prompts.map((entry) => ({ key: entry.name, backend: entry.backend, index: entry.index })),
        backends,
        (backend) => byName.get(backend)?.prompts_json,
        (own, key) => ({ ...own, name: key }),
        (backend, own) => needsOf(backend, `prompt:${(own as Prompt).name}`),
      ),
      resources: buildList(resourceEntries(route.resources), backends, (backend) => byName.get(backend)?.resources_json, (own, key) => ({ ...own, uri: key }), () => []),
      resourceTemplates: buildList(
        resourceEntries(route.resource_templates),
        backends,
        (backend) => byName.get(backend)?.resource_templates_json,
        (own, key) => ({ ...own, uriTemplate: key }),
        () => [],
      ),
      backendsBySchemeName: new Map([...backends.values()].map((backend) => [backend.schemeName, backend])),
      capabilities: routeCapabilities([...backends.values()]),
      ...(route.groups_claim.length > 0 && { groupsClaim: route.groups_claim }),
      listVariesByCaller: tools.some((exposed) => exposed.accessRule !== undefined),
    });
  }
  return views;
}

export type ToolResolution =
  | { ok: true; backend: BackendView; toolName: string; tool: Tool }
  | { ok: false; message: string; denied?: { backend: BackendView; toolName: string; rule: string } };

/**
 * The exposed name picks exactly one tool of one backend; anything else is an explicit error, never
 * a guess. The separator only serves to say what is wrong with a name the route does not serve.
 */
export function resolveTool(view: RouteCatalogView, exposedName: string): ToolResolution {
  const exposed = view.toolsByName.get(exposedName);
  if (exposed) return { ok: true, backend: exposed.backend, toolName: exposed.toolName, tool: exposed.tool };
  const separator = view.toolNameSeparator;
  const at = separator ? exposedName.indexOf(separator) : -1;
  if (at <= 0) {
    return { ok: false, message: `tool "${exposedName}" has no backend prefix: call it as <backend>${separator}<tool>` };
  }
  const backendName = exposedName.slice(0, at);
  const toolName = exposedName.slice(at + separator.length);
  const backend = view.backends.get(backendName);
  if (!backend) {
    return { ok: false, message: `unknown backend "${backendName}" on route "${view.key}" (tool "${exposedName}")` };
  }
  const rule = backend.deniedTools.get(toolName);
  if (rule !== undefined) {
    return {
      ok: false,
      message: `tool "${exposedName}" is denied on route "${view.key}" by policy (${rule})`,
      denied: { backend, toolName, rule },
    };
  }
  return { ok: false, message: `backend "${backendName}" has no tool "${toolName}" on route "${view.key}"` };
}
