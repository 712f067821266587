import { AccessRuleMessage } from '../../control-plane/catalog/catalog-store';
import { accessDecision } from '../../control-plane/auth/access-rules';
import { CALLER_CLAIM_HEADERS, CallerIdentity, callerIdentityOf, ownerOf } from '../../control-plane/auth/caller-identity';
import { RequestHead } from '../../control-plane/sidecar/decision';
import { decideOnBody } from '../../control-plane/sidecar/mcp-gateway';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { StatelessCallSessions, checkCall } from '../../control-plane/sidecar/session-check';
import { answerToolsList, toolsListBody } from '../../control-plane/sidecar/tools-list';
import { CHECK_STATUS } from '../../control-plane/xds/translate/settings';
import { sidecarContext } from '../support/sidecar-context';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

/**
 * The caller as the sidecar sees it (docs/auth.md): the claims Envoy's jwt_authn validated, in the
 * headers it sets; the access rules the sidecar applies to tools/list (the call script applies the
 * same to calls: test/unit/lua/call-lane.spec.lua); sessions bound to issuer and subject.
 */

/**
 * The claim headers Envoy's jwt_authn sets from a validated token (claim_to_headers, seen in Envoy 1.40):
 * a string claim as its UTF-8 bytes, a list as base64 of its JSON; the groups claim from its path.
 */
function claimHeaders(claims: Record<string, unknown>, groupsClaim: readonly string[] = ['groups']): Map<string, string> {
  const at = (path: readonly string[]) => path.reduce<unknown>((node, name) => (node && typeof node === 'object' ? (node as Record<string, unknown>)[name] : undefined), claims);
  const headers = new Map<string, string>();
  for (const [claim, header] of Object.entries(CALLER_CLAIM_HEADERS)) {
    const value = at(claim === 'groups' ? groupsClaim : [claim]);
    if (typeof value === 'string') headers.set(header, Buffer.from(value, 'utf8').toString('latin1'));
    else if (Array.isArray(value)) headers.set(header, Buffer.from(JSON.stringify(value), 'utf8').toString('base64'));
  }
  return headers;
}
const callerOfClaims = (claims: Record<string, unknown>, groupsClaim?: readonly string[]) => {
  const headers = claimHeaders(claims, groupsClaim);
  return callerIdentityOf((name) => headers.get(name));
};
const ALICE = { iss: 'https://idp.example', sub: 'alice-id', azp: 'agent-cli', scope: ['openid', 'tools:read'], groups: ['engineering'] };
const BOB = { iss: 'https://idp.example', sub: 'bob-id', azp: 'agent-cli', scope: 'tools:read tools:call', groups: ['support'] };

describe('the caller from the claim headers Envoy sets', () => {
  it.each<[string, Record<string, unknown>, string[], Partial<CallerIdentity> | undefined]>([
    ['scope as a list', ALICE, ['groups'], { subject: 'alice-id', clientId: 'agent-cli', scopes: ['openid', 'tools:read'], groups: ['engineering'] }],
    ['scope as a space-delimited string, and scp', { iss: 'i', sub: 's', scope: 'a b', scp: ['c', 'a'] }, ['groups'], { scopes: ['a', 'b', 'c'], groups: [] }],
    ['client_id before azp', { iss: 'i', sub: 's', client_id: 'c1', azp: 'c2' }, ['groups'], { clientId: 'c1' }],
    ['groups at a nested claim', { iss: 'i', sub: 's', realm_access: { roles: ['admin', 7] } }, ['realm_access', 'roles'], { groups: ['admin'] }],
    ['one group as a string', { iss: 'i', sub: 's', team: 'blue' }, ['team'], { groups: ['blue'] }],
    ['non-ASCII claims (UTF-8 bytes)', { iss: 'i', sub: 'Åsa' }, ['groups'], { subject: 'Åsa' }],
    ['no sub', { iss: 'i' }, ['groups'], undefined],
  ])('reads %s', (_case, claims, groupsClaim, expected) => {
    const caller = callerOfClaims(claims, groupsClaim);
    if (expected === undefined) expect(caller).toBeUndefined();
    else expect(caller).toMatchObject(expected);
  });

  it('has no caller without an issuer and a subject', () => {
    expect(callerIdentityOf(() => undefined)).toBeUndefined();
    expect(callerIdentityOf((name) => (name === CALLER_CLAIM_HEADERS.sub ? 's' : ''))).toBeUndefined();
  });

  it('takes a string claim that only looks like base64 as it is', () => {
    expect(callerOfClaims({ iss: 'i', sub: 's', groups: 'abcd' })?.groups).toEqual(['abcd']);
  });

  it('binds to issuer and subject', () => {
    expect(ownerOf(callerOfClaims(ALICE))).toBe('https://idp.example alice-id');
    expect(ownerOf(undefined)).toBeUndefined();
  });
});

