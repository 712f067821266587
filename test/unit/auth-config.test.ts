import * as http from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { SavedSigningKeys, SigningKeyStore, readSigningKeys, signatureKeys } from '../../control-plane/auth/signing-keys';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { validateRegistry } from '../../control-plane/registry/validate';
import { closeServer } from '../../control-plane/shared/http-listen';
import { defaultAccess, originMatcher } from '../../control-plane/xds/translate/access';
import { jwtAuthnConfig, jwtAuthnKeepingRemoved } from '../../control-plane/xds/translate/auth';
import * as fs from 'node:fs';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
import { projectPath } from '../../control-plane/shared/paths';
import { quietLogger } from '../support/quiet-logger';

/** The registry's auth settings, their defaults, the access settings and the signing keys (docs/auth.md). */

const service = (name: string, extra: Record<string, unknown> = {}) => ({ name, url: 'http://127.0.0.1:9000/mcp', ...extra });
const ISSUER = 'https://idp.example/realms/r';

describe('auth in the registry', () => {
  it("gives every route without its own auth the document's, keeps a route's own, and leaves `auth: false` open", () => {
    const { registry, problems } = validateRegistry({
      auth: { issuer: ISSUER },
      routes: [
        { key: 'inherits', toolServices: [service('a')] },
        { key: 'own', auth: { issuer: 'https://other.example' }, toolServices: [service('a')] },
        { key: 'open', auth: false, toolServices: [service('a')] },
      ],
    });
    expect(problems).toEqual([]);
    expect(registry.routes.map((route) => [route.key, route.auth && route.auth.issuer])).toEqual([
      ['inherits', ISSUER],
      ['own', 'https://other.example'],
      ['open', false],
    ]);
  });

  it("refuses, at `auth`, an invalid document default, and every route that would inherit it; a route with its own auth stays", () => {
    const { registry, problems } = validateRegistry({
      auth: { issuer: 'not a url' },
      routes: [
        { key: 'inherits', toolServices: [service('a')] },
        { key: 'own', auth: { issuer: ISSUER }, toolServices: [service('a')] },
      ],
    });
    expect(registry.routes.map((route) => route.key)).toEqual(['own']);
    expect(problems.map((problem) => [problem.route, problem.field])).toEqual([
      [undefined, 'auth.issuer'],
      ['inherits', 'routes[0].auth'],
    ]);
  });

  it.each([
    ['rules on a route without auth', { key: 'r', toolServices: [service('a', { policy: { rules: [{ tools: ['*'], requiredScopes: ['x'] }] } })] }, 'routes[0].toolServices[0].policy.rules', /give the route an auth/],
    ['a rule without a condition', { key: 'r', auth: { issuer: ISSUER }, toolServices: [service('a', { policy: { rules: [{ tools: ['*'] }] } })] }, 'routes[0].toolServices[0].policy.rules[0]', /at least one of/],
    ['a scope with a space', { key: 'r', auth: { issuer: ISSUER, scopes: ['a b'] }, toolServices: [service('a')] }, 'routes[0].auth.scopes[0]', /OAuth scope/],
    ['no leeway (Envoy would read 0 as 60 s)', { key: 'r', auth: { issuer: ISSUER, clockSkewSeconds: 0 }, toolServices: [service('a')] }, 'routes[0].auth.clockSkewSeconds', /1/],
    ['a public URL with a path', { key: 'r', auth: { issuer: ISSUER, publicUrl: 'https://gw.example/base' }, toolServices: [service('a')] }, 'routes[0].auth.publicUrl', /without a path/],
  ])('rejects %s, naming the field', (_case, route, field, message) => {
    const { problems } = validateRegistry({ routes: [route] });
    expect(problems.map((problem) => problem.field)).toEqual([field]);
    expect(problems[0].message).toMatch(message);
  });

  it('resolves the resource URL, the metadata document, audiences, scopes and the groups claim', () => {
    const { registry } = validateRegistry({
      routes: [
        {
          key: 'demo',
          auth: { issuer: ISSUER, scopes: ['tools:read'] },
          toolServices: [service('a', { policy: { rules: [{ tools: ['run_*'], requiredScopes: ['tools:call'] }] } })],
        },
        { key: 'partner', auth: { issuer: ISSUER, audiences: ['gw'], groupsClaim: ['realm_access', 'roles'], publicUrl: 'https://gw.example/' }, toolServices: [service('a')] },
      ],
    });
    const [demo, partner] = buildGatewayIR(registry, { publicUrl: 'http://127.0.0.1:10000' }).routes.map((route) => route.auth!);
    expect(demo).toMatchObject({
      resource: 'http://127.0.0.1:10000/mcp/demo',
      metadataUrl: 'http://127.0.0.1:10000/.well-known/oauth-protected-resource/mcp/demo',
      metadataPath: '/.well-known/oauth-protected-resource/mcp/demo',
      audiences: ['http://127.0.0.1:10000/mcp/demo'],
      clockSkewSeconds: 60,
      challengeScopes: ['tools:read'],
      scopesSupported: ['tools:read', 'tools:call'],
      authorizationServers: [ISSUER],
      groupsClaim: ['groups'],
    });
    expect(partner).toMatchObject({ resource: 'https://gw.example/mcp/partner', audiences: ['gw'], groupsClaim: ['realm_access', 'roles'], challengeScopes: [] });
    // One issuer, one key source: its keys are read once and shared.
    expect(partner.keys).toEqual(demo.keys);
  });
});

