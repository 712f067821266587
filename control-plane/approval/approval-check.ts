import { z } from 'zod';
import { argumentsSha256 } from '../audit/arguments-hash';
import { GatewayContext, TOOL_DENIED_CODE, sessionNotFound } from '../sidecar/decision';
import { JsonRpcId, isObject, jsonRpcError, jsonRpcResult } from '../sidecar/json-rpc';
import { RISKS } from '../registry/model';
import { ApprovalBinding, ApprovalRequest, ApprovalStore, Decision, Person, bindingKey, continuationToken, grantAllows, newApprovalId, verifyGrant } from './approval-store';

/**
 * The approval check (docs/approval-and-audit.md): the call script asks it, with one short HTTP request
 * from Envoy (control-plane/xds/lua/call-lane.lua), before it sends a call of a tool whose rule
 * requires an approval. It answers from Redis and never holds the call: the client gets a URL-mode
 * elicitation pointing at the approval page, and calls again once a person decided there.
 */

/** MCP 2025-11-25: the request cannot go on until the user completes the URL-mode elicitations in `data`. */
export const URL_ELICITATION_REQUIRED_CODE = -32042;

export const APPROVAL_CHECK_PATH = '/internal/approval-check';
/** Where the call script reports that the backend answered an approved call with `input_required`. */
export const APPROVAL_CONTINUATION_PATH = '/internal/approval-continuation';

const nullableString = z.string().nullish();

/** What the call script sends: the call, its rule, the client's session or (stateless) capabilities, the caller. */
export const approvalCheckRequestSchema = z.object({
  route: z.string().min(1),
  backend: z.string().min(1),
  tool: z.string().min(1),
  exposed: z.string().min(1),
  id: z.union([z.string(), z.number(), z.null()]),
  rule: z.object({ risk: z.enum(RISKS), approvers: z.string().min(1).optional() }).strict(),
  modern: z.boolean(),
  session: nullableString,
  caller: z.object({ iss: z.string(), sub: z.string(), client_id: nullableString, azp: nullableString, preferred_username: nullableString }).nullable(),
  capabilities: z.unknown().optional(),
  /** A 2026-07-28 retry's answers to the input it was asked for, as the client sent them. */
  inputResponses: z.unknown().optional(),
  /** A 2026-07-28 retry's requestState as the client sent it (a string, if it keeps to the spec). */
  requestState: z.unknown().optional(),
  arguments: z.unknown(),
});
export type ApprovalCheckRequest = z.infer<typeof approvalCheckRequestSchema>;

/** The call script's report: the backend answered the call that approval `approvalId` let through with `input_required`. */
export const approvalContinuationSchema = z.object({
  approvalId: z.string().min(1),
  requestState: z.string().nullable(),
  inputRequestKeys: z.array(z.string()),
});
export type ApprovalContinuation = z.infer<typeof approvalContinuationSchema>;

export interface ApprovalSettings {
  /** The gateway's public origin, as approvers' browsers reach it: pages are under <publicUrl>/approvals/. */
  publicUrl: string;
  /** How long a person has to decide; a grant is good until then too, and so is a continuation after its backend asked. */
  ttlMs: number;
}

/** The check's answer: let the call go (and who approved it), or answer the client with this. */
export type ApprovalAnswer =
  | { kind: 'allow'; approvalId: string; approver: Person }
  | { kind: 'respond'; status: number; body: unknown; outcome: 'denied' | 'approval_required' | 'failed'; approval: 'required' | 'declined' | 'expired'; reason?: string; approvalId?: string };

const ELICITATION_URL_TOOL_LIMIT = 200;

/** Top-level argument names with shortened values: what the page shows an approver. */
export function argumentSummary(args: unknown, valueLimit = 500, names = 50): { name: string; value: string }[] {
  const shorten = (value: unknown) => {
    const text = JSON.stringify(value, null, 1) ?? 'null';
    return text.length > valueLimit ? `${text.slice(0, valueLimit)}… (${text.length} characters)` : text;
  };
  if (!isObject(args)) return [{ name: '(arguments)', value: shorten(args) }];
  const entries = Object.entries(args);
  const shown = entries.slice(0, names).map(([name, value]) => ({ name, value: shorten(value) }));
  return entries.length > names ? [...shown, { name: `(${entries.length - names} more)`, value: '' }] : shown;
}

