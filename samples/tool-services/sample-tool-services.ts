import * as http from 'node:http';
import * as https from 'node:https';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { mountStatelessMcp } from './stateless-mcp';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';

/** Sample Tool Services for the demo and the tests: real MCP SDK servers, stateless Streamable HTTP. */
export type SampleServiceName = 'weather' | 'jobs';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

function weatherServer(): McpServer {
  const server = new McpServer({ name: 'sample-weather', version: '1.0.0' });
  server.registerTool(
    'get_forecast',
    {
      description: 'Forecast for a city (deterministic sample data).',
      inputSchema: { city: z.string().min(1) },
      annotations: { readOnlyHint: true },
    },
    async ({ city }) => text(`Forecast for ${city}: sunny, ${10 + (city.length % 15)}°C`),
  );
  server.registerTool(
    'get_alerts',
    { description: 'Weather alerts for a region.', inputSchema: { region: z.string() }, annotations: { readOnlyHint: true } },
    async ({ region }) => text(`No alerts for ${region}`),
  );
  return server;
}

function jobsServer(): McpServer {
  const server = new McpServer({ name: 'sample-jobs', version: '1.0.0' });
  server.registerTool(
    'run_job',
    {
      description: 'Runs a job of `steps` steps, `interval_ms` apart, reporting progress after each step.',
      inputSchema: { steps: z.number().int().min(1).max(200).default(5), interval_ms: z.number().int().min(0).max(10000).default(200) },
    },
    async ({ steps, interval_ms }, extra) => {
      const progressToken = extra._meta?.progressToken;
      for (let step = 1; step <= steps; step++) {
        await sleep(interval_ms);
        if (progressToken !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: step, total: steps, message: `step ${step} of ${steps}` },
          });
        }
      }
      return text(`job finished after ${steps} steps`);
    },
  );
  server.registerTool(
    'echo',
    { description: 'Echoes its input.', inputSchema: { text: z.string() }, annotations: { readOnlyHint: true, idempotentHint: true } },
    async ({ text: value }) => text(value),
  );
  server.registerTool(
    'whoami',
    {
      description: 'Returns the identity and trace headers this request reached the Tool Service with.',
      inputSchema: {},
      annotations: { readOnlyHint: true },
    },
    async (_args, extra) => {
      const headers = extra.requestInfo?.headers ?? {};
      const seen = Object.fromEntries(
        Object.entries(headers).filter(([name]) => /^(authorization|traceparent|tracestate|mcp-|x-mcpgw-|x-envoy-retry|x-envoy-max|x-envoy-upstream-rq)/.test(name)),
      );
      return text(JSON.stringify(seen));
    },
  );
  return server;
}

const FACTORIES: Record<SampleServiceName, () => McpServer> = { weather: weatherServer, jobs: jobsServer };

export function isSampleServiceName(value: string): value is SampleServiceName {
  return value in FACTORIES;
}

/**
 * Serves one sample Tool Service at http://host:port/mcp until the returned server is closed. With
 * jsonResponse it answers each request with one JSON body when the result is ready, instead of
 * opening an SSE stream at once.
 */
export interface SampleServiceOptions {
  jsonResponse?: boolean;
  /** PEM certificate and key: serve https instead of http. */
  tls?: { cert: Buffer; key: Buffer };
}

export function startSampleToolService(
  service: SampleServiceName,
  host: string,
  port: number,
  { jsonResponse = false, tls }: SampleServiceOptions = {},
): Promise<http.Server> {
  const app = createMcpExpressApp({ host });
  mountStatelessMcp(app, FACTORIES[service], jsonResponse);
  const methodNotAllowed = (_req: unknown, res: { status(code: number): { json(body: unknown): void } }) =>
    res.status(405).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null });
  app.get('/mcp', methodNotAllowed);
  app.delete('/mcp', methodNotAllowed);
  return new Promise((resolve, reject) => {
    const server = tls ? https.createServer(tls, app) : http.createServer(app);
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
