import { z } from 'zod';
import { CALL_OUTCOMES, LogEntry, limitedRecordOf, outcomeOf } from '../admin/call-log';
import { argumentsHash } from './arguments-hash';

/**
 * One audit event per tools/call and per request the gateway refused to its caller (401 to 403),
 * built from the call log Envoy streams to the control plane (control-plane/admin/call-log.ts). The
 * schema below is the contract: docs/audit-event.schema.json is generated from it, and
 * docs/approval-and-audit.md describes every field. Argument values never appear, only their hash.
 */

export const AUDIT_SCHEMA_VERSION = 1;

/** The calls' outcome vocabulary (docs/observability.md), the same in metrics and audit. */
export const AUDIT_OUTCOMES = CALL_OUTCOMES;

/**
 * What the call carried to its backend as a credential: its Tool Service's credentials mode
 * (docs/auth.md, Backends); the caller's own token only with `passthrough`.
 */
export const CREDENTIAL_MODES = ['none', 'serviceAccount', 'tokenExchange', 'passthrough'] as const;

export const APPROVAL_DECISIONS = ['not_required', 'required', 'granted', 'declined', 'expired'] as const;

const identity = z
  .object({
    issuer: z.string().describe('`iss` of the validated token'),
    subject: z.string().describe('`sub` of the validated token'),
    client_id: z.string().optional().describe('The OAuth client: `client_id` (RFC 9068), else `azp`'),
  })
  .strict();

export const auditEventSchema = z
  .object({
    audit_version: z.literal(AUDIT_SCHEMA_VERSION),
    time: z.iso.datetime().describe('When Envoy received the request (UTC)'),
    request_id: z.string().optional().describe("Envoy's x-request-id: the same request in Envoy's access log"),
    kind: z.enum(['tools/call', 'denied_request']).describe('A tools/call (whatever its outcome), or another request refused with 401 to 403'),
    method: z.string().optional().describe('The JSON-RPC method, when the request got as far as being parsed'),
    caller: identity.optional().describe("The caller's validated token; absent on routes without authentication"),
    route: z.string().optional().describe('The route key, when the path named a route'),
    backend: z.string().optional().describe('The Tool Service (its prefix name) the call was placed on'),
    tool: z.string().optional().describe("The tool's own name at its backend; the name as called when no backend took it"),
    arguments_sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional()
      .describe('SHA-256 (hex) of the arguments as canonical JSON (RFC 8785; absent arguments are {}); never the values'),
    outcome: z.enum(AUDIT_OUTCOMES),
    reason: z
      .string()
      .optional()
      .describe('Why a request was denied, limited or failed: "policy", "approval declined", "approval expired", what Envoy says of a 401/403, or the name of the limit that refused it (docs/quotas.md)'),
    rule: z.string().optional().describe('The policy rule that denied the call'),
    http_status: z.number().int(),
    attempts: z.number().int().min(0).describe('Requests Envoy sent to the backend (0: nothing was forwarded)'),
    elapsed_ms: z.number().int().min(0).describe('From the request to the last byte of the answer'),
    approval: z
      .object({
        decision: z.enum(APPROVAL_DECISIONS),
        id: z.string().optional().describe('The approval request, as its page names it'),
        approver: identity.omit({ client_id: true }).optional().describe('Who decided'),
      })
      .strict(),
    credential_mode: z.enum(CREDENTIAL_MODES).describe("What the call carried to the backend as a credential: its Tool Service's credentials mode (none when nothing reached it)"),
  })
  .strict();

export type AuditEvent = z.output<typeof auditEventSchema>;

const str = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
const pick = <T extends string>(values: readonly T[], value: unknown, fallback: T): T =>
  typeof value === 'string' && (values as readonly string[]).includes(value) ? (value as T) : fallback;

