import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { freePort, portAccepts, waitFor } from '../../control-plane/devstack/processes';
import { closeServer, listen } from '../../control-plane/shared/http-listen';
import { testDir } from '../support/gateway-fixture';
import { launchChromium } from '../support/chromium';
import { startJaeger } from '../support/jaeger';
import { decodeJwt, verifyJwtSignature } from '../support/jwt';
import { KEYCLOAK_STARTUP_MS, Keycloak, keycloak } from '../support/keycloak';
import { startPrometheus } from '../support/prometheus';
import { startRedisSentinel } from '../support/redis-sentinel';
import { TestRedis } from '../support/redis-server';
import { DevInside } from '../../control-plane/devstack/dev-inside';
import { createRedisClient } from '../../control-plane/shared/redis-client';
import { tools } from '../support/tools';

/**
 * Each real part the end-to-end tests build on (installed by scripts/test-tools.sh) works on this
 * machine through its test/support helper.
 */

const run = promisify(execFile);
const dir = testDir('real-parts');

const scopesOf = (claims: Record<string, unknown>) => String(claims.scope ?? '').split(' ');

describe('Keycloak (the run’s shared IdP, realm test/fixtures/keycloak/mcpgw-realm.json)', () => {
  let idp: Keycloak;

  beforeAll(async () => {
    idp = await keycloak();
  }, KEYCLOAK_STARTUP_MS);

  test("alice's token verifies against Keycloak's JWKS and carries the route and gateway audiences, her groups and granted scopes", async () => {
    const token = await idp.tokenFor('alice', { scopes: ['tools:read', 'tools:call', 'tools:admin'] });
    const claims = await verifyJwtSignature(token, idp.jwksUri);
    expect(claims.iss).toBe(idp.issuer);
    expect(claims.aud).toEqual(expect.arrayContaining([idp.routeAudience, 'mcp-gateway']));
    expect(claims.preferred_username).toBe('alice');
    expect(claims.groups).toEqual(['engineering']);
    expect(scopesOf(claims)).toEqual(expect.arrayContaining(['tools:read', 'tools:call']));
    // Asked for, but none of alice's roles grants it: left out, not refused.
    expect(scopesOf(claims)).not.toContain('tools:admin');
  });

  test('a token whose payload was changed does not verify', async () => {
    const [header, , signature] = (await idp.tokenFor('bob')).split('.');
    const forged = Buffer.from(JSON.stringify({ ...decodeJwt(await idp.tokenFor('bob')), groups: ['engineering'] })).toString('base64url');
    await expect(verifyJwtSignature(`${header}.${forged}.${signature}`, idp.jwksUri)).rejects.toThrow('does not verify');
  });

  test('bob (support) gets tools:read only; carol is in approvers', async () => {
    const bob = decodeJwt(await idp.tokenFor('bob', { scopes: ['tools:read', 'tools:call'] }));
    expect(bob.groups).toEqual(['support']);
    expect(scopesOf(bob)).toContain('tools:read');
    expect(scopesOf(bob)).not.toContain('tools:call');
    const carol = decodeJwt(await idp.tokenFor('carol'));
    expect(carol.groups).toEqual(['approvers']);
  });

  test('agent-batch gets a token by client credentials, with the same audiences', async () => {
    const claims = decodeJwt(await idp.tokenFor('agent-batch', { scopes: ['tools:read', 'tools:call'] }));
    expect(claims.azp).toBe('agent-batch');
    expect(claims.aud).toEqual(expect.arrayContaining([idp.routeAudience, 'mcp-gateway']));
    expect(scopesOf(claims)).toEqual(expect.arrayContaining(['tools:read', 'tools:call']));
  });

  test('authorization code with PKCE through the login page, to a loopback redirect', async () => {
    const claims = decodeJwt(await idp.authorizationCodeToken('alice', { scopes: ['tools:read'] }));
    expect(claims.azp).toBe('agent-cli');
    expect(claims.preferred_username).toBe('alice');
    expect(scopesOf(claims)).toContain('tools:read');
  });

  test('mcp-gateway exchanges alice’s token for one addressed to tool-weather, alice staying the subject', async () => {
    const subjectToken = await idp.tokenFor('alice', { scopes: ['tools:call'] });
    const exchanged = await verifyJwtSignature(await idp.exchange(subjectToken, { audience: 'tool-weather', scopes: ['tools:call'] }), idp.jwksUri);
    expect(exchanged.aud).toBe('tool-weather');
    expect(exchanged.azp).toBe('mcp-gateway');
    expect(exchanged.sub).toBe(decodeJwt(subjectToken).sub);
    expect(scopesOf(exchanged)).toContain('tools:call');
  });

  test('a token exchange with a subject token Keycloak did not sign is refused', async () => {
    const [header, payload] = (await idp.tokenFor('alice')).split('.');
    await expect(idp.exchange(`${header}.${payload}.${randomBytes(256).toString('base64url')}`, { audience: 'tool-jobs' })).rejects.toThrow(/answered 400/);
  });

  test('stop and start: Keycloak comes back on the same port with the same realm and signing keys', async () => {
    const before = await idp.tokenFor('alice');
    await idp.stop();
    expect(await portAccepts(Number(new URL(idp.issuer).port))).toBeUndefined();
    await idp.start();
    await verifyJwtSignature(before, idp.jwksUri);
    expect(decodeJwt(await idp.tokenFor('alice')).sub).toBe(decodeJwt(before).sub);
  }, KEYCLOAK_STARTUP_MS);
});

