import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { argumentSummary, declinedInClient, takesUrlElicitation } from '../../control-plane/approval/approval-check';
import { mayDecide } from '../../control-plane/approval/approval-pages';
import { ApprovalBinding, ApprovalRequest, bindingKey, continuationAllows, continuationToken, grantAllows, signContinuation, signGrant, verifyGrant } from '../../control-plane/approval/approval-store';
import { approvalOf, riskOf } from '../../control-plane/approval/risk';
import { toolFlags } from '../../control-plane/xds/translate/call-lane';

const tool = (annotations?: Tool['annotations'], name = 'wipe'): Tool => ({ name, inputSchema: { type: 'object' }, ...(annotations ? { annotations } : {}) });

describe("a tool's risk from its annotations", () => {
  it.each<[string, Tool['annotations'], string]>([
    ['no annotations: the spec defaults (writes, destructive, open world)', undefined, 'high'],
    ['read-only, closed world', { readOnlyHint: true, openWorldHint: false }, 'low'],
    ['read-only, open world (the default)', { readOnlyHint: true }, 'medium'],
    ['additive, closed world', { readOnlyHint: false, destructiveHint: false, openWorldHint: false }, 'medium'],
    ['additive, open world', { destructiveHint: false }, 'high'],
    ['destructive, closed world', { destructiveHint: true, openWorldHint: false }, 'high'],
  ])('%s', (_case, annotations, risk) => expect(riskOf(annotations)).toBe(risk));
});

describe('which calls wait for an approval', () => {
  it('by risk: at or above approvalAtRisk, with the policy\'s approvers', () => {
    expect(approvalOf({ approvalAtRisk: 'high', approvers: 'approvers' }, tool())).toEqual({ risk: 'high', approvers: 'approvers' });
    expect(approvalOf({ approvalAtRisk: 'high' }, tool({ readOnlyHint: true }))).toBeUndefined();
    expect(approvalOf({ approvalAtRisk: 'medium' }, tool({ readOnlyHint: true }))).toEqual({ risk: 'medium' });
  });

  it('by rule: required, none, a risk override and the rule\'s approvers first; the first matching rule decides', () => {
    const policy = {
      approvalAtRisk: 'high' as const,
      approvers: 'ops',
      rules: [
        { tools: ['wipe'], approval: 'required' as const, risk: 'medium' as const, approvers: 'approvers' },
        { tools: ['wi*'], approval: 'none' as const },
        { tools: ['read_*'], risk: 'high' as const },
      ],
    };
    expect(approvalOf(policy, tool({ readOnlyHint: true }, 'wipe'))).toEqual({ risk: 'medium', approvers: 'approvers' });
    expect(approvalOf(policy, tool(undefined, 'wield'))).toBeUndefined();
    expect(approvalOf(policy, tool({ readOnlyHint: true, openWorldHint: false }, 'read_all'))).toEqual({ risk: 'high', approvers: 'ops' });
    expect(approvalOf(undefined, tool())).toBeUndefined();
  });

  it('marks such a tool for the call script', () => {
    expect(toolFlags(tool({ readOnlyHint: true }), false, { needsApproval: true })).toBe('r;ap');
    expect(toolFlags(tool(), false, { needsApproval: false })).toBe('');
  });
});

