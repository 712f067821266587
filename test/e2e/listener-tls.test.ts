import * as path from 'node:path';
import * as tls from 'node:tls';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Agent, fetch as undiciFetch } from 'undici';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { envoyConfigVersions, envoyStat, startGateway, testDir } from '../support/gateway-fixture';
import { MountedSecret } from '../support/mounted-secret';
import { IssuedCertificate, ShortLivedCa } from '../support/short-lived-pki';

/**
 * The agents' listener terminating TLS (docs/auth.md): its certificate and key come from a mounted
 * secret by SDS, so a renewed certificate is served without a restart, without a listener change
 * (which would drain it) and without dropping a connection.
 */
describe("TLS on the agents' listener, its certificate from a mounted secret (real Envoy, SDS)", () => {
  const SERVER_NAME = 'gateway.mcp.test';
  let stack: GatewayStack;
  let ca: ShortLivedCa;
  let mount: MountedSecret;
  let first: IssuedCertificate;
  /** A fetch that trusts the test CA, as an agent configured with it would. */
  let trusting: typeof fetch;

  /** The serial number of the certificate a new TLS connection to the listener gets. */
  const servedSerial = () =>
    new Promise<string>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: stack.ports.listener, ca: ca.caPem, servername: SERVER_NAME }, () => {
        resolve(socket.getPeerCertificate().serialNumber);
        socket.end();
      });
      socket.on('error', reject);
    });

  const connect = async () => {
    const client = new Client({ name: 'tls-agent', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(stack.gatewayUrl('demo')), { fetch: trusting }));
    return client;
  };

  beforeAll(async () => {
    const dir = testDir('listener-tls-pki');
    ca = ShortLivedCa.create(path.join(dir, 'ca'));
    first = ca.issue(SERVER_NAME, { usage: 'server', ttlMinutes: 10 });
    mount = new MountedSecret(path.join(dir, 'listener'), { 'tls.crt': first.cert, 'tls.key': first.key });
    const agent = new Agent({ connect: { ca: ca.caPem, servername: SERVER_NAME } });
    trusting = ((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) =>
      undiciFetch(input as never, { ...(init as object), dispatcher: agent } as never)) as unknown as typeof fetch;
    ({ stack } = await startGateway('listener-tls', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'jobs', url: b.jobs }] }] }), {
      listenerTls: { certFile: mount.file('tls.crt'), keyFile: mount.file('tls.key') },
    }));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('serves an MCP SDK client that trusts the test CA, and no client that does not', async () => {
    expect(stack.gatewayUrl('demo')).toMatch(/^https:/);
    const client = await waitFor('the catalog over TLS', async () => {
      const candidate = await connect();
      if ((await candidate.listTools()).tools.some((tool) => tool.name === 'jobs__echo')) return candidate;
      await candidate.close();
      return undefined;
    });
    try {
      expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'over tls' } })).content).toEqual([{ type: 'text', text: 'over tls' }]);
    } finally {
      await client.close();
    }
    await expect(fetch(stack.gatewayUrl('demo'), { method: 'POST', body: '{}' })).rejects.toThrow();
    expect(await servedSerial()).toBe(first.serial);
  });

  it('serves a renewed certificate to new connections without a listener change; connections and streams in flight go on', async () => {
    const versionsBefore = await envoyConfigVersions(stack);
    const modifiedBefore = await envoyStat(stack, 'listener_manager.listener_modified');
    const client = await connect();
    try {
      const progress: number[] = [];
      const job = client.callTool({ name: 'jobs__run_job', arguments: { steps: 10, interval_ms: 200 } }, undefined, { onprogress: ({ progress: step }) => void progress.push(step) });
      await waitFor('the job streaming', async () => (progress.length > 0 ? true : undefined));

      const renewed = ca.issue(SERVER_NAME, { usage: 'server', ttlMinutes: 10 });
      mount.update({ 'tls.crt': renewed.cert, 'tls.key': renewed.key });
      await waitFor('new connections served the renewed certificate', async () => ((await servedSerial()) === renewed.serial ? true : undefined));

      expect((await job).content).toEqual([{ type: 'text', text: 'job finished after 10 steps' }]);
      expect(progress).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      // The client's connection from before the renewal still carries its calls.
      expect((await client.callTool({ name: 'jobs__echo', arguments: { text: 'still here' } })).content).toEqual([{ type: 'text', text: 'still here' }]);
    } finally {
      await client.close();
    }
    expect(await envoyStat(stack, 'listener_manager.listener_modified')).toBe(modifiedBefore);
    expect(await envoyConfigVersions(stack)).toEqual(versionsBefore);
  });
});
