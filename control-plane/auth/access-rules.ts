import type { AccessRuleMessage } from '../catalog/catalog-store';
import { CallerIdentity } from './caller-identity';

/**
 * A tool's access rule against a caller (docs/auth.md), the same decision the call script makes in
 * Envoy for tools/call (control-plane/xds/lua/call-lane.lua, access_decision): first who the caller is
 * (subjects, groups, clients: no other token of the same caller would do, so `denied`), then what the
 * token grants (scopes: a token with more scopes would do, so the scope challenge).
 */
export type AccessDecision = { allowed: true } | { allowed: false; reason: 'policy' | 'insufficient_scope'; missingScopes: string[] };

const ALLOWED: AccessDecision = { allowed: true };

export function accessDecision(rule: AccessRuleMessage | undefined, caller: CallerIdentity | undefined): AccessDecision {
  if (!rule) return ALLOWED;
  const denied: AccessDecision = { allowed: false, reason: 'policy', missingScopes: [] };
  if (!caller) return denied;
  if (rule.allow_subjects.length > 0 && !rule.allow_subjects.includes(caller.subject)) return denied;
  if (rule.allow_groups.length > 0 && !caller.groups.some((group) => rule.allow_groups.includes(group))) return denied;
  if (rule.allow_clients.length > 0 && (caller.clientId === undefined || !rule.allow_clients.includes(caller.clientId))) return denied;
  const missingScopes = rule.required_scopes.filter((scope) => !caller.scopes.includes(scope));
  return missingScopes.length > 0 ? { allowed: false, reason: 'insufficient_scope', missingScopes } : ALLOWED;
}
