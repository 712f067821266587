import { GatewayStack } from '../../control-plane/devstack/stack';
import { postJsonRpc, startGateway } from '../support/gateway-fixture';

/**
 * Envoy's overload manager (envoy/bootstrap.yaml, docs/adr/0009-edge-hardening.md): with its heap past
 * --max-heap-bytes (here set below what an idle Envoy uses), every new request is refused with 503 and
 * a JSON-RPC error saying so, on a connection still accepted, and nothing reaches the sidecar or a backend.
 */
describe("Envoy's overload manager", () => {
  let stack: GatewayStack;

  beforeAll(async () => {
    ({ stack } = await startGateway('overload', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] }] }), {
      envoyOverload: { maxHeapBytes: 4 * 1024 * 1024 },
    }));
  });
  afterAll(async () => stack?.stop());

  it.each([
    ['tools/list', { jsonrpc: '2.0', id: 1, method: 'tools/list' }],
    ['tools/call', { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'weather__get_forecast', arguments: { city: 'Oslo' } } }],
  ])('refuses %s with 503 and JSON-RPC -32603 "gateway overloaded"', async (_method, request) => {
    const answer = await postJsonRpc(stack.gatewayUrl('demo'), request);
    expect(answer.status).toBe(503);
    expect(answer.contentType).toBe('application/json');
    expect(answer.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'gateway overloaded: try again shortly', data: { details: 'overload' } } });
  });
});
