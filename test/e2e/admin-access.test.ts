import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { projectPath } from '../../control-plane/shared/paths';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { ManagedProcess, freePorts } from '../../control-plane/devstack/processes';
import { testDir, writeRegistry } from '../support/gateway-fixture';

const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const mcpgw = (args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 15_000 });

/**
 * Admin ports and internal channels off loopback (docs/adr/0017-closed-inside.md): a process refuses to
 * start without what authenticates them, in one line; an admin port bound to a network address asks
 * every caller for the token.
 */
describe('admin ports and the inside off loopback', () => {
  const registry = () => writeRegistry(testDir('admin-access-cli'), { routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: 'http://127.0.0.1:1/mcp' }] }] });
  const controlPlane = (extra: string[]) => ['control-plane', '--registry', registry(), '--listener', '127.0.0.1:10000', '--sidecar', '127.0.0.1:18080', ...extra];

  it.each([
    ['a control plane admin port', controlPlane(['--grpc', '127.0.0.1:1', '--admin', '0.0.0.0:18001']), /^mcpgw control-plane: --admin 0\.0\.0\.0:18001 is not a loopback address: give --admin-token-file FILE/],
    ['a control plane gRPC port without TLS', controlPlane(['--grpc', '0.0.0.0:18000']), /^mcpgw control-plane: --grpc 0\.0\.0\.0:18000 is not a loopback address, and the gateway's inside is plain without --internal-tls DIR/],
    ['sidecars reached without TLS', ['control-plane', '--registry', '/dev/null', '--listener', '127.0.0.1:10000', '--grpc', '127.0.0.1:1', '--sidecar', '10.0.0.5:18080'], /^mcpgw control-plane: --sidecar 10\.0\.0\.5:18080 is not a loopback address/],
    ['a sidecar port without TLS', ['sidecar', '--listen', '0.0.0.0:18080', '--control-plane', '127.0.0.1:18000'], /^mcpgw sidecar: --listen 0\.0\.0\.0:18080 is not a loopback address/],
    ["Envoy's egress listener without TLS", controlPlane(['--grpc', '127.0.0.1:1', '--egress', '0.0.0.0:10001']), /^mcpgw control-plane: --egress 0\.0\.0\.0:10001 is not a loopback address/],
    ["the sidecar reaching Envoy's egress listener without TLS", ['sidecar', '--listen', '127.0.0.1:18080', '--control-plane', '127.0.0.1:18000', '--egress', 'envoy-egress:10001'], /^mcpgw sidecar: --egress envoy-egress:10001 is not a loopback address/],
    ['a sidecar admin port', ['sidecar', '--listen', '127.0.0.1:18080', '--control-plane', '127.0.0.1:18000', '--admin', '0.0.0.0:18081'], /^mcpgw sidecar: --admin 0\.0\.0\.0:18081 is not a loopback address/],
    ["Envoy's admin", ['envoy-bootstrap', '--node-id', 'e', '--admin', '0.0.0.0:9901', '--xds', '127.0.0.1:18000'], /^mcpgw envoy-bootstrap: --admin 0\.0\.0\.0:9901 is not a loopback address: Envoy's admin interface has no authentication/],
    ["Envoy's stats listener", ['envoy-bootstrap', '--node-id', 'e', '--admin', '127.0.0.1:9901', '--xds', '127.0.0.1:18000', '--stats-listener', '0.0.0.0:9902'], /^mcpgw envoy-bootstrap: --stats-listener 0\.0\.0\.0:9902 is not a loopback address: give --stats-token-file FILE/],
    ['ADS without TLS', ['envoy-bootstrap', '--node-id', 'e', '--admin', '127.0.0.1:9901', '--xds', 'cp.internal:18000'], /^mcpgw envoy-bootstrap: --xds cp\.internal:18000 is not a loopback address/],
  ])('refuses to start with %s open to the network, in one line', (_what, args, message) => {
    const result = mcpgw(args);
    expect(result.status).toBe(2);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stderr).toMatch(message);
  });

  it('refuses a token file with a token too short to be one', () => {
    const dir = testDir('admin-access-short-token');
    fs.writeFileSync(path.join(dir, 'token'), 'short\n');
    const result = mcpgw(controlPlane(['--grpc', '127.0.0.1:1', '--admin', '0.0.0.0:18001', '--admin-token-file', path.join(dir, 'token')]));
    expect(result.status).toBe(1);
    expect(result.stderr.trim()).toMatch(/^mcpgw control-plane: the token in .* is shorter than 16 characters$/);
  });

  /**
   * A network namespace of the test's own (`unshare --user --net`, no privileges needed) with a veth
   * pair: the control plane's and the sidecar's admin ports bound to 10.77.0.1 and called from
   * 10.77.0.2, two addresses of a network interface, neither loopback (the rule is about addresses:
   * 127.0.0.2 would count as loopback). Inside it, a script starts both processes, calls each admin
   * port as a stranger and with the token, prints the answers as JSON lines and stops them.
   */
  it('asks every caller off loopback for the token; the probes get their status alone', () => {
    const dir = testDir('admin-access-netns');
    const token = 'a-test-admin-token-of-some-length';
    fs.writeFileSync(path.join(dir, 'token'), `${token}\n`);
    const registryFile = writeRegistry(dir, { routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: 'http://127.0.0.1:1/mcp' }] }] });
    const probe = path.join(dir, 'probe.js');
    fs.writeFileSync(
      probe,
      `const http = require('node:http');
const get = (port, path, token) => new Promise((resolve) => {
  const request = http.request({ host: '10.77.0.1', port, path, localAddress: '10.77.0.2', headers: token ? { authorization: 'Bearer ' + token } : {} }, (response) => {
    let body = '';
    response.on('data', (chunk) => (body += chunk));
    response.on('end', () => resolve({ port, path, token: Boolean(token), status: response.statusCode, body: body.slice(0, 300) }));
  });
  request.on('error', (error) => resolve({ port, path, error: error.message }));
  request.end();
});
(async () => {
  for (let i = 0; i < 100; i++) {
    const ready = await get(18001, '/healthz');
    const sidecar = await get(18081, '/healthz');
    if (ready.status && sidecar.status) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  for (const [port, path] of [[18001, '/status'], [18001, '/metrics'], [18001, '/config/xds'], [18001, '/readyz'], [18001, '/healthz'], [18081, '/metrics'], [18081, '/healthz']]) {
    console.log(JSON.stringify(await get(port, path)));
    console.log(JSON.stringify(await get(port, path, ${JSON.stringify(token)})));
  }
  console.log(JSON.stringify(await get(18001, '/status', 'a-wrong-token-of-some-length')));
})();
`,
    );
    const script = [
      'set -e',
      'ip link set lo up',
      'ip link add v0 type veth peer name v1',
      'ip addr add 10.77.0.1/24 dev v0 && ip addr add 10.77.0.2/24 dev v1',
      'ip link set v0 up && ip link set v1 up',
      `"${process.execPath}" "${CLI}" control-plane --registry "${registryFile}" --grpc 127.0.0.1:18000 --admin 10.77.0.1:18001 --admin-token-file "${dir}/token" --listener 127.0.0.1:10000 --sidecar 127.0.0.1:18080 2> "${dir}/control-plane.log" & cp=$!`,
      `"${process.execPath}" "${CLI}" sidecar --listen 127.0.0.1:18080 --control-plane 127.0.0.1:18000 --admin 10.77.0.1:18081 --admin-token-file "${dir}/token" 2> "${dir}/sidecar.log" & sc=$!`,
      `"${process.execPath}" "${probe}"`,
      'kill $cp $sc; wait',
    ].join('\n');
    const result = spawnSync('unshare', ['--user', '--map-root-user', '--net', 'sh', '-c', script], { encoding: 'utf8', timeout: 30_000 });
    expect(result.stderr).toBe('');
    const answers = result.stdout.trim().split('\n').map((line) => JSON.parse(line));
    const answer = (port: number, path: string, token: boolean) => answers.find((entry) => entry.port === port && entry.path === path && entry.token === token);
    for (const [port, path] of [[18001, '/status'], [18001, '/metrics'], [18001, '/config/xds'], [18081, '/metrics']] as const) {
      expect(answer(port, path, false)).toMatchObject({ status: 401, body: expect.stringContaining('Authorization: Bearer') });
      expect(answer(port, path, true)).toMatchObject({ status: 200 });
    }
    // The probes' paths answer a stranger too, with their status and nothing else.
    expect(answer(18001, '/healthz', false)).toMatchObject({ status: 200 });
    expect(JSON.parse(answer(18001, '/readyz', false).body)).toEqual({ status: 'DOWN' });
    expect(JSON.parse(answer(18001, '/readyz', true).body)).toMatchObject({ status: 'DOWN', routesWithoutSnapshot: ['demo'] });
    expect(answer(18081, '/healthz', false).status).toBeDefined();
    expect(answers.at(-1)).toMatchObject({ path: '/status', token: true, status: 401 });
  });

  it("keeps Envoy's admin on loopback and serves probes and Prometheus a stats listener with nothing else", async () => {
    const dir = testDir('admin-access-envoy-stats');
    const token = 'a-stats-token-of-some-length';
    fs.writeFileSync(path.join(dir, 'token'), `${token}\n`);
    const [adminPort, statsPort] = await freePorts(2);
    const output = path.join(dir, 'envoy.yaml');
    const written = mcpgw(['envoy-bootstrap', '--node-id', 'stats-test', '--admin', `127.0.0.1:${adminPort}`, '--xds', '127.0.0.1:1', '--stats-listener', `127.0.0.1:${statsPort}`, '--stats-token-file', path.join(dir, 'token'), '--output', output]);
    expect(written.stderr).toBe('');
    const envoy = new ManagedProcess({ name: 'envoy-stats', command: envoyBinary(), args: ['-c', output, '--use-dynamic-base-id', '--log-level', 'warn'], logFile: path.join(dir, 'envoy.log') });
    try {
      const stats = (requestPath: string, init: RequestInit = {}) => fetch(`http://127.0.0.1:${statsPort}${requestPath}`, init);
      // Envoy opens its listeners once initialized: here, without a control plane, after the initial
      // fetch timeouts of CDS and then LDS (15 s each). Kubernetes' liveness probe therefore asks the
      // admin on loopback instead.
      await envoy.untilReady('the stats listener', async () => ((await stats('/ready')).status > 0 ? true : undefined), { timeoutMs: 50_000 });
      // /ready is Envoy's own answer (503 here: no control plane has configured it).
      expect((await stats('/ready')).status).toBe((await fetch(`http://127.0.0.1:${adminPort}/ready`)).status);
      expect((await stats('/stats/prometheus')).status).toBe(401);
      expect((await stats('/stats/prometheus', { headers: { authorization: 'Bearer not-the-token-at-all' } })).status).toBe(401);
      const metrics = await stats('/stats/prometheus', { headers: { authorization: `Bearer ${token}` } });
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toContain('envoy_server_live');
      for (const [method, adminPath] of [['GET', '/config_dump'], ['GET', '/certs'], ['POST', '/quitquitquit'], ['POST', '/logging?level=trace'], ['GET', '/stats']]) {
        expect([method, adminPath, (await stats(adminPath, { method, headers: { authorization: `Bearer ${token}` } })).status]).toEqual([method, adminPath, 404]);
      }
    } finally {
      await envoy.stop();
    }
  }, 90_000);
});
