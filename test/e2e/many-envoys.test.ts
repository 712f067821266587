import { XdsApiType } from '../../control-plane/devstack/envoy';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { transportRefusalRoutes } from '../../control-plane/xds/translate/transport-refusals';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { SampleBackends, clusterOf, controlPlaneStatus, envoyDynamicClusters, envoyRouteNames, startGateway } from '../support/gateway-fixture';

/** One control plane configures every Envoy of the fleet, and each registry change reaches all of them. */
describe.each<XdsApiType>(['GRPC', 'DELTA_GRPC'])('several Envoys on one control plane (ADS %s)', (xdsApiType) => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let secondAdminUrl: string;

  beforeAll(async () => {
    ({ stack, backends } = await startGateway(`many-envoys-${xdsApiType}`, (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] }],
    }), { xdsApiType, registryRefreshMs: 2000 }));
    const adminPort = await freePort();
    await stack.startEnvoy('envoy-2', adminPort);
    secondAdminUrl = `http://127.0.0.1:${adminPort}`;
  });
  afterAll(async () => stack?.stop());

  it('gives every Envoy the same config and tracks each one', async () => {
    const nodes = await waitFor('both Envoys to ACK routes', async () => {
      const list = (await controlPlaneStatus(stack)).xds.nodes as { node: { id: string }; acked: Record<string, string> }[];
      return list.length === 2 && list.every((node) => node.acked[TYPE_URL.routeConfiguration]) ? list : undefined;
    });
    expect(new Set(nodes.map((node) => node.node.id)).size).toBe(2);
    for (const adminUrl of [stack.envoyAdminUrl, secondAdminUrl]) {
      expect(await envoyRouteNames(adminUrl)).toEqual([...transportRefusalRoutes().map((route) => route.name), 'demo/call/weather', 'demo/streams', 'demo/listen', 'demo/end', 'demo/gateway', 'unknown_route', 'approval_pages', 'not_found', 'host_denied']);
    }
  });

  it('pushes a registry change to every Envoy', async () => {
    await stack.setPortalRegistry({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }] },
        { key: 'jobs', toolServices: [{ name: 'jobs', url: backends.jobs }] },
      ],
    });
    for (const adminUrl of [stack.envoyAdminUrl, secondAdminUrl]) {
      await waitFor(`${adminUrl} to get the new route and cluster`, async () =>
        (await envoyRouteNames(adminUrl)).includes('jobs/call/jobs') && (await envoyDynamicClusters(stack, adminUrl)).includes(clusterOf(backends.jobs))
          ? true
          : undefined,
      );
    }
  });
});
