import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { encode } from '@msgpack/msgpack';
import * as grpc from '@grpc/grpc-js';
import { overloadForThisHost } from '../../control-plane/devstack/envoy';
import { InternalPki, writeSecretDirectory } from '../../control-plane/devstack/internal-pki';
import { ManagedProcess, freePort } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { INTERNAL_TLS_FILES, InternalIdentity } from '../../control-plane/shared/internal-tls';
import { INTERNAL_CERTIFICATE_SECRET } from '../../control-plane/xds/translate/internal-tls';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { callToolContent, controlPlaneStatus, listedTools, metricValue, startGateway } from '../support/gateway-fixture';
import { adsRequest, catalogRequest, envoyStatAt, internalHttpRequest, startEnvoyWith, waitFor } from '../support/internal-peers';
import { ServerRequestsService } from '../support/server-requests-service';

/**
 * The inside refuses strangers (docs/adr/0017-closed-inside.md): real Envoys, control plane and
 * sidecar on a stack with mutual TLS, certificates issued at test time by the stack's dev CA, and by
 * another CA for the strangers.
 */
describe('a closed inside refuses strangers', () => {
  let stack: GatewayStack;
  let dir: string;
  let caFile: string;
  let grpcAddress: string;
  /** Certificates of the stack's own CA, for identities the stack never gave out. */
  let issue: (identity: InternalIdentity) => { dir: string };
  let otherCa: InternalPki;
  const envoys: ManagedProcess[] = [];
  /** A stateful backend that opted in: a 2026-07-28 client's call to it goes through the sidecar's pooled-call lane. */
  let asker: ServerRequestsService;

  beforeAll(async () => {
    asker = await ServerRequestsService.start();
    ({ stack, dir } = await startGateway('closed-inside', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] },
        { key: 'pooled', toolServices: [{ name: 'asker', url: asker.url, transport: { resumeCutPooledCalls: true } }] },
      ],
    })));
    caFile = path.join(stack.internalTlsDir({ role: 'sidecar', name: 'sidecar' }), INTERNAL_TLS_FILES.ca);
    grpcAddress = `127.0.0.1:${stack.ports.grpc}`;
    issue = (identity) => ({ dir: stack.internalTlsDir(identity) });
    otherCa = InternalPki.create(path.join(dir, 'other-ca'));
  });
  afterAll(async () => {
    for (const envoy of envoys) await envoy.stop();
    await stack?.stop();
    await asker?.stop();
  });

  /** A directory with a certificate of the other CA for `identity`, beside our CA (the stranger trusts us). */
  const strangerDir = (identity: InternalIdentity) => {
    const issued = otherCa.issue(identity, { ttlMinutes: 10 });
    return writeSecretDirectory(path.join(dir, `stranger-${identity.role}-${identity.name}`), { ...issued, [INTERNAL_TLS_FILES.ca]: fs.readFileSync(caFile, 'utf8') });
  };

  const ourEnvoyNode = () => stack.envoyNodeIds.get('envoy')!;

  it('serves its own Envoy: the positive control of every refusal below', async () => {
    const nodes = (await controlPlaneStatus(stack)).xds.nodes as { node: { id: string } }[];
    expect(nodes.map((node) => node.node.id)).toContain(ourEnvoyNode());
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(['weather__get_forecast', 'weather__get_alerts']);
  });

  it("carries a 2026-07-28 client's call in a pooled backend session through the sidecar's lane, which reaches the backend over the inside's mutual TLS", async () => {
    await waitFor('the stateful backend in the catalog', async () => (((await listedTools(stack.gatewayUrl('pooled'))) ?? []).includes('asker__steps') ? true : undefined));
    const resumesBefore = asker.resumedFrom.length;
    const response = await fetch(stack.gatewayUrl('pooled'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'asker__steps' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'asker__steps', arguments: { steps: 2, interval_ms: 100, close_after: 1, close_anyway: true }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, progressToken: 'p' } },
      }),
    });
    // The backend closed the stream after the first step (its progress notification carried the event id
    // the resume starts from): the rest came on the sidecar's resume.
    expect(await response.text()).toContain('done after 2 steps');
    expect(asker.resumedFrom.length).toBe(resumesBefore + 1);
  });

  it('gives an Envoy without a valid client certificate no xDS: no listener, no cluster, no secret', async () => {
    const noCertificate = await freePort();
    const otherCaCertificate = await freePort();
    const xds = [{ host: '127.0.0.1', port: stack.ports.grpc }];
    const callLog = [{ host: '127.0.0.1', port: stack.controlPlanePorts[0].callLog }];
    const base = { adsApiType: 'GRPC' as const, adminAddress: '127.0.0.1', xds, callLog, overload: overloadForThisHost() };
    envoys.push(await startEnvoyWith({ ...base, nodeId: 'envoy/no-certificate', adminPort: noCertificate }, dir, 'envoy-no-certificate'));
    envoys.push(
      await startEnvoyWith(
        {
          ...base,
          nodeId: 'envoy/other-ca',
          adminPort: otherCaCertificate,
          internalTls: { certDir: strangerDir({ role: 'envoy', name: 'envoy' }), sdsDir: path.join(dir, 'other-ca-sds') },
        },
        dir,
        'envoy-other-ca',
      ),
    );
    for (const adminPort of [noCertificate, otherCaCertificate]) {
      // It keeps trying; every try is refused.
      await waitFor('the stranger to try three times', async () => ((await envoyStatAt(adminPort, 'cluster.xds_control_plane.upstream_cx_total')) >= 3 ? true : undefined));
      expect(await envoyStatAt(adminPort, 'control_plane.connected_state')).toBe(0);
      expect(await envoyStatAt(adminPort, 'listener_manager.total_listeners_active')).toBe(0);
      expect(await envoyStatAt(adminPort, 'cluster_manager.active_clusters')).toBe(2); // its bootstrap's own: ADS and the call log
      // Only the secrets of its own bootstrap (its certificate files), none from a control plane.
      const secrets = (await (await fetch(`http://127.0.0.1:${adminPort}/config_dump?resource=dynamic_active_secrets`)).json()) as { configs?: { name: string }[] };
      expect((secrets.configs ?? []).map((secret) => secret.name).filter((name) => name.startsWith('mcpgw_'))).toEqual([]);
    }
    const nodes = ((await controlPlaneStatus(stack)).xds.nodes as { node: { id: string } }[]).map((node) => node.node.id);
    expect(nodes).not.toContain('envoy/no-certificate');
    expect(nodes).not.toContain('envoy/other-ca');
  });

  it("does not let one Envoy's certificate fetch another node's resources and secrets", async () => {
    // A valid Envoy certificate of our CA, for node envoy-b, used with our Envoy's node id.
    const impostorAdmin = await freePort();
    envoys.push(
      await startEnvoyWith(
        {
          nodeId: ourEnvoyNode(),
          adsApiType: 'GRPC',
          adminAddress: '127.0.0.1',
          adminPort: impostorAdmin,
          xds: [{ host: '127.0.0.1', port: stack.ports.grpc }],
          callLog: [{ host: '127.0.0.1', port: stack.controlPlanePorts[0].callLog }],
          overload: overloadForThisHost(),
          internalTls: { certDir: issue({ role: 'envoy', name: 'envoy-b' }).dir, sdsDir: path.join(dir, 'impostor-sds') },
        },
        dir,
        'envoy-impostor',
      ),
    );
    const refusal = `the certificate does not vouch for envoy \\"${ourEnvoyNode()}\\" (it names envoy/envoy-b)`;
    const refusals = () => fs.readFileSync(stack.logFileOf('control-plane'), 'utf8').split(refusal).length - 1;
    // It keeps asking (a new stream each time); every stream is refused before anything is sent.
    await waitFor('the impostor to be refused three times', async () => (refusals() >= 3 ? true : undefined));
    expect(await envoyStatAt(impostorAdmin, 'control_plane.connected_state')).toBe(0);
    expect(await envoyStatAt(impostorAdmin, 'listener_manager.total_listeners_active')).toBe(0);
    expect(await envoyStatAt(impostorAdmin, 'cluster_manager.active_clusters')).toBe(2); // its bootstrap's own: ADS and the call log
    const impostorSecrets = (await (await fetch(`http://127.0.0.1:${impostorAdmin}/config_dump?resource=dynamic_active_secrets`)).json()) as { configs?: { name: string }[] };
    expect((impostorSecrets.configs ?? []).map((secret) => secret.name).filter((name) => name.startsWith('mcpgw_'))).toEqual([]);

    // The same refusals to a plain gRPC client asking for the secret itself.
    const askSecret = (files: Parameters<typeof adsRequest>[1], nodeId: string) => adsRequest(grpcAddress, files, caFile, nodeId, TYPE_URL.secret, [INTERNAL_CERTIFICATE_SECRET]);
    const envoyB = issue({ role: 'envoy', name: 'envoy-b' });
    expect(await askSecret(envoyB, ourEnvoyNode())).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    expect(await askSecret(envoyB, '')).toMatchObject({ code: grpc.status.PERMISSION_DENIED, details: expect.stringContaining('must name its node id') });
    expect(await askSecret(issue({ role: 'sidecar', name: 'sidecar' }), 'sidecar')).toMatchObject({ code: grpc.status.PERMISSION_DENIED, details: expect.stringContaining('needs a gateway envoy certificate') });
    expect(await askSecret({ dir: strangerDir({ role: 'envoy', name: 'envoy-b' }) }, 'envoy-b')).toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await askSecret('no certificate', 'envoy-b')).toMatchObject({ code: grpc.status.UNAVAILABLE });
    // Positive control: envoy-b's certificate as envoy-b (or envoy-b/<instance>) gets what it asked for.
    const own = await askSecret(envoyB, 'envoy-b/pod-1');
    expect(own).toMatchObject({ message: { type_url: TYPE_URL.secret } });
    expect((own as { message: { resources: unknown[] } }).message.resources).toHaveLength(1);
  });

  it("reads the call-log port only from an Envoy's certificate of our CA", async () => {
    const port = stack.controlPlanePorts[0].callLog;
    /** One Forward-mode message reporting a call on route demo, backend `reporter` (a name no registry has), shaped as Envoy sends it (the call script's record as one value). */
    const report = (reporter: string) =>
      Buffer.from(encode(['mcpgw_calls', [[0, { script: { route: 'demo', backend: reporter, tool: 'echo', method: 'tools/call', outcome: 'ok' }, status: 200, duration_ms: 1, attempts: 1, flags: '-' }]]]));
    const send = (certDir: string | undefined, reporter: string) =>
      new Promise<void>((resolve) => {
        const files = certDir && { cert: fs.readFileSync(path.join(certDir, INTERNAL_TLS_FILES.certificate)), key: fs.readFileSync(path.join(certDir, INTERNAL_TLS_FILES.key)) };
        const socket = tls.connect({ host: '127.0.0.1', port, ca: fs.readFileSync(caFile), servername: 'control-plane', checkServerIdentity: () => undefined, ...files }, () => {
          socket.write(report(reporter));
          setTimeout(() => socket.end(), 300);
        });
        socket.on('error', () => undefined);
        socket.on('close', () => resolve());
      });
    const reported = (reporter: string) => metricValue(stack, 'mcpgw_tool_calls_total', { backend: reporter });
    await send(undefined, 'no-certificate');
    await send(issue({ role: 'sidecar', name: 'sidecar' }).dir, 'a-sidecar');
    await send(strangerDir({ role: 'envoy', name: 'envoy' }), 'other-ca');
    await send(issue({ role: 'envoy', name: 'envoy' }).dir, 'our-envoy');
    await waitFor('the Envoy-certified report to be counted', async () => ((await reported('our-envoy')) === 1 ? true : undefined));
    expect([await reported('no-certificate'), await reported('a-sidecar'), await reported('other-ca')]).toEqual([0, 0, 0]);
  });

  it('serves the catalog stream only to sidecars, each under the id its certificate vouches for', async () => {
    const catalog = (files: Parameters<typeof catalogRequest>[1], id: string) => catalogRequest(grpcAddress, files, caFile, id);
    expect(await catalog(issue({ role: 'envoy', name: 'envoy-b' }), 'envoy-b')).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    expect(await catalog(issue({ role: 'sidecar', name: 'sidecar-x' }), 'sidecar')).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    expect(await catalog('no certificate', 'sidecar-x')).toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await catalog({ dir: strangerDir({ role: 'sidecar', name: 'sidecar-x' }) }, 'sidecar-x')).toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await catalog(issue({ role: 'sidecar', name: 'sidecar-x' }), 'sidecar-x')).toMatchObject({ message: { version: expect.any(String) } });
  });

  it("refuses anyone but an Envoy on the sidecar's port (gateway lane, session check, streams)", async () => {
    const request = (files: Parameters<typeof internalHttpRequest>[1]) => internalHttpRequest(stack.ports.sidecar, files, caFile, '/mcp/demo');
    expect(await request('no certificate')).not.toMatch(/^HTTP/);
    expect(await request({ dir: strangerDir({ role: 'envoy', name: 'envoy' }) })).not.toMatch(/^HTTP/);
    expect(await request(issue({ role: 'sidecar', name: 'sidecar-x' }))).not.toMatch(/^HTTP/);
    expect(await request(issue({ role: 'control-plane', name: 'control-plane-x' }))).not.toMatch(/^HTTP/);
    await expect(fetch(`http://127.0.0.1:${stack.ports.sidecar}/mcp/demo`)).rejects.toThrow();
    // Positive control: an Envoy's certificate gets the gateway's answer.
    expect(await request(issue({ role: 'envoy', name: 'envoy-c' }))).toMatch(/^HTTP\/1\.1 \d{3}/);
  });

  it('takes identities in DNS form too (what the Helm chart generates), on every channel', async () => {
    for (const identity of [
      { role: 'control-plane', name: 'control-plane' },
      { role: 'sidecar', name: 'sidecar' },
      { role: 'envoy', name: 'envoy' },
    ] as const) {
      stack.inside!.renew(identity, 10, 'dns');
    }
    // New processes and new connections, all with DNS-form certificates: Envoy reconnects to the control
    // plane, the sidecar to its catalog stream, Envoy calls the sidecar.
    await stack.stopProcess('sidecar');
    await stack.stopProcess('control-plane');
    await stack.startControlPlane();
    await stack.startSidecar();
    await waitFor('Envoy back on the control plane', async () =>
      ((await controlPlaneStatus(stack)).xds.nodes as { node: { id: string } }[]).some((node) => node.node.id === ourEnvoyNode()) ? true : undefined,
    );
    expect(await waitFor('the tools through Envoy and the sidecar', () => listedTools(stack.gatewayUrl('demo')))).toHaveLength(2);
    expect(await callToolContent(stack.gatewayUrl('demo'), 'weather__get_forecast', { city: 'Oslo' })).toEqual([expect.objectContaining({ type: 'text' })]);
    expect(await catalogRequest(grpcAddress, { dir: stack.internalTlsDir({ role: 'sidecar', name: 'sidecar' }) }, caFile, 'sidecar/dns-form')).toMatchObject({ message: { version: expect.any(String) } });
  });
});
