import * as fs from 'node:fs';
import * as http from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, envoyStat, postJsonRpc, startGateway, toolCallAccessLog } from '../support/gateway-fixture';
import { decodeJwt } from '../support/jwt';
import { KEYCLOAK_STARTUP_MS, Keycloak, keycloak } from '../support/keycloak';
import { ScriptedBrowserOAuthProvider } from '../support/oauth-client';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * The gateway as an OAuth 2.1 resource server (docs/auth.md, docs/adr/0011-caller-identity.md), end to
 * end: the run's Keycloak issues the tokens (password grant, client credentials, authorization code
 * with PKCE through its login page), Envoy 1.40 validates them and decides the per-tool rules, the
 * sidecar binds sessions and lists tools per caller, and a spy Tool Service counts what reaches it.
 */

/** The test realm's tokens carry this route's resource URL in `aud` (docs/testing.md): the gateway's public URL is therefore this, whatever port its listener has. */
const PUBLIC_URL = 'http://127.0.0.1:10000';
const METADATA_URL = `${PUBLIC_URL}/.well-known/oauth-protected-resource/mcp/demo`;
/** Envoy's count of jwt_authn configurations it took over ECDS. */
const ECDS_RELOADS = 'extension_config_discovery.http_filter.envoy.filters.http.jwt_authn.config_reload';
const SPY_TOOLS = ['read_report', 'run_task', 'admin_reset', 'open_tool'];

