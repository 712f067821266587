import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import express from 'express';
import { BackendCredentialsMessage } from '../../control-plane/catalog/catalog-store';
import { BackendCredentialsProvider, CredentialsDeniedError, bearerToken } from '../../control-plane/credentials/backend-credentials';
import { CatalogCredentials } from '../../control-plane/credentials/catalog-credentials';
import { IdpClient, IdpRefusedError, IdpUnavailableError, IssuedToken } from '../../control-plane/credentials/idp-client';
import { TokenCache, TokenCacheObserver } from '../../control-plane/credentials/token-cache';
import { freePort } from '../../control-plane/devstack/processes';
import { closeServer, listen } from '../../control-plane/shared/http-listen';

/** A JWT-shaped token with these claims (unsigned: nothing here verifies signatures). */
const jwt = (claims: Record<string, unknown>) => `e30.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.sig`;

/** Lookups and IdP requests as the metrics would count them. */
function countingObserver() {
  const counts = { hit: 0, miss: 0, ok: 0, refused: 0, unavailable: 0 };
  const observer: TokenCacheObserver = { lookup: (result) => void counts[result]++, issued: (outcome) => void counts[outcome]++ };
  return { counts, observer };
}

describe('the token cache', () => {
  let now = 1_000_000;
  const clock = () => now;
  const issued = (token: string, lifetimeMs: number): IssuedToken => ({ accessToken: token, expiresAtMs: now + lifetimeMs });

  it('asks the IdP once per key while the token lives, and again shortly before it expires', async () => {
    const { counts, observer } = countingObserver();
    const cache = new TokenCache({ maxEntries: 10, renewBeforeExpiryMs: 30_000 }, observer, clock);
    let issuedCount = 0;
    const issue = async () => issued(`t${++issuedCount}`, 300_000);
    expect(await cache.get('k', issue)).toBe('t1');
    now += 200_000;
    expect(await cache.get('k', issue)).toBe('t1');
    // 30 s before expiry: renewed.
    now += 71_000;
    expect(await cache.get('k', issue)).toBe('t2');
    expect(counts).toMatchObject({ hit: 1, miss: 2, ok: 2 });
  });

  it('renews a short-lived token a tenth of its lifetime early, and never keeps a token past the caller’s own expiry', async () => {
    const cache = new TokenCache({ maxEntries: 10, renewBeforeExpiryMs: 30_000 }, countingObserver().observer, clock);
    let issuedCount = 0;
    const issue = async () => issued(`t${++issuedCount}`, 10_000);
    await cache.get('short', issue);
    now += 8_900;
    expect(await cache.get('short', issue)).toBe('t1');
    now += 200;
    expect(await cache.get('short', issue)).toBe('t2');
    // The caller's token ends in 5 s: the exchanged one is not served beyond that.
    await cache.get('bounded', issue, now + 5_000);
    now += 4_600;
    expect(await cache.get('bounded', issue, now + 400)).toBe('t4');
  });

  it('makes one request for many waiting on the same key', async () => {
    const { counts, observer } = countingObserver();
    const cache = new TokenCache({ maxEntries: 10, renewBeforeExpiryMs: 30_000 }, observer, clock);
    let release!: (token: IssuedToken) => void;
    let requests = 0;
    const issue = () => {
      requests++;
      return new Promise<IssuedToken>((resolve) => (release = resolve));
    };
    const waiting = Promise.all([cache.get('k', issue), cache.get('k', issue), cache.get('k', issue)]);
    release(issued('shared', 60_000));
    expect(await waiting).toEqual(['shared', 'shared', 'shared']);
    expect(requests).toBe(1);
    expect(counts).toMatchObject({ miss: 1, hit: 2 });
  });

  it('keeps serving a still-valid token while the IdP is down, but not a refused one', async () => {
    const cache = new TokenCache({ maxEntries: 10, renewBeforeExpiryMs: 30_000 }, countingObserver().observer, clock);
    await cache.get('k', async () => issued('valid', 60_000));
    // In its renewal window (the last tenth of its 60 s): the IdP is asked, cannot answer, the token still serves.
    now += 55_000;
    let asked = 0;
    const down = async (): Promise<IssuedToken> => {
      asked++;
      throw new IdpUnavailableError('idp', 'connection refused');
    };
    expect(await cache.get('k', down)).toBe('valid');
    expect(asked).toBe(1);
    now += 6_000;
    await expect(cache.get('k', down)).rejects.toThrow('identity provider idp is unavailable: connection refused');
    await cache.get('r', async () => issued('r1', 60_000));
    now += 55_000;
    await expect(cache.get('r', async () => Promise.reject(new IdpRefusedError('idp', 'invalid_grant', undefined)))).rejects.toBeInstanceOf(IdpRefusedError);
    await expect(cache.get('r', down)).rejects.toBeInstanceOf(IdpUnavailableError);
  });

  it('is bounded: the least recently used token goes first', async () => {
    const cache = new TokenCache({ maxEntries: 2, renewBeforeExpiryMs: 30_000 }, countingObserver().observer, clock);
    let issuedCount = 0;
    const issue = async () => issued(`t${++issuedCount}`, 300_000);
    await cache.get('a', issue);
    await cache.get('b', issue);
    await cache.get('a', issue);
    await cache.get('c', issue);
    expect(cache.size).toBe(2);
    expect(await cache.get('a', issue)).toBe('t1');
    expect(await cache.get('b', issue)).toBe('t4');
  });
});