describe('examples/auth-keycloak.yaml', () => {
  it("takes the test realm's tokens on mcpgw up's default port: its route's resource URL is the realm's audience", () => {
    const ir = buildGatewayIR(loadRegistryFile(projectPath('examples', 'auth-keycloak.yaml')));
    const realm = JSON.parse(fs.readFileSync(projectPath('test', 'fixtures', 'keycloak', 'mcpgw-realm.json'), 'utf8')) as {
      clientScopes: { name: string; protocolMappers?: { config: Record<string, string> }[] }[];
    };
    const audiences = realm.clientScopes.find((scope) => scope.name === 'route-demo')!.protocolMappers!.map((mapper) => mapper.config['included.custom.audience']);
    const demo = ir.routes.find((route) => route.key === 'demo')!.auth!;
    expect(demo.issuer).toBe('http://127.0.0.1:8080/realms/mcpgw');
    expect(audiences).toContain(demo.audiences[0]);
    expect(ir.routes.find((route) => route.key === 'weather-only')!.auth).toBeUndefined();
  });
});

describe('access defaults', () => {
  it('serves loopback names and origins on a loopback listener', () => {
    const access = defaultAccess({ address: '127.0.0.1', port: 10000 });
    expect(access.publicUrl).toBe('http://127.0.0.1:10000');
    expect(access.allowedHosts).toEqual(expect.arrayContaining(['localhost:10000', '127.0.0.1:10000', '[::1]:10000', 'localhost']));
    expect(access.allowedOrigins).toEqual(expect.arrayContaining(['http://localhost:*', 'http://127.0.0.1:*', 'https://[::1]']));
  });

  it('serves any host, and only its public origin, on another address', () => {
    expect(defaultAccess({ address: '0.0.0.0', port: 8443 }, 'https://gw.example.com')).toEqual({
      publicUrl: 'https://gw.example.com',
      allowedHosts: '*',
      allowedOrigins: ['https://gw.example.com'],
    });
  });

  it.each([
    ['http://localhost:6274', { exact: 'http://localhost:6274' }],
    ['http://localhost:*', { prefix: 'http://localhost:' }],
    ['https://*.example.com', { safe_regex: { regex: '^https://[A-Za-z0-9.-]*\\.example\\.com$' } }],
  ])('matches the origin %s as Envoy string matcher', (origin, matcher) => {
    expect(originMatcher(origin)).toEqual(matcher);
  });
});

