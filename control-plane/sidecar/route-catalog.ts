import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { BackendState, CatalogSnapshotMessage } from '../catalog/catalog-store';

export const TOOL_NAME_SEPARATOR = '__';

export interface BackendView {
  name: string;
  cluster: string;
  state: BackendState;
  /** Unprefixed tool names the backend declared. */
  toolNames: Set<string>;
}

/** What the sidecar needs to answer for one route, computed once per catalog update. */
export interface RouteCatalogView {
  key: string;
  backends: Map<string, BackendView>;
  /** Prefixed tools in a deterministic order: by backend name, then by the backend's own order. */
  tools: Tool[];
}

export function buildRouteViews(snapshot: CatalogSnapshotMessage): Map<string, RouteCatalogView> {
  const views = new Map<string, RouteCatalogView>();
  for (const route of snapshot.routes) {
    const backends = new Map<string, BackendView>();
    const tools: Tool[] = [];
    for (const backend of [...route.backends].sort((a, b) => a.name.localeCompare(b.name))) {
      const backendTools = backend.tools_json.map((json) => JSON.parse(json) as Tool);
      backends.set(backend.name, {
        name: backend.name,
        cluster: backend.cluster,
        state: backend.state,
        toolNames: new Set(backendTools.map((tool) => tool.name)),
      });
      tools.push(...backendTools.map((tool) => ({ ...tool, name: `${backend.name}${TOOL_NAME_SEPARATOR}${tool.name}` })));
    }
    views.set(route.route_key, { key: route.route_key, backends, tools });
  }
  return views;
}

export type ToolResolution =
  | { ok: true; backend: BackendView; toolName: string }
  | { ok: false; message: string };

/** The prefix picks exactly one backend; anything else is an explicit error, never a guess. */
export function resolveTool(view: RouteCatalogView, exposedName: string): ToolResolution {
  const at = exposedName.indexOf(TOOL_NAME_SEPARATOR);
  if (at <= 0) {
    return { ok: false, message: `tool "${exposedName}" has no backend prefix: call it as <backend>${TOOL_NAME_SEPARATOR}<tool>` };
  }
  const backendName = exposedName.slice(0, at);
  const toolName = exposedName.slice(at + TOOL_NAME_SEPARATOR.length);
  const backend = view.backends.get(backendName);
  if (!backend) {
    return { ok: false, message: `unknown backend "${backendName}" on route "${view.key}" (tool "${exposedName}")` };
  }
  if (!backend.toolNames.has(toolName)) {
    return { ok: false, message: `backend "${backendName}" has no tool "${toolName}" on route "${view.key}"` };
  }
  return { ok: true, backend, toolName };
}
