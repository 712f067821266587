import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { INTERNAL_TLS_FILES, InternalIdentity } from '../../control-plane/shared/internal-tls';
import { connectClient, listedTools, startGateway } from '../support/gateway-fixture';
import { envoyCertificateSerials, envoyStatAt, tlsConnect, waitFor } from '../support/internal-peers';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * Every internal certificate renewed in place (a new Secret version swapped in, as the kubelet does
 * with cert-manager's renewals), on a running stack: each channel's next connection presents the new
 * certificate, and the streams open across the renewal (Envoy's ADS stream, the sidecar's catalog
 * stream, a client's GET stream from Envoy to the sidecar) carry on without a restart or reconnect.
 */
describe('renewing the internal certificates without a restart', () => {
  let stack: GatewayStack;
  let toolbox: ScriptedToolService;
  const control: InternalIdentity = { role: 'control-plane', name: 'control-plane' };
  const sidecar: InternalIdentity = { role: 'sidecar', name: 'sidecar' };
  const envoy: InternalIdentity = { role: 'envoy', name: 'envoy' };

  beforeAll(async () => {
    toolbox = await ScriptedToolService.start(['alpha']);
    // debug: the sidecar logs each connection it accepts with the client certificate's serial.
    ({ stack } = await startGateway('internal-rotation', () => ({ routes: [{ key: 'live', toolServices: [{ name: 'box', url: toolbox.url }] }] }), { logLevel: 'debug' }));
    await waitFor('the toolbox in the catalog', async () => ((await listedTools(stack.gatewayUrl('live'))) ?? []).length === 1 || undefined);
  });
  afterAll(async () => {
    await stack?.stop();
    await toolbox?.stop();
  });

  const dirOf = (identity: InternalIdentity) => stack.internalTlsDir(identity);
  const serialOf = (identity: InternalIdentity) => new X509Certificate(fs.readFileSync(path.join(dirOf(identity), INTERNAL_TLS_FILES.certificate))).serialNumber;
  const caFile = () => path.join(dirOf(sidecar), INTERNAL_TLS_FILES.ca);
  /** The serial of the certificate a server presents on a new connection (as an Envoy connects). */
  const serverSerial = async (port: number, alpn?: string) => {
    const connected = await tlsConnect(port, { dir: dirOf(envoy) }, caFile(), alpn);
    if ('error' in connected) throw new Error(connected.error);
    connected.socket.destroy();
    return connected.serial;
  };
  const logLines = (name: string, text: string) => fs.readFileSync(stack.logFileOf(name), 'utf8').split('\n').filter((line) => line.includes(text));
  /** The serials the control plane logged for streams it accepted on `method` (ADS or the catalog). */
  const streamSerials = (method: string) => logLines('control-plane', 'internal stream opened').filter((line) => line.includes(method)).map((line) => JSON.parse(line).serial as string);
  const sidecarConnectionSerials = () => logLines('sidecar', 'internal connection accepted').map((line) => JSON.parse(line).serial as string);

  it('serves new connections with the renewed certificates while open streams carry on', async () => {
    const before = { control: serialOf(control), sidecar: serialOf(sidecar), envoy: serialOf(envoy) };
    expect(await serverSerial(stack.ports.grpc, 'h2')).toBe(before.control);
    expect(await serverSerial(stack.ports.sidecar)).toBe(before.sidecar);
    expect(await envoyCertificateSerials(stack.ports.envoyAdmin)).toContain(before.envoy);
    expect(streamSerials('StreamAggregatedResources')).toEqual([before.envoy]);
    expect(streamSerials('WatchCatalog')).toEqual([before.sidecar]);
    const xdsConnections = await envoyStatAt(stack.ports.envoyAdmin, 'cluster.xds_control_plane.upstream_cx_total');

    // A client whose GET stream Envoy holds open to the sidecar across the renewal.
    const first = await connectClient(stack.gatewayUrl('live'));
    let notified = 0;
    first.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      notified++;
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const streamConnectionsBefore = await envoyStatAt(stack.ports.envoyAdmin, 'cluster.mcp_sidecar_streams.upstream_cx_total');

      for (const identity of [control, sidecar, envoy]) stack.inside!.renew(identity, 5);
      const after = { control: serialOf(control), sidecar: serialOf(sidecar), envoy: serialOf(envoy) };
      for (const key of ['control', 'sidecar', 'envoy'] as const) expect(after[key]).not.toBe(before[key]);

      // Each server presents its new certificate to the next connection; Envoy loads its own.
      await waitFor('the control plane to present its new certificate', async () => ((await serverSerial(stack.ports.grpc, 'h2')) === after.control ? true : undefined));
      await waitFor('the sidecar to present its new certificate', async () => ((await serverSerial(stack.ports.sidecar)) === after.sidecar ? true : undefined));
      await waitFor("Envoy to load its new certificate", async () => {
        const serials = await envoyCertificateSerials(stack.ports.envoyAdmin);
        return serials.includes(after.envoy) && !serials.includes(before.envoy) ? true : undefined;
      });

      // The streams carry on: a tools change still reaches the client's GET stream (catalog stream →
      // sidecar → Envoy → client) and Envoy (ADS), and nobody reconnected.
      toolbox.setTools(['alpha', 'beta']);
      await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=live`, { method: 'POST' });
      await waitFor('the list_changed notification on the open GET stream', async () => (notified === 1 ? true : undefined));
      expect(await envoyStatAt(stack.ports.envoyAdmin, 'cluster.xds_control_plane.upstream_cx_total')).toBe(xdsConnections);
      expect(streamSerials('StreamAggregatedResources')).toEqual([before.envoy]);
      expect(streamSerials('WatchCatalog')).toEqual([before.sidecar]);

      // Envoy's next connection to the sidecar (a second client's GET stream needs one: the first holds
      // its own) presents Envoy's new certificate.
      const second = await connectClient(stack.gatewayUrl('live'));
      try {
        await waitFor('a new connection from Envoy to the sidecar', async () =>
          (await envoyStatAt(stack.ports.envoyAdmin, 'cluster.mcp_sidecar_streams.upstream_cx_total')) > streamConnectionsBefore ? true : undefined,
        );
        await waitFor('the sidecar to accept it with the new Envoy certificate', async () => (sidecarConnectionSerials().includes(after.envoy) ? true : undefined));
      } finally {
        await second.close();
      }

      // A control plane restart makes Envoy and the sidecar connect again: with their new certificates.
      await stack.stopProcess('control-plane');
      await stack.startControlPlane();
      await waitFor('Envoy and the sidecar to reconnect with their new certificates', async () =>
        streamSerials('StreamAggregatedResources').includes(after.envoy) && streamSerials('WatchCatalog').includes(after.sidecar) ? true : undefined,
      );
    } finally {
      await first.close();
    }
  });
});