describe('the IdP client (RFC 8693 token exchange, client credentials)', () => {
  let server: Awaited<ReturnType<typeof listen>>;
  let secretFile: string;
  const received: { authorization?: string; form: Record<string, string> }[] = [];
  let answer: (form: Record<string, string>) => { status: number; body: unknown } = () => ({ status: 200, body: {} });

  const client = (endpoint = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/token`, timeoutMs = 1000) =>
    new IdpClient({ name: 'test-idp', tokenEndpoint: endpoint, clientId: 'mcp gateway', clientSecretFile: secretFile, timeoutMs });

  beforeAll(async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-idp-'));
    secretFile = path.join(dir, 'secret');
    fs.writeFileSync(secretFile, 's3cret:&\n');
    const app = express();
    app.post('/token', express.urlencoded({ extended: false }), (req, res) => {
      received.push({ authorization: req.headers.authorization, form: req.body as Record<string, string> });
      const { status, body } = answer(req.body as Record<string, string>);
      res.status(status).json(body);
    });
    server = await listen(app, '127.0.0.1', 0);
  });
  afterAll(async () => {
    await closeServer(server);
  });

  it('exchanges a subject token for an audience, authenticated as its own client, and reads the expiry', async () => {
    const exp = Math.floor(Date.now() / 1000) + 60;
    answer = () => ({ status: 200, body: { access_token: jwt({ exp }), expires_in: 300, token_type: 'Bearer' } });
    const token = await client().exchange('subject-token', { audience: 'tool-weather', scopes: ['a', 'b'] });
    expect(token.expiresAtMs).toBe(exp * 1000);
    const { authorization, form } = received.at(-1)!;
    expect(Buffer.from(authorization!.replace(/^Basic /, ''), 'base64').toString()).toBe('mcp+gateway:s3cret%3A%26');
    expect(form).toEqual({
      grant_type: 'urn:ietf:params:oauth:grant-type:token-exchange',
      subject_token: 'subject-token',
      subject_token_type: 'urn:ietf:params:oauth:token-type:access_token',
      requested_token_type: 'urn:ietf:params:oauth:token-type:access_token',
      audience: 'tool-weather',
      scope: 'a b',
    });
  });

  it('tells a refusal (4xx, the OAuth error) from an IdP that cannot answer (down, 5xx, a timeout)', async () => {
    answer = () => ({ status: 400, body: { error: 'invalid_request', error_description: 'Requested audience not available: tool-x' } });
    await expect(client().exchange('s', { audience: 'tool-x' })).rejects.toThrow(
      new IdpRefusedError('test-idp', 'invalid_request', 'Requested audience not available: tool-x'),
    );
    answer = () => ({ status: 503, body: 'maintenance' });
    await expect(client().clientCredentials()).rejects.toThrow('identity provider test-idp is unavailable: it answered HTTP 503');
    const closed = await freePort();
    await expect(client(`http://127.0.0.1:${closed}/token`).clientCredentials()).rejects.toThrow('identity provider test-idp is unavailable: connection refused');
    const silent = net.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      await expect(client(`http://127.0.0.1:${(silent.address() as net.AddressInfo).port}/token`, 200).clientCredentials()).rejects.toThrow(
        'identity provider test-idp is unavailable: no answer in time',
      );
    } finally {
      silent.close();
    }
  });
});