/**
 * What a 2026-07-28 client answered to the approval page it was sent (`inputResponses[<elicitation id>].action`):
 * only `decline` or `cancel` count, as the user's refusal to go there. An `accept` says nothing (a person
 * approves on the page, not the client), and is ignored.
 */
export function declinedInClient(inputResponses: unknown, elicitationId: string): 'decline' | 'cancel' | undefined {
  const response = isObject(inputResponses) ? inputResponses[elicitationId] : undefined;
  const action = isObject(response) ? response.action : undefined;
  return action === 'decline' || action === 'cancel' ? action : undefined;
}

/** Whether a client declared URL-mode elicitation: `capabilities.elicitation.url` (MCP 2025-11-25). */
export const takesUrlElicitation = (capabilities: unknown) => isObject(capabilities) && isObject(capabilities.elicitation) && isObject(capabilities.elicitation.url);

/** A -32003 refusal whose `data` names its outcome and reason, as the gateway's policy denials do (docs/errors.md). */
function refusal(
  id: JsonRpcId,
  message: string,
  fields: Pick<Extract<ApprovalAnswer, { kind: 'respond' }>, 'outcome' | 'approval' | 'approvalId'> & { reason: string },
  data: Record<string, unknown>,
): ApprovalAnswer {
  return { kind: 'respond', status: 200, body: jsonRpcError(id, TOOL_DENIED_CODE, message, { ...data, outcome: fields.outcome, reason: fields.reason, attempts: 0 }), ...fields };
}

/** A tool needs an approval, and this gateway's sidecars have no approval pages configured: nothing is forwarded. */
export function noApprovalPages(call: ApprovalCheckRequest): ApprovalAnswer {
  return refusal(
    call.id,
    `tool "${call.exposed}" needs an approval, and this gateway has no approval pages configured (sidecar --approval-* options): nothing was sent to the backend`,
    { outcome: 'approval_required', approval: 'required', reason: 'approvals not configured' },
    { backend: call.backend, tool: call.tool, risk: call.rule.risk },
  );
}

/** Header values for Envoy: printable ASCII only (claims are the IdP's), else left out. */
const headerSafe = (value: string | undefined) => (value !== undefined && /^[\x20-\x7e]{1,512}$/.test(value) ? value : undefined);

/** The HTTP answer to the call script (control-plane/xds/lua/call-lane.lua, approval_answered). */
export function approvalCheckResponse(answer: ApprovalAnswer): { status: number; headers: Record<string, string>; body: string } {
  if (answer.kind === 'allow') {
    const headers = Object.entries({
      'x-mcpgw-approval-id': answer.approvalId,
      'x-mcpgw-approver-iss': headerSafe(answer.approver.issuer),
      'x-mcpgw-approver-sub': headerSafe(answer.approver.subject),
    }).filter((entry): entry is [string, string] => entry[1] !== undefined);
    return { status: 204, headers: Object.fromEntries(headers), body: '' };
  }
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-mcpgw-outcome': answer.outcome, 'x-mcpgw-approval': answer.approval };
  if (answer.reason) headers['x-mcpgw-reason'] = answer.reason;
  if (answer.approvalId) headers['x-mcpgw-approval-id'] = answer.approvalId;
  return { status: answer.status, headers, body: JSON.stringify(answer.body) };
}

export class ApprovalCheck {
  constructor(
    private readonly store: ApprovalStore,
    private readonly settings: ApprovalSettings,
    private readonly context: Pick<GatewayContext, 'sessions' | 'log'>,
  ) {}

  pageUrl(id: string): string {
    return `${this.settings.publicUrl}/approvals/${id}`;
  }