describe('access rules', () => {
  const rule = (fields: Partial<AccessRuleMessage>): AccessRuleMessage => ({ required_scopes: [], allow_subjects: [], allow_groups: [], allow_clients: [], ...fields });
  const alice = callerOfClaims(ALICE)!;

  it.each<[string, AccessRuleMessage | undefined, ReturnType<typeof accessDecision>]>([
    ['no rule', undefined, { allowed: true }],
    ['a scope held', rule({ required_scopes: ['tools:read'] }), { allowed: true }],
    ['a scope missing', rule({ required_scopes: ['tools:read', 'tools:call'] }), { allowed: false, reason: 'insufficient_scope', missingScopes: ['tools:call'] }],
    ['another subject', rule({ allow_subjects: ['bob-id'] }), { allowed: false, reason: 'policy', missingScopes: [] }],
    ['a group held', rule({ allow_groups: ['engineering', 'ops'] }), { allowed: true }],
    ['no group held', rule({ allow_groups: ['support'] }), { allowed: false, reason: 'policy', missingScopes: [] }],
    ['another client', rule({ allow_clients: ['agent-batch'] }), { allowed: false, reason: 'policy', missingScopes: [] }],
    ['who before what', rule({ allow_groups: ['support'], required_scopes: ['tools:admin'] }), { allowed: false, reason: 'policy', missingScopes: [] }],
  ])('decides %s', (_case, given, decision) => {
    expect(accessDecision(given, alice)).toEqual(decision);
  });

  it('denies any rule to a caller without a token', () => {
    expect(accessDecision(rule({ required_scopes: ['tools:read'] }), undefined)).toMatchObject({ allowed: false, reason: 'policy' });
  });
});

