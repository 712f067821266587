import * as fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { waitFor } from '../../control-plane/devstack/processes';
import { argumentsHash } from '../../control-plane/audit/arguments-hash';
import { projectPath } from '../../control-plane/shared/paths';
import { FlakyToolService } from '../support/flaky-tool-service';
import { connectClient, listedTools, metricValue, postJsonRpc, startGateway, toolCallAccessLog } from '../support/gateway-fixture';

/**
 * The audit on the real path (docs/approval-and-audit.md), on an open route (no caller identity):
 * Envoy's call log reaches the control plane, which writes exactly one event per tools/call, valid
 * against the published schema, with the arguments' hash and never their values.
 */
describe('audit events through the real Envoy', () => {
  let stack: GatewayStack;
  let spy: FlakyToolService;
  let dir: string;
  let auditFile: string;
  let client: Client;

  beforeAll(async () => {
    spy = await FlakyToolService.start();
    ({ stack, dir } = await startGateway('audit', () => ({ routes: [{ key: 'ops', toolServices: [{ name: 'reports', url: spy.url, policy: { denyTools: ['slow_*'] } }] }] })));
    auditFile = stack.auditFile;
    await waitFor('the spy tools', async () => ((await listedTools(stack.gatewayUrl('ops'))) ?? []).length === 3 ? true : undefined);
    client = await connectClient(stack.gatewayUrl('ops'));
  });
  afterAll(async () => {
    await client?.close();
    await stack?.stop();
    await spy?.stop();
  });

  const auditEvents = () =>
    fs.existsSync(auditFile)
      ? fs
          .readFileSync(auditFile, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((line) => JSON.parse(line) as Record<string, any>)
      : [];

  it('writes one valid event per call, with the hash of its arguments, and counts them', async () => {
    const secret = 'hunter2-do-not-log';
    await client.callTool({ name: 'reports__send_email', arguments: { to: 'ops@example.com', body: secret } });
    await client.callTool({ name: 'reports__read_report', arguments: {} });
    const denied = await client.callTool({ name: 'reports__slow_read', arguments: { n: 1 } }).catch((error: Error) => error);
    expect(String(denied)).toContain('denied');
    const unknown = await client.callTool({ name: 'nobody__x', arguments: {} }).catch((error: Error) => error);
    expect(String(unknown)).toMatch(/nobody__x|unknown|no tool/i);
    // An Authorization header on an open route: the call route removes it (the Tool Service has no credentials).
    const withToken = await postJsonRpc(
      stack.gatewayUrl('ops'),
      { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'reports__read_report', arguments: { page: 2 } } },
      { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: 'Bearer opaque-caller-token' },
    );
    expect(withToken.status).toBe(200);
    await client.listTools();

    const events = await waitFor('five audit events', async () => (auditEvents().length >= 5 ? auditEvents() : undefined), { timeoutMs: 10_000 });
    // Envoy flushes its call log every second: anything more would have arrived with these.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(auditEvents()).toHaveLength(5);

    const ajv = new Ajv2020({ strict: true });
    addFormats(ajv);
    const validate = ajv.compile(JSON.parse(fs.readFileSync(projectPath('docs', 'audit-event.schema.json'), 'utf8')));
    for (const event of events) expect({ event, valid: validate(event), errors: validate.errors }).toMatchObject({ valid: true });
    expect(fs.readFileSync(auditFile, 'utf8')).not.toContain(secret);

    const byTool = new Map(events.map((event) => [`${event.tool}:${event.arguments_sha256 ?? ''}`, event]));
    const sent = byTool.get(`send_email:${argumentsHash(JSON.stringify({ body: secret, to: 'ops@example.com' }))}`);
    expect(sent).toMatchObject({
      kind: 'tools/call',
      route: 'ops',
      backend: 'reports',
      outcome: 'ok',
      http_status: 200,
      attempts: 1,
      approval: { decision: 'not_required' },
      credential_mode: 'none',
    });
    expect(sent?.caller).toBeUndefined();
    expect(byTool.get(`slow_read:${argumentsHash('{"n":1}')}`)).toMatchObject({ outcome: 'denied', reason: 'policy', attempts: 0, credential_mode: 'none' });
    expect(events.find((event) => event.tool === 'nobody__x')).toMatchObject({ outcome: 'invalid', route: 'ops' });
    expect(byTool.get(`read_report:${argumentsHash('{"page":2}')}`)).toMatchObject({ outcome: 'ok', credential_mode: 'none' });
    expect(spy.received.get('slow_read')).toBeUndefined();

    expect(await metricValue(stack, 'mcpgw_audit_events_total', { kind: 'tools/call' })).toBe(5);
    expect(await metricValue(stack, 'mcpgw_audit_events_total', { outcome: 'denied' })).toBe(1);
    // Envoy's own access log names the caller too: nobody, on an open route.
    const logged = await waitFor('the access log line of the call', async () => toolCallAccessLog(dir).find((entry) => entry.tool === 'send_email'));
    expect(logged).toHaveProperty('caller_sub', null);
  });
});
