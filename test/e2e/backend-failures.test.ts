import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { MCP_POST_HEADERS, SampleBackends, callToolContent, connectClient, listedTools, postJsonRpc, startGateway, listedToolsOnceServed } from '../support/gateway-fixture';

/**
 * What an agent sees when the path behind the gateway fails: JSON-RPC errors naming the backend,
 * with the call's attempts and elapsed time — never Envoy's text/plain replies.
 */
describe('backend failures through the real Envoy', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;

  let jsonJobsPort: number;

  beforeAll(async () => {
    jsonJobsPort = await freePort();
    ({ stack, backends } = await startGateway('backend-failures', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] },
        // Any response taking longer than 500 ms is cut by Envoy: one backend answers in one JSON body,
        // the other opens its SSE stream at once.
        {
          key: 'hasty',
          toolServices: [
            { id: 'jobs-json', name: 'jobs', url: `http://127.0.0.1:${jsonJobsPort}/mcp`, transport: { requestTimeoutMs: 500 } },
            { id: 'jobs-sse', name: 'jobs_sse', url: b.jobs, transport: { requestTimeoutMs: 500 } },
          ],
        },
      ],
    })));
    await stack.startSample('jobs', jsonJobsPort, { jsonResponse: true });
    await fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=hasty`, { method: 'POST' });
    await waitFor('the catalog of the JSON-mode backend', async () =>
      ((await listedTools(stack.gatewayUrl('hasty'))) ?? []).includes('jobs__run_job') ? true : undefined,
    );
  });
  afterAll(async () => stack?.stop());

  async function callError(route: string, name: string, args: Record<string, unknown>): Promise<McpError> {
    const client = await connectClient(stack.gatewayUrl(route));
    try {
      await client.callTool({ name, arguments: args });
    } catch (error) {
      return error as McpError;
    } finally {
      await client.close();
    }
    throw new Error(`${name} unexpectedly succeeded`);
  }

  it('cuts the stream of a call that times out after its backend started streaming (no error can follow a sent response)', async () => {
    const response = await fetch(stack.gatewayUrl('hasty'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'jobs_sse__run_job', arguments: { steps: 1, interval_ms: 2000 } } }),
    });
    expect(response.headers.get('content-type')).toBe('text/event-stream');
    await expect(response.text()).rejects.toThrow(/terminated/);
  });

  it('answers a timed-out call with a JSON-RPC error of the 504 class', async () => {
    const error = await callError('hasty', 'jobs__run_job', { steps: 1, interval_ms: 2000 });
    expect(error).toBeInstanceOf(McpError);
    expect(error.code).toBe(-32004);
    expect(error.message).toContain('backend jobs timed out: tools/call run_job failed (response_timeout)');
    expect(error.data).toMatchObject({ outcome: 'failed', backend: 'jobs', tool: 'run_job', http_status: 504, fallback_used: false, attempts: 1 });
    // The call script's clock (Envoy Lua's handle:timestamp) reads whole milliseconds at both ends, so a
    // call that took 500.x ms may read 499 (seen once in a clean-clone run).
    expect((error.data as { elapsed_ms: number }).elapsed_ms).toBeGreaterThanOrEqual(499);
  });

  it("annotates a JSON-mode backend's answer (read whole in one piece), its content-length following the annotation", async () => {
    const client = await connectClient(stack.gatewayUrl('hasty'));
    try {
      const result = await client.callTool({ name: 'jobs__run_job', arguments: { steps: 1, interval_ms: 0 } });
      expect(result.content).toEqual([{ type: 'text', text: 'job finished after 1 steps' }]);
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'jobs', tool: 'run_job', attempts: 1 });
    } finally {
      await client.close();
    }
  });

  it('answers calls to a backend that is down with a JSON-RPC error naming it, keeps the others working', async () => {
    await stack.stopProcess(`tool-service-jobs-${backends.ports.jobs}`);
    const raw = await postJsonRpc(stack.gatewayUrl('demo'), {
      jsonrpc: '2.0',
      id: 'call-1',
      method: 'tools/call',
      params: { name: 'jobs__echo', arguments: { text: 'anyone?' } },
    });
    expect(raw.status).toBe(200);
    expect(raw.contentType).toBe('application/json');
    const body = raw.json();
    expect(body).toMatchObject({ jsonrpc: '2.0', id: 'call-1', error: { code: -32004, data: { backend: 'jobs', outcome: 'failed', http_status: 503 } } });
    // Connection refused before the request reached the backend is always retried.
    expect(body.error.data.attempts).toBeGreaterThan(1);
    expect(body.error.data.last_error).toMatch(/upstream|connection|refused/i);

    expect(await callToolContent(stack.gatewayUrl('demo'), 'weather__get_forecast', { city: 'Rome' })).toEqual([
      { type: 'text', text: 'Forecast for Rome: sunny, 14°C' },
    ]);
  });

  it('still lists the dead backend\'s last-good tools, marked stale in _meta; with both dead, a warning — always 200', async () => {
    const refresh = () => fetch(`${stack.controlPlaneAdminUrl}/catalog/refresh?route=demo`, { method: 'POST' });
    const federation = async () => {
      const response = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(response.status).toBe(200);
      const { tools, _meta } = response.json().result;
      return { names: tools.map((tool: { name: string }) => tool.name), meta: _meta['mcpgw/federation'] };
    };
    await refresh();
    const oneDown = await waitFor('jobs to be reported stale', async () => {
      const answer = await federation();
      return answer.meta.degradedBackends.length === 1 ? answer : undefined;
    });
    expect(oneDown.names).toEqual(['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts']);
    expect(oneDown.meta.degradedBackends[0]).toMatchObject({ name: 'jobs', state: 'stale', tools: 3, failingSince: expect.any(String) });
    expect(oneDown.meta.warning).toBeUndefined();

    await stack.stopProcess(`tool-service-weather-${backends.ports.weather}`);
    await refresh();
    const bothDown = await waitFor('both backends to be reported stale', async () => {
      const answer = await federation();
      return answer.meta.degradedBackends.length === 2 ? answer : undefined;
    });
    expect(bothDown.names).toHaveLength(5);
    expect(bothDown.meta.warning).toMatch(/no backend of route "demo" is answering/);
    await stack.startSample('weather', backends.ports.weather);
  });

  it('rejects an oversized body with 413 and a JSON-RPC error', async () => {
    const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'weather__get_forecast', arguments: { city: 'x'.repeat(2 * 1024 * 1024) } } });
    const response = await postJsonRpc(stack.gatewayUrl('demo'), big);
    expect(response.status).toBe(413);
    expect(response.contentType).toBe('application/json');
    expect(response.json().error).toMatchObject({ code: -32600, message: expect.stringContaining('too large') });
  });

  it("passes trace headers through unchanged, but neither the caller's Authorization (the backend has no credentials) nor a client-set gateway header", async () => {
    await stack.startSample('jobs', backends.ports.jobs);
    const headers = {
      authorization: 'Bearer agent-token-123',
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tracestate: 'vendor=opaque',
      'x-mcpgw-cluster': 'tool_service.weather',
      'x-envoy-retry-on': '5xx',
      'x-envoy-upstream-rq-timeout-ms': '1',
    };
    const client = new Client({ name: 'identity-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(stack.gatewayUrl('demo')), { requestInit: { headers } }));
    try {
      const result = await waitFor('the restarted jobs backend', () =>
        client.callTool({ name: 'jobs__whoami', arguments: {} }).catch(() => undefined),
      );
      const seen = JSON.parse((result.content as { text: string }[])[0].text);
      expect(seen).toEqual({
        traceparent: headers.traceparent,
        tracestate: headers.tracestate,
        'mcp-protocol-version': expect.any(String),
      });
    } finally {
      await client.close();
    }
  });

  it('keeps a tools/call stream in flight going, annotated, when the sidecar restarts: no call passes through it', async () => {
    const client = await connectClient(stack.gatewayUrl('demo'));
    try {
      const progress: number[] = [];
      let restart: Promise<void> | undefined;
      // Longer than the sidecar's drain timeout: were the call passing through the sidecar, the stop would cut it.
      const result = await client.callTool({ name: 'jobs__run_job', arguments: { steps: 24, interval_ms: 150 } }, undefined, {
        onprogress: ({ progress: step }) => {
          progress.push(step);
          if (step === 2) restart = stack.stopProcess('sidecar').then(() => stack.startSidecar());
        },
      });
      await restart;
      expect(result.content).toEqual([{ type: 'text', text: 'job finished after 24 steps' }]);
      expect(progress).toEqual(Array.from({ length: 24 }, (_, index) => index + 1));
      // Envoy's call lane carried and annotated the call from start to end.
      expect(result._meta?.['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'jobs', tool: 'run_job', attempts: 1 });
    } finally {
      await client.close();
    }
    await waitFor('the restarted sidecar to have the catalog', () => listedToolsOnceServed(stack.gatewayUrl('demo')));
  });

  it('fails closed in JSON-RPC form when the sidecar is down', async () => {
    await stack.stopProcess('sidecar');
    const response = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(response.status).toBe(503);
    expect(response.contentType).toBe('application/json');
    expect(response.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32603, message: expect.stringContaining('gateway sidecar unavailable') } });
    // A client's own steering header leads nowhere either: no request reaches a backend unchecked.
    const forged = await postJsonRpc(
      stack.gatewayUrl('demo'),
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run_job', arguments: {} } },
      { ...MCP_POST_HEADERS, 'x-mcpgw-cluster': 'tool_service.jobs' },
    );
    expect(forged.status).toBe(503);
    expect(forged.json().error.message).toContain('gateway sidecar unavailable');
    await stack.startSidecar();
  });

  // Last: it stops the stack's Redis.
  it('answers requests that need a session with a JSON-RPC error naming the session store when Redis is down; others go on', async () => {
    await stack.stopProcess('redis');
    const initialize = await postJsonRpc(stack.gatewayUrl('demo'), {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'agent', version: '1' } },
    });
    expect(initialize.status).toBe(503);
    expect(initialize.json().error).toMatchObject({ code: -32603, message: expect.stringContaining('session store (Redis) unavailable') });
    const stateless = await postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'no session needed' } } });
    expect(stateless.status).toBe(200);
    expect(stateless.text).toContain('no session needed');
  });
});
