import * as path from 'node:path';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { connectClient, envoyConfigVersions, listedTools, startGateway, testDir } from '../support/gateway-fixture';
import { MountedSecret } from '../support/mounted-secret';
import { everyRequestKind, everySurfaceKind, expectEveryKind, expectEverySurfaceKind } from '../support/request-kinds';
import { SpyToolService } from '../support/spy-tool-service';

/** What an agent authenticates to the gateway with: it must never reach a backend (docs/auth.md, Backends). */
const CALLER_TOKEN = 'the-callers-own-token';

describe('backend credentials: none (real Envoy, sidecar and control plane)', () => {
  let stack: GatewayStack;
  let spy: SpyToolService;

  beforeAll(async () => {
    spy = await SpyToolService.start({ surface: true });
    ({ stack } = await startGateway('backend-credentials-none', () => ({
      routes: [{ key: 'spied', toolServices: [{ name: 'spy', url: spy.url }] }],
    })));
    await waitFor('the spy in the catalog', async () => (((await listedTools(stack.gatewayUrl('spied'))) ?? []).includes('spy__echo') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await spy?.stop();
  });

  it("sends no Authorization to a backend without credentials, on every request kind, whatever the caller's own token", async () => {
    await everyRequestKind(stack.gatewayUrl('spied'), spy, 'spy', CALLER_TOKEN);
    await everySurfaceKind(stack.gatewayUrl('spied'), spy, 'spy', CALLER_TOKEN);
    expectEveryKind(spy.requests);
    expectEverySurfaceKind(spy.requests);
    expect(spy.of({ rpcMethod: 'tools/list' }).length).toBeGreaterThan(0);
    expect(spy.requests.filter((request) => request.headers.authorization !== undefined)).toEqual([]);
  });
});

describe('backend credentials: serviceAccount (Envoy injects a token from a mounted secret)', () => {
  let stack: GatewayStack;
  let spy: SpyToolService;
  let secret: MountedSecret;

  beforeAll(async () => {
    spy = await SpyToolService.start({ surface: true });
    const dir = testDir('backend-credentials-sa-secret');
    secret = new MountedSecret(path.join(dir, 'spy-token'), { token: 'service-account-v1\n' });
    ({ stack } = await startGateway('backend-credentials-sa', () => ({
      routes: [{ key: 'spied', toolServices: [{ name: 'spy', url: spy.url, credentials: { mode: 'serviceAccount', tokenFile: secret.file('token') } }] }],
    })));
    await waitFor('the spy in the catalog', async () => (((await listedTools(stack.gatewayUrl('spied'))) ?? []).includes('spy__echo') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await spy?.stop();
  });

  it("sends the gateway's own token, never the caller's, on every request kind: calls, sessions, notifications, DELETE, catalog listings, prompts, resources, completion, logging", async () => {
    await everyRequestKind(stack.gatewayUrl('spied'), spy, 'spy', CALLER_TOKEN);
    await everySurfaceKind(stack.gatewayUrl('spied'), spy, 'spy', CALLER_TOKEN);
    expectEveryKind(spy.requests);
    expectEverySurfaceKind(spy.requests);
    expect(spy.of({ rpcMethod: 'tools/list' }).length).toBeGreaterThan(0);
    expect(new Set(spy.requests.map((request) => request.headers.authorization))).toEqual(new Set(['Bearer service-account-v1']));
  });

  it('follows a rotated secret without a restart: the stream in flight finishes, the next requests carry the new token', async () => {
    const client = await connectClient(stack.gatewayUrl('spied'));
    try {
      const versionsBefore = await envoyConfigVersions(stack);
      expect(Object.keys(versionsBefore)).toEqual(expect.arrayContaining(['mcp_gateway', 'mcp_egress', 'mcp_routes', 'mcp_egress_routes']));
      const progress: string[] = [];
      const held = client.callTool({ name: 'spy__hold', arguments: {} }, undefined, { onprogress: ({ message }) => void progress.push(message ?? '') });
      await waitFor('the held call streaming', async () => (progress.length === 1 ? true : undefined));
      secret.update({ token: 'service-account-v2\n' });
      const rotatedAt = spy.requests.length;
      await waitFor('a call with the new token', async () => {
        await client.callTool({ name: 'spy__echo', arguments: { text: 'after' } });
        return spy.requests.at(-1)?.headers.authorization === 'Bearer service-account-v2' ? true : undefined;
      });
      spy.release();
      expect((await held).content).toEqual([{ type: 'text', text: 'released' }]);
      // The old token until Envoy read the new file, then only the new one.
      const seen = spy.requests.slice(rotatedAt).map((request) => request.headers.authorization);
      expect(seen.slice(seen.indexOf('Bearer service-account-v2'))).toEqual(seen.slice(seen.indexOf('Bearer service-account-v2')).map(() => 'Bearer service-account-v2'));
      // A rotation is Envoy's own: not one xDS resource changed for it.
      expect(await envoyConfigVersions(stack)).toEqual(versionsBefore);
    } finally {
      await client.close();
    }
  });
});