describe('approval grants', () => {
  const key = Buffer.alloc(32, 7);
  const binding: ApprovalBinding = { issuer: 'http://idp', subject: 'alice', route: 'ops', backend: 'reports', tool: 'send_email', argumentsSha256: 'a'.repeat(64) };
  const by = { issuer: 'http://idp', subject: 'carol' };
  const grant = signGrant(key, { v: 1, id: 'id1', binding, exp: 2_000, by });

  it('hold for their own binding until they expire', () => {
    expect(grantAllows(key, grant, 'id1', binding, 1_000)).toBe(true);
    expect(grantAllows(key, grant, 'id1', binding, 2_000)).toBe(false);
  });

  it('fail for changed arguments, another caller, another route, another request', () => {
    expect(grantAllows(key, grant, 'id1', { ...binding, argumentsSha256: 'b'.repeat(64) }, 1_000)).toBe(false);
    expect(grantAllows(key, grant, 'id1', { ...binding, subject: 'bob' }, 1_000)).toBe(false);
    expect(grantAllows(key, grant, 'id1', { ...binding, route: 'other' }, 1_000)).toBe(false);
    expect(grantAllows(key, grant, 'id2', binding, 1_000)).toBe(false);
  });

  it('fail when changed, or signed with another key', () => {
    const [body, mac] = grant.split('.');
    const payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
    const forged = `${Buffer.from(JSON.stringify({ ...payload, binding: { ...binding, subject: 'bob' } })).toString('base64url')}.${mac}`;
    expect(verifyGrant(key, forged)).toBeUndefined();
    expect(verifyGrant(Buffer.alloc(32, 8), grant)).toBeUndefined();
    expect(verifyGrant(key, `${body}.`)).toBeUndefined();
    expect(verifyGrant(key, grant)?.binding).toEqual(binding);
  });

  describe('continuations (the retry of an approved call its 2026-07-28 backend asked about)', () => {
    const token = continuationToken({ requestState: 'backend-state', answeredKeys: ['confirm'] });
    const continuation = signContinuation(key, { id: 'id1', binding, exp: 2_000, by }, token);

    it('hold for their own binding and the backend\'s requestState until they expire', () => {
      expect(continuationAllows(key, continuation, binding, token, 1_000)).toMatchObject({ id: 'id1', by });
      expect(continuationAllows(key, continuation, binding, token, 2_000)).toBeUndefined();
    });

    it('fail for another requestState, changed arguments, another caller or route, another key', () => {
      expect(continuationAllows(key, continuation, binding, continuationToken({ requestState: 'other', answeredKeys: ['confirm'] }), 1_000)).toBeUndefined();
      expect(continuationAllows(key, continuation, binding, continuationToken({ answeredKeys: ['confirm'] }), 1_000)).toBeUndefined();
      expect(continuationAllows(key, continuation, { ...binding, argumentsSha256: 'b'.repeat(64) }, token, 1_000)).toBeUndefined();
      expect(continuationAllows(key, continuation, { ...binding, subject: 'bob' }, token, 1_000)).toBeUndefined();
      expect(continuationAllows(key, continuation, { ...binding, route: 'other' }, token, 1_000)).toBeUndefined();
      expect(continuationAllows(Buffer.alloc(32, 8), continuation, binding, token, 1_000)).toBeUndefined();
    });

    it('and grants never pass for each other', () => {
      expect(grantAllows(key, continuation, 'id1', binding, 1_000)).toBe(false);
      expect(continuationAllows(key, grant, binding, token, 1_000)).toBeUndefined();
    });

    it('are named by the backend\'s requestState, or without one by the keys the retry answers, in any order', () => {
      expect(continuationToken({ requestState: 's', answeredKeys: ['a'] })).toBe(continuationToken({ requestState: 's', answeredKeys: [] }));
      expect(continuationToken({ answeredKeys: ['b', 'a'] })).toBe(continuationToken({ answeredKeys: ['a', 'b'] }));
      expect(continuationToken({ answeredKeys: ['a'] })).not.toBe(continuationToken({ answeredKeys: ['a', 'b'] }));
      expect(continuationToken({ requestState: 'keys:["a"]', answeredKeys: [] })).not.toBe(continuationToken({ answeredKeys: ['a'] }));
    });
  });

  it('binding keys name the binding, whatever its member order', () => {
    const reordered = Object.fromEntries(Object.entries(binding).reverse()) as ApprovalBinding;
    expect(bindingKey(reordered)).toBe(bindingKey(binding));
    expect(bindingKey({ ...binding, session: 's' })).not.toBe(bindingKey(binding));
  });
});

describe('the approval page', () => {
  const request = (approvers?: string): ApprovalRequest => ({
    id: 'x'.repeat(22),
    binding: { issuer: 'http://idp', subject: 'alice', route: 'ops', backend: 'reports', tool: 'send_email', argumentsSha256: 'a'.repeat(64) },
    exposedTool: 'reports__send_email',
    risk: 'high',
    ...(approvers ? { approvers } : {}),
    summary: [],
    createdAt: '2026-01-01T00:00:00.000Z',
    expiresAt: '2026-01-01T00:15:00.000Z',
  });
  const approver = (subject: string, groups: string[] = []) => ({ issuer: 'http://idp', subject, groups, csrf: 'c' });

  it('lets the caller decide, or only members of the approvers group when there is one', () => {
    expect(mayDecide(approver('alice'), request())).toBe(true);
    expect(mayDecide(approver('bob'), request())).toBe(false);
    expect(mayDecide({ ...approver('alice'), issuer: 'http://other' }, request())).toBe(false);
    expect(mayDecide(approver('carol', ['approvers']), request('approvers'))).toBe(true);
    expect(mayDecide(approver('alice'), request('approvers'))).toBe(false);
  });

  it('summarizes the arguments: names, shortened values', () => {
    expect(argumentSummary({ to: 'a@b', body: 'x'.repeat(600) }, 20)).toEqual([
      { name: 'to', value: '"a@b"' },
      { name: 'body', value: `"${'x'.repeat(19)}… (602 characters)` },
    ]);
    expect(argumentSummary([1, 2])).toEqual([{ name: '(arguments)', value: '[\n 1,\n 2\n]' }]);
  });

  it('knows which clients take URL elicitation', () => {
    expect(takesUrlElicitation({ elicitation: { url: {} } })).toBe(true);
    expect(takesUrlElicitation({ elicitation: {} })).toBe(false);
    expect(takesUrlElicitation({ elicitation: { form: {} } })).toBe(false);
    expect(takesUrlElicitation(undefined)).toBe(false);
  });

  it('reads a user\'s decline or cancel of the approval page from a 2026-07-28 retry, and never an accept', () => {
    expect(declinedInClient({ abc: { action: 'decline' } }, 'abc')).toBe('decline');
    expect(declinedInClient({ abc: { action: 'cancel' } }, 'abc')).toBe('cancel');
    expect(declinedInClient({ abc: { action: 'accept' } }, 'abc')).toBeUndefined();
    expect(declinedInClient({ other: { action: 'decline' } }, 'abc')).toBeUndefined();
    expect(declinedInClient({ abc: 'decline' }, 'abc')).toBeUndefined();
    expect(declinedInClient(undefined, 'abc')).toBeUndefined();
  });
});