  async check(call: ApprovalCheckRequest, now = Date.now()): Promise<ApprovalAnswer> {
    const data = { backend: call.backend, tool: call.tool, risk: call.rule.risk };
    const caller = call.caller ?? undefined;
    const binding: ApprovalBinding = {
      ...(caller ? { issuer: caller.iss, subject: caller.sub } : call.session ? { session: call.session } : {}),
      route: call.route,
      backend: call.backend,
      tool: call.tool,
      argumentsSha256: argumentsSha256(call.arguments ?? {}),
    };
    const continued = await this.continuation(call, binding, now);
    if (continued) return continued;
    const found = await this.store.findByBinding(binding);
    if (found) {
      const answer = await this.answerFor(call, binding, found.request, found.decision, now);
      if (answer) return answer;
    }
    if (!caller && !call.rule.approvers) {
      return refusal(
        call.id,
        `tool "${call.exposed}" needs its caller's approval, and route "${call.route}" does not identify its callers: nothing was sent to the backend`,
        { outcome: 'approval_required', approval: 'required', reason: 'no approver can be identified' },
        data,
      );
    }
    let capabilities: unknown = call.capabilities;
    if (!call.modern && call.session) {
      const session = await this.context.sessions.get(call.session);
      if (!session || session.route !== call.route) {
        const { status, body } = sessionNotFound(call.id);
        return { kind: 'respond', status, body: JSON.parse(body), outcome: 'failed', approval: 'required', reason: 'unknown session' };
      }
      capabilities = session.clientCapabilities;
    }
    if (!takesUrlElicitation(capabilities)) {
      return refusal(
        call.id,
        `tool "${call.exposed}" needs an approval, and this client did not declare URL elicitation (capabilities.elicitation.url) to open the approval page: nothing was sent to the backend`,
        { outcome: 'approval_required', approval: 'required', reason: 'client cannot take URL elicitation' },
        data,
      );
    }
    const request = await this.store.create({
      id: newApprovalId(),
      binding,
      exposedTool: call.exposed,
      risk: call.rule.risk,
      ...(call.rule.approvers ? { approvers: call.rule.approvers } : {}),
      summary: argumentSummary(call.arguments ?? {}),
      ...(caller ? { requestedBy: { issuer: caller.iss, subject: caller.sub, ...(caller.preferred_username ? { name: caller.preferred_username } : {}) } } : {}),
      createdAt: new Date(now).toISOString(),
      expiresAt: new Date(now + this.settings.ttlMs).toISOString(),
    });
    this.context.log.info('approval requested', { id: request.id, route: call.route, backend: call.backend, tool: call.tool, risk: call.rule.risk });
    return this.elicitation(call, request);
  }

  /**
   * A 2026-07-28 retry that continues an approved call its backend answered `input_required` (it
   * carries the backend's requestState, or answers exactly the backend's inputRequests): let through
   * under the same approval, once. A fresh call carries neither and is never a continuation.
   */
  private async continuation(call: ApprovalCheckRequest, binding: ApprovalBinding, now: number): Promise<ApprovalAnswer | undefined> {
    const requestState = typeof call.requestState === 'string' ? call.requestState : undefined;
    if (requestState === undefined && !isObject(call.inputResponses)) return undefined;
    const answeredKeys = isObject(call.inputResponses) ? Object.keys(call.inputResponses) : [];
    const taken = await this.store.takeContinuation(binding, continuationToken({ requestState, answeredKeys }), now);
    if (!taken) return undefined;
    this.context.log.info('approval continued: the backend asked its client for input', { id: taken.id, route: call.route, backend: call.backend, tool: call.tool });
    return { kind: 'allow', approvalId: taken.id, approver: taken.by };
  }

  /**
   * The backend answered the call that `report.approvalId` let through with `input_required`: its
   * client's retry (with the backend's requestState) continues that call, and may go once without a
   * new approval for `ttlMs`, bound as the approval was. False when there is no such approved call.
   */
  async recordContinuation(report: ApprovalContinuation, now = Date.now()): Promise<boolean> {
    const found = await this.store.get(report.approvalId);
    const grant = found?.decision?.decision === 'granted' && found.decision.grant ? verifyGrant(this.store.settings.key, found.decision.grant) : undefined;
    // The grant let the call through (it may have expired since); its signature and binding must still hold.
    if (!found || !grant || grant.continues !== undefined || grant.id !== found.request.id || bindingKey(grant.binding) !== bindingKey(found.request.binding)) {
      this.context.log.warn('a continuation was reported for no verifiable approval: its retry will ask again', { id: report.approvalId });
      return false;
    }
    const token = continuationToken({ ...(report.requestState !== null && { requestState: report.requestState }), answeredKeys: report.inputRequestKeys });
    await this.store.recordContinuation(grant.id, grant.binding, grant.by, token, now + this.settings.ttlMs);
    return true;
  }

