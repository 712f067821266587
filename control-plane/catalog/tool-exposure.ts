import type { ExposedToolMessage } from './catalog-store';

/**
 * Which tools a route serves and under which names. The control plane decides this once, when it
 * builds the catalog, so that every sidecar serves the same list and resolves tools/call by an exact
 * name lookup.
 */

/** A tool a route serves, before the route's access rules are attached. */
export type ExposedTool = Omit<ExposedToolMessage, 'access_rule'>;

/** The MCP spec's tool-name rule (2025-11-25): a name breaking it is never served. */
const MCP_TOOL_NAME_PATTERN = /^[A-Za-z0-9_.-]{1,128}$/;
/** What popular clients enforce in practice (no dot, at most 64 characters). */
const CLIENT_TOOL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;

/** What happens to a name that is valid MCP but breaks the stricter client rule. */
export type ToolNamePolicy = 'warn' | 'drop';
export const TOOL_NAME_POLICIES: readonly ToolNamePolicy[] = ['warn', 'drop'];

export type ToolRule = 'mcp-tool-name' | 'client-tool-name' | 'duplicate-name' | 'route-tool-cap';
export const TOOL_RULES: readonly ToolRule[] = ['mcp-tool-name', 'client-tool-name', 'duplicate-name', 'route-tool-cap'];
export type ToolRuleAction = 'dropped' | 'kept';
export const TOOL_RULE_ACTIONS: readonly ToolRuleAction[] = ['dropped', 'kept'];

export interface ExposureSettings {
  /** Joins backend and tool: `<backend><separator><tool>`. */
  toolNameSeparator: string;
  toolNamePolicy: ToolNamePolicy;
  maxToolsPerRoute: number;
}

/** A tool a rule reported: which one, which rule, and what the rule did with it. */
export interface ToolFinding {
  /** The exposed name, `<backend><separator><tool>`. */
  tool: string;
  backend: string;
  rule: ToolRule;
  action: ToolRuleAction;
  reason: string;
}

export interface BackendToolNames {
  backend: string;
  /** The backend's own tool names, in the backend's order. */
  toolNames: string[];
  /** Positions of the tools the route's policy keeps from agents: not served, and no finding either (it is the registry's wish). */
  denied?: ReadonlySet<number>;
}

/**
 * Code-unit order, not localeCompare: the order of a route's tools must not depend on the locale of
 * the process (the cursor of a sidecar relies on the control plane's order).
 */
export function compareBackendNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function exposedToolName(backend: string, separator: string, toolName: string): string {
  return `${backend}${separator}${toolName}`;
}

const SEPARATOR_PATTERN = /^[A-Za-z0-9_.-]{1,8}$/;

/**
 * Why a separator cannot be used, or undefined. Backend names are snake_case (lowercase letters,
 * digits, single underscores); a separator that can never occur inside one makes its first
 * occurrence in an exposed name the boundary between backend and tool.
 */
export function separatorProblem(separator: string): string | undefined {
  if (!SEPARATOR_PATTERN.test(separator)) {
    return 'must be 1-8 characters of A-Z a-z 0-9 _ . - (the characters MCP allows in tool names)';
  }
  if (/^[a-z0-9_]+$/.test(separator) && !separator.includes('__')) {
    return 'could occur inside a snake_case backend name: use one containing "__", ".", "-" or an uppercase letter';
  }
  return undefined;
}

function charactersOutside(name: string, allowed: RegExp): string {
  return [...new Set([...name].filter((char) => !allowed.test(char)))].map((char) => JSON.stringify(char)).join(', ');
}

function mcpNameProblem(name: string, toolName: string): string | undefined {
  if (toolName.length === 0) return 'the backend declared a tool with an empty name';
  if (name.length > 128) return `is ${name.length} characters long; MCP allows 1-128`;
  if (!MCP_TOOL_NAME_PATTERN.test(name)) return `contains ${charactersOutside(name, /[A-Za-z0-9_.-]/)}; MCP allows A-Z a-z 0-9 _ . -`;
  return undefined;
}

function clientNameProblem(name: string): string | undefined {
  if (CLIENT_TOOL_NAME_PATTERN.test(name)) return undefined;
  const problems = [
    ...(name.length > 64 ? [`is ${name.length} characters long`] : []),
    ...(/[^a-zA-Z0-9_-]/.test(name) ? [`contains ${charactersOutside(name, /[a-zA-Z0-9_-]/)}`] : []),
  ];
  return `${problems.join(' and ')}; popular clients accept only ^[a-zA-Z0-9_-]{1,64}$`;
}

/**
 * The tools a route serves, in order (backends by name, then each backend's own order), and a
 * finding for every tool a rule touched. Rules, in this order:
 * - a name breaking the MCP rule is dropped;
 * - a name seen before in the route is dropped (the first occurrence stays);
 * - a name breaking the client rule is kept (policy warn) or dropped (policy drop);
 * - past maxToolsPerRoute served tools, the rest is dropped.
 * Each finding's action is what its rule did: a tool is served when none of its findings says dropped.
 */
export function exposeRouteTools(
  backends: BackendToolNames[],
  settings: ExposureSettings,
): { tools: ExposedTool[]; findings: ToolFinding[] } {
  const tools: ExposedTool[] = [];
  const findings: ToolFinding[] = [];
  const seen = new Set<string>();
  for (const { backend, toolNames, denied } of [...backends].sort((a, b) => compareBackendNames(a.backend, b.backend))) {
    toolNames.forEach((toolName, toolIndex) => {
      if (denied?.has(toolIndex)) return;
      const name = exposedToolName(backend, settings.toolNameSeparator, toolName);
      const report = (rule: ToolRule, action: ToolRuleAction, reason: string) => {
        findings.push({ tool: name, backend, rule, action, reason });
      };
      const mcpProblem = mcpNameProblem(name, toolName);
      if (mcpProblem) return report('mcp-tool-name', 'dropped', mcpProblem);
      if (seen.has(name)) return report('duplicate-name', 'dropped', `backend "${backend}" lists "${toolName}" more than once; the first is served`);
      seen.add(name);
      const clientProblem = clientNameProblem(name);
      if (clientProblem) {
        const action = settings.toolNamePolicy === 'drop' ? 'dropped' : 'kept';
        report('client-tool-name', action, clientProblem);
        if (action === 'dropped') return;
      }
      if (tools.length >= settings.maxToolsPerRoute) {
        return report('route-tool-cap', 'dropped', `the route already serves ${settings.maxToolsPerRoute} tools (the per-route cap)`);
      }
      tools.push({ name, backend, tool_index: toolIndex });
    });
  }
  return { tools, findings };
}