describe('the gateway as an OAuth 2.1 resource server (Keycloak 26, Envoy 1.40, MCP SDK clients)', () => {
  let idp: Keycloak;
  let spy: ScriptedToolService;
  let stack: GatewayStack;
  let dir: string;
  let demo: string;
  const tokens: Record<'alice' | 'bob' | 'carol', string> = { alice: '', bob: '', carol: '' };

  const rpc = (body: unknown, token?: string, headers: Record<string, string> = {}, url = demo) =>
    postJsonRpc(url, body, { ...MCP_POST_HEADERS, ...(token && { authorization: `Bearer ${token}` }), ...headers });
  const call = (name: string, token: string, headers: Record<string, string> = {}) =>
    rpc({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name, arguments: {} } }, token, headers);
  /** The JSON-RPC message of an answer, sent as JSON or as one SSE event. */
  const messageOf = (text: string) => JSON.parse(text.startsWith('{') ? text : /^data: (.*)$/m.exec(text)![1]);
  const listed = async (token: string) => ((await rpc({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, token)).json().result.tools as { name: string }[]).map((tool) => tool.name);

  beforeAll(async () => {
    idp = await keycloak();
    spy = await ScriptedToolService.start(SPY_TOOLS);
    [tokens.alice, tokens.bob, tokens.carol] = await Promise.all([
      idp.tokenFor('alice', { scopes: ['tools:read', 'tools:call'] }),
      idp.tokenFor('bob', { scopes: ['tools:read', 'tools:call'] }),
      idp.tokenFor('carol', { scopes: ['tools:read'] }),
    ]);
    ({ stack, dir } = await startGateway(
      'auth-gateway',
      (backends) => ({
        routes: [
          {
            key: 'demo',
            auth: { issuer: idp.issuer, scopes: ['tools:read'], clockSkewSeconds: 1 },
            toolServices: [
              {
                name: 'spy',
                url: spy.url,
                policy: {
                  rules: [
                    { tools: ['read_*'], requiredScopes: ['tools:read'] },
                    { tools: ['run_*'], requiredScopes: ['tools:call'] },
                    { tools: ['admin_*'], allowGroups: ['approvers'] },
                  ],
                },
              },
              { name: 'jobs', url: backends.jobs },
            ],
          },
          { key: 'open', toolServices: [{ name: 'jobs', url: backends.jobs }] },
        ],
      }),
      { controlPlaneArgs: ['--public-url', PUBLIC_URL] },
    ));
    demo = stack.gatewayUrl('demo');
    await waitFor('the demo route to list the spy and jobs tools', async () => {
      const names = await listed(tokens.carol).catch((): string[] => []);
      return names.includes('spy__read_report') && names.includes('jobs__echo') ? true : undefined;
    });
  }, KEYCLOAK_STARTUP_MS);

  afterAll(async () => {
    await stack?.stop();
    await spy?.stop();
  });

  it('answers a request without a token 401, naming the route\'s metadata document and scope, without an error code', async () => {
    const response = await rpc({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(response.status).toBe(401);
    expect(response.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${METADATA_URL}", scope="tools:read"`);
    expect(response.json().error.code).toBe(-32030);
  });

  it('answers an expired token, another issuer\'s, another audience\'s, a tampered one and a non-JWT 401 invalid_token; nothing reaches a backend', async () => {
    // Used once while valid: Envoy's JWT cache then holds it, and must still refuse it once expired.
    const shortLived = await idp.shortLivedToken(3);
    expect((await call('spy__open_tool', shortLived)).status).toBe(200);
    spy.calls.length = 0;
    const [header, payload, signature] = tokens.alice.split('.');
    const flipped = signature.slice(0, 10) + (signature[10] === 'A' ? 'B' : 'A') + signature.slice(11);
    const cases: [string, string, string][] = [
      ['another issuer (the master realm)', await idp.masterRealmToken(), 'the access token is from an issuer this route does not accept'],
      ['another audience (a token of mcp-gateway)', await idp.tokenFor('mcp-gateway'), 'the access token is not for this resource (audience)'],
      ['a tampered signature', `${header}.${payload}.${flipped}`, 'the access token is invalid'],
      ['not a JWT', 'not-a-jwt', 'the access token is invalid'],
    ];
    // Its lifetime (3 s) and the route's leeway (1 s) both past.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    cases.push(['an expired token', shortLived, 'the access token expired']);
    for (const [what, token, description] of cases) {
      const response = await call('spy__open_tool', token);
      expect([what, response.status]).toEqual([what, 401]);
      expect([what, response.headers.get('www-authenticate')]).toEqual([
        what,
        `Bearer error="invalid_token", error_description="${description}", resource_metadata="${METADATA_URL}", scope="tools:read"`,
      ]);
    }
    expect(spy.calls).toEqual([]);
  });

  it('serves the route\'s RFC 9728 metadata at the well-known path of its resource URL, without a token', async () => {
    const response = await fetch(demo.replace('/mcp/demo', '/.well-known/oauth-protected-resource/mcp/demo'));
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/json');
    expect(await response.json()).toEqual({
      resource: `${PUBLIC_URL}/mcp/demo`,
      authorization_servers: [idp.issuer],
      scopes_supported: ['tools:read', 'tools:call'],
      bearer_methods_supported: ['header'],
      resource_name: 'MCP route demo',
    });
  });

  it('lists to each caller only the tools it may call, a list marked cacheScope private for 2026-07-28 clients', async () => {
    // alice: engineering, tools:read tools:call; bob: support, tools:read; carol: approvers, tools:read.
    const spyTools = async (token: string) => (await listed(token)).filter((name) => name.startsWith('spy__'));
    expect(await spyTools(tokens.alice)).toEqual(['spy__read_report', 'spy__run_task', 'spy__open_tool']);
    expect(await spyTools(tokens.bob)).toEqual(['spy__read_report', 'spy__open_tool']);
    expect(await spyTools(tokens.carol)).toEqual(['spy__read_report', 'spy__admin_reset', 'spy__open_tool']);
    const modern = {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/list',
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
    };
    const modernHeaders = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' };
    expect((await rpc(modern, tokens.bob, modernHeaders)).json().result.cacheScope).toBe('private');
    expect((await rpc(modern, undefined, modernHeaders, stack.gatewayUrl('open'))).json().result.cacheScope).toBe('public');
  });

  it('answers a call whose token lacks the tool\'s scope with the 403 scope challenge; the backend never sees it', async () => {
    spy.calls.length = 0;
    const response = await call('spy__run_task', tokens.bob);
    expect(response.status).toBe(403);
    expect(response.headers.get('www-authenticate')).toBe(
      `Bearer error="insufficient_scope", scope="tools:call tools:read", resource_metadata="${METADATA_URL}", error_description="tools/call spy__run_task needs scope tools:call"`,
    );
    expect(response.json().error).toMatchObject({ code: -32031, data: { missing_scopes: ['tools:call'] } });
    expect(spy.calls).toEqual([]);
    expect(messageOf((await call('spy__run_task', tokens.alice)).text).result.content[0].text).toBe('called run_task');
    expect(spy.calls).toEqual(['run_task']);
  });

  it('denies -32003 a call whose caller a group rule leaves out (no token of theirs would do); the backend never sees it', async () => {
    spy.calls.length = 0;
    const denied = await call('spy__admin_reset', tokens.alice);
    expect(denied.status).toBe(200);
    expect(denied.json().error).toMatchObject({ code: -32003, data: { outcome: 'denied', reason: 'policy', rule: 'allowGroups' } });
    expect(spy.calls).toEqual([]);
    expect(messageOf((await call('spy__admin_reset', tokens.carol)).text).result.content[0].text).toBe('called admin_reset');
    expect(spy.calls).toEqual(['admin_reset']);
  });

  it('lets an SDK client with its OAuth provider discover the gateway, sign in (authorization code + PKCE), call, and step up for a scope', async () => {
    const provider = new ScriptedBrowserOAuthProvider(idp, 'alice');
    // The client knows the gateway by its public URL; this "load balancer" takes it to the listener.
    const listener = new URL(demo).origin;
    const throughLoadBalancer: typeof fetch = (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      return fetch(url.startsWith(PUBLIC_URL) ? listener + url.slice(PUBLIC_URL.length) : url, init);
    };
    const transport = new StreamableHTTPClientTransport(new URL(`${PUBLIC_URL}/mcp/demo`), { authProvider: provider, fetch: throughLoadBalancer });
    const client = new Client({ name: 'oauth-agent', version: '1.0.0' });
    await expect(client.connect(transport)).rejects.toBeInstanceOf(UnauthorizedError);
    // The SDK read the 401's resource_metadata and scope, then Keycloak's metadata, and sent the user to sign in for tools:read.
    expect(new URL(provider.authorizations[0]).searchParams.get('scope')).toBe('tools:read');
    expect(new URL(provider.authorizations[0]).searchParams.get('resource')).toBe(`${PUBLIC_URL}/mcp/demo`);
    await transport.finishAuth(provider.pendingCode!);
    const connected = new Client({ name: 'oauth-agent', version: '1.0.0' });
    await connected.connect(new StreamableHTTPClientTransport(new URL(`${PUBLIC_URL}/mcp/demo`), { authProvider: provider, fetch: throughLoadBalancer }));
    try {
      expect(decodeJwt(provider.tokens()!.access_token).scope).toContain('tools:read');
      expect((await connected.callTool({ name: 'spy__read_report', arguments: {} })).content).toEqual([{ type: 'text', text: 'called read_report' }]);
      // run_task needs tools:call: the gateway's 403 challenge sends the SDK to sign in again for it.
      await expect(connected.callTool({ name: 'spy__run_task', arguments: {} })).rejects.toBeInstanceOf(UnauthorizedError);
      expect(new URL(provider.authorizations[1]).searchParams.get('scope')).toBe('tools:call tools:read');
      const stepUp = connected.transport as StreamableHTTPClientTransport;
      await stepUp.finishAuth(provider.pendingCode!);
      expect(decodeJwt(provider.tokens()!.access_token).scope).toContain('tools:call');
      expect((await connected.callTool({ name: 'spy__run_task', arguments: {} })).content).toEqual([{ type: 'text', text: 'called run_task' }]);
    } finally {
      await connected.close();
    }
  });

  it("names the caller of a forwarded call in Envoy's access log and in the audit: the token's issuer, subject and client", async () => {
    // The route removes the claim headers as the call leaves: what the logs see is the call script's record.
    const claims = decodeJwt(tokens.alice);
    const client = claims.client_id ?? claims.azp;
    expect((await call('spy__open_tool', tokens.alice)).status).toBe(200);
    const logged = await waitFor('the access log line of alice\'s call', async () =>
      toolCallAccessLog(dir).find((entry) => entry.tool === 'open_tool' && entry.caller_sub === claims.sub),
    );
    expect(logged).toMatchObject({ route_key: 'demo', caller_iss: idp.issuer, caller_client_id: client });
    const audited = await waitFor('the audit event of alice\'s call', async () =>
      fs
        .readFileSync(stack.auditFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, any>)
        .find((event) => event.tool === 'open_tool' && event.outcome === 'ok' && event.caller?.subject === claims.sub),
    );
    expect(audited.caller).toMatchObject({ issuer: idp.issuer, subject: claims.sub, client_id: client });
  });

  it('binds a session to the caller who opened it: another user\'s token on its id is 404 on POST, GET, DELETE and calls; no token is 401', async () => {
    const opened = await rpc(
      { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'alice-agent', version: '1' } } },
      tokens.alice,
    );
    const session = opened.headers.get('mcp-session-id')!;
    expect(session).toBeTruthy();
    const inSession = { 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25' };
    // alice's call is checked and remembered by this Envoy worker for her (the spy keeps no session).
    expect(messageOf((await call('spy__open_tool', tokens.alice, inSession)).text).result.content[0].text).toBe('called open_tool');
    spy.calls.length = 0;
    expect((await call('spy__open_tool', tokens.bob, inSession)).status).toBe(404);
    expect((await call('jobs__echo', tokens.bob, inSession)).status).toBe(404);
    expect((await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, tokens.bob, inSession)).status).toBe(404);
    const stream = await fetch(demo, { headers: { accept: 'text/event-stream', authorization: `Bearer ${tokens.bob}`, ...inSession } });
    expect(stream.status).toBe(404);
    const end = await fetch(demo, { method: 'DELETE', headers: { authorization: `Bearer ${tokens.bob}`, ...inSession } });
    expect(end.status).toBe(404);
    expect((await call('spy__open_tool', '', inSession)).status).toBe(401);
    expect(spy.calls).toEqual([]);
    // Still alice's: nothing above ended it.
    expect((await rpc({ jsonrpc: '2.0', id: 3, method: 'tools/list' }, tokens.alice, inSession)).status).toBe(200);
  });

  it("takes the caller from Envoy alone: claim headers a client sends claiming to be alice change nothing, and reach no backend", async () => {
    const claims = decodeJwt(tokens.alice);
    // Every header jwt_authn fills from a validated token, as a client would forge them.
    const forged = {
      'x-mcpgw-claim-iss': String(claims.iss),
      'x-mcpgw-claim-sub': String(claims.sub),
      'x-mcpgw-claim-client-id': 'forged-client',
      'x-mcpgw-claim-scope': 'tools:read tools:call',
      'x-mcpgw-claim-groups': 'approvers',
    };
    const opened = await rpc(
      { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'a', version: '1' } } },
      tokens.alice,
    );
    const inAliceSession = { 'mcp-session-id': opened.headers.get('mcp-session-id')!, 'mcp-protocol-version': '2025-11-25' };
    // Bob's valid token with alice's subject forged: the token's identity wins (alice's session is not bob's).
    expect((await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, tokens.bob, { ...inAliceSession, ...forged })).status).toBe(404);
    expect((await call('spy__open_tool', tokens.bob, { ...inAliceSession, ...forged })).status).toBe(404);
    // Nor do forged groups or scopes count: bob is neither an approver nor holder of tools:call.
    const bobList = (await rpc({ jsonrpc: '2.0', id: 3, method: 'tools/list' }, tokens.bob, forged)).json().result.tools as { name: string }[];
    expect(bobList.map((tool) => tool.name)).not.toContain('spy__admin_reset');
    spy.calls.length = 0;
    expect((await call('spy__admin_reset', tokens.bob, forged)).json().error).toMatchObject({ code: -32003 });
    expect((await call('spy__run_task', tokens.bob, forged)).status).toBe(403);
    // Without a token, forged claims are refused like no token at all.
    expect((await call('spy__open_tool', '', forged)).status).toBe(401);
    expect((await rpc({ jsonrpc: '2.0', id: 4, method: 'tools/list' }, undefined, forged)).status).toBe(401);
    expect(spy.calls).toEqual([]);
    // The caller's own (validated) claims never reach a backend either.
    spy.callHeaderNames.length = 0;
    expect(messageOf((await call('spy__open_tool', tokens.bob, forged)).text).result.content[0].text).toBe('called open_tool');
    expect(spy.callHeaderNames).toHaveLength(1);
    expect(spy.callHeaderNames[0].filter((name) => name.startsWith('x-mcpgw-'))).toEqual([]);
  });

  it('refuses a browser page of another origin 403, answers an allowed origin\'s CORS preflight, and refuses another Host 403', async () => {
    const evil = await rpc({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, tokens.alice, { origin: 'http://evil.example.com' });
    expect(evil.status).toBe(403);
    expect(evil.json().error.message).toContain('Origin not allowed');
    const allowed = await rpc({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, tokens.alice, { origin: 'http://localhost:6274' });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get('access-control-allow-origin')).toBe('http://localhost:6274');
    const preflight = await fetch(demo, {
      method: 'OPTIONS',
      headers: { origin: 'http://localhost:6274', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, mcp-session-id' },
    });
    expect(preflight.status).toBe(200);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://localhost:6274');
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, POST, DELETE, OPTIONS');
    expect(preflight.headers.get('access-control-allow-headers')).toContain('authorization');
    const evilPreflight = await fetch(demo, { method: 'OPTIONS', headers: { origin: 'http://evil.example.com', 'access-control-request-method': 'POST' } });
    expect(evilPreflight.status).toBe(403);
    const rebound = await new Promise<number>((resolve, reject) => {
      const sent = http.request(demo, { method: 'POST', headers: { ...MCP_POST_HEADERS, host: 'evil.example.com:10000' } }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      sent.on('error', reject);
      sent.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
    });
    expect(rebound).toBe(403);
  });

  it('adds a route with auth of another issuer by RDS and ECDS: the listener is not modified, nothing drains', async () => {
    const listenerModified = await envoyStat(stack, 'listener_manager.listener_modified');
    const ecdsReloads = await envoyStat(stack, ECDS_RELOADS);
    const masterIssuer = idp.issuer.replace(/\/realms\/[^/]+$/, '/realms/master');
    const registry = {
      routes: [
        { key: 'demo', auth: { issuer: idp.issuer, scopes: ['tools:read'], clockSkewSeconds: 1 }, toolServices: [{ name: 'spy', url: spy.url }] },
        { key: 'admin', auth: { issuer: masterIssuer }, toolServices: [{ name: 'spy', url: spy.url }] },
      ],
    };
    await stack.setPortalRegistry(registry);
    const admin = stack.gatewayUrl('admin');
    const challenge = await waitFor('the new route to ask for its own token', async () => {
      const response = await postJsonRpc(admin, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      return response.status === 401 ? response.headers.get('www-authenticate') : undefined;
    });
    expect(challenge).toBe(`Bearer resource_metadata="${PUBLIC_URL}/.well-known/oauth-protected-resource/mcp/admin"`);
    expect(await envoyStat(stack, ECDS_RELOADS)).toBeGreaterThan(ecdsReloads);
    expect(await envoyStat(stack, 'listener_manager.listener_modified')).toBe(listenerModified);
    expect(await envoyStat(stack, 'listener_manager.total_listeners_draining')).toBe(0);
    // A token of the test realm is not one of the master realm's.
    expect((await postJsonRpc(admin, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { ...MCP_POST_HEADERS, authorization: `Bearer ${tokens.alice}` })).status).toBe(401);
  });
});