/** The route key of a path /mcp/{key}[/...]; Envoy's route names are `<key>/<lane>`. */
function routeOf(routeName: string | undefined, path: string | undefined): string | undefined {
  const named = routeName?.includes('/') ? routeName.slice(0, routeName.indexOf('/')) : undefined;
  return named ?? /^\/mcp\/([^/?#]+)/.exec(path ?? '')?.[1];
}

function callerOf(claims: Record<string, unknown>): AuditEvent['caller'] {
  const issuer = str(claims.iss);
  const subject = str(claims.sub);
  if (!issuer || !subject) return undefined;
  const clientId = str(claims.client_id) ?? str(claims.azp);
  return { issuer, subject, ...(clientId ? { client_id: clientId } : {}) };
}

/** The audit event of one call-log entry, or undefined for an entry that is neither a tools/call nor refused. */
export function auditEventOf(entry: LogEntry): AuditEvent | undefined {
  const status = entry.status ?? 0;
  const method = str(entry.rpc_method) ?? str(entry.method);
  const refused = status >= 401 && status <= 403;
  if (method !== 'tools/call' && !refused) return undefined;

  const backend = str(entry.backend);
  let outcome: AuditEvent['outcome'];
  let reason = str(entry.reason);
  const limited = limitedRecordOf(entry);
  if (refused) {
    outcome = 'denied';
    reason ??= str(entry.details) ?? `HTTP ${status}`;
  } else if (limited) {
    // Refused by a rate or concurrency limit (docs/quotas.md), on either lane: the reason names it.
    outcome = 'limited';
    reason = limited.limit;
  } else if (!backend) {
    // The gateway lane answered a call no backend route took (an unknown prefix): refused as the client's mistake.
    outcome = 'invalid';
    reason ??= 'no backend of the route has this tool name';
  } else {
    outcome = outcomeOf(entry);
  }
  const attempts = entry.attempts ?? 0;
  const hash = typeof entry.arguments === 'string' ? argumentsHash(entry.arguments) : undefined;
  // The call script's record of the caller (call lane), else jwt_authn's claim headers (requests the gateway answered).
  const caller =
    callerOf({ iss: entry.caller_iss, sub: entry.caller_sub, client_id: entry.caller_client }) ??
    callerOf({ iss: entry.claim_iss, sub: entry.claim_sub, client_id: entry.claim_client_id, azp: entry.claim_azp });
  const route = str(entry.route) ?? routeOf(entry.envoy_route ?? undefined, entry.path ?? undefined);
  const approver = callerOf({ iss: entry.approver_iss, sub: entry.approver_sub });
  const approvalId = str(entry.approval_id);
  const tool = str(entry.tool) ?? str(entry.rpc_tool);
  const requestId = str(entry.request_id);
  return {
    audit_version: AUDIT_SCHEMA_VERSION,
    time: new Date(entry.start_ms ?? 0).toISOString(),
    ...(requestId ? { request_id: requestId } : {}),
    kind: method === 'tools/call' ? 'tools/call' : 'denied_request',
    ...(method ? { method } : {}),
    ...(caller ? { caller } : {}),
    ...(route ? { route } : {}),
    ...(backend ? { backend } : {}),
    ...(tool ? { tool } : {}),
    ...(hash ? { arguments_sha256: hash } : {}),
    outcome,
    ...(reason ? { reason } : {}),
    ...(str(entry.rule) ? { rule: str(entry.rule) } : {}),
    http_status: status,
    attempts,
    elapsed_ms: Math.round(entry.duration_ms ?? 0),
    approval: {
      decision: pick(APPROVAL_DECISIONS, entry.approval, 'not_required'),
      ...(approvalId ? { id: approvalId } : {}),
      ...(approver ? { approver: { issuer: approver.issuer, subject: approver.subject } } : {}),
    },
    // Nothing reached a backend, nothing was carried.
    credential_mode: attempts === 0 ? 'none' : pick(CREDENTIAL_MODES, entry.credential, 'none'),
  };
}