describe("jwt_authn's configuration", () => {
  const registry = validateRegistry({
    routes: [
      { key: 'a', auth: { issuer: ISSUER }, toolServices: [service('x')] },
      { key: 'b', auth: { issuer: ISSUER }, toolServices: [service('x')] },
    ],
  }).registry;
  const ir = buildGatewayIR(registry);
  const keys = new Map([[ir.routes[0].auth!.keys.name, '{"keys":[]}']]);

  it('shares one provider per issuer; each route requires it with its own audiences', () => {
    const config = jwtAuthnConfig(ir, keys) as unknown as { typed_config: { providers: Record<string, unknown>; requirement_map: Record<string, unknown> } };
    expect(Object.keys(config.typed_config.providers)).toHaveLength(1);
    expect(config.typed_config.requirement_map).toEqual({
      a: { provider_and_audiences: { provider_name: expect.any(String), audiences: ['http://127.0.0.1:10000/mcp/a'] } },
      b: { provider_and_audiences: { provider_name: expect.any(String), audiences: ['http://127.0.0.1:10000/mcp/b'] } },
    });
  });

  it("copies into headers only the claims a reader of the route needs: groups for a group rule, scopes for a scope rule, the name where approval can be asked", () => {
    const policy = (policy: Record<string, unknown>) => [service('x', { policy })];
    const routes = validateRegistry({
      auth: { issuer: ISSUER },
      routes: [
        { key: 'plain', toolServices: [service('x')] },
        { key: 'grouped', toolServices: policy({ rules: [{ tools: ['admin_*'], allowGroups: ['admins'] }] }) },
        { key: 'scoped', toolServices: policy({ rules: [{ tools: ['*'], requiredScopes: ['tools:call'] }] }) },
        { key: 'approving', toolServices: policy({ approvalAtRisk: 'high' }) },
        { key: 'approvingrule', toolServices: policy({ rules: [{ tools: ['pay'], approval: 'required' }] }) },
      ],
    });
    expect(routes.problems).toEqual([]);
    const routeIR = buildGatewayIR(routes.registry);
    const config = jwtAuthnConfig(routeIR, new Map([[routeIR.routes[0].auth!.keys.name, '{"keys":[]}']])) as unknown as {
      typed_config: { providers: Record<string, { claim_to_headers: { header_name: string; claim_name: string }[] }>; requirement_map: Record<string, { provider_and_audiences: { provider_name: string } }> };
    };
    const claimsOf = (route: string) => {
      const provider = config.typed_config.providers[config.typed_config.requirement_map[route].provider_and_audiences.provider_name];
      return provider.claim_to_headers.map((copy) => copy.claim_name).sort();
    };
    const always = ['azp', 'client_id', 'iss', 'sub'];
    expect(claimsOf('plain')).toEqual(always);
    expect(claimsOf('grouped')).toEqual([...always, 'groups'].sort());
    expect(claimsOf('scoped')).toEqual([...always, 'scope', 'scp'].sort());
    expect(claimsOf('approving')).toEqual([...always, 'preferred_username'].sort());
    expect(claimsOf('approvingrule')).toEqual([...always, 'preferred_username'].sort());
  });

  it('keeps a removed route\'s requirement until the routes without it are published, and nothing when nothing is removed', () => {
    const before = jwtAuthnConfig(ir, keys);
    const after = jwtAuthnConfig(buildGatewayIR({ routes: [registry.routes[0]] }), keys);
    const kept = jwtAuthnKeepingRemoved(before, after) as unknown as { typed_config: { requirement_map: Record<string, unknown> } };
    expect(Object.keys(kept.typed_config.requirement_map)).toEqual(['a', 'b']);
    expect(jwtAuthnKeepingRemoved(after, before)).toBeUndefined();
    expect(jwtAuthnKeepingRemoved(undefined, before)).toBeUndefined();
  });
});

