import { Client as V2Client, ProtocolError, SdkError, SdkErrorCode, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import * as fs from 'node:fs';
import { Browser, BrowserContext } from 'playwright-core';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { approvalSidecarArgs, decideOnPage, openApprovalPage } from '../support/approvals';
import { launchChromium } from '../support/chromium';
import { FlakyToolService } from '../support/flaky-tool-service';
import { MCP_POST_HEADERS, listedTools, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { KEYCLOAK_STARTUP_MS, Keycloak, keycloak } from '../support/keycloak';
import { MultiRoundToolService } from '../support/multi-round-tool-service';

/**
 * Approvals for MCP 2026-07-28 clients, and approvals that expire (docs/approval-and-audit.md), on the
 * real path: Envoy's call script asks the approval check, an MCP SDK v2 client pinned to 2026-07-28 gets
 * an `input_required` result naming the approval page, alice decides there in a real headless Chromium
 * (signed in at Keycloak), and the SDK's multi-round-trip driver calls again. The routes have auth, so
 * an approval is bound to alice's issuer and subject; she approves her own calls (no approvers group).
 * Approvals here live APPROVAL_TTL_S seconds. The spy Tool Service counts what reached it; on route
 * ops, the Tool Service `ledger` asks its own question (2026-07-28 `input_required`) before it acts.
 */
const APPROVAL_TTL_S = 15;
const MODERN = '2026-07-28';
const URL_ELICITATION = { elicitation: { url: {} } };

type ElicitAction = 'accept' | 'decline' | 'cancel';
/** What a client answers to an elicitation: an action, or (a form) accepted with its content. */
type ElicitAnswer = ElicitAction | { action: 'accept'; content: Record<string, string | number | boolean> };

interface ElicitationParams {
  mode: string;
  url: string;
  message: string;
  elicitationId?: string;
}

describe('approvals for 2026-07-28 clients, and approvals that expire', () => {
  let idp: Keycloak;
  let stack: GatewayStack;
  let spy: FlakyToolService;
  let ledger: MultiRoundToolService;
  let browser: Browser;
  /** alice's browser: signed in on the approval pages once, as a person keeps a tab open. */
  let alicesBrowser: BrowserContext;
  const tokens = { alice: '', bob: '' };
  const clients: V2Client[] = [];

  beforeAll(async () => {
    idp = await keycloak();
    spy = await FlakyToolService.start();
    ledger = await MultiRoundToolService.start();
    [tokens.alice, tokens.bob] = await Promise.all([idp.tokenFor('alice'), idp.tokenFor('bob')]);
    const listener = await freePort();
    // Two routes in front of the same Tool Service: an approval on one must not open the other.
    const route = (key: string, more: { name: string; url: string; policy: { approvalAtRisk: 'high' } }[] = []) => ({
      key,
      auth: { issuer: idp.issuer, audiences: [idp.routeAudience] },
      toolServices: [{ name: 'reports', url: spy.url, policy: { approvalAtRisk: 'high' as const } }, ...more],
    });
    const ledgerService = { name: 'ledger', url: ledger.url, policy: { approvalAtRisk: 'high' as const } };
    ({ stack } = await startGateway('auth-approval-modern', () => ({ routes: [route('ops', [ledgerService]), route('ops2')] }), {
      ports: { listener },
      extraArgs: { sidecar: approvalSidecarArgs('auth-approval-modern', listener, idp.issuer, APPROVAL_TTL_S) },
    }));
    for (const [key, tools] of [['ops', 5], ['ops2', 4]] as const) {
      await waitFor(`the spy tools on ${key}`, async () => (((await listedTools(stack.gatewayUrl(key), tokens.alice)) ?? []).length === tools ? true : undefined));
    }
    browser = await launchChromium();
    // alice signs in on the pages before the tests, so that deciding takes well under APPROVAL_TTL_S.
    alicesBrowser = await browser.newContext();
    const warmUp = inputRequestOf(await modernCall('ops', 'reports__put_setting', { name: 'sign-in' }));
    await (await openApprovalPage(alicesBrowser, warmUp.url, 'alice')).close();
  }, KEYCLOAK_STARTUP_MS);

  afterAll(async () => {
    for (const client of clients) await client.close();
    await browser?.close();
    await stack?.stop();
    await spy?.stop();
    await ledger?.stop();
  });

  /** A tools/call as a 2026-07-28 client sends it (no session; capabilities in `_meta`), raw. */
  function modernCall(route: string, tool: string, args: Record<string, unknown>, options: { token?: string; capabilities?: unknown; params?: Record<string, unknown> } = {}) {
    const _meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': options.capabilities ?? URL_ELICITATION };
    return postJsonRpc(
      stack.gatewayUrl(route),
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: args, ...options.params, _meta } },
      { ...MCP_POST_HEADERS, authorization: `Bearer ${options.token ?? tokens.alice}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': tool },
    );
  }

  /** The one URL-mode elicitation an `input_required` result asks for, and the key it is asked under. */
  function inputRequestOf(response: { status: number; json: () => any }): ElicitationParams & { key: string } {
    expect(response.status).toBe(200);
    const result = response.json().result;
    expect(result.resultType).toBe('input_required');
    const entries = Object.entries(result.inputRequests as Record<string, { method: string; params: ElicitationParams }>);
    expect(entries).toHaveLength(1);
    const [[key, request]] = entries;
    expect(request.method).toBe('elicitation/create');
    expect(request.params).toMatchObject({ mode: 'url', url: expect.stringMatching(new RegExp(`^http://127\\.0\\.0\\.1:${stack.ports.listener}/approvals/`)), message: expect.any(String) });
    return { key, ...request.params };
  }

  /**
   * An SDK v2 client pinned to 2026-07-28 with alice's token. With `person`, it declares URL elicitation
   * and its elicitation handler is the person: it gets each approval link the gateway asks for, and the
   * client answers what the person says (`accept`: done on the page; `decline`: will not open it).
   * With `forms`, it takes form-mode elicitations too, which the person fills in.
   */
  async function modernClient(person?: (params: ElicitationParams) => Promise<ElicitAnswer>, options: { forms?: boolean } = {}): Promise<{ client: V2Client; asked: ElicitationParams[] }> {
    const asked: ElicitationParams[] = [];
    const capabilities = options.forms ? { elicitation: { url: {}, form: {} } } : URL_ELICITATION;
    const client = new V2Client({ name: 'approval-agent', version: '1.0.0' }, { versionNegotiation: { mode: { pin: MODERN } }, ...(person && { capabilities }) });
    if (person) {
      client.setRequestHandler('elicitation/create', async (request) => {
        const params = request.params as ElicitationParams;
        asked.push(params);
        const answer = await person(params);
        return typeof answer === 'string' ? { action: answer } : answer;
      });
    }
    await client.connect(new V2Transport(new URL(stack.gatewayUrl('ops')), { requestInit: { headers: { authorization: `Bearer ${tokens.alice}` } } }));
    clients.push(client);
    return { client, asked };
  }

  /** alice on the approval page of `link`: approves or declines. */
  async function alice(link: string, decision: { approve: boolean; comment?: string }): Promise<string> {
    const page = await openApprovalPage(alicesBrowser, link, 'alice');
    try {
      expect(await page.textContent('#caller')).toContain('alice');
      return await decideOnPage(page, decision);
    } finally {
      await page.close();
    }
  }

  const received = (tool = 'send_email') => spy.received.get(tool) ?? 0;
  const auditEvents = () => (fs.existsSync(stack.auditFile) ? fs.readFileSync(stack.auditFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, any>) : []);
  const failureOf = (promise: Promise<unknown>) => promise.then(() => undefined, (thrown: unknown) => thrown);

  it('answers input_required with the approval page; approved there, the SDK client’s retry gets the result, once', async () => {
    const args = { to: 'ops@example.com', body: 'restart the cluster' };
    const before = received();
    // The wire shape first: what the SDK client will be given for the same call.
    const wire = inputRequestOf(await modernCall('ops', 'reports__send_email', args));
    expect(wire.key).toBe(wire.elicitationId);

    const { client, asked } = await modernClient(async (params) => {
      expect(received()).toBe(before);
      expect(await alice(params.url, { approve: true, comment: 'fine' })).toContain('Approved by alice');
      return 'accept';
    });
    const result = await client.callTool({ name: 'reports__send_email', arguments: args });
    expect(result.content).toEqual([{ type: 'text', text: 'sent' }]);
    expect(asked.map((params) => params.url)).toEqual([wire.url]);
    expect(received()).toBe(before + 1);
    // One call per approval: the same call again asks anew.
    const again = inputRequestOf(await modernCall('ops', 'reports__send_email', args));
    expect(again.url).not.toBe(wire.url);
    expect(received()).toBe(before + 1);
  });

  it('lets the retry of an approved call that its Tool Service asked a question about through without a new approval, once; the gateway’s own answer is not forwarded', async () => {
    const args = { amount: 100, to: 'acme' };
    const from = ledger.rounds.length;
    const { client, asked } = await modernClient(
      async (params) => {
        if (params.mode === 'form') return { action: 'accept', content: { confirm: true } };
        // alice approves once; a second approval page for the same call is one too many.
        if (asked.filter((earlier) => earlier.mode === 'url').length > 1) return 'cancel';
        expect(await alice(params.url, { approve: true })).toContain('Approved by alice');
        return 'accept';
      },
      { forms: true },
    );
    const result = await client.callTool({ name: 'ledger__transfer', arguments: args });
    expect(asked.map((params) => params.mode)).toEqual(['url', 'form']);
    expect(result.content).toEqual([{ type: 'text', text: 'moved 100 to acme' }]);
    // The Tool Service saw its two rounds: the first without the gateway's approval answer, the retry with its own state.
    const rounds = ledger.rounds.slice(from);
    expect(rounds).toEqual([{ inputResponseKeys: [] }, { inputResponseKeys: ['confirm'], requestState: expect.any(String) }]);
    // The continuation was used: the same retry replayed, and a fresh identical call, each ask for an approval anew.
    const replay = { params: { inputResponses: { confirm: { action: 'accept', content: { confirm: true } } }, requestState: rounds[1].requestState } };
    const approvalPage = /\/approvals\//;
    expect(inputRequestOf(await modernCall('ops', 'ledger__transfer', args, replay)).url).toMatch(approvalPage);
    expect(inputRequestOf(await modernCall('ops', 'ledger__transfer', args)).url).toMatch(approvalPage);
    expect(ledger.rounds.length).toBe(from + 2);
    // Both rounds are audited as calls of the one approval.
    const roundsAudited = await waitFor('both rounds’ audit events', async () => {
      const granted = auditEvents().filter((event) => event.tool === 'transfer' && event.approval?.decision === 'granted');
      return granted.length === 2 ? granted : undefined;
    }, { timeoutMs: 10_000 });
    expect(new Set(roundsAudited.map((event) => event.approval.id)).size).toBe(1);
  });

  it('does not let a continuation go with changed arguments, to another tool or route, or for another caller; its own retry still goes', async () => {
    const args = { amount: 7, to: 'globex' };
    // A client that takes forms too, as the Tool Service's question is one.
    const capabilities = { elicitation: { url: {}, form: {} } };
    const link = inputRequestOf(await modernCall('ops', 'ledger__transfer', args, { capabilities }));
    expect(await alice(link.url, { approve: true })).toContain('Approved by alice');
    const approved = await modernCall('ops', 'ledger__transfer', args, { capabilities, params: { inputResponses: { [link.key]: { action: 'accept' } } } });
    const asked = approved.json().result;
    expect(asked).toMatchObject({ resultType: 'input_required', inputRequests: { confirm: { method: 'elicitation/create' } }, requestState: expect.any(String) });
    const from = ledger.rounds.length;
    // Each carries the backend's requestState and an answer to its question, as the continuing retry would.
    const continuing = { capabilities, params: { inputResponses: { confirm: { action: 'accept', content: { confirm: true } } }, requestState: asked.requestState } };
    const elsewhere = [
      modernCall('ops', 'ledger__transfer', { ...args, amount: 7000 }, continuing),
      modernCall('ops', 'reports__send_email', args, continuing),
      modernCall('ops2', 'reports__send_email', args, continuing),
      modernCall('ops', 'ledger__transfer', args, { ...continuing, token: tokens.bob }),
    ];
    for (const response of await Promise.all(elsewhere)) expect(inputRequestOf(response).url).toMatch(/\/approvals\//);
    expect(ledger.rounds.length).toBe(from);
    // The continuation is still there for its own retry.
    const done = await modernCall('ops', 'ledger__transfer', args, continuing);
    expect(done.json().result.content).toEqual([{ type: 'text', text: 'moved 7 to globex' }]);
    expect(ledger.rounds.slice(from)).toEqual([{ inputResponseKeys: ['confirm'], requestState: asked.requestState }]);
  });

  it('refuses the retry of a declined call: -32003, outcome denied, reason approval declined, nothing sent', async () => {
    const before = received();
    const { client, asked } = await modernClient(async (params) => {
      expect(await alice(params.url, { approve: false, comment: 'not today' })).toContain('Declined by alice');
      return 'accept';
    });
    const error = await failureOf(client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: 'drop the database' } }));
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe(-32003);
    expect((error as ProtocolError).message).toContain('approval declined by alice: "not today"');
    expect((error as ProtocolError).data).toMatchObject({ outcome: 'denied', reason: 'approval declined', comment: 'not today', attempts: 0 });
    expect(asked).toHaveLength(1);
    expect(received()).toBe(before);
  });

  it('refuses a 2026-07-28 client without URL elicitation: approval_required, nothing sent', async () => {
    const before = received();
    const { client } = await modernClient();
    const error = await failureOf(client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: 'x' } }));
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe(-32003);
    expect((error as ProtocolError).message).toContain('did not declare URL elicitation');
    expect((error as ProtocolError).data).toMatchObject({ outcome: 'approval_required', reason: 'client cannot take URL elicitation', attempts: 0 });
    expect(received()).toBe(before);
  });

  it('does not take a client’s own accept for a person’s approval: it keeps asking, nothing sent', async () => {
    const before = received();
    // An agent that auto-accepts the elicitation without anyone opening the page.
    const { client, asked } = await modernClient(async () => 'accept');
    const error = await failureOf(client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: 'auto' } }));
    expect(error).toBeInstanceOf(SdkError);
    expect((error as SdkError).code).toBe(SdkErrorCode.InputRequiredRoundsExceeded);
    // Every round the same page: the request stays open for a person.
    expect(new Set(asked.map((params) => params.url)).size).toBe(1);
    expect(asked.length).toBeGreaterThan(1);
    expect(received()).toBe(before);
  });

  it.each<ElicitAction>(['decline', 'cancel'])('ends the call when the user answers %s to the approval page in their client: approval_required, nothing sent', async (action) => {
    const before = received();
    const args = { to: 'ops@example.com', body: `not opened (${action})` };
    const { client, asked } = await modernClient(async () => action);
    const error = await failureOf(client.callTool({ name: 'reports__send_email', arguments: args }));
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe(-32003);
    expect((error as ProtocolError).message).toContain(`the user answered "${action}" to the approval page`);
    expect((error as ProtocolError).data).toMatchObject({ outcome: 'approval_required', reason: 'approval page declined', attempts: 0 });
    expect(asked).toHaveLength(1);
    expect(received()).toBe(before);
    // The request stays open for a person: the same call later is shown the same page.
    expect(inputRequestOf(await modernCall('ops', 'reports__send_email', args)).url).toBe(asked[0].url);
  });

  it('refuses an approval used after it expired: -32003, outcome denied, reason approval expired, nothing sent', async () => {
    const before = received();
    let approvedAt = 0;
    const { client } = await modernClient(async (params) => {
      expect(await alice(params.url, { approve: true })).toContain('Approved by alice');
      approvedAt = Date.now();
      // The user comes back to the agent only after the approval ran out.
      await new Promise((resolve) => setTimeout(resolve, APPROVAL_TTL_S * 1000 + 1000));
      return 'accept';
    });
    const error = await failureOf(client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: 'later' } }, { timeout: APPROVAL_TTL_S * 1000 + 30_000 }));
    expect(approvedAt).toBeGreaterThan(0);
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe(-32003);
    expect((error as ProtocolError).message).toMatch(/^approval by alice expired at \S+ before it was used; tool "reports__send_email" was not called/);
    expect((error as ProtocolError).data).toMatchObject({ outcome: 'denied', reason: 'approval expired', attempts: 0 });
    expect(received()).toBe(before);
  }, 60_000);

  it('does not carry a granted approval over to changed arguments, another tool, another route or another caller', async () => {
    const args = { name: 'mode', value: 'maintenance' };
    const link = inputRequestOf(await modernCall('ops', 'reports__put_setting', args));
    expect(await alice(link.url, { approve: true })).toContain('Approved by alice');
    const before = { put: received('put_setting'), send: received() };
    // Each presents the approved elicitation's id as accepted, as a replaying client would: it counts for nothing.
    const replay = { params: { inputResponses: { [link.key]: { action: 'accept' } } } };
    const elsewhere = [
      modernCall('ops', 'reports__put_setting', { ...args, value: 'off' }, replay),
      modernCall('ops', 'reports__send_email', args, replay),
      modernCall('ops2', 'reports__put_setting', args, replay),
    ];
    for (const response of await Promise.all(elsewhere)) expect(inputRequestOf(response).url).not.toBe(link.url);
    // bob is another subject: the same call of his is his own request, which he cannot approve with alice's.
    expect(inputRequestOf(await modernCall('ops', 'reports__put_setting', args, { ...replay, token: tokens.bob })).url).not.toBe(link.url);
    expect({ put: received('put_setting'), send: received() }).toEqual(before);
    // The approval itself is still good, for its own call.
    const allowed = await modernCall('ops', 'reports__put_setting', args);
    expect(allowed.json().result.content).toEqual([{ type: 'text', text: 'set' }]);
    expect(received('put_setting')).toBe(before.put + 1);
  });

  it('writes the expired approval to the audit file as denied, reason approval expired, nothing forwarded', async () => {
    const expired = await waitFor('the expired approval’s audit event', async () => auditEvents().find((event) => event.approval?.decision === 'expired'), { timeoutMs: 10_000 });
    expect(expired).toMatchObject({ outcome: 'denied', reason: 'approval expired', attempts: 0, route: 'ops', tool: 'send_email', caller: { issuer: idp.issuer } });
  });
});
