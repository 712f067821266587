import * as fs from 'node:fs';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, SampleBackends, metricValue, postJsonRpc, startGateway, testDir, writeRegistry } from '../support/gateway-fixture';
import { decodeJwt } from '../support/jwt';
import { KEYCLOAK_STARTUP_MS, Keycloak, keycloak } from '../support/keycloak';

/**
 * Per-caller limits on routes with auth count each validated token's subject (docs/quotas.md):
 * alice and bob call from the same address with their own Keycloak tokens, through the real Envoy,
 * per instance (local_ratelimit) and shared (the real envoyproxy/ratelimit on Redis).
 */

/** The test realm's tokens carry this resource URL in `aud` (docs/testing.md). */
const PUBLIC_URL = 'http://127.0.0.1:10000';
const AUDIENCE = `${PUBLIC_URL}/mcp/demo`;

describe('per-caller limits by the validated token', () => {
  let idp: Keycloak;
  let stack: GatewayStack;
  /** A second gateway on the same ratelimit service, leasing its shared limits (docs/adr/0016-quotas.md, "Leased shared limits"). */
  let leasing: GatewayStack;
  const tokens = { alice: '', bob: '' };

  const registry = (backends: SampleBackends) => ({
    routes: [
      { key: 'demo', auth: { issuer: idp.issuer, clockSkewSeconds: 1 }, quotas: { calls: { perCaller: '3/minute' } }, toolServices: [{ name: 'jobs', url: backends.jobs }] },
      ...['shared', 'leased'].map((key) => ({
        key,
        auth: { issuer: idp.issuer, audiences: [AUDIENCE], clockSkewSeconds: 1 },
        quotas: { calls: { perCaller: { rate: '2/minute', shared: true } } },
        toolServices: [{ name: 'jobs', url: backends.jobs }],
      })),
    ],
  });

  const call = (route: string, token: string, id: number, through = stack) =>
    postJsonRpc(through.gatewayUrl(route), { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' } } }, {
      ...MCP_POST_HEADERS,
      'mcp-protocol-version': '2025-11-25',
      authorization: `Bearer ${token}`,
    });

  beforeAll(async () => {
    idp = await keycloak();
    [tokens.alice, tokens.bob] = await Promise.all([
      idp.tokenFor('alice', { scopes: ['tools:read', 'tools:call'] }),
      idp.tokenFor('bob', { scopes: ['tools:read', 'tools:call'] }),
    ]);
    let backends: SampleBackends;
    ({ stack, backends } = await startGateway('auth-quotas', registry, { controlPlaneArgs: ['--public-url', PUBLIC_URL], rateLimit: true }));
    const dir = testDir('auth-quotas-leasing');
    leasing = await GatewayStack.start({
      registryFile: writeRegistry(dir, registry(backends)),
      logDir: dir,
      sharedRateLimit: { socketPath: stack.rateLimitSocket, configFile: stack.rateLimitConfigFile },
      controlPlaneArgs: ['--public-url', PUBLIC_URL, '--shared-limit-lease-workers', '4'],
    });
    await waitFor('route leased to list jobs__echo', async () => {
      const listed = await postJsonRpc(leasing.gatewayUrl('leased'), { jsonrpc: '2.0', id: 0, method: 'tools/list' }, { ...MCP_POST_HEADERS, authorization: `Bearer ${tokens.bob}` });
      return listed.status === 200 && listed.text.includes('jobs__echo') ? true : undefined;
    });
    for (const route of ['demo', 'shared']) {
      await waitFor(`route ${route} to list jobs__echo`, async () => {
        const listed = await postJsonRpc(stack.gatewayUrl(route), { jsonrpc: '2.0', id: 0, method: 'tools/list' }, { ...MCP_POST_HEADERS, authorization: `Bearer ${tokens.bob}` });
        return listed.status === 200 && listed.text.includes('jobs__echo') ? true : undefined;
      });
    }
  }, KEYCLOAK_STARTUP_MS);
  afterAll(async () => {
    await leasing?.stop();
    await stack?.stop();
  });

  it("refuses alice over her limit while bob, from the same address, goes on; the refusal is in the metrics and in the audit log under alice's subject", async () => {
    for (const id of [1, 2, 3]) expect((await call('demo', tokens.alice, id)).status).toBe(200);
    const refused = await call('demo', tokens.alice, 4);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(refused.json()).toMatchObject({ id: 4, error: { code: -32029, data: { outcome: 'limited', limit: 'route:demo/calls/per-caller' } } });
    for (const id of [5, 6, 7]) expect((await call('demo', tokens.bob, id)).status).toBe(200);

    await waitFor('the call log to count the refusal', async () =>
      (await metricValue(stack, 'mcpgw_limited_requests_total', { route: 'demo', limit: 'route:demo/calls/per-caller' })) >= 1 ? true : undefined,
    );
    const alice = decodeJwt(tokens.alice).sub;
    const limited = await waitFor('the audit event of the refusal', async () => {
      const events = fs.existsSync(stack.auditFile) ? fs.readFileSync(stack.auditFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line)) : [];
      return events.find((event) => event.outcome === 'limited' && event.route === 'demo');
    });
    expect(limited).toMatchObject({ kind: 'tools/call', caller: { subject: alice }, reason: 'route:demo/calls/per-caller', http_status: 429, attempts: 0 });
  });

  it('counts a shared per-caller limit by subject in the ratelimit service', async () => {
    for (const id of [1, 2]) expect((await call('shared', tokens.bob, id)).status).toBe(200);
    expect((await call('shared', tokens.bob, 6)).status).toBe(429);
    for (const id of [3, 4]) expect((await call('shared', tokens.alice, id)).status).toBe(200);
    const refused = await call('shared', tokens.alice, 5);
    expect(refused.status).toBe(429);
    expect(refused.json()).toMatchObject({ error: { code: -32029, message: expect.stringContaining('route:shared/calls/per-caller') } });
  });

  it('counts a leased shared per-caller limit by subject too (the call script, a lease of one token at 2/minute), naming it in the refusal and the metrics', async () => {
    for (const id of [1, 2]) expect((await call('leased', tokens.alice, id, leasing)).status).toBe(200);
    const refused = await call('leased', tokens.alice, 3, leasing);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-mcpgw-limit')).toBe('route:leased/calls/per-caller');
    expect(refused.json()).toMatchObject({ id: 3, error: { code: -32029, data: { outcome: 'limited', limit: 'route:leased/calls/per-caller' } } });
    for (const id of [4, 5]) expect((await call('leased', tokens.bob, id, leasing)).status).toBe(200);
    await waitFor('the call log to count the refusal', async () =>
      (await metricValue(leasing, 'mcpgw_limited_requests_total', { route: 'leased', limit: 'route:leased/calls/per-caller' })) >= 1 ? true : undefined,
    );
  });
});
