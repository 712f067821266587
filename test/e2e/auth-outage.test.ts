import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, controlPlaneStatus, postJsonRpc, startGateway } from '../support/gateway-fixture';
import { KEYCLOAK_STARTUP_MS, Keycloak, keycloak } from '../support/keycloak';

/**
 * The identity provider down for longer than the gateway's key refresh (docs/adr/0011-caller-identity.md):
 * the control plane keeps the last signing keys it read (and Redis keeps a copy), so tokens issued
 * before the outage keep validating in the running Envoy, in an Envoy started during the outage, and
 * after a control plane restarted during the outage. A route whose issuer was never read refuses
 * every request with 503, never lets one through.
 */

const PUBLIC_URL = 'http://127.0.0.1:10000';
const REFRESH_MS = 1000;

describe('an identity provider outage (Keycloak stopped, real Envoy 1.40 and control plane)', () => {
  let idp: Keycloak;
  let stack: GatewayStack;
  let token: string;
  let unreachableIssuer: string;

  const listTools = (route = 'demo') =>
    postJsonRpc(stack.gatewayUrl(route), { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { ...MCP_POST_HEADERS, authorization: `Bearer ${token}` });
  const keysOf = async (issuer: string) =>
    ((await controlPlaneStatus(stack)).signingKeys as { issuer: string; state: string; lastError?: string; keyIds: string[] }[]).find((source) => source.issuer === issuer);

  beforeAll(async () => {
    idp = await keycloak();
    token = await idp.tokenFor('alice', { scopes: ['tools:read'] });
    unreachableIssuer = `http://127.0.0.1:${await freePort()}/realms/nowhere`;
    ({ stack } = await startGateway(
      'auth-outage',
      (backends) => ({
        routes: [
          { key: 'demo', auth: { issuer: idp.issuer }, toolServices: [{ name: 'jobs', url: backends.jobs }] },
          { key: 'nowhere', auth: { issuer: unreachableIssuer }, toolServices: [{ name: 'jobs', url: backends.jobs }] },
        ],
      }),
      { controlPlaneArgs: ['--public-url', PUBLIC_URL, '--signing-keys-refresh-ms', String(REFRESH_MS), '--signing-keys-timeout-ms', '1000'] },
    ));
    await waitFor('the demo route to answer a valid token', async () => ((await listTools()).status === 200 ? true : undefined));
  }, KEYCLOAK_STARTUP_MS);

  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses every request of a route whose issuer it never read with 503, saying why', async () => {
    const response = await listTools('nowhere');
    expect(response.status).toBe(503);
    expect(response.json().error.message).toContain(`no signing keys of ${unreachableIssuer}`);
    expect((await keysOf(unreachableIssuer))?.state).toBe('missing');
  });

  it(
    'keeps validating with the last keys read: in the running Envoy, after a control plane restart, and in an Envoy started during the outage',
    async () => {
      const keyIds = (await keysOf(idp.issuer))!.keyIds;
      await idp.stop();
      try {
        await waitFor('a failed read of the stopped Keycloak', async () => ((await keysOf(idp.issuer))?.state === 'stale' ? true : undefined));
        // Several refresh periods without the identity provider.
        await new Promise((resolve) => setTimeout(resolve, 3 * REFRESH_MS));
        expect(await keysOf(idp.issuer)).toMatchObject({ state: 'stale', keyIds });
        expect((await listTools()).status).toBe(200);

        // A control plane started during the outage has the keys from Redis.
        await stack.stopProcess('control-plane');
        await stack.startControlPlane();
        await waitFor('the restarted control plane to serve the route', async () => ((await keysOf(idp.issuer))?.keyIds.length ? true : undefined));
        expect((await keysOf(idp.issuer))?.lastError).toBeDefined();

        // An Envoy started during the outage gets them from the control plane.
        await stack.stopProcess('envoy');
        await stack.startEnvoy('envoy-fresh', await freePort());
        await waitFor('the fresh Envoy to validate the token', async () => ((await listTools()).status === 200 ? true : undefined), { timeoutMs: 10_000 });
        expect((await listTools()).json().result.tools.length).toBeGreaterThan(0);
      } finally {
        await idp.start();
      }
      // After a long outage the next read may be up to the retry backoff's ceiling (30 s) away.
      await waitFor('the keys to be read again', async () => ((await keysOf(idp.issuer))?.state === 'ok' ? true : undefined), { timeoutMs: 45_000 });
    },
    KEYCLOAK_STARTUP_MS + 60_000,
  );
});
