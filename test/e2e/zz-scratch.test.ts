import * as fs from 'node:fs';
import { startGateway, connectClient, clusterOf } from '../support/gateway-fixture';
it('dump', async () => {
  const { stack, backends, dir } = await startGateway('scratch', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }] }));
  try {
    const client = await connectClient(stack.gatewayUrl('demo'));
    await client.callTool({ name: 'jobs__echo', arguments: { text: 'hi' } });
    await client.close();
    const text = await (await fetch(`${stack.envoyAdminUrl}/stats/prometheus`)).text();
    fs.writeFileSync(`${dir}/envoy-stats.txt`, text);
    fs.writeFileSync(`${dir}/cp-metrics.txt`, await (await fetch(`${stack.controlPlaneAdminUrl}/metrics`)).text());
    fs.writeFileSync(`${dir}/sidecar-metrics.txt`, await (await fetch(`${stack.sidecarAdminUrl}/metrics`)).text());
    console.log(clusterOf(backends.jobs));
  } finally { await stack.stop(); }
}, 60000);
