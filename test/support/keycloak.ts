import * as fs from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { projectPath } from '../../control-plane/shared/paths';

/**
 * The run's one Keycloak 26.7.3 (started by keycloak-global-setup.ts in the background) with the realm
 * of test/fixtures/keycloak/mcpgw-realm.json — see docs/testing.md for its clients, users and scopes.
 *
 *   const idp = await keycloak();          // waits until Keycloak answers (give beforeAll KEYCLOAK_STARTUP_MS)
 *   const token = await idp.tokenFor('alice', { scopes: ['tools:read', 'tools:call'] });
 *
 * Only tests of the jest project "keycloak" (jest.config.js) have it.
 */

export const KEYCLOAK_RUN_ENV = 'MCPGW_KEYCLOAK_RUN';
export const REALM_FILE = projectPath('test', 'fixtures', 'keycloak', 'mcpgw-realm.json');

/** Keycloak starts in 35 to 70 s on 2 busy cores: the timeout for a beforeAll that awaits it. */
export const KEYCLOAK_STARTUP_MS = 180_000;

export const KeycloakRun = z.object({
  baseUrl: z.string(),
  adminUser: z.string(),
  adminPassword: z.string(),
  controlUrl: z.string(),
  logFile: z.string(),
  dataDir: z.string(),
});
export type KeycloakRun = z.infer<typeof KeycloakRun>;

/** The parts of the realm file tests take their names, passwords and secrets from. */
const RealmFixture = z.object({
  realm: z.string(),
  users: z.array(z.object({ username: z.string(), credentials: z.array(z.object({ value: z.string() })).optional() })),
  clients: z.array(z.object({ clientId: z.string(), secret: z.string().optional() })),
  clientScopes: z.array(
    z.object({
      name: z.string(),
      protocolMappers: z.array(z.object({ protocolMapper: z.string(), config: z.record(z.string(), z.string()) })).optional(),
    }),
  ),
});

export type TestUser = 'alice' | 'bob' | 'carol';
/** Confidential clients that get tokens of their own (client credentials). */
export type TestClient = 'agent-batch' | 'mcp-gateway';
export type ToolScope = 'tools:read' | 'tools:call' | 'tools:admin';
/** Tool Service clients a gateway token can be exchanged for. */
export type ToolAudience = 'tool-weather' | 'tool-jobs';

const TokenResponse = z.object({
  access_token: z.string(),
  token_type: z.string(),
  expires_in: z.number(),
  scope: z.string().optional(),
});

const Discovery = z.object({
  issuer: z.string(),
  jwks_uri: z.string(),
  token_endpoint: z.string(),
  authorization_endpoint: z.string(),
});

export interface Keycloak {
  /** e.g. http://127.0.0.1:PORT/realms/mcpgw */
  issuer: string;
  jwksUri: string;
  tokenEndpoint: string;
  authorizationEndpoint: string;
  /** The master realm's administrator. */
  admin: { username: string; password: string };
  /** The demo route's resource URL: every agent token carries it in `aud`, beside `mcp-gateway`. */
  routeAudience: string;
  /**
   * An access token: for a user by the password grant of the public client agent-cli, for a client by
   * client credentials. Scopes a user's roles do not grant are left out of the token, not refused.
   */
  tokenFor(who: TestUser | TestClient, options?: { scopes?: ToolScope[] }): Promise<string>;
  /** An access token for a user by authorization code with PKCE (S256) through the login page, as agent-cli. */
  authorizationCodeToken(user: TestUser, options?: { scopes?: ToolScope[] }): Promise<string>;
  /**
   * Signs a user in on an authorization URL a client built (as a browser would: the login form, posted
   * with the user's password) and returns where Keycloak redirects: the client's redirect URI with the
   * code and state.
   */
  signIn(authorizationUrl: URL, user: TestUser): Promise<URL>;
  /** A client-credentials token of the demo route's audience that expires `lifespanSeconds` after it is issued (client agent-short-lived, made on first use). */
  shortLivedToken(lifespanSeconds: number): Promise<string>;
  /** A token of the master realm's administrator: another issuer than the test realm. */
  masterRealmToken(): Promise<string>;
  /** Standard token exchange (RFC 8693) by mcp-gateway: `subjectToken` for a token for a Tool Service. */
  exchange(subjectToken: string, options: { audience: ToolAudience; scopes?: ToolScope[] }): Promise<string>;
  /** Stops Keycloak (an IdP outage); the realm, users and signing keys survive a start. */
  stop(): Promise<void>;
  /** Starts it again on the same port and waits until it answers. */
  start(): Promise<void>;
}

let realmFixture: z.infer<typeof RealmFixture> | undefined;
function realm(): z.infer<typeof RealmFixture> {
  realmFixture ??= RealmFixture.parse(JSON.parse(fs.readFileSync(REALM_FILE, 'utf8')));
  return realmFixture;
}

