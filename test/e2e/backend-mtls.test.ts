import * as fs from 'node:fs';
import * as https from 'node:https';
import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { connectClient, envoyConfigVersions, listedTools, startGateway, testDir } from '../support/gateway-fixture';
import { MountedSecret } from '../support/mounted-secret';
import { everyRequestKind, expectEveryKind } from '../support/request-kinds';
import { IssuedCertificate, ShortLivedCa } from '../support/short-lived-pki';
import { SpyToolService } from '../support/spy-tool-service';

/** Serial numbers (lower-case hex) of the certificates Envoy presents, from its admin /certs. */
async function envoyCertificateSerials(stack: GatewayStack): Promise<string[]> {
  const certs = (await (await fetch(`${stack.envoyAdminUrl}/certs`)).json()) as { certificates: { cert_chain?: { serial_number: string }[] }[] };
  return certs.certificates.flatMap((context) => (context.cert_chain ?? []).map((cert) => cert.serial_number.toLowerCase()));
}

/**
 * mTLS to a Tool Service (docs/auth.md, Backends): the gateway's client certificate, its key and the
 * backend's CA come from a mounted secret in cert-manager's layout (tls.crt, tls.key, ca.crt), read by
 * Envoy through SDS and by the control plane at each listing. Certificates are issued at test time by
 * a throwaway CA and live for minutes.
 */
describe('mTLS to a Tool Service with short-lived certificates (real Envoy, SDS from a mounted secret)', () => {
  const SERVER_NAME = 'spy.tools.test';
  let stack: GatewayStack;
  let spy: SpyToolService;
  let ca: ShortLivedCa;
  let mount: MountedSecret;
  let first: IssuedCertificate;

  const secretFiles = (client: IssuedCertificate) => ({ 'tls.crt': client.cert, 'tls.key': client.key, 'ca.crt': ca.caPem });

  beforeAll(async () => {
    const dir = testDir('backend-mtls-pki');
    ca = ShortLivedCa.create(path.join(dir, 'ca'));
    const server = ca.issue(SERVER_NAME, { usage: 'server', ttlMinutes: 15 });
    fs.writeFileSync(path.join(dir, 'server.pem'), server.cert);
    fs.writeFileSync(path.join(dir, 'server.key'), server.key);
    fs.writeFileSync(path.join(dir, 'ca.pem'), ca.caPem);
    spy = await SpyToolService.start({ tls: { certFile: path.join(dir, 'server.pem'), keyFile: path.join(dir, 'server.key'), clientCaFile: path.join(dir, 'ca.pem') } });
    first = ca.issue('mcp-gateway', { usage: 'client', ttlMinutes: 10 });
    mount = new MountedSecret(path.join(dir, 'spy-mtls'), secretFiles(first));
    ({ stack } = await startGateway('backend-mtls', () => ({
      routes: [
        {
          key: 'secure',
          toolServices: [
            {
              name: 'spy',
              url: spy.url,
              transport: { tls: { caFile: mount.file('ca.crt'), sni: SERVER_NAME, clientCertFile: mount.file('tls.crt'), clientKeyFile: mount.file('tls.key') } },
            },
          ],
        },
      ],
    })));
    await waitFor('the mTLS backend in the catalog', async () => (((await listedTools(stack.gatewayUrl('secure'))) ?? []).includes('spy__echo') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await spy?.stop();
  });

  it('refuses a client without a certificate, and accepts the gateway on every request kind and the catalog', async () => {
    const refused = await new Promise<string>((resolve) => {
      const request = https.request(spy.url, { method: 'POST', ca: ca.caPem, servername: SERVER_NAME, headers: { 'content-type': 'application/json' } }, (response) =>
        resolve(`answered ${response.statusCode}`),
      );
      request.on('error', (error) => resolve(error.message));
      request.end('{}');
    });
    expect(refused).not.toMatch(/^answered/);
    expect(spy.refusedHandshakes).toBeGreaterThan(0);

    await everyRequestKind(stack.gatewayUrl('secure'), spy, 'spy', 'the-callers-own-token');
    expectEveryKind(spy.requests);
    expect(spy.of({ rpcMethod: 'tools/list' }).length).toBeGreaterThan(0);
    expect(new Set(spy.requests.map((request) => request.clientCertSerial))).toEqual(new Set([first.serial]));
  });

  it('follows a renewed certificate: the stream in flight is not cut, and every connection after it — call, session open, DELETE, catalog listing — shows the new one', async () => {
    const versionsBefore = await envoyConfigVersions(stack);
    const streaming = await connectClient(stack.gatewayUrl('secure'));
    const progress: string[] = [];
    const held = streaming.callTool({ name: 'spy__hold', arguments: {} }, undefined, { onprogress: ({ message }) => void progress.push(message ?? '') });
    await waitFor('the held call streaming', async () => (progress.length === 1 ? true : undefined));

    const renewed = ca.issue('mcp-gateway', { usage: 'client', ttlMinutes: 10 });
    mount.update(secretFiles(renewed));
    const renewedAt = spy.requests.length;
    // Envoy reads the moved files by itself: its admin /certs lists the certificates it uses.
    await waitFor("Envoy's SDS to load the renewed certificate", async () => ((await envoyCertificateSerials(stack)).includes(renewed.serial.toLowerCase()) ? true : undefined));
    expect(await envoyCertificateSerials(stack)).not.toContain(first.serial.toLowerCase());
    // Connections made before the renewal keep the certificate they were made with: the spy lets go of
    // the idle ones, so that what follows needs new handshakes (the one streaming stays).
    const client = new Client({ name: 'after-renewal', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(stack.gatewayUrl('secure')));
    await waitFor('a new connection with the renewed certificate', async () => {
      spy.closeIdleConnections();
      await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=secure`, { method: 'POST' });
      const listing = spy.of({ rpcMethod: 'tools/list' }).at(-1);
      return listing?.clientCertSerial === renewed.serial ? true : undefined;
    });
    spy.closeIdleConnections();
    await client.connect(transport);
    await client.callTool({ name: 'spy__echo', arguments: { text: 'renewed' } });
    await transport.terminateSession();
    await client.close();

    spy.release();
    expect((await held).content).toEqual([{ type: 'text', text: 'released' }]);
    await streaming.close();

    const after = spy.requests.slice(renewedAt);
    const kinds = (serial: string) => new Set(after.filter((request) => request.clientCertSerial === serial).map((request) => request.rpcMethod || request.httpMethod));
    for (const kind of ['initialize', 'tools/call', 'DELETE', 'tools/list']) expect(kinds(renewed.serial)).toContain(kind);
    // Only the call that was streaming when the certificate changed finished on the old one.
    expect(after.filter((request) => request.clientCertSerial === first.serial && request.rpcMethod === 'tools/call')).toEqual([]);
    expect(await envoyConfigVersions(stack)).toEqual(versionsBefore);
  });
});
