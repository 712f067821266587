import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { AccessRuleMessage, BackendState, CatalogSnapshotMessage } from '../catalog/catalog-store';
import { BackendTls } from '../shared/backend-fetch';

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
  /** Degraded answer for its read-only tools when it cannot be reached; empty for none. */
  fallbackText: string;
  /** For an https backend: how to verify it. */
  tls?: BackendTls;
  /** The backend's own names of tools the route's policy denies, with the rule that does. */
  deniedTools: Map<string, string>;
  /** The protocol revision the backend speaks; "" before the control plane has heard from it. */
  protocolVersion: string;
}

/** One tool the route serves, and where it comes from. */
export interface ExposedToolView {
  /** The tool as agents see it: the backend's Tool object under its exposed name. */
  tool: Tool;
  /** The same, serialized once per catalog version: a tools/list answer is these joined, never re-serialized. */
  json: string;
  backend: BackendView;
  /** The backend's own name for the tool: what tools/call sends on. */
  toolName: string;
  /** Position in the backend's own list, to place a tools/list cursor whose tool has gone. */
  toolIndex: number;
  /** Position in the route's list. */
  position: number;
  /** Who may call it and see it listed (docs/auth.md); none: every caller the route admits. */
  accessRule?: AccessRuleMessage;
}

/** What the sidecar needs to answer for one route, computed once per catalog update. */
export interface RouteCatalogView {
  key: string;
  backends: Map<string, BackendView>;
  /** The tools the control plane decided this route serves, in its order: by backend name, then by the backend's own order. */
  tools: ExposedToolView[];
  toolsByName: Map<string, ExposedToolView>;
  toolNameSeparator: string;
  /** Most tools in one tools/list answer; 0 means all of them. */
  toolsListPageSize: number;
  /** Where callers' groups are in the route's tokens; undefined when the route takes no token (open). */
  groupsClaim?: string[];
  /** Some tool has an access rule: what tools/list shows depends on the caller. */
  listVariesByCaller: boolean;
}

export function buildRouteViews(snapshot: CatalogSnapshotMessage): Map<string, RouteCatalogView> {
  const views = new Map<string, RouteCatalogView>();
  for (const route of snapshot.routes) {
    const backends = new Map<string, BackendView>();
    const declared = new Map<string, string[]>();
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
        ...(backend.tls_ca_file && { tls: { caFile: backend.tls_ca_file, sni: backend.tls_sni } }),
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
        tool,
        json: JSON.stringify(tool),
        backend,
        toolName: own.name,
        toolIndex: exposed.tool_index,
        position: tools.length,
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
      toolNameSeparator: snapshot.tool_name_separator,
      toolsListPageSize: snapshot.tools_list_page_size,
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