describe('the sidecar on a route with auth', () => {
  const rules = [
    { required_scopes: ['tools:call'], allow_subjects: [], allow_groups: [], allow_clients: [] },
    { required_scopes: [], allow_subjects: [], allow_groups: ['support'], allow_clients: [] },
  ];
  const ruleOfTool: Record<string, number> = { run: 1, support_only: 2 };
  const views = buildRouteViews(
    catalogSnapshot([
      {
        route_key: 'guarded',
        backends: [backendCatalog('jobs', ['open', 'run', 'support_only', 'open2']), backendCatalog('pooled', ['echo'])],
        access: { rules, ruleOf: (backend, toolIndex) => (backend === 'jobs' ? (ruleOfTool[['open', 'run', 'support_only', 'open2'][toolIndex]] ?? 0) : 0) },
      },
      { route_key: 'open', backends: [backendCatalog('jobs', ['open'])] },
    ]),
  );
  const guarded = views.get('guarded')!;
  const head = (route: string, claims?: Record<string, unknown>, extra: Record<string, string> = {}): RequestHead => ({
    method: 'POST',
    path: `/mcp/${route}`,
    headers: new Map(
      Object.entries({ 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(claims && Object.fromEntries(claimHeaders(claims))), ...extra }),
    ),
  });
  const listNames = (claims: Record<string, unknown> | undefined, cursor?: string) => {
    const answer = answerToolsList(guarded, cursor === undefined ? undefined : { cursor }, { caller: claims && callerOfClaims(claims) });
    if (!answer.ok) throw new Error(answer.message);
    return { names: JSON.parse(toolsListBody(1, answer.result).toString()).result.tools.map((tool: { name: string }) => tool.name), next: answer.result.nextCursor };
  };

  it('lists to each caller the tools its rules let it call, and pages through that list', () => {
    expect(listNames(ALICE).names).toEqual(['jobs__open', 'jobs__open2', 'pooled__echo']);
    expect(listNames(BOB).names).toEqual(['jobs__open', 'jobs__run', 'jobs__support_only', 'jobs__open2', 'pooled__echo']);
    expect(guarded.listVariesByCaller).toBe(true);
    expect(views.get('open')!.listVariesByCaller).toBe(false);
    const paged = buildRouteViews(
      catalogSnapshot(
        [{ route_key: 'guarded', backends: [backendCatalog('jobs', ['open', 'run', 'support_only', 'open2'])], access: { rules, ruleOf: (_b, index) => (index === 1 ? 1 : index === 2 ? 2 : 0) } }],
        { toolNameSeparator: '__', toolNamePolicy: 'drop', maxToolsPerRoute: 5000, toolsListPageSize: 1 },
      ),
    ).get('guarded')!;
    const pages: string[][] = [];
    let cursor: string | undefined;
    do {
      const answer = answerToolsList(paged, cursor === undefined ? undefined : { cursor }, { caller: callerOfClaims(ALICE) });
      if (!answer.ok) throw new Error(answer.message);
      pages.push(JSON.parse(toolsListBody(1, answer.result).toString()).result.tools.map((tool: { name: string }) => tool.name));
      cursor = answer.result.nextCursor;
    } while (cursor);
    expect(pages).toEqual([['jobs__open'], ['jobs__open2']]);
  });

  it('serves callers who decide alike on every rule the same bytes, and one who decides otherwise its own', () => {
    const entries = (claims: Record<string, unknown>) => {
      const answer = answerToolsList(guarded, undefined, { caller: callerOfClaims(claims) });
      if (!answer.ok) throw new Error(answer.message);
      return answer.result.entries;
    };
    const alice = entries(ALICE);
    expect(entries(ALICE)).toBe(alice);
    // Another subject with Alice's scopes and groups: the same decisions, so the same list.
    expect(entries({ ...ALICE, sub: 'carol-id' })).toBe(alice);
    const bob = entries(BOB);
    expect(bob).not.toBe(alice);
    expect(JSON.parse(`[${bob.toString()}]`).map((tool: { name: string }) => tool.name)).toEqual(['jobs__open', 'jobs__run', 'jobs__support_only', 'jobs__open2', 'pooled__echo']);
  });

  it('lists each caller its own tools past the number of distinct audiences it keeps at once', () => {
    const groups = ['g0', 'g1', 'g2', 'g3', 'g4'];
    const groupRules: AccessRuleMessage[] = groups.map((group) => ({ required_scopes: [], allow_subjects: [], allow_groups: [group], allow_clients: [] }));
    const many = buildRouteViews(
      catalogSnapshot([{ route_key: 'many', backends: [backendCatalog('jobs', ['open', ...groups])], access: { rules: groupRules, ruleOf: (_backend, index) => index } }]),
    ).get('many')!;
    // 32 callers, one per subset of the five groups, twice over: each sees the open tool and its groups' tools.
    for (let round = 0; round < 2; round++) {
      for (let subset = 0; subset < 2 ** groups.length; subset++) {
        const held = groups.filter((_group, bit) => subset & (1 << bit));
        const answer = answerToolsList(many, undefined, { caller: callerOfClaims({ ...ALICE, groups: held }) });
        if (!answer.ok) throw new Error(answer.message);
        expect(answer.result.page.map((item) => item.key)).toEqual(['jobs__open', ...held.map((group) => `jobs__${group}`)]);
      }
    }
  });

  it('ignores the header on an open route: no caller there, whatever a client sends', async () => {
    const { context } = sidecarContext(views);
    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'a', version: '1' } } };
    const opened = await decideOnBody(head('open', ALICE), Buffer.from(JSON.stringify(initialize)), context);
    if (opened.kind !== 'respond') throw new Error('not answered');
    const session = await context.sessions.get(opened.headers['mcp-session-id']);
    expect(session?.owner).toBeUndefined();
  });

  it('binds a session to its opener: another caller, or none, is told it does not exist; the session check likewise', async () => {
    const { context } = sidecarContext(views);
    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'a', version: '1' } } };
    const opened = await decideOnBody(head('guarded', ALICE), Buffer.from(JSON.stringify(initialize)), context);
    if (opened.kind !== 'respond') throw new Error('not answered');
    const sessionId = opened.headers['mcp-session-id'];
    expect((await context.sessions.get(sessionId))?.owner).toBe('https://idp.example alice-id');
    const list = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
    const statusOf = async (claims?: Record<string, unknown>) => {
      const decision = await decideOnBody(head('guarded', claims, { 'mcp-session-id': sessionId }), list, context);
      return decision.kind === 'respond' ? decision.status : decision.kind;
    };
    expect(await statusOf(ALICE)).toBe(200);
    expect(await statusOf(BOB)).toBe(404);
    expect(await statusOf(undefined)).toBe(404);
    const pool = new StatelessCallSessions(context);
    const check = (claims?: Record<string, unknown>) =>
      checkCall(
        head('guarded', claims, { 'x-mcpgw-route': 'guarded', 'x-mcpgw-backend': 'jobs', 'x-mcpgw-tool': 'open', 'x-mcpgw-rpc-id': '3', 'mcp-session-id': sessionId }),
        context,
        pool,
      );
    expect((await check(ALICE)).status).toBe(CHECK_STATUS.ALLOW);
    expect((await check(BOB)).status).toBe(404);
    expect((await check(undefined)).status).toBe(404);
  });

  it("keeps stateless clients' pooled backend sessions apart per caller", async () => {
    let opened = 0;
    const { context } = sidecarContext(views, async () => `backend-session-${++opened}`);
    const pool = new StatelessCallSessions(context);
    const check = async (claims: Record<string, unknown>) =>
      (await checkCall(head('guarded', claims, { 'x-mcpgw-route': 'guarded', 'x-mcpgw-backend': 'pooled', 'x-mcpgw-tool': 'echo', 'x-mcpgw-rpc-id': '3' }), context, pool))
        .headers['mcp-session-id'];
    expect(await check(ALICE)).toBe('backend-session-1');
    expect(await check(BOB)).toBe('backend-session-2');
    expect(await check(ALICE)).toBe('backend-session-1');
  });
});
