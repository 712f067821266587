import * as fs from 'node:fs';
import * as path from 'node:path';
import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { listedTools, metricValue, startGateway, testDir } from '../support/gateway-fixture';
import { decodeJwt, verifyJwtSignature } from '../support/jwt';
import { KEYCLOAK_STARTUP_MS, Keycloak, REALM_FILE, keycloak } from '../support/keycloak';
import { SURFACE_KINDS, everyRequestKind, everySurfaceKind, expectEveryKind, expectEverySurfaceKind } from '../support/request-kinds';
import { SpiedRequest, SpyToolService } from '../support/spy-tool-service';

/**
 * Backend credentials taken from the caller's identity, against the run's real Keycloak 26.7.3
 * (docs/testing.md): RFC 8693 token exchange by the gateway's own client `mcp-gateway`, its cache, an
 * IdP outage, a refused exchange, and audience-checked passthrough. The spy backends verify every
 * token they get against Keycloak's JWKS.
 */

const IDP_NAME = 'keycloak';

function gatewayClientSecret(): string {
  const realm = JSON.parse(fs.readFileSync(REALM_FILE, 'utf8')) as { clients: { clientId: string; secret?: string }[] };
  const secret = realm.clients.find((client) => client.clientId === 'mcp-gateway')?.secret;
  if (!secret) throw new Error(`${REALM_FILE} has no secret for mcp-gateway`);
  return secret;
}

/** A client of one route, authenticated with `token`. */
async function connectAs(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'exchange-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  return client;
}

/** The JSON-RPC error a request is answered with, as the client sees it. */
async function rpcError(request: () => Promise<unknown>): Promise<{ code: number; message: string; data?: Record<string, unknown> }> {
  const error = await request().then(
    () => undefined,
    (thrown: { code: number; message: string; data?: Record<string, unknown> }) => thrown,
  );
  if (!error) throw new Error('the request was not refused');
  return error;
}

/** The error a call is refused with, as the client sees it. */
const callError = (client: Client, name: string) => rpcError(() => client.callTool({ name, arguments: { text: 'x' } }));

/**
 * Runs `work` while tokens Keycloak issues to mcp-gateway (its exchanged tokens among them) live
 * `seconds`, through the admin API; the run's shared realm gets its setting back afterwards.
 */
async function withGatewayTokenLifespan(idp: Keycloak, seconds: number, work: () => Promise<void>): Promise<void> {
  const base = idp.issuer.replace(/\/realms\/[^/]+$/, '');
  const realm = idp.issuer.slice(idp.issuer.lastIndexOf('/') + 1);
  const login = await fetch(`${base}/realms/master/protocol/openid-connect/token`, {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'password', client_id: 'admin-cli', username: idp.admin.username, password: idp.admin.password }),
  });
  const { access_token: adminToken } = (await login.json()) as { access_token: string };
  const admin = { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' };
  const [client] = (await (await fetch(`${base}/admin/realms/${realm}/clients?clientId=mcp-gateway`, { headers: admin })).json()) as { id: string; attributes?: Record<string, string> }[];
  const update = async (attributes: Record<string, string>) => {
    const response = await fetch(`${base}/admin/realms/${realm}/clients/${client.id}`, { method: 'PUT', headers: admin, body: JSON.stringify({ ...client, attributes }) });
    if (!response.ok) throw new Error(`Keycloak admin: updating mcp-gateway answered ${response.status}`);
  };
  await update({ ...client.attributes, 'access.token.lifespan': String(seconds) });
  try {
    await work();
  } finally {
    await update(client.attributes ?? {});
  }
}

const bearerOf = (request: SpiedRequest) => /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];
const audiencesOf = (claims: Record<string, unknown>) => (Array.isArray(claims.aud) ? claims.aud : [claims.aud]);

