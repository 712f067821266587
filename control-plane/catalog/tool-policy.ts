import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { ToolPolicy, ToolRule } from '../registry/model';
import { patternMatches } from '../registry/tool-pattern';

/**
 * Why a route's policy keeps a tool from its agents, or undefined when it serves it. The reason names
 * the rule, so that an agent's "denied" error and the operator's /status say which one.
 */
export function policyDenial(policy: ToolPolicy | undefined, tool: Tool): string | undefined {
  if (!policy) return undefined;
  const denied = policy.denyTools?.find((pattern) => patternMatches(pattern, tool.name));
  if (denied !== undefined) return `denyTools ${JSON.stringify(denied)}`;
  if (policy.allowTools && !policy.allowTools.some((pattern) => patternMatches(pattern, tool.name))) {
    return `not in allowTools ${JSON.stringify(policy.allowTools)}`;
  }
  if (policy.readOnly && tool.annotations?.readOnlyHint !== true) return 'readOnly: the tool is not annotated readOnlyHint: true';
  return undefined;
}

/** The rule that decides who may call a tool: the first whose patterns match its own name (docs/auth.md). */
export function ruleFor(rules: readonly ToolRule[] | undefined, toolName: string): ToolRule | undefined {
  return rules?.find((rule) => rule.tools.some((pattern) => patternMatches(pattern, toolName)));
}