describe('signing keys', () => {
  const jwkOf = (type: 'rsa' | 'ec' | 'ed25519' | 'x25519', extra: Record<string, unknown>) => {
    const { publicKey } = type === 'rsa' ? generateKeyPairSync('rsa', { modulusLength: 2048 }) : type === 'ec' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync(type as 'ed25519');
    return { ...publicKey.export({ format: 'jwk' }), ...extra };
  };
  const rsa = jwkOf('rsa', { kid: 'sig', use: 'sig', alg: 'RS256' });

  it('keeps only keys that verify signatures, and that Envoy can read', () => {
    expect(
      signatureKeys({
        keys: [
          rsa,
          { ...rsa, kid: 'enc', use: 'enc', alg: 'RSA-OAEP' },
          { kty: 'oct', kid: 'hmac', alg: 'HS256', k: 'c2VjcmV0' },
          jwkOf('ec', { kid: 'ec' }),
          jwkOf('ed25519', { kid: 'ed' }),
          jwkOf('x25519', { kid: 'x25519 (no signatures)' }),
          { ...rsa, kid: 'broken', e: undefined },
          'junk',
        ],
      }).map((key) => key.kid),
    ).toEqual(['sig', 'ec', 'ed']);
    expect(() => signatureKeys({ nokeys: true })).toThrow();
  });

  it("reads an issuer's keys through its discovery document, and refuses a document of another issuer", async () => {
    let issuer = '';
    let claimed = '';
    const server = http.createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/realms/r/.well-known/openid-configuration') res.end(JSON.stringify({ issuer: claimed, jwks_uri: `${issuer.replace('/realms/r', '')}/certs` }));
      else if (req.url === '/certs') res.end(JSON.stringify({ keys: [rsa, { ...rsa, kid: 'enc', use: 'enc' }] }));
      else res.writeHead(404).end('{}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}/realms/r`;
      claimed = issuer;
      const source = { name: 'jwks_test', issuer };
      expect(JSON.parse(await readSigningKeys(source, 2000)).keys.map((key: { kid: string }) => key.kid)).toEqual(['sig']);
      claimed = 'https://someone-else.example';
      await expect(readSigningKeys(source, 2000)).rejects.toThrow(/document of issuer https:\/\/someone-else.example/);
    } finally {
      await closeServer(server);
    }
  });

  it('keeps the last keys read while reads fail, starts from the saved ones, and reads again on its own', async () => {
    const saved = new Map<string, SavedSigningKeys>([['jwks_a', { issuer: ISSUER, jwks: '{"keys":[{"kid":"saved"}]}', readAt: '2026-11-30T00:00:00.000Z' }]]);
    const written: string[] = [];
    let answer: () => Promise<string> = async () => Promise.reject(new Error('connect ECONNREFUSED'));
    const store = new SigningKeyStore(
      { refreshMs: 20, retryMinMs: 10, retryMaxMs: 20, timeoutMs: 100 },
      quietLogger,
      { save: (source, value) => written.push(`${source} ${value.jwks}`), load: async () => saved },
      () => answer(),
    );
    try {
      await store.restore();
      await store.setSources([{ name: 'jwks_a', issuer: ISSUER }, { name: 'jwks_b', issuer: 'https://never.example' }]);
      expect(store.keys()).toEqual(new Map([['jwks_a', '{"keys":[{"kid":"saved"}]}']]));
      expect(store.status().map(({ source, state, keyIds }) => [source, state, keyIds])).toEqual([
        ['jwks_a', 'stale', ['saved']],
        ['jwks_b', 'missing', []],
      ]);
      answer = async () => '{"keys":[{"kid":"new"}]}';
      const changed = new Promise((resolve) => store.once('change', resolve));
      await changed;
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(store.status().every((source) => source.state === 'ok')).toBe(true);
      expect(store.keys().get('jwks_a')).toBe('{"keys":[{"kid":"new"}]}');
      expect(written).toContain('jwks_a {"keys":[{"kid":"new"}]}');
      answer = async () => Promise.reject(new Error('timed out'));
      await new Promise((resolve) => setTimeout(resolve, 60));
      expect(store.status()[0]).toMatchObject({ state: 'stale', keyIds: ['new'], lastError: 'timed out' });
      await store.setSources([{ name: 'jwks_b', issuer: 'https://never.example' }]);
      expect([...store.keys().keys()]).toEqual(['jwks_b']);
    } finally {
      store.close();
    }
  });
});
