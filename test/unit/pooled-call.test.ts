import * as http from 'node:http';
import { AddressInfo } from 'node:net';
import { BackendStreamLimits, BackendStreams } from '../../control-plane/sidecar/backend-streams';
import { RequestHead } from '../../control-plane/sidecar/decision';
import { PooledCallLane } from '../../control-plane/sidecar/pooled-call';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { ChangeListeners } from '../../control-plane/sidecar/sessions/session-store';
import { sidecarContext } from '../support/sidecar-context';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

const views = buildRouteViews(catalogSnapshot([{ route_key: 'demo', backends: [backendCatalog('jobs', ['echo'])] }]));
const noReports = { listChanged: () => undefined, failed: () => undefined };
const CALL = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: {} } });

/** What the pooled-call route sends a sidecar: the call script's call, named by the route, in the pooled session the check put there. */
const laneHeaders = (extra: Record<string, string> = {}) => ({ 'x-mcpgw-route': 'demo', 'x-mcpgw-backend': 'jobs', 'mcp-session-id': 'pooled-1', ...extra });

/** The lane behind a loopback HTTP server (its answers are real HTTP responses); the backend-stream slots it takes. */
async function lane(limits: BackendStreamLimits) {
  const { context } = sidecarContext(views);
  const streams = new BackendStreams(context, limits, noReports, new ChangeListeners());
  const calls = new PooledCallLane(context, streams);
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const head: RequestHead = { method: 'POST', path: '/internal/pooled-call', headers: new Map(Object.entries(req.headers).map(([name, value]) => [name, String(value)])) };
      void calls.forward(head, Buffer.concat(chunks), res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/internal/pooled-call`;
  const call = async (headers: Record<string, string>) => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: CALL });
    return { status: response.status, body: (await response.json()) as { id: unknown; error?: { code: number; message: string } } };
  };
  return { call, streams, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe("the sidecar's pooled-call lane", () => {
  it.each([
    ['no pooled session', { 'mcp-session-id': '' }, 'the pooled-call lane takes only calls the call script sent in a pooled backend session'],
    ['a backend the route does not have', { 'x-mcpgw-backend': 'gone' }, 'backend "gone" is not on route "demo" (any longer): call again'],
  ])('answers a call with %s with the call’s -32004, nothing sent on', async (_case, headers, message) => {
    const { call, streams, close } = await lane({ perSession: 32, total: 10 });
    try {
      expect(await call(laneHeaders(headers))).toEqual({ status: 200, body: { jsonrpc: '2.0', id: 7, error: { code: -32004, message } } });
      expect(streams.open).toBe(0);
    } finally {
      await close();
    }
  });

  it('counts each call against the replica’s backend streams: past its most, the call’s -32004, nothing sent on', async () => {
    const { call, streams, close } = await lane({ perSession: 32, total: 0 });
    try {
      expect(await call(laneHeaders())).toEqual({
        status: 200,
        body: { jsonrpc: '2.0', id: 7, error: { code: -32004, message: 'this gateway replica holds its most backend streams: call again later' } },
      });
      expect(streams.open).toBe(0);
    } finally {
      await close();
    }
  });

  it('gives a backend it cannot reach the call’s -32004 and its slot back', async () => {
    const { call, streams, close } = await lane({ perSession: 32, total: 1 });
    try {
      const answer = await call(laneHeaders());
      expect(answer.body.error).toEqual({ code: -32004, message: 'backend jobs could not be reached: no backend streams in unit tests' });
      expect(streams.open).toBe(0);
    } finally {
      await close();
    }
  });
});