describe('backend credentials from the caller: token exchange and passthrough (real Keycloak, Envoy, sidecar)', () => {
  let idp: Keycloak;
  let stack: GatewayStack;
  const spies: Record<'exchange' | 'surface' | 'refused' | 'passthrough' | 'wrongAudience', SpyToolService> = {} as never;
  let aliceToken: string;
  let aliceSub: string;
  let logDir: string;

  const misses = () => metricValue(stack, 'mcpgw_sidecar_token_cache_lookups_total', { result: 'miss' }, stack.sidecarAdminUrl);

  beforeAll(async () => {
    idp = await keycloak();
    for (const name of ['exchange', 'wrongAudience'] as const) spies[name] = await SpyToolService.start();
    // Also serving prompts, a resource that takes subscriptions, completion and logging.
    for (const name of ['surface', 'refused', 'passthrough'] as const) spies[name] = await SpyToolService.start({ surface: true });
    const secretFile = path.join(testDir('auth-backend-credentials-secrets'), 'mcp-gateway.secret');
    fs.writeFileSync(secretFile, `${gatewayClientSecret()}\n`);
    const idpArgs = ['--idp-token-endpoint', idp.tokenEndpoint, '--idp-client-id', 'mcp-gateway', '--idp-client-secret-file', secretFile, '--idp-name', IDP_NAME];
    ({ stack, dir: logDir } = await startGateway(
      'auth-backend-credentials',
      () => ({
        // Envoy's jwt_authn validates every caller token first (issuer, signature, the gateway's audience):
        // what is exchanged or passed on is a token the gateway accepted.
        auth: { issuer: idp.issuer, audiences: [idp.routeAudience] },
        routes: [
          { key: 'exchange', toolServices: [{ name: 'weather', url: spies.exchange.url, credentials: { mode: 'tokenExchange', audience: 'tool-weather' } }] },
          { key: 'surface', toolServices: [{ name: 'forecast', url: spies.surface.url, credentials: { mode: 'tokenExchange', audience: 'tool-weather' } }] },
          { key: 'refused', toolServices: [{ name: 'nowhere', url: spies.refused.url, credentials: { mode: 'tokenExchange', audience: 'tool-nobody-knows' } }] },
          { key: 'passthrough', toolServices: [{ name: 'own', url: spies.passthrough.url, credentials: { mode: 'passthrough', audience: idp.routeAudience } }] },
          { key: 'elsewhere', toolServices: [{ name: 'other', url: spies.wrongAudience.url, credentials: { mode: 'passthrough', audience: 'https://elsewhere.example/mcp' } }] },
        ],
      }),
      { controlPlaneArgs: [...idpArgs, '--allow-token-passthrough'], extraArgs: { sidecar: idpArgs } },
    ));
    aliceToken = await idp.tokenFor('alice', { scopes: ['tools:call'] });
    aliceSub = String(decodeJwt(aliceToken).sub);
    for (const [route, tool] of [['exchange', 'weather__echo'], ['surface', 'forecast__echo'], ['refused', 'nowhere__echo'], ['passthrough', 'own__echo'], ['elsewhere', 'other__echo']]) {
      await waitFor(`${route} in the catalog`, async () => (((await listedTools(stack.gatewayUrl(route), aliceToken)) ?? []).includes(tool) ? true : undefined));
    }
  }, KEYCLOAK_STARTUP_MS);

  afterAll(async () => {
    await stack?.stop();
    for (const spy of Object.values(spies)) await spy?.stop();
  });

  it("gives the backend a token for its own audience with the caller as subject — never the caller's token — on every request kind; the catalog lists with the gateway's own", async () => {
    await everyRequestKind(stack.gatewayUrl('exchange'), spies.exchange, 'weather', aliceToken);
    const onBehalf: SpiedRequest[] = [];
    for (const request of spies.exchange.requests) {
      const token = bearerOf(request);
      expect(token).toBeDefined();
      expect(token).not.toBe(aliceToken);
      const claims = await verifyJwtSignature(token!, idp.jwksUri);
      expect(claims.iss).toBe(idp.issuer);
      expect(audiencesOf(claims)).toContain('tool-weather');
      expect(claims.azp).toBe('mcp-gateway');
      if (claims.sub === aliceSub) {
        // RFC 8693: exchanged for the backend alone, the user kept as subject.
        expect(claims.aud).toBe('tool-weather');
        onBehalf.push(request);
      } else {
        // The catalog's listing: the gateway's own token, never used for a call.
        expect(claims.preferred_username).toBe('service-account-mcp-gateway');
        expect(request.rpcMethod).not.toBe('tools/call');
      }
    }
    expectEveryKind(onBehalf);
    expect(spies.exchange.of({ rpcMethod: 'tools/list' }).length).toBeGreaterThan(0);
    expect(spies.exchange.of({ rpcMethod: 'tools/list' }).every((request) => decodeJwt(bearerOf(request)!).sub !== aliceSub)).toBe(true);
  });

  /** Every request the spy got on the caller's behalf carries a token for `audience` whose subject is the caller, never the caller's own. */
  async function expectExchangedFor(requests: SpiedRequest[], audience: string, subject: string): Promise<void> {
    expect(requests.length).toBeGreaterThan(0);
    for (const request of requests) {
      const token = bearerOf(request);
      expect({ method: request.rpcMethod || request.httpMethod, token: token !== undefined }).toEqual({ method: request.rpcMethod || request.httpMethod, token: true });
      expect(token).not.toBe(aliceToken);
      const claims = await verifyJwtSignature(token!, idp.jwksUri);
      expect(claims).toMatchObject({ iss: idp.issuer, aud: audience, sub: subject, azp: 'mcp-gateway' });
    }
  }

  it("gives the backend its exchanged token — never the caller's — on prompts/get, completion/complete, resources/read, resources/subscribe and unsubscribe, logging/setLevel, from session and stateless clients", async () => {
    const before = spies.surface.requests.length;
    await everySurfaceKind(stack.gatewayUrl('surface'), spies.surface, 'forecast', aliceToken);
    const seen = spies.surface.requests.slice(before);
    // A catalog listing may come meanwhile, with the gateway's own token: never one of the caller's requests.
    const catalog = seen.filter((request) => decodeJwt(bearerOf(request) ?? 'x.e30.x').preferred_username === 'service-account-mcp-gateway');
    expect(catalog.filter((request) => SURFACE_KINDS.includes(request.rpcMethod))).toEqual([]);
    const onBehalf = seen.filter((request) => !catalog.includes(request));
    expectEverySurfaceKind(onBehalf);
    // The session opens, pooled or not, and the DELETE included: nothing of the caller's goes unexchanged.
    await expectExchangedFor(onBehalf, 'tool-weather', aliceSub);
  });

  it("never lets a stateless caller's request go in another caller's pooled backend session: each session is opened with, and used with, one caller's exchanged token", async () => {
    const bobToken = await idp.tokenFor('bob', { scopes: ['tools:read'] });
    const bobSub = String(decodeJwt(bobToken).sub);
    const before = spies.surface.requests.length;
    for (const token of [aliceToken, bobToken, aliceToken]) {
      const client = new V2Client({ name: 'pool-test', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
      await client.connect(new V2Transport(new URL(stack.gatewayUrl('surface')), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
      try {
        await client.getPrompt({ name: 'forecast__greet', arguments: { name: 'pooled' } });
        await client.callTool({ name: 'forecast__echo', arguments: { text: 'pooled' } });
      } finally {
        await client.close();
      }
    }
    const subjectOf = (request: SpiedRequest) => decodeJwt(bearerOf(request)!).sub;
    const openedBy = new Map(spies.surface.of({ rpcMethod: 'initialize' }).map((request) => [request.session, subjectOf(request)]));
    const inSessions = spies.surface.requests.slice(before).filter((request) => request.rpcMethod === 'prompts/get' || request.rpcMethod === 'tools/call');
    expect(new Set(inSessions.map(subjectOf))).toEqual(new Set([aliceSub, bobSub]));
    for (const request of inSessions) {
      expect(request.session).toBeDefined();
      expect({ method: request.rpcMethod, caller: subjectOf(request), sessionOpenedBy: openedBy.get(request.session) }).toEqual({ method: request.rpcMethod, caller: subjectOf(request), sessionOpenedBy: subjectOf(request) });
    }
    // Alice's second client found her pooled session; bob's is another.
    expect(new Set(inSessions.filter((request) => subjectOf(request) === aliceSub).map((request) => request.session)).size).toBe(1);
    expect(new Set(inSessions.map((request) => request.session)).size).toBe(2);
  });

  it('exchanges once per caller token while the exchanged token lives: the next calls take it from the cache', async () => {
    const bobToken = await idp.tokenFor('bob', { scopes: ['tools:read'] });
    const bob = await connectAs(stack.gatewayUrl('exchange'), bobToken);
    try {
      const before = await misses();
      await bob.callTool({ name: 'weather__echo', arguments: { text: 'first' } });
      expect(await misses()).toBe(before + 1);
      await bob.callTool({ name: 'weather__echo', arguments: { text: 'second' } });
      await bob.callTool({ name: 'weather__echo', arguments: { text: 'third' } });
      expect(await misses()).toBe(before + 1);
      const calls = spies.exchange.of({ rpcMethod: 'tools/call' }).slice(-3).map(bearerOf);
      expect(new Set(calls).size).toBe(1);
    } finally {
      await bob.close();
    }
  });

  it('denies a call whose exchange the IdP refuses (-32003, outcome denied, naming the backend); nothing reaches the backend', async () => {
    const client = await connectAs(stack.gatewayUrl('refused'), aliceToken);
    try {
      const error = await callError(client, 'nowhere__echo');
      expect(error.code).toBe(-32003);
      expect(error.message).toMatch(/backend nowhere/);
      expect(error.message).not.toContain(aliceToken);
      expect(error.data).toMatchObject({ outcome: 'denied', backend: 'nowhere', tool: 'echo', attempts: 0, reason: 'credentials' });
      expect(spies.refused.requests.filter((request) => request.rpcMethod !== 'tools/list' && decodeJwt(bearerOf(request) ?? 'x.e30.x').sub === aliceSub)).toEqual([]);
      expect(spies.refused.of({ rpcMethod: 'tools/call' })).toEqual([]);
      const prompt = await rpcError(() => client.getPrompt({ name: 'nowhere__greet', arguments: { name: 'x' } }));
      expect(prompt.code).toBe(-32003);
      expect(prompt.message).toMatch(/prompts\/get greet denied: .*backend nowhere/);
      expect(prompt.message).not.toContain(aliceToken);
      expect(prompt.data).toMatchObject({ outcome: 'denied', backend: 'nowhere', attempts: 0, reason: 'credentials' });
      expect(spies.refused.of({ rpcMethod: 'prompts/get' })).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it("refuses a caller token the gateway does not validate at the edge (jwt_authn, 401): no exchange is tried, nothing reaches the backend", async () => {
    const [header, payload, signature] = aliceToken.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
    const forged = [header, Buffer.from(JSON.stringify({ ...claims, sub: 'mallory' })).toString('base64url'), signature].join('.');
    const before = { misses: await misses(), requests: spies.exchange.requests.length };
    const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'weather__echo', arguments: { text: 'x' } } };
    for (const authorization of [undefined, `Bearer ${forged}`]) {
      const answer = await fetch(stack.gatewayUrl('exchange'), {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(authorization && { authorization }) },
        body: JSON.stringify(call),
      });
      expect(answer.status).toBe(401);
      expect(answer.headers.get('www-authenticate')).toMatch(/^Bearer /);
    }
    expect(await misses()).toBe(before.misses);
    expect(spies.exchange.requests.length).toBe(before.requests);
  });

  it("passes the caller's own token only to a backend its audience names, and denies the call elsewhere", async () => {
    await everyRequestKind(stack.gatewayUrl('passthrough'), spies.passthrough, 'own', aliceToken);
    await everySurfaceKind(stack.gatewayUrl('passthrough'), spies.passthrough, 'own', aliceToken);
    const onBehalf = spies.passthrough.requests.filter((request) => bearerOf(request) === aliceToken);
    expectEveryKind(onBehalf);
    expectEverySurfaceKind(onBehalf);
    expect(spies.passthrough.requests.filter((request) => [...SURFACE_KINDS, 'tools/call'].includes(request.rpcMethod) && bearerOf(request) !== aliceToken)).toEqual([]);
    const client = await connectAs(stack.gatewayUrl('elsewhere'), aliceToken);
    try {
      const error = await callError(client, 'other__echo');
      expect(error.code).toBe(-32003);
      expect(error.message).toContain('backend other takes the caller\'s own token only when its audience includes "https://elsewhere.example/mcp"');
      expect(spies.wrongAudience.requests.filter((request) => bearerOf(request) === aliceToken)).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it('lets a call stream on past the expiry of the token it went with (never cut); the next call re-authenticates with a new exchange', async () => {
    await withGatewayTokenLifespan(idp, 8, async () => {
      const callerToken = await idp.tokenFor('alice', { scopes: ['tools:call'] });
      const client = await connectAs(stack.gatewayUrl('exchange'), callerToken);
      try {
        const progress: string[] = [];
        const held = client.callTool({ name: 'weather__hold', arguments: {} }, undefined, { onprogress: ({ message }) => void progress.push(message ?? '') });
        await waitFor('the held call streaming', async () => (progress.length === 1 ? true : undefined));
        const streamed = bearerOf(spies.exchange.of({ tool: 'hold' }).at(-1)!)!;
        const expiresAt = Number(decodeJwt(streamed).exp) * 1000;
        expect(expiresAt - Date.now()).toBeLessThan(10_000);
        await new Promise((resolve) => setTimeout(resolve, expiresAt - Date.now() + 1000));
        spies.exchange.release();
        expect((await held).content).toEqual([{ type: 'text', text: 'released' }]);
        const before = await misses();
        await client.callTool({ name: 'weather__echo', arguments: { text: 'next' } });
        expect(await misses()).toBe(before + 1);
        const next = bearerOf(spies.exchange.of({ tool: 'echo' }).at(-1)!)!;
        expect(next).not.toBe(streamed);
        expect(Number((await verifyJwtSignature(next, idp.jwksUri)).exp) * 1000).toBeGreaterThan(Date.now());
      } finally {
        await client.close();
      }
    });
  }, 60_000);

  // Last: it stops Keycloak for a while.
  it('keeps cached tokens working while the IdP is down, and answers new callers -32004 naming the IdP', async () => {
    const alice = await connectAs(stack.gatewayUrl('exchange'), aliceToken);
    const carolToken = await idp.tokenFor('carol', { scopes: ['tools:read'] });
    const carol = await connectAs(stack.gatewayUrl('exchange'), carolToken);
    const carolSurface = await connectAs(stack.gatewayUrl('surface'), carolToken);
    const aliceSurface = await connectAs(stack.gatewayUrl('surface'), aliceToken);
    try {
      await alice.callTool({ name: 'weather__echo', arguments: { text: 'cached before' } });
      await aliceSurface.readResource({ uri: 'forecast+note://spy' });
      await idp.stop();
      expect((await alice.callTool({ name: 'weather__echo', arguments: { text: 'cached during' } })).content).toEqual([{ type: 'text', text: 'cached during' }]);
      const error = await callError(carol, 'weather__echo');
      expect(error.code).toBe(-32004);
      expect(error.message).toMatch(/identity provider keycloak is unavailable: .*backend weather was not called/);
      expect(error.data).toMatchObject({ outcome: 'failed', backend: 'weather', attempts: 0 });
      expect((await aliceSurface.readResource({ uri: 'forecast+note://spy' })).contents[0]).toMatchObject({ text: 'a note' });
      const prompt = await rpcError(() => carolSurface.getPrompt({ name: 'forecast__greet', arguments: { name: 'x' } }));
      expect(prompt.code).toBe(-32004);
      expect(prompt.message).toMatch(/prompts\/get greet failed: identity provider keycloak is unavailable: .*backend forecast was not called/);
      expect(prompt.data).toMatchObject({ outcome: 'failed', backend: 'forecast', attempts: 0 });
    } finally {
      await idp.start();
      await alice.close();
      await carol.close();
      await carolSurface.close();
      await aliceSurface.close();
    }
    // Back: the new caller's exchange succeeds.
    const again = await connectAs(stack.gatewayUrl('exchange'), carolToken);
    try {
      expect((await again.callTool({ name: 'weather__echo', arguments: { text: 'back' } })).content).toEqual([{ type: 'text', text: 'back' }]);
    } finally {
      await again.close();
    }
  }, KEYCLOAK_STARTUP_MS);

  // After every other case: their tokens, and the IdP's refusals and outage, are in the logs if anything writes them.
  it("writes no token into any log or the audit: neither a caller's nor an exchanged one", async () => {
    const tokens = new Set([aliceToken, ...Object.values(spies).flatMap((spy) => spy.requests.map(bearerOf).filter((token): token is string => token !== undefined))]);
    expect(tokens.size).toBeGreaterThan(2);
    // A token's signature is its one part no other token shares.
    const signatures = [...tokens].map((token) => token.split('.')[2]);
    const files = fs.readdirSync(logDir).filter((name) => name.endsWith('.log') || name.endsWith('.jsonl'));
    expect(files).toEqual(expect.arrayContaining(['envoy.log', 'envoy-access.log', 'control-plane.log', 'sidecar.log']));
    for (const file of files) {
      const text = fs.readFileSync(path.join(logDir, file), 'utf8');
      expect({ file, leaked: signatures.filter((signature) => text.includes(signature)).length }).toEqual({ file, leaked: 0 });
    }
  });
});