describe('backend credentials on a caller’s behalf', () => {
  const credentials = (mode: BackendCredentialsMessage['mode'], audience = ''): BackendCredentialsMessage => ({ mode, audience, resource: '', scopes: [] });
  const provider = (exchange?: (token: string) => Promise<IssuedToken>) =>
    new BackendCredentialsProvider(
      exchange && ({ exchange: (token: string) => exchange(token) } as unknown as IdpClient),
      new TokenCache({ maxEntries: 10, renewBeforeExpiryMs: 1000 }, countingObserver().observer),
    );

  it('reads only bearer tokens', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bearer  abc ')).toBe('abc');
    expect(bearerToken('Basic abc')).toBeUndefined();
    expect(bearerToken(undefined)).toBeUndefined();
  });

  it('adds nothing for none and serviceAccount (Envoy removes the caller’s, injects the service account’s)', async () => {
    for (const mode of ['none', 'serviceAccount'] as const) {
      expect(await provider().authorizationFor({ name: 'b', credentials: credentials(mode) }, 'Bearer caller')).toBeUndefined();
    }
  });

  it('passes the caller’s own token only to a backend its audience names', async () => {
    const token = jwt({ aud: ['https://gw/mcp/demo', 'tool-own'] });
    expect(await provider().authorizationFor({ name: 'own', credentials: credentials('passthrough', 'tool-own') }, `Bearer ${token}`)).toBe(`Bearer ${token}`);
    await expect(provider().authorizationFor({ name: 'other', credentials: credentials('passthrough', 'tool-other') }, `Bearer ${token}`)).rejects.toThrow(
      new CredentialsDeniedError('backend other takes the caller\'s own token only when its audience includes "tool-other"'),
    );
    await expect(provider().authorizationFor({ name: 'own', credentials: credentials('passthrough', 'tool-own') }, 'Bearer opaque')).rejects.toBeInstanceOf(CredentialsDeniedError);
  });

  it('exchanges once per caller token, and refuses a caller without one', async () => {
    const exchanged: string[] = [];
    const exchanging = provider(async (token) => {
      exchanged.push(token);
      return { accessToken: `for-${token}`, expiresAtMs: Date.now() + 60_000 };
    });
    const backend = { name: 'weather', credentials: credentials('tokenExchange', 'tool-weather') };
    expect(await exchanging.authorizationFor(backend, 'Bearer alice')).toBe('Bearer for-alice');
    expect(await exchanging.authorizationFor(backend, 'Bearer alice')).toBe('Bearer for-alice');
    expect(await exchanging.authorizationFor(backend, 'Bearer bob')).toBe('Bearer for-bob');
    expect(exchanged).toEqual(['alice', 'bob']);
    await expect(exchanging.authorizationFor(backend, undefined)).rejects.toThrow(
      "backend weather acts on the caller's identity (tokenExchange): the request carries no bearer token",
    );
    await expect(provider().authorizationFor(backend, 'Bearer alice')).rejects.toBeInstanceOf(IdpUnavailableError);
  });
});

describe('catalog credentials', () => {
  const catalog = new CatalogCredentials(undefined, new TokenCache({ maxEntries: 1, renewBeforeExpiryMs: 1000 }, countingObserver().observer));

  it("reads a service account's token file at every listing, and names the file it cannot read", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-catalog-token-'));
    const tokenFile = path.join(dir, 'token');
    fs.writeFileSync(tokenFile, 'v1\n');
    const service = { id: 's', credentials: { mode: 'serviceAccount' as const, tokenFile } };
    expect(await catalog.authorizationFor(service)).toBe('Bearer v1');
    fs.writeFileSync(tokenFile, 'v2');
    expect(await catalog.authorizationFor(service)).toBe('Bearer v2');
    fs.writeFileSync(tokenFile, '  \n');
    await expect(catalog.authorizationFor(service)).rejects.toThrow(`credentials.tokenFile ${tokenFile} is empty`);
    await expect(catalog.authorizationFor({ id: 's', credentials: { mode: 'serviceAccount', tokenFile: '/nonexistent/token' } })).rejects.toThrow(
      'cannot read credentials.tokenFile /nonexistent/token: ENOENT',
    );
  });

  it('needs the IdP for a Tool Service with per-caller credentials', async () => {
    await expect(catalog.authorizationFor({ id: 'x', credentials: { mode: 'tokenExchange', audience: 'a' } })).rejects.toThrow(/start the control plane with --idp-token-endpoint/);
    expect(await catalog.authorizationFor({ id: 'n', credentials: { mode: 'none' } })).toBeUndefined();
  });
});
