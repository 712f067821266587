import * as fs from 'node:fs';
import { stringify } from 'yaml';
import { freePorts, waitFor } from '../control-plane/devstack/processes';
import { GatewayStack } from '../control-plane/devstack/stack';
import { ServerRequestsService } from '../test/support/server-requests-service';

/** What a bench of streams gets: the gateway's URL of its route, the backend's own, and the sidecars' process ids (for their CPU). */
export interface AskerGateway {
  gateway: string;
  backend: ServerRequestsService;
  sidecarPids: number[];
}

/**
 * The stack the stream benches run on: the SDK v1 backend that keeps its streams' events
 * (test/support/server-requests-service.ts) as Tool Service `asker` of one route, the gateway (one
 * sidecar) once the route lists its tools; everything stopped when `run` ends.
 */
export async function withAskerGateway<T>(logDir: string, routeKey: string, run: (stack: AskerGateway) => Promise<T>): Promise<T> {
  fs.rmSync(logDir, { recursive: true, force: true });
  fs.mkdirSync(logDir, { recursive: true });
  const [weather, jobs] = await freePorts(2);
  const backend = await ServerRequestsService.start();
  let stack: GatewayStack | undefined;
  try {
    const registryFile = `${logDir}/registry.yaml`;
    // Opted in to the pooled-call lane, which the pooled-call bench measures (session clients never take it).
    const asker = { name: 'asker', url: backend.url, transport: { resumeCutPooledCalls: true } };
    fs.writeFileSync(registryFile, stringify({ routes: [{ key: routeKey, toolServices: [asker] }] }));
    stack = await GatewayStack.start({ registryFile, logDir, samples: [{ service: 'weather', port: weather }, { service: 'jobs', port: jobs }] });
    const gateway = stack.gatewayUrl(routeKey);
    await waitFor('the backend in the catalog', async () => {
      const response = await fetch(gateway, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
      return (await response.text()).includes('asker__steps') ? true : undefined;
    }, { timeoutMs: 60_000, intervalMs: 200 });
    const sidecarPids = [...stack.processes.entries()].filter(([name]) => name.startsWith('sidecar')).map(([, process]) => process.child.pid!);
    return await run({ gateway, backend, sidecarPids });
  } finally {
    await stack?.stop();
    await backend.stop();
  }
}