  /** The answer for a binding that has a request already, or undefined to ask anew. */
  private async answerFor(call: ApprovalCheckRequest, binding: ApprovalBinding, request: ApprovalRequest, decision: Decision | undefined, now: number): Promise<ApprovalAnswer | undefined> {
    const data = { backend: call.backend, tool: call.tool, approval_id: request.id };
    const expired = Date.parse(request.expiresAt) <= now;
    if (decision?.decision === 'declined') {
      await this.store.release(binding, request.id);
      const comment = decision.comment ? `: "${decision.comment}"` : '';
      return refusal(call.id, `approval declined by ${decision.by.name ?? decision.by.subject}${comment}; tool "${call.exposed}" was not called`, { outcome: 'denied', approval: 'declined', reason: 'approval declined', approvalId: request.id }, {
        ...data,
        ...(decision.comment ? { comment: decision.comment } : {}),
      });
    }
    if (expired) {
      await this.store.release(binding, request.id);
      // A grant is good until the request's expiry: approved and not used by then is expired too, but says who approved it.
      const what = decision?.decision === 'granted' ? `approval by ${decision.by.name ?? decision.by.subject} expired at ${request.expiresAt} before it was used` : `approval expired at ${request.expiresAt} without a decision`;
      return refusal(call.id, `${what}; tool "${call.exposed}" was not called`, { outcome: 'denied', approval: 'expired', reason: 'approval expired', approvalId: request.id }, data);
    }
    // The user refused the page in their client (2026-07-28): this call ends, even if a person approved meanwhile;
    // the request is kept, so that the same call later finds it (pending, or approved and not used up).
    const refused = declinedInClient(call.inputResponses, request.id);
    if (refused) {
      return refusal(
        call.id,
        `the user answered "${refused}" to the approval page for tool "${call.exposed}", which was not called; its approval request ${this.pageUrl(request.id)} is kept until ${request.expiresAt}`,
        { outcome: 'approval_required', approval: 'required', reason: 'approval page declined', approvalId: request.id },
        data,
      );
    }
    if (decision?.decision === 'granted') {
      if (decision.grant && grantAllows(this.store.settings.key, decision.grant, request.id, binding, now)) {
        // One call per approval: of two calls racing for it, one goes and the other asks anew.
        if (await this.store.release(binding, request.id)) return { kind: 'allow', approvalId: request.id, approver: decision.by };
        return undefined;
      }
      this.context.log.warn('an approval grant does not verify (wrong key, or changed in Redis): asking again', { id: request.id });
      await this.store.release(binding, request.id);
      return undefined;
    }
    // Still pending: the same page again.
    return this.elicitation(call, request);
  }

  private elicitation(call: ApprovalCheckRequest, request: ApprovalRequest): ApprovalAnswer {
    const who = request.approvers ? `a member of "${request.approvers}"` : 'you (sign in as the caller)';
    const tool = request.exposedTool.slice(0, ELICITATION_URL_TOOL_LIMIT);
    const message = `Calling ${tool} (${request.risk} risk) needs an approval by ${who}: open the page, sign in, decide, then call again with the same arguments.`;
    const params = { mode: 'url', elicitationId: request.id, url: this.pageUrl(request.id), message };
    const fields = { kind: 'respond' as const, status: 200, outcome: 'approval_required' as const, approval: 'required' as const, reason: 'approval requested', approvalId: request.id };
    if (call.modern) {
      // MCP 2026-07-28: the request's result asks for input; the client calls again once it is given.
      return { ...fields, body: jsonRpcResult(call.id, { resultType: 'input_required', inputRequests: { [request.id]: { method: 'elicitation/create', params } } }) };
    }
    return { ...fields, body: jsonRpcError(call.id, URL_ELICITATION_REQUIRED_CODE, 'This request requires approval.', { elicitations: [params] }) };
  }
}
