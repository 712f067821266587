import { XdsApiType } from '../../control-plane/devstack/envoy';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { SampleBackends, callToolContent, connectClient, controlPlaneStatus, listedTools, metricValue, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';

/** What Envoy rejects, and Envoy or control-plane restarts, never take the gateway down. */
describe.each<XdsApiType>(['GRPC', 'DELTA_GRPC'])('xDS resilience (ADS %s, real Envoy 1.40)', (xdsApiType) => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  const demo = () => ({ key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] });

  beforeAll(async () => {
    ({ stack, backends } = await startGateway(`xds-resilience-${xdsApiType}`, (b) => ({
      routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }],
    }), { xdsApiType, registryRefreshMs: 2000 }));
  });
  afterAll(async () => stack?.stop());

  const echoThroughEnvoy = (text: string) => callToolContent(stack.gatewayUrl('demo'), 'jobs__echo', { text });

  it('surfaces a config Envoy rejects, does not resend it, and keeps serving the last accepted one', async () => {
    // Valid for the registry, rejected by Envoy: the CA file does not exist on Envoy's machine (its SDS
    // secret, which Envoy reads from the file, is the resource it rejects).
    await stack.setPortalRegistry({
      routes: [
        demo(),
        { key: 'secure', toolServices: [{ name: 'vault', url: 'https://127.0.0.1:9/mcp', transport: { tls: { caFile: '/nonexistent/mcpgw-ca.pem' } } }] },
      ],
    });
    const nack = await waitFor('the NACK to show in /status', async () => (await controlPlaneStatus(stack)).xds.nodes[0]?.lastNack);
    expect(nack.typeUrl).toBe(TYPE_URL.secret);
    expect(nack.errorDetail).toContain('/nonexistent/mcpgw-ca.pem');
    expect(await metricValue(stack, 'mcpgw_xds_nacks_total', { type: 'Secret' })).toBeGreaterThanOrEqual(1);

    const pushes = await metricValue(stack, 'mcpgw_xds_pushes_total', { type: 'Secret' });
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(await metricValue(stack, 'mcpgw_xds_pushes_total', { type: 'Secret' })).toBe(pushes);
    expect(await echoThroughEnvoy('still serving')).toEqual([{ type: 'text', text: 'still serving' }]);

    await stack.setPortalRegistry({ routes: [demo()] });
    await waitFor('Envoy to accept the fixed config', async () => {
      const [node] = (await controlPlaneStatus(stack)).xds.nodes;
      return node.acked[TYPE_URL.secret] === node.sent[TYPE_URL.secret] ? node : undefined;
    });
  });

  it('resumes with the current config after Envoy restarts', async () => {
    await stack.stopProcess('envoy');
    await stack.startEnvoy();
    expect(await waitFor('routes after the restart', () => listedToolsOnceServed(stack.gatewayUrl('demo')))).toContain('jobs__echo');
    expect(await echoThroughEnvoy('after envoy restart')).toEqual([{ type: 'text', text: 'after envoy restart' }]);
  });

  it('keeps serving while the control plane is down, and takes new config once it is back', async () => {
    await stack.stopProcess('control-plane');
    expect(await echoThroughEnvoy('control plane down')).toEqual([{ type: 'text', text: 'control plane down' }]);
    expect(await listedTools(stack.gatewayUrl('demo'))).toContain('weather__get_forecast');

    await stack.startControlPlane();
    await stack.setPortalRegistry({ routes: [demo(), { key: 'after', toolServices: [{ name: 'jobs', url: backends.jobs }] }] });
    expect(await waitFor('the new route through the reconnected Envoy and sidecar', () => listedToolsOnceServed(stack.gatewayUrl('after')))).toEqual([
      'jobs__run_job',
      'jobs__echo',
      'jobs__whoami',
    ]);
    const client = await connectClient(stack.gatewayUrl('after'));
    try {
      const result = await waitFor('a call on the new route', () =>
        client.callTool({ name: 'jobs__echo', arguments: { text: 'new route' } }).catch(() => undefined),
      );
      expect(result.content).toEqual([{ type: 'text', text: 'new route' }]);
    } finally {
      await client.close();
    }
  });
});