describe('Jaeger v1.76.0', () => {
  test('takes a span over OTLP/HTTP and serves it from its query API, then stops', async () => {
    const jaeger = await startJaeger(path.join(dir, 'jaeger'));
    try {
      const traceId = randomBytes(16).toString('hex');
      const now = BigInt(Date.now()) * 1_000_000n;
      const exported = await fetch(`${jaeger.otlpHttpUrl}/v1/traces`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          resourceSpans: [
            {
              resource: { attributes: [{ key: 'service.name', value: { stringValue: 'real-parts-test' } }] },
              scopeSpans: [
                {
                  spans: [
                    {
                      traceId,
                      spanId: randomBytes(8).toString('hex'),
                      name: 'real-parts.span',
                      kind: 1,
                      startTimeUnixNano: String(now),
                      endTimeUnixNano: String(now + 1_000_000n),
                    },
                  ],
                },
              ],
            },
          ],
        }),
      });
      expect(exported.status).toBe(200);
      const operations = await waitFor('the span in Jaeger', async () => {
        const response = await fetch(`${jaeger.queryUrl}/api/traces/${traceId}`);
        if (!response.ok) return undefined;
        const body = (await response.json()) as { data: { spans: { operationName: string }[] }[] };
        return body.data[0]?.spans.map((span) => span.operationName);
      });
      expect(operations).toEqual(['real-parts.span']);
      expect(await portAccepts(Number(jaeger.otlpGrpcAddress.split(':')[1]))).toBe(true);
    } finally {
      await jaeger.stop();
    }
  });
});

describe('Prometheus v0.316.0', () => {
  test('promtool runs', async () => {
    const { stdout, stderr } = await run(tools().promtool, ['--version']);
    expect(stdout + stderr).toMatch(/promtool, version/);
  });

  test('prometheus starts, scrapes a target served by the test, answers a query and stops', async () => {
    const target = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end('# TYPE real_parts_value gauge\nreal_parts_value 42\n');
    }, '127.0.0.1', await freePort());
    const prometheus = await startPrometheus(path.join(dir, 'prometheus'), {
      global: { scrape_interval: '1s' },
      scrape_configs: [{ job_name: 'test', static_configs: [{ targets: [`127.0.0.1:${(target.address() as { port: number }).port}`] }] }],
    });
    try {
      const value = await waitFor('a scraped sample', async () => {
        const response = await fetch(`${prometheus.url}/api/v1/query?query=real_parts_value`);
        const body = (await response.json()) as { data: { result: { value: [number, string] }[] } };
        return body.data.result[0]?.value[1];
      });
      expect(value).toBe('42');
    } finally {
      await prometheus.stop();
      await closeServer(target);
    }
  });
});

describe('Helm 4 and envoyproxy/ratelimit', () => {
  test('helm version names Helm 4', async () => {
    const { stdout } = await run(tools().helm, ['version', '--short']);
    expect(stdout.trim()).toMatch(/^v4\./);
  });

  test('the ratelimit service binary is installed', () => {
    expect(() => fs.accessSync(tools().ratelimit, fs.constants.X_OK)).not.toThrow();
  });
});

describe('Chromium via playwright-core', () => {
  test('loads a page served on 127.0.0.1 and takes a screenshot of it', async () => {
    const server = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<!doctype html><title>real parts</title><h1 id="greeting">served by the test</h1>');
    }, '127.0.0.1', await freePort());
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      await page.goto(`http://127.0.0.1:${(server.address() as { port: number }).port}/`);
      expect(await page.title()).toBe('real parts');
      expect(await page.textContent('#greeting')).toBe('served by the test');
      const screenshot = await page.screenshot({ path: path.join(dir, 'chromium.png') });
      expect(screenshot.subarray(1, 4).toString()).toBe('PNG');
    } finally {
      await browser.close();
      await closeServer(server);
    }
  });
});

describe('redis-sentinel', () => {
  test('with TLS on (the chart\'s redis.sentinel.tls), the gateway\'s client reaches the primary by sentinels:// and the CA', async () => {
    const tls = DevInside.create(path.join(dir, 'sentinel-tls-inside'), 60).redisTlsFiles();
    const primary = await TestRedis.start(dir, [], tls);
    try {
      const sentinel = await startRedisSentinel(path.join(dir, 'sentinel-tls'), { primaryPort: primary.port, tls });
      let overTls: ReturnType<typeof createRedisClient> | undefined;
      try {
        overTls = createRedisClient(`sentinels://127.0.0.1:${sentinel.port}/mcpgw`, { connectTimeoutMs: 1000, commandTimeoutMs: 1000 }, { auth: { tlsCaFile: tls.caFile } });
        const client = overTls;
        // The first tries fail until the client has asked the Sentinel and connected to the primary (no offline queue).
        expect(await waitFor('the client over TLS to write to the primary', () => client.set('sentinel-tls', 'yes'))).toBe('OK');
        expect(await client.get('sentinel-tls')).toBe('yes');
        expect((await client.info('server')).match(/tcp_port:(\d+)/)?.[1]).toBe(String(primary.port));
      } finally {
        overTls?.disconnect();
        await sentinel.stop();
      }
    } finally {
      await primary.stop();
    }
  });

  test('starts and reports the primary it watches', async () => {
    const primary = await TestRedis.start(dir);
    try {
      const sentinel = await startRedisSentinel(path.join(dir, 'sentinel'), { primaryPort: primary.port });
      try {
        expect(await sentinel.primaryAddress()).toBe(`127.0.0.1:${primary.port}`);
      } finally {
        await sentinel.stop();
      }
    } finally {
      await primary.stop();
    }
  });
});
