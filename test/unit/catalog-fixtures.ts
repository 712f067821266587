import { AccessRuleMessage, BackendCatalogMessage, CATALOG_DEFAULTS, CatalogSettings, CatalogSnapshotMessage } from '../../control-plane/catalog/catalog-store';
import { exposeRoutePrompts, exposeRouteResources } from '../../control-plane/catalog/surface-exposure';
import { exposeRouteTools } from '../../control-plane/catalog/tool-exposure';

/** A healthy backend's catalog entry declaring tools of these names. */
export function backendCatalog(name: string, toolNames: string[], overrides: Partial<BackendCatalogMessage> = {}): BackendCatalogMessage {
  return {
    name,
    tool_service: `tool_service.${name}`,
    cluster: `backend_${name}`,
    tools_json: toolNames.map((tool) => JSON.stringify({ name: tool, inputSchema: { type: 'object' } })),
    state: 'ok',
    last_success_at: '2026-11-30T00:00:00.000Z',
    last_error: '',
    failing_since: '',
    url: `http://127.0.0.1:9/${name}/mcp`,
    fallback_text: '',
    denied_tools: [],
    approval_tools: [],
    protocol_version: '2025-11-25',
    sessionful: true,
    also_modern: false,
    credentials: { mode: 'none', audience: '', resource: '', scopes: [] },
    prompts_json: [],
    resources_json: [],
    resource_templates_json: [],
    capabilities_json: JSON.stringify({ tools: {} }),
    needs_json: '{}',
    ...overrides,
  };
}

/**
 * Catalog messages for sidecar unit tests, with the served tools decided by the control plane's own
 * rules, as a sidecar receives them.
 */
export function catalogSnapshot(
  routes: {
    route_key: string;
    backends: BackendCatalogMessage[];
    /** The route's access rules, and the 1-based rule of a backend's tool (0: none). */
    access?: { rules: AccessRuleMessage[]; ruleOf: (backend: string, toolIndex: number) => number; groupsClaim?: string[] };
  }[],
  settings: CatalogSettings = CATALOG_DEFAULTS,
): CatalogSnapshotMessage {
  return {
    version: 'v1',
    tool_name_separator: settings.toolNameSeparator,
    tools_list_page_size: settings.toolsListPageSize,
    routes: routes.map(({ access, ...route }) => ({
      ...route,
      access_rules: access?.rules ?? [],
      groups_claim: access ? (access.groupsClaim ?? ['groups']) : [],
      tools: exposeRouteTools(
        route.backends.map((backend) => ({
          backend: backend.name,
          toolNames: backend.tools_json.map((json) => (JSON.parse(json) as { name: string }).name),
          denied: new Set(
            backend.tools_json.flatMap((json, index) =>
              backend.denied_tools.some((denied) => denied.tool === (JSON.parse(json) as { name: string }).name) ? [index] : [],
            ),
          ),
        })),
        settings,
      ).tools.map((exposed) => ({
        ...exposed,
        access_rule: access?.ruleOf(exposed.backend, exposed.tool_index) ?? 0,
      })),
      prompts: exposeRoutePrompts(itemsOf(route.backends, 'prompts_json', 'name'), settings.toolNameSeparator).prompts,
      resources: exposeRouteResources(itemsOf(route.backends, 'resources_json', 'uri'), 'resource').resources,
      resource_templates: exposeRouteResources(itemsOf(route.backends, 'resource_templates_json', 'uriTemplate'), 'resource-template').resources,
    })),
  };
}

/** Each backend's own prompt names, resource URIs or template URIs, as the control plane's exposure rules take them. */
function itemsOf(backends: BackendCatalogMessage[], field: 'prompts_json' | 'resources_json' | 'resource_templates_json', key: string) {
  return backends.map((backend) => ({ backend: backend.name, items: backend[field].map((json) => String((JSON.parse(json) as Record<string, unknown>)[key])) }));
}