export function passwordOf(username: TestUser): string {
  const password = realm().users.find((user) => user.username === username)?.credentials?.[0]?.value;
  if (!password) throw new Error(`${REALM_FILE} has no password for user ${username}`);
  return password;
}

export function secretOf(clientId: string): string {
  const secret = realm().clients.find((client) => client.clientId === clientId)?.secret;
  if (!secret) throw new Error(`${REALM_FILE} has no secret for client ${clientId}`);
  return secret;
}

function routeAudience(): string {
  const mappers = realm().clientScopes.find((scope) => scope.name === 'route-demo')?.protocolMappers ?? [];
  const audience = mappers.map((mapper) => mapper.config['included.custom.audience']).find(Boolean);
  if (!audience) throw new Error(`${REALM_FILE}: client scope route-demo has no custom audience`);
  return audience;
}

function readRun(): KeycloakRun {
  const file = process.env[KEYCLOAK_RUN_ENV];
  if (!file) {
    throw new Error(
      'Keycloak is not started for this run: only test files of the jest project "keycloak" (see testMatch in jest.config.js) get it',
    );
  }
  return KeycloakRun.parse(JSON.parse(fs.readFileSync(file, 'utf8')));
}

async function tokenRequest(endpoint: string, form: Record<string, string>): Promise<string> {
  const response = await fetch(endpoint, { method: 'POST', body: new URLSearchParams(form) });
  const body = await response.text();
  if (!response.ok) throw new Error(`token endpoint answered ${response.status}: ${body}`);
  return TokenResponse.parse(JSON.parse(body)).access_token;
}

const scopeParameter = (scopes: ToolScope[] = []) => ['openid', ...scopes].join(' ');

/** Every Set-Cookie of a response as one Cookie header, the way a browser would send them back. */
function cookiesOf(response: Response): string {
  return response.headers
    .getSetCookie()
    .map((cookie) => cookie.split(';')[0])
    .join('; ');
}

async function signIn(authorize: URL, user: TestUser): Promise<URL> {
  const redirectUri = authorize.searchParams.get('redirect_uri') ?? '';
  const loginPage = await fetch(authorize, { redirect: 'manual' });
  const html = await loginPage.text();
  const action = /<form[^>]*id="kc-form-login"[^>]*action="([^"]+)"/.exec(html)?.[1];
  if (!action) throw new Error(`no login form on Keycloak's authorization page (${loginPage.status})`);
  const login = await fetch(action.replaceAll('&amp;', '&'), {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: cookiesOf(loginPage) },
    body: new URLSearchParams({ username: user, password: passwordOf(user), credentialId: '' }),
  });
  const location = login.headers.get('location');
  if (login.status !== 302 || !location?.startsWith(redirectUri)) {
    throw new Error(`login as ${user} did not redirect to ${redirectUri}: ${login.status} ${location ?? ''}`);
  }
  return new URL(location);
}

const SHORT_LIVED_CLIENT = { clientId: 'agent-short-lived', secret: 'short-lived-secret' };

/** The master realm administrator's token (admin-cli, password grant). */
async function masterRealmToken(run: KeycloakRun): Promise<string> {
  return tokenRequest(`${run.baseUrl}/realms/master/protocol/openid-connect/token`, {
    grant_type: 'password',
    client_id: 'admin-cli',
    username: run.adminUser,
    password: run.adminPassword,
  });
}

/** Makes (or updates) the confidential client agent-short-lived, whose tokens live `lifespanSeconds`, and gets one of its tokens. */
async function shortLivedToken(run: KeycloakRun, tokenEndpoint: string, lifespanSeconds: number): Promise<string> {
  const admin = { authorization: `Bearer ${await masterRealmToken(run)}`, 'content-type': 'application/json' };
  const clients = `${run.baseUrl}/admin/realms/${realm().realm}/clients`;
  const client = {
    ...SHORT_LIVED_CLIENT,
    publicClient: false,
    serviceAccountsEnabled: true,
    standardFlowEnabled: false,
    directAccessGrantsEnabled: false,
    attributes: { 'access.token.lifespan': String(lifespanSeconds) },
    defaultClientScopes: ['basic', 'profile', 'groups', 'route-demo'],
  };
  const existing = (await (await fetch(`${clients}?clientId=${SHORT_LIVED_CLIENT.clientId}`, { headers: admin })).json()) as { id: string }[];
  const response = existing[0]
    ? await fetch(`${clients}/${existing[0].id}`, { method: 'PUT', headers: admin, body: JSON.stringify(client) })
    : await fetch(clients, { method: 'POST', headers: admin, body: JSON.stringify(client) });
  if (!response.ok) throw new Error(`Keycloak admin: client ${SHORT_LIVED_CLIENT.clientId} answered ${response.status}: ${await response.text()}`);
  return tokenRequest(tokenEndpoint, { grant_type: 'client_credentials', client_id: SHORT_LIVED_CLIENT.clientId, client_secret: SHORT_LIVED_CLIENT.secret, scope: 'openid' });
}

