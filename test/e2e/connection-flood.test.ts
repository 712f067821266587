import * as http from 'node:http';
import { execFileSync } from 'node:child_process';
import { FloodReport, SlowHeaderFlood } from '../../bench/load/slow-header-flood';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, callToolContent, envoyStat, startGateway } from '../support/gateway-fixture';

/**
 * A slow-header connection flood past Envoy's file-descriptor limit (issue 9: about 20,000 such
 * connections crashed Envoy). Envoy runs with a lowered limit (1,024 descriptors, set on the running
 * process with prlimit) and a connection limit below it; the flood opens 3,000 connections from other
 * loopback addresses in two waves, each trickling header lines, and stops by itself. Envoy stays up and
 * a legitimate client, opening a new connection for every request during the flood, is served: a
 * connection over the limit is closed at once, the flood's are timed out by the request-headers timeout
 * (docs/adr/0009-edge-hardening.md).
 */
describe('a slow-header connection flood past Envoy’s file-descriptor limit', () => {
  let stack: GatewayStack;
  const FD_LIMIT = 1_024;
  const CONNECTION_LIMIT = 600;
  const HEADERS_TIMEOUT_MS = 3_000;
  const FLOOD_MS = 14_000;
  let flood: FloodReport;
  const served: number[] = [];
  const failed: string[] = [];

  beforeAll(async () => {
    ({ stack } = await startGateway('connection-flood', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }] }), {
      envoyOverload: { maxDownstreamConnections: CONNECTION_LIMIT },
      controlPlaneArgs: ['--request-headers-timeout-ms', String(HEADERS_TIMEOUT_MS)],
    }));
    const envoyPid = stack.processes.get('envoy')!.child.pid!;
    execFileSync('prlimit', ['--pid', String(envoyPid), `--nofile=${FD_LIMIT}:${FD_LIMIT}`]);

    const wave = (connections: number, sourceAddresses: string[]) =>
      new SlowHeaderFlood({ port: stack.ports.listener, connections, sourceAddresses, openPerSecond: 4_000, trickleMs: 1_000, durationMs: FLOOD_MS });
    const first = wave(2_000, ['127.0.0.2', '127.0.0.3']);
    const second = new Promise<SlowHeaderFlood>((resolve) => setTimeout(() => resolve(wave(1_000, ['127.0.0.4', '127.0.0.5'])), 6_000));
    // Meanwhile, from 127.0.0.1: a request on a new connection every 500 ms, each retried until served.
    const legitimate: Promise<void>[] = [];
    await new Promise((resolve) => setTimeout(resolve, 500));
    const startedAt = Date.now();
    while (Date.now() - startedAt < FLOOD_MS - 3_000) {
      legitimate.push(
        servedAfterMs(stack.ports.listener).then(
          (ms) => void served.push(ms),
          (error: Error) => void failed.push(error.message),
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await Promise.all(legitimate);
    const [a, b] = await Promise.all([first.done, (await second).done]);
    flood = { attempted: a.attempted + b.attempted, connected: a.connected + b.connected, closedByPeer: a.closedByPeer + b.closedByPeer, peakOpen: Math.max(a.peakOpen, b.peakOpen), open: 0 };
  }, 120_000);
  afterAll(async () => stack?.stop());

  it('tried more connections at once than Envoy has file descriptors', () => {
    expect(flood.attempted).toBe(3_000);
    expect(flood.connected).toBeGreaterThan(FD_LIMIT);
  });

  it('left Envoy running, having closed the connections over its limit at once', async () => {
    expect(stack.processes.get('envoy')!.running).toBe(true);
    expect(await envoyStat(stack, 'listener.127.0.0.1_' + stack.ports.listener + '.downstream_global_cx_overflow')).toBeGreaterThan(0);
    expect(flood.closedByPeer).toBeGreaterThan(2_000);
  });

  it('served the legitimate client during the flood, each request within the request-headers timeout and a little', () => {
    expect(failed).toEqual([]);
    expect(served.length).toBeGreaterThanOrEqual(18);
    expect(Math.max(...served)).toBeLessThan(HEADERS_TIMEOUT_MS + 2_500);
  });

  it('serves as before once the flood is over', async () => {
    expect(await callToolContent(stack.gatewayUrl('demo'), 'weather__get_forecast', { city: 'Oslo' })).toEqual([{ type: 'text', text: 'Forecast for Oslo: sunny, 14°C' }]);
  });
});

/**
 * A tools/list on a new connection from 127.0.0.1, tried again (after 100 ms) whenever the connection is
 * closed or times out, as a client would: how long until it was answered. Fails after 10 s.
 */
async function servedAfterMs(port: number): Promise<number> {
  const startedAt = performance.now();
  for (;;) {
    const status = await new Promise<number | Error>((resolve) => {
      const request = http.request({ host: '127.0.0.1', port, path: '/mcp/demo', method: 'POST', agent: false, localAddress: '127.0.0.1', headers: MCP_POST_HEADERS, timeout: 3_000 });
      request.on('response', (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      });
      request.on('timeout', () => request.destroy(new Error('no answer within 3 s')));
      request.on('error', resolve);
      request.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
    });
    if (status === 200) return performance.now() - startedAt;
    if (performance.now() - startedAt > 10_000) throw new Error(`not served within 10 s (last: ${status instanceof Error ? status.message : status})`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
