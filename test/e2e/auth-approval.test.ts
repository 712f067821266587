import * as fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { Browser } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import { argumentsHash } from '../../control-plane/audit/arguments-hash';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { projectPath } from '../../control-plane/shared/paths';
import { approvalSidecarArgs, decideOnPage, openApprovalPage } from '../support/approvals';
import { launchChromium } from '../support/chromium';
import { FlakyToolService } from '../support/flaky-tool-service';
import { listedTools, startGateway } from '../support/gateway-fixture';
import { KEYCLOAK_STARTUP_MS, Keycloak, TestUser, keycloak } from '../support/keycloak';

/**
 * Approvals on the real path (docs/approval-and-audit.md): Envoy's call script asks the approval check,
 * an MCP SDK client that declared URL elicitation gets the approval page's link (-32042), a person
 * signs in at Keycloak in a real headless Chromium and decides there, and the client's retry passes
 * once. The spy Tool Service counts what reached it; the audit file holds one event per call.
 *
 * The route here is open (no caller identity yet): an approval is bound to the client's session, and
 * members of the group `approvers` (carol) decide.
 */
describe('approval of risky calls, decided on the approval page', () => {
  let idp: Keycloak;
  let stack: GatewayStack;
  let spy: FlakyToolService;
  let browser: Browser;
  let url: string;
  const clients: Client[] = [];

  beforeAll(async () => {
    idp = await keycloak();
    spy = await FlakyToolService.start();
    const listener = await freePort();
    ({ stack } = await startGateway(
      'auth-approval',
      () => ({ routes: [{ key: 'ops', toolServices: [{ name: 'reports', url: spy.url, policy: { approvalAtRisk: 'high', approvers: 'approvers' } }] }] }),
      { ports: { listener }, extraArgs: { sidecar: approvalSidecarArgs('auth-approval', listener, idp.issuer, 300) } },
    ));
    url = stack.gatewayUrl('ops');
    await waitFor('the spy tools', async () => ((await listedTools(url)) ?? []).length === 4 ? true : undefined);
    browser = await launchChromium();
  }, KEYCLOAK_STARTUP_MS);

  afterAll(async () => {
    for (const client of clients) await client.close();
    await browser?.close();
    await stack?.stop();
    await spy?.stop();
  });

  async function connect(urlElicitation = true): Promise<Client> {
    const client = new Client({ name: 'approval-test', version: '1.0.0' }, { capabilities: urlElicitation ? { elicitation: { url: {} } } : {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    clients.push(client);
    return client;
  }

  /** A call that must not go through yet: the approval page's link it was given. */
  async function approvalLink(client: Client, args: Record<string, unknown>): Promise<{ url: string; elicitationId: string }> {
    const error = await client.callTool({ name: 'reports__send_email', arguments: args }).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(UrlElicitationRequiredError);
    const [elicitation] = (error as UrlElicitationRequiredError).elicitations;
    expect(elicitation).toMatchObject({ mode: 'url', url: expect.stringMatching(new RegExp(`^http://127\\.0\\.0\\.1:${stack.ports.listener}/approvals/`)) });
    return { url: elicitation.url, elicitationId: elicitation.elicitationId };
  }

  /** A person signs in at Keycloak on the approval page and, if asked to, decides. */
  async function onApprovalPage(link: string, user: TestUser, decision?: { approve: boolean; comment?: string }): Promise<string> {
    const context = await browser.newContext();
    try {
      const page = await openApprovalPage(context, link, user);
      expect(await page.textContent('#tool')).toContain('send_email');
      expect(await page.textContent('#backend')).toBe('reports');
      expect(await page.textContent('#risk')).toBe('high');
      expect(await page.textContent('#arguments')).toContain('ops@example.com');
      return decision ? await decideOnPage(page, decision) : ((await page.textContent('#decision')) ?? '');
    } finally {
      await context.close();
    }
  }

  const sent = () => spy.received.get('send_email') ?? 0;

  it('holds the call until a member of the approvers group approves it, then lets one retry through', async () => {
    const client = await connect();
    const args = { to: 'ops@example.com', body: 'restart the cluster' };
    const before = sent();
    const link = await approvalLink(client, args);
    // Asked again before anyone decided: the same request, still nothing sent.
    expect((await approvalLink(client, args)).elicitationId).toBe(link.elicitationId);
    expect(sent()).toBe(before);

    // bob is not an approver: he sees the request and cannot decide it.
    expect(await onApprovalPage(link.url, 'bob')).toContain('may not decide');
    expect(await onApprovalPage(link.url, 'carol', { approve: true, comment: 'ok, maintenance window' })).toContain('Approved by carol');
    expect(sent()).toBe(before);

    const result = await client.callTool({ name: 'reports__send_email', arguments: args });
    expect(result.content).toEqual([{ type: 'text', text: 'sent' }]);
    expect(sent()).toBe(before + 1);
    // One call per approval: the next one asks again.
    expect((await approvalLink(client, args)).elicitationId).not.toBe(link.elicitationId);
    expect(sent()).toBe(before + 1);
  });

  it('asks again for changed arguments, and from another session, without sending anything', async () => {
    const client = await connect();
    const args = { to: 'ops@example.com', body: 'rotate the keys' };
    const link = await approvalLink(client, args);
    await onApprovalPage(link.url, 'carol', { approve: true });
    const before = sent();
    const changed = await approvalLink(client, { ...args, body: 'rotate the keys and delete the old ones' });
    expect(changed.elicitationId).not.toBe(link.elicitationId);
    // The same arguments from another session (another caller, on an open route): not this approval.
    const other = await connect();
    expect((await approvalLink(other, args)).elicitationId).not.toBe(link.elicitationId);
    expect(sent()).toBe(before);
    await client.callTool({ name: 'reports__send_email', arguments: args });
    expect(sent()).toBe(before + 1);
  });

  it('refuses a declined call with the approver\'s comment (-32003), and asks again after that', async () => {
    const client = await connect();
    const args = { to: 'ops@example.com', body: 'drop the database' };
    const link = await approvalLink(client, args);
    expect(await onApprovalPage(link.url, 'carol', { approve: false, comment: 'not on a Friday' })).toContain('Declined by carol');
    const before = sent();
    const error = await client.callTool({ name: 'reports__send_email', arguments: args }).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(McpError);
    expect((error as McpError).code).toBe(-32003);
    expect((error as McpError).message).toContain('approval declined by carol: "not on a Friday"');
    expect((error as McpError).data).toMatchObject({ outcome: 'denied', comment: 'not on a Friday', attempts: 0 });
    expect((await approvalLink(client, args)).elicitationId).not.toBe(link.elicitationId);
    expect(sent()).toBe(before);
  });

  it('refuses a client that did not declare URL elicitation: approval_required, nothing sent', async () => {
    const client = await connect(false);
    const before = sent();
    const error = await client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: 'x' } }).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(McpError);
    expect(error).not.toBeInstanceOf(UrlElicitationRequiredError);
    expect((error as McpError).code).toBe(-32003);
    expect((error as McpError).message).toContain('did not declare URL elicitation');
    expect((error as McpError).data).toMatchObject({ outcome: 'approval_required' });
    expect(sent()).toBe(before);
    // A tool below the policy's risk needs no approval.
    expect((await client.callTool({ name: 'reports__read_report', arguments: {} })).content).toEqual([{ type: 'text', text: 'report' }]);
  });

  it('writes one valid audit event per call, with the approval decision and the approver', async () => {
    const auditFile = stack.auditFile;
    const lines = () => fs.readFileSync(auditFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, any>);
    // Every call above: 4 + 4 + 3 + 2.
    const events = await waitFor('the audit events of every call', async () => (fs.existsSync(auditFile) && lines().length >= 13 ? lines() : undefined), { timeoutMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(lines()).toHaveLength(13);
    const ajv = new Ajv2020({ strict: true });
    addFormats(ajv);
    const validate = ajv.compile(JSON.parse(fs.readFileSync(projectPath('docs', 'audit-event.schema.json'), 'utf8')));
    for (const event of events) expect({ event, valid: validate(event) }).toMatchObject({ valid: true });
    const restart = argumentsHash(JSON.stringify({ to: 'ops@example.com', body: 'restart the cluster' }));
    // Envoy logs a call when its answer ends: in the order the calls started, by their time.
    const ofRestart = events.filter((event) => event.arguments_sha256 === restart).sort((a, b) => a.time.localeCompare(b.time));
    expect(ofRestart.map((event) => [event.outcome, event.approval.decision])).toEqual([
      ['approval_required', 'required'],
      ['approval_required', 'required'],
      ['ok', 'granted'],
      ['approval_required', 'required'],
    ]);
    expect(ofRestart[2]).toMatchObject({ attempts: 1, credential_mode: 'none', approval: { approver: { issuer: idp.issuer } } });
    expect(events.find((event) => event.approval.decision === 'declined')).toMatchObject({ outcome: 'denied', reason: 'approval declined', attempts: 0 });
    expect(events.find((event) => event.reason === 'client cannot take URL elicitation')).toMatchObject({ outcome: 'approval_required', attempts: 0 });
    expect(fs.readFileSync(auditFile, 'utf8')).not.toContain('restart the cluster');
  });
});