async function authorizationCodeFlow(discovery: z.infer<typeof Discovery>, user: TestUser, scopes?: ToolScope[]): Promise<string> {
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(8).toString('hex');
  // A native app's loopback redirect (RFC 8252): Keycloak accepts any port for the registered one.
  const redirectUri = `http://127.0.0.1:${await freePort()}/callback`;
  const authorize = new URL(discovery.authorization_endpoint);
  authorize.search = new URLSearchParams({
    response_type: 'code',
    client_id: 'agent-cli',
    redirect_uri: redirectUri,
    scope: scopeParameter(scopes),
    state,
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
  }).toString();
  const redirected = await signIn(authorize, user);
  const code = redirected.searchParams.get('code');
  if (redirected.searchParams.get('state') !== state || !code) throw new Error(`unexpected authorization response: ${redirected.href}`);
  return tokenRequest(discovery.token_endpoint, {
    grant_type: 'authorization_code',
    client_id: 'agent-cli',
    code,
    redirect_uri: redirectUri,
    code_verifier: verifier,
  });
}

async function discoveryOf(issuer: string): Promise<z.infer<typeof Discovery> | undefined> {
  const response = await fetch(`${issuer}/.well-known/openid-configuration`);
  return response.ok ? Discovery.parse(await response.json()) : undefined;
}

/** Whether the supervisor's Keycloak process is running; 'gone' when the supervisor itself is. */
async function keycloakProcess(run: KeycloakRun): Promise<'running' | 'stopped' | 'gone'> {
  try {
    const response = await fetch(`${run.controlUrl}/status`);
    return z.object({ keycloak: z.enum(['running', 'stopped']) }).parse(await response.json()).keycloak;
  } catch {
    return 'gone';
  }
}

async function control(run: KeycloakRun, action: 'start' | 'stop'): Promise<void> {
  const response = await fetch(`${run.controlUrl}/${action}`, { method: 'POST' });
  if (!response.ok) throw new Error(`Keycloak supervisor: ${action} answered ${response.status}`);
}

let ready: Promise<Keycloak> | undefined;

/** The run's Keycloak, once it answers. */
export function keycloak(): Promise<Keycloak> {
  ready ??= connect().catch((error: unknown) => {
    ready = undefined;
    throw error;
  });
  return ready;
}

async function connect(): Promise<Keycloak> {
  const run = readRun();
  const issuerUrl = `${run.baseUrl}/realms/${realm().realm}`;
  /** Waits until Keycloak answers; fails at once when its process or the supervisor has ended. */
  const untilReady = async () => {
    const outcome = await waitFor(
      `Keycloak at ${run.baseUrl} (log: ${run.logFile})`,
      async () => {
        const state = await keycloakProcess(run);
        if (state !== 'running') return { ended: state };
        const discovery = await discoveryOf(issuerUrl);
        return discovery && { discovery };
      },
      { timeoutMs: KEYCLOAK_STARTUP_MS - 5000, intervalMs: 500 },
    );
    if ('ended' in outcome) {
      throw new Error(outcome.ended === 'gone' ? 'the Keycloak supervisor has exited (see the jest output)' : `Keycloak exited: see ${run.logFile}`);
    }
    return outcome.discovery;
  };
  const discovery = await untilReady();
  return {
    issuer: discovery.issuer,
    jwksUri: discovery.jwks_uri,
    tokenEndpoint: discovery.token_endpoint,
    authorizationEndpoint: discovery.authorization_endpoint,
    admin: { username: run.adminUser, password: run.adminPassword },
    routeAudience: routeAudience(),
    tokenFor: (who, { scopes } = {}) =>
      tokenRequest(
        discovery.token_endpoint,
        who === 'agent-batch' || who === 'mcp-gateway'
          ? { grant_type: 'client_credentials', client_id: who, client_secret: secretOf(who), scope: scopeParameter(scopes) }
          : { grant_type: 'password', client_id: 'agent-cli', username: who, password: passwordOf(who), scope: scopeParameter(scopes) },
      ),
    authorizationCodeToken: (user, { scopes } = {}) => authorizationCodeFlow(discovery, user, scopes),
    signIn,
    shortLivedToken: (lifespanSeconds) => shortLivedToken(run, discovery.token_endpoint, lifespanSeconds),
    masterRealmToken: () => masterRealmToken(run),
    exchange: (subjectToken, { audience, scopes }) =>
      tokenRequest(discovery.token_endpoint, {
        grant_type: 'urn:ietf:params:oauth:grant-type:token-exchange',
        client_id: 'mcp-gateway',
        client_secret: secretOf('mcp-gateway'),
        subject_token: subjectToken,
        subject_token_type: 'urn:ietf:params:oauth:token-type:access_token',
        audience,
        ...(scopes ? { scope: scopes.join(' ') } : {}),
      }),
    stop: () => control(run, 'stop'),
    start: async () => {
      await control(run, 'start');
      await untilReady();
    },
  };
}
