import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, postJsonRpc } from './gateway-fixture';

/** One tools/call of the jobs backend's echo on a route of a stack. */
export const callEcho = (stack: GatewayStack, route: string, id = 1) =>
  postJsonRpc(stack.gatewayUrl(route), { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' } } }, {
    ...MCP_POST_HEADERS,
    'mcp-protocol-version': '2025-11-25',
  });

/**
 * What a shared limit's whenServiceDown does (docs/quotas.md), on two stacks sharing the first one's
 * ratelimit service: routes `open` (allow) and `closed` (refuse) pass, then while the service is
 * stopped `open` passes and `closed` answers 503 on either, and `closed` counts again once it is back.
 */
export async function expectWhenServiceDown(first: GatewayStack, second: GatewayStack): Promise<void> {
  expect((await callEcho(first, 'open')).status).toBe(200);
  expect((await callEcho(first, 'closed')).status).toBe(200);
  await first.stopProcess('ratelimit');
  for (const stack of [first, second]) {
    expect((await callEcho(stack, 'open')).status).toBe(200);
    const refused = await callEcho(stack, 'closed', 9);
    expect(refused.status).toBe(503);
    expect(refused.json()).toMatchObject({ id: 9, error: { code: -32603, message: expect.stringContaining('rate limit service unavailable'), data: { outcome: 'limited' } } });
  }
  await first.startRateLimit();
  await waitFor('the refusing limit to count again', async () => ((await callEcho(first, 'closed')).status === 200 ? true : undefined));
  expect((await callEcho(second, 'closed')).status).toBe(200);
}
