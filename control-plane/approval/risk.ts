import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { ruleFor } from '../catalog/tool-policy';
import { RISKS, Risk, ToolPolicy } from '../registry/model';

/**
 * A tool's risk from its MCP annotations (docs/approval-and-audit.md), with the spec's defaults for
 * the hints a tool leaves out (readOnlyHint false, destructiveHint true, openWorldHint true):
 *
 *   read-only, closed world                     low
 *   read-only, open world                       medium  (what it reads comes from outside: injection, exfiltration)
 *   writes, not destructive, closed world       medium
 *   writes, not destructive, open world         high
 *   writes, destructive                         high
 *
 * A tool without annotations is high: nothing says it is safe.
 */
export function riskOf(annotations: Tool['annotations']): Risk {
  const openWorld = annotations?.openWorldHint !== false;
  if (annotations?.readOnlyHint === true) return openWorld ? 'medium' : 'low';
  if (annotations?.destructiveHint !== false) return 'high';
  return openWorld ? 'high' : 'medium';
}

const atLeast = (risk: Risk, threshold: Risk) => RISKS.indexOf(risk) >= RISKS.indexOf(threshold);

/** A tool whose calls wait for an approval: its risk, and who approves (a group; none: the caller themself). */
export interface ToolApproval {
  risk: Risk;
  approvers?: string;
}

/**
 * Whether a route's policy makes a tool's calls wait for an approval: its rule (the first whose
 * pattern matches, as for access) says `approval: required`, or its risk reaches the policy's
 * approvalAtRisk and its rule does not say `approval: none`.
 */
export function approvalOf(policy: ToolPolicy | undefined, tool: Tool): ToolApproval | undefined {
  const rule = ruleFor(policy?.rules, tool.name);
  const risk = rule?.risk ?? riskOf(tool.annotations);
  const required =
    rule?.approval === 'required' || (rule?.approval !== 'none' && policy?.approvalAtRisk !== undefined && atLeast(risk, policy.approvalAtRisk));
  if (!required) return undefined;
  const approvers = rule?.approvers ?? policy?.approvers;
  return { risk, ...(approvers ? { approvers } : {}) };
}
