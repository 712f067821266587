import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { callToolContent, controlPlaneStatus, postJsonRpc, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';
import { makeTestPki } from '../support/test-pki';

/**
 * A Tool Service behind a private CA: Envoy (SNI, CA file, SAN check), the control plane's tools/list
 * and the sidecar's backend sessions all verify it with the registry's transport.tls settings.
 */
describe('https Tool Service with a private CA (real Envoy TLS)', () => {
  let stack: GatewayStack;
  let dir: string;
  let tlsDir: string;
  const SERVER_NAME = 'tools.internal.test';

  beforeAll(async () => {
    const port = await freePort();
    tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-tls-'));
    const pki = makeTestPki(tlsDir, SERVER_NAME);
    const url = `https://127.0.0.1:${port}/mcp`;
    ({ stack, dir } = await startGateway('tls-backend', () => ({
      routes: [
        { key: 'secure', toolServices: [{ id: 'vault', name: 'vault', url, transport: { tls: { caFile: pki.caFile, sni: SERVER_NAME } } }] },
        { key: 'misnamed', toolServices: [{ id: 'vault-misnamed', name: 'vault', url, transport: { tls: { caFile: pki.caFile, sni: 'other.internal.test' } } }] },
      ],
    })));
    await stack.startSample('weather', port, { tls: { certFile: pki.certFile, keyFile: pki.keyFile } });
    await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh`, { method: 'POST' });
  });
  afterAll(async () => {
    await stack?.stop();
    if (tlsDir) fs.rmSync(tlsDir, { recursive: true, force: true });
  });

  it('lists and calls the tools of a Tool Service verified by its own CA and server name', async () => {
    expect(await waitFor('the https catalog', () => listedToolsOnceServed(stack.gatewayUrl('secure')))).toEqual(['vault__get_forecast', 'vault__get_alerts']);
    expect(await callToolContent(stack.gatewayUrl('secure'), 'vault__get_forecast', { city: 'Bern' })).toEqual([
      { type: 'text', text: 'Forecast for Bern: sunny, 14°C' },
    ]);
    // The sidecar opened this session's backend session over the same TLS settings.
    expect(fs.readFileSync(path.join(dir, 'sidecar.log'), 'utf8')).not.toContain('could not open a backend session');
  });

  it('refuses a Tool Service whose certificate does not match the expected server name', async () => {
    const status = await controlPlaneStatus(stack);
    const backend = status.catalog.routes.find((route: { route: string }) => route.route === 'misnamed').backends[0];
    expect(backend.state).toBe('missing');
    expect(backend.last_error).toMatch(/certificate|altnames|Hostname|fetch failed/i);
    const call = await postJsonRpc(stack.gatewayUrl('misnamed'), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'vault__get_forecast', arguments: { city: 'x' } } });
    expect(call.json().error.code).toBe(-32602);
  });
});
