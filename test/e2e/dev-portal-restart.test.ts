import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';

/** `mcpgw up`'s default path: the dev Portal serves the registry file; its revisions must survive its restart. */
describe('dev Portal restart (real Envoy, control plane Portal client)', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let file: string;

  beforeAll(async () => {
    let dir: string;
    ({ stack, backends, dir } = await startGateway('dev-portal-restart', (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] }],
    })));
    file = path.join(dir, 'registry.yaml');
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('brings an edit made while the dev Portal was down to Envoy once it is back', async () => {
    expect(await waitFor('the first route', () => listedToolsOnceServed(stack.gatewayUrl('demo')))).toEqual(['weather__get_forecast', 'weather__get_alerts']);
    await stack.stopProcess('portal');
    fs.writeFileSync(
      file,
      stringify({
        routes: [
          { key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }] },
          { key: 'added-while-down', toolServices: [{ name: 'jobs', url: backends.jobs }] },
        ],
      }),
    );
    await stack.startPortal();
    expect(await waitFor('the route added while the Portal was down', () => listedToolsOnceServed(stack.gatewayUrl('added-while-down')), { timeoutMs: 15_000 })).toEqual([
      'jobs__run_job',
      'jobs__echo',
      'jobs__whoami',
    ]);
  });
});
