import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, controlPlaneStatus, metricValue, startGateway } from '../support/gateway-fixture';

/**
 * The gateway's metrics, scraped from the running processes (real Envoy, control plane and sidecar):
 * they say what /status and the calls say, at every moment.
 */
describe('metrics that tell the truth', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;

  const demo = () => ({ key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] });

  beforeAll(async () => {
    ({ stack, backends } = await startGateway('observability-metrics', (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }],
    })));
  });
  afterAll(async () => stack?.stop());

  const rejectedRouteKeys = async () =>
    new Set(((await controlPlaneStatus(stack)).registry.rejectedRoutes as { route?: string }[]).map((problem) => problem.route)).size;

  it('counts rejected routes, not problems, also when nothing served changes', async () => {
    // Two broken routes, one with two problems; the routes served stay exactly as they were.
    await stack.setPortalRegistry({
      routes: [
        demo(),
        { key: 'broken', toolServices: [{ name: 'Bad Name', url: 'not a url' }] },
        { key: 'also-broken', toolServices: [] },
      ],
    });
    await waitFor('the broken routes in /status', async () => ((await rejectedRouteKeys()) === 2 ? true : undefined));
    expect((await controlPlaneStatus(stack)).registry.rejectedRoutes.length).toBeGreaterThan(2);
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(2);

    // Fixed: the served routes still do not change, and the gauge follows.
    await stack.setPortalRegistry({ routes: [demo()] });
    await waitFor('no rejected route in /status', async () => ((await rejectedRouteKeys()) === 0 ? true : undefined));
    expect(await metricValue(stack, 'mcpgw_registry_rejected_routes')).toBe(0);
  });
});
