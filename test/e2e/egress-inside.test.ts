import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InternalPki, writeSecretDirectory } from '../../control-plane/devstack/internal-pki';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { INTERNAL_TLS_FILES, InternalIdentity } from '../../control-plane/shared/internal-tls';
import { EGRESS_UPSTREAM_HEADER } from '../../control-plane/xds/translate/settings';
import { connectClient, listedTools, startGateway, testDir } from '../support/gateway-fixture';
import { envoyStatAt, internalHttpRequest, PeerFiles, tlsConnect, waitFor } from '../support/internal-peers';
import { MountedSecret } from '../support/mounted-secret';
import { everyRequestKind, expectEveryKind } from '../support/request-kinds';
import { SpyToolService } from '../support/spy-tool-service';

/**
 * Envoy's egress listener sends whatever reaches it to a Tool Service with the gateway's own backend
 * credentials (docs/adr/0013-backend-credentials.md): only the gateway's sidecars may use it
 * (docs/adr/0017-closed-inside.md). Real Envoy, control plane and sidecar with the closed inside; a spy
 * Tool Service with a service-account token, which counts what reaches it.
 */
describe("Envoy's egress listener serves only the gateway's sidecars", () => {
  let stack: GatewayStack;
  let spy: SpyToolService;
  let dir: string;
  let cluster: string;
  let otherCa: InternalPki;
  const sidecar: InternalIdentity = { role: 'sidecar', name: 'sidecar' };
  const envoy: InternalIdentity = { role: 'envoy', name: 'envoy' };
  const INITIALIZE = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'stranger', version: '1' } } });

  beforeAll(async () => {
    spy = await SpyToolService.start();
    dir = testDir('egress-inside-files');
    const secret = new MountedSecret(path.join(dir, 'spy-token'), { token: 'service-account-v1\n' });
    ({ stack } = await startGateway('egress-inside', () => ({
      routes: [{ key: 'spied', toolServices: [{ name: 'spy', url: spy.url, credentials: { mode: 'serviceAccount', tokenFile: secret.file('token') } }] }],
    })));
    await waitFor('the spy in the catalog', async () => (((await listedTools(stack.gatewayUrl('spied'))) ?? []).includes('spy__echo') ? true : undefined));
    cluster = await spyCluster();
    otherCa = InternalPki.create(path.join(dir, 'other-ca'));
  });
  afterAll(async () => {
    await stack?.stop();
    await spy?.stop();
  });

  /** The spy's cluster, as the egress routes name it (`egress/<cluster>`). */
  async function spyCluster(): Promise<string> {
    const dump = (await (await fetch(`http://127.0.0.1:${stack.ports.envoyAdmin}/config_dump?resource=dynamic_route_configs`)).json()) as {
      configs: { route_config: { name: string; virtual_hosts: { routes: { name: string }[] }[] } }[];
    };
    const egress = dump.configs.find((config) => config.route_config.name === 'mcp_egress_routes')!;
    const names = egress.route_config.virtual_hosts.flatMap((host) => host.routes.map((route) => route.name));
    return names.find((name) => name.startsWith('egress/') && name !== 'egress/unknown')!.slice('egress/'.length);
  }

  const dirOf = (identity: InternalIdentity) => stack.internalTlsDir(identity);
  const caFile = () => path.join(dirOf(sidecar), INTERNAL_TLS_FILES.ca);
  const serialOf = (identity: InternalIdentity) => new X509Certificate(fs.readFileSync(path.join(dirOf(identity), INTERNAL_TLS_FILES.certificate))).serialNumber;
  /** A certificate of another CA naming `identity`, beside our CA (the stranger trusts Envoy). */
  const strangerDir = (identity: InternalIdentity): PeerFiles => ({
    dir: writeSecretDirectory(path.join(dir, `stranger-${identity.role}`), { ...otherCa.issue(identity, { ttlMinutes: 10 }), [INTERNAL_TLS_FILES.ca]: fs.readFileSync(caFile(), 'utf8') }),
  });
  /** A GET of the spy's MCP path through the egress listener over TLS with `files`' certificate: the status line, or why none. */
  const egressOverTls = (files: PeerFiles) => internalHttpRequest(stack.ports.egress, files, caFile(), '/mcp', { [EGRESS_UPSTREAM_HEADER]: cluster });
  /** The serials of the client certificates Envoy's egress listener logged requests from (its access log). */
  const egressPeerSerials = () =>
    fs
      .readFileSync(stack.logFileOf('envoy-access'), 'utf8')
      .split('\n')
      .filter((line) => line.includes('"egress_peer_serial"'))
      .map((line) => (JSON.parse(line) as { egress_peer_serial: string }).egress_peer_serial.toUpperCase());

  it('refuses a plain HTTP stranger: nothing reaches the Tool Service, no credential leaves', async () => {
    const seen = spy.requests.length;
    const answer = await fetch(`http://127.0.0.1:${stack.ports.egress}/mcp`, {
      method: 'POST',
      headers: { [EGRESS_UPSTREAM_HEADER]: cluster, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: INITIALIZE,
    }).then(
      (response) => `HTTP ${response.status}`,
      () => 'refused',
    );
    expect(answer).toBe('refused');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(spy.requests.length).toBe(seen);
  });

  it('refuses TLS without a client certificate, with another CA, or with a certificate of another role', async () => {
    const seen = spy.requests.length;
    expect(await egressOverTls('no certificate')).not.toMatch(/^HTTP/);
    expect(await egressOverTls(strangerDir(sidecar))).not.toMatch(/^HTTP/);
    // Our CA, but not a sidecar: Envoy's own certificate and the control plane's (it lists Tool Services directly).
    expect(await egressOverTls({ dir: dirOf(envoy) })).not.toMatch(/^HTTP/);
    expect(await egressOverTls({ dir: dirOf({ role: 'control-plane', name: 'control-plane' }) })).not.toMatch(/^HTTP/);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(spy.requests.length).toBe(seen);
    // Each refused in Envoy's handshake, for its own reason.
    const sslStat = (name: string) => envoyStatAt(stack.ports.envoyAdmin, `listener.127.0.0.1_${stack.ports.egress}.ssl.${name}`);
    expect(await sslStat('fail_verify_no_cert')).toBeGreaterThanOrEqual(1);
    expect(await sslStat('fail_verify_error')).toBeGreaterThanOrEqual(1);
    expect(await sslStat('fail_verify_san')).toBeGreaterThanOrEqual(2);
    // Positive control: a sidecar's certificate gets through to the spy, with the gateway's token.
    expect(await egressOverTls({ dir: dirOf(sidecar) })).toMatch(/^HTTP\/1\.1 \d{3}/);
    expect(spy.requests.length).toBe(seen + 1);
    expect(spy.requests.at(-1)!.headers.authorization).toBe('Bearer service-account-v1');
  });

  it("carries the gateway's own requests: calls, sessions, notifications, DELETE, catalog listings", async () => {
    const from = spy.requests.length;
    await everyRequestKind(stack.gatewayUrl('spied'), spy, 'spy', 'the-callers-own-token');
    expectEveryKind(spy.requests.slice(from));
    expect(new Set(spy.requests.slice(from).map((request) => request.headers.authorization))).toEqual(new Set(['Bearer service-account-v1']));
    // Envoy writes its access log about once a second.
    await waitFor("the sidecar's certificate in the egress listener's access log", async () => (egressPeerSerials().includes(serialOf(sidecar)) ? true : undefined));
  });

  it("uses renewed certificates on both ends for the next connections, without a restart", async () => {
    const before = { sidecar: serialOf(sidecar), envoy: serialOf(envoy) };
    const serverSerial = async () => {
      const connected = await tlsConnect(stack.ports.egress, { dir: dirOf(sidecar) }, caFile());
      if ('error' in connected) throw new Error(connected.error);
      connected.socket.destroy();
      return connected.serial;
    };
    expect(await serverSerial()).toBe(before.envoy);
    stack.inside!.renew(sidecar, 5);
    stack.inside!.renew(envoy, 5);
    const after = { sidecar: serialOf(sidecar), envoy: serialOf(envoy) };
    expect(after).not.toEqual(before);
    await waitFor("Envoy's egress listener to present its new certificate", async () => ((await serverSerial()) === after.envoy ? true : undefined));
    // The sidecar's next backend session opens a new connection to the egress listener, with its new certificate.
    await waitFor("the sidecar's requests through the egress listener under its new certificate", async () => {
      const client = await connectClient(stack.gatewayUrl('spied'));
      try {
        await client.callTool({ name: 'spy__echo', arguments: { text: 'after renewal' } });
      } finally {
        await client.close();
      }
      return egressPeerSerials().includes(after.sidecar) ? true : undefined;
    });
    expect(fs.readFileSync(stack.logFileOf('sidecar'), 'utf8')).toContain('internal TLS certificate reloaded');
  });
});
