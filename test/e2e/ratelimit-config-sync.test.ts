import * as fs from 'node:fs';
import * as path from 'node:path';
import express from 'express';
import * as http from 'node:http';
import { ManagedProcess, freePorts, waitFor } from '../../control-plane/devstack/processes';
import { DEV_REDIS_USER } from '../../control-plane/devstack/dev-inside';
import { rateLimitBinary, rateLimitConfigFile, rateLimitEnvironment } from '../../control-plane/devstack/ratelimit';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { fetchRateLimitConfig } from '../../control-plane/quotas/ratelimit-config-sync';
import { TokenFile, adminAccess } from '../../control-plane/shared/admin-access';
import { listen } from '../../control-plane/shared/http-listen';
import { projectPath } from '../../control-plane/shared/paths';
import { readRedisPassword } from '../../control-plane/shared/redis-client';
import { startGateway } from '../support/gateway-fixture';

/**
 * Where the ratelimit service runs beside Envoy, away from every control plane (the Helm chart's
 * Envoy pods), `mcpgw ratelimit-config-sync` keeps its configuration file the same as the one the
 * control plane writes beside itself (docs/deploying.md): a real control plane, the real command, and
 * a second real ratelimit service that reads only the copy.
 */
const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');

describe('mcpgw ratelimit-config-sync', () => {
  let stack: GatewayStack;
  let dir: string;
  let sync: ManagedProcess;
  let besideEnvoy: ManagedProcess;
  let besideEnvoyDebug: string;
  let synced: string;
  let backends: { jobs: string };

  const registry = (rate: string) => (b: { jobs: string }) => ({
    routes: [{ key: 'shared', quotas: { calls: { total: { rate, shared: true } } }, toolServices: [{ name: 'jobs', url: b.jobs }] }],
  });

  beforeAll(async () => {
    ({ stack, dir, backends } = await startGateway('ratelimit-config-sync', registry('4/minute'), { rateLimit: true, registryRefreshMs: 500 }));
    const serviceDir = path.join(dir, 'beside-envoy');
    synced = rateLimitConfigFile(serviceDir);
    sync = new ManagedProcess({
      name: 'ratelimit-config-sync',
      command: process.execPath,
      args: [CLI, 'ratelimit-config-sync', `--control-plane=${stack.controlPlaneAdminUrl}`, `--output=${synced}`, '--interval-ms=200'],
      logFile: path.join(dir, 'ratelimit-config-sync.log'),
    });
    // The service beside "Envoy": its runtime directory is the copy's, as in the chart's Envoy pods.
    await waitFor('the sync to write a first configuration', async () => (fs.existsSync(synced) ? true : undefined));
    const [http, debug] = await freePorts(2);
    besideEnvoyDebug = `http://127.0.0.1:${debug}`;
    const redis = new URL(stack.redisUrl);
    besideEnvoy = new ManagedProcess({
      name: 'ratelimit-beside-envoy',
      command: rateLimitBinary()!,
      args: [],
      env: rateLimitEnvironment(serviceDir, { grpc: { socketPath: path.join(serviceDir, 'ratelimit.sock') }, http, debug }, {
        host: redis.hostname,
        port: Number(redis.port),
        user: DEV_REDIS_USER,
        password: readRedisPassword(stack.redisPasswordFile!),
      }),
      logFile: path.join(dir, 'ratelimit-beside-envoy.log'),
    });
  });
  afterAll(async () => {
    await besideEnvoy?.stop();
    await sync?.stop();
    await stack?.stop();
  });

  const same = async () => {
    const theirs = fs.readFileSync(stack.rateLimitConfigFile, 'utf8');
    return fs.existsSync(synced) && fs.readFileSync(synced, 'utf8') === theirs ? theirs : undefined;
  };

  it("copies the control plane's configuration of the shared limits, byte for byte, and follows a change of the registry", async () => {
    const first = await waitFor('the copy to match the control plane file', same);
    expect(first).toContain('name: route:shared/calls');
    expect(first).toContain('requests_per_unit: 4');
    // The service reads the copy (its /rlconfig lists what it loaded) and reloads it when it changes.
    const loaded = (rate: number) => async () => {
      const text = await (await fetch(`${besideEnvoyDebug}/rlconfig`)).text().catch(() => '');
      return text.includes('route:shared/calls') && text.includes(`requests_per_unit=${rate}`) ? text : undefined;
    };
    await waitFor('the service beside Envoy to load the copy', loaded(4));

    await stack.setPortalRegistry(registry('6/minute')(backends));
    const second = await waitFor('the copy to follow the new rate', async () => ((await same())?.includes('requests_per_unit: 6') ? fs.readFileSync(synced, 'utf8') : undefined));
    expect(second).toContain('name: route:shared/calls');
    await waitFor('the service beside Envoy to reload the copy', loaded(6));
  });
});

describe('fetchRateLimitConfig', () => {
  let server: http.Server;
  let base: string;
  let tokenFile: string;
  let served = '';

  beforeAll(async () => {
    const dir = fs.mkdtempSync(path.join(projectPath('.run'), 'ratelimit-fetch-'));
    tokenFile = path.join(dir, 'token');
    fs.writeFileSync(tokenFile, 'a-token-of-at-least-16-chars\n');
    // The control plane's own admin access check, as off loopback: the bearer token is required.
    const app = express();
    app.use(adminAccess(new TokenFile(tokenFile)));
    app.get('/config/ratelimit', (_req, res) => {
      res.type('application/yaml').send(served);
    });
    server = await listen(app, '127.0.0.1', 0);
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('sends the admin token, and refuses an answer that is not a configuration of the gateway domain', async () => {
    served = 'domain: mcpgw\ndescriptors: []\n';
    expect(await fetchRateLimitConfig({ controlPlane: base, adminTokenFile: tokenFile, timeoutMs: 2000 })).toBe(served);
    await expect(fetchRateLimitConfig({ controlPlane: base, timeoutMs: 2000 })).rejects.toThrow('HTTP 401');
    served = 'domain: other\ndescriptors: []\n';
    await expect(fetchRateLimitConfig({ controlPlane: base, adminTokenFile: tokenFile, timeoutMs: 2000 })).rejects.toThrow('not a ratelimit configuration of domain mcpgw (domain');
    served = '<html>proxy error</html>';
    await expect(fetchRateLimitConfig({ controlPlane: base, adminTokenFile: tokenFile, timeoutMs: 2000 })).rejects.toThrow('not a ratelimit configuration');
  });
});
