import Redis from 'ioredis';
import { z } from 'zod';
import { Registry } from '../registry/model';
import { KEYS_UNAVAILABLE } from '../xds/translate/auth';
import { TYPE_URL } from '../xds/translate/type-urls';
import { listensOn, portOwner } from './port-owner';
import { GatewayStack } from './stack';

/**
 * The checks `mcpgw up` makes before it says "up": every part answers, Envoy accepted its
 * configuration, and a request through the gateway's listener gets the gateway's own answer.
 */

/** Why the stack is not serving, as one line naming the cause and the fix. */
export class NotServingError extends Error {}

/** A check that has not passed yet; `final` when waiting longer cannot help (a NACK). */
type Failure = { message: string; final?: boolean };

const statusSchema = z.object({
  xds: z.object({
    nodes: z.array(
      z.object({
        node: z.object({ id: z.string() }),
        acked: z.record(z.string(), z.string()),
        sent: z.record(z.string(), z.string()),
        lastNack: z.object({ typeUrl: z.string(), version: z.string(), errorDetail: z.string() }).optional(),
      }),
    ),
  }),
  catalog: z.object({
    routes: z.array(
      z.object({
        route: z.string(),
        backends: z.array(z.object({ name: z.string(), url: z.string(), state: z.string(), last_error: z.string() })),
      }),
    ),
  }),
});
type ControlPlaneStatus = z.infer<typeof statusSchema>;

const toolsListAnswer = z.object({ jsonrpc: z.literal('2.0'), result: z.object({ tools: z.array(z.object({ name: z.string() })) }) });
const errorAnswer = z.object({ jsonrpc: z.literal('2.0'), error: z.object({ message: z.string() }) });

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const REQUEST_TIMEOUT_MS = 2000;

async function get(url: string): Promise<Response> {
  return fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
}

function postJson(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: MCP_HEADERS, body: JSON.stringify(body), signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
}

async function redisAnswersPing(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: REQUEST_TIMEOUT_MS });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const describeError = (error: unknown) => (error instanceof Error ? ((error.cause as Error | undefined)?.message ?? error.message) : String(error));

/** The fix for what Envoy rejected: a listener it cannot bind is a taken port, anything else the registry. */
function nackFix(errorDetail: string, stack: GatewayStack): string {
  const bind = /cannot bind '[^']*:(\d+)'/.exec(errorDetail);
  if (bind) {
    const port = Number(bind[1]);
    const owner = portOwner(port);
    return `port ${port} is taken${owner ? ` by ${owner}` : ''}: stop that process or choose another port with --listener-port`;
  }
  return `fix what it names in ${stack.options.registryFile} and start again (details in ${stack.logFileOf('control-plane')})`;
}

function envoyFailure(status: ControlPlaneStatus, stack: GatewayStack): Failure | undefined {
  const nodeId = stack.envoyNodeIds.get('envoy');
  const node = status.xds.nodes.find((entry) => entry.node.id === nodeId);
  if (!node) return { message: `Envoy (node ${nodeId}) is not connected to the control plane; see ${stack.logFileOf('envoy')}` };
  if (node.lastNack) {
    return {
      final: true,
      message: `Envoy rejected its configuration (NACK of ${node.lastNack.typeUrl.split('.').pop()} version ${node.lastNack.version}: ${node.lastNack.errorDetail}); ${nackFix(node.lastNack.errorDetail, stack)}`,
    };
  }
  const unanswered = Object.keys(node.sent).filter((type) => node.acked[type] !== node.sent[type]);
  if (!node.sent[TYPE_URL.listener] || unanswered.length > 0) return { message: 'Envoy has not accepted its listener and routes yet' };
  return undefined;
}

/**
 * What a route answered a tools/list without a token with: its tools, a token challenge (a route with
 * auth), or the refusal of a route with auth whose issuer's keys the control plane could not read yet.
 */
export type RouteAnswer = { tools: number } | { challenge: string } | { keysUnavailable: string };

export interface ServingReport {
  /** What each route answered through the gateway. */
  toolsByRoute: Map<string, RouteAnswer>;
  /** Tool Services of the registry that do not answer tools/list (the gateway serves without them). */
  degraded: string[];
}

export class ServingCheck {
  constructor(
    private readonly stack: GatewayStack,
    private readonly registry: Registry,
    private readonly samples: { service: string; port: number }[],
  ) {}

  /** Every failing check's reason, the first one first; none when the stack serves. */
  private async failures(): Promise<{ failures: Failure[]; report?: ServingReport }> {
    const { stack } = this;
    const failures: Failure[] = [];
    const ready = await get(`${stack.controlPlaneAdminUrl}/readyz`).catch((error: unknown) => describeError(error));
    if (typeof ready === 'string' || !ready.ok) {
      const why = typeof ready === 'string' ? ready : `${ready.status} ${await ready.text()}`;
      failures.push({ message: `the control plane is not ready (GET /readyz: ${why}); see ${stack.logFileOf('control-plane')}` });
    }
    const healthy = await get(`${stack.sidecarAdminUrl}/healthz`).then((response) => response.ok, () => false);
    if (!healthy) failures.push({ message: `the sidecar is not healthy (GET /healthz); see ${stack.logFileOf('sidecar')}` });
    if (!(await redisAnswersPing(stack.redisUrl))) failures.push({ message: `Redis does not answer PING at ${stack.redisUrl}; see ${stack.logFileOf('redis')}` });
    for (const sample of this.samples) {
      const url = `http://127.0.0.1:${sample.port}/mcp`;
      const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'mcpgw-up', version: '1' } } };
      const answer = await postJson(url, initialize).then((response) => (response.ok ? undefined : `HTTP ${response.status}`), describeError);
      if (answer) failures.push({ message: `sample Tool Service ${sample.service} does not answer at ${url} (${answer}); see ${stack.logFileOf(stack.sampleName(sample))}` });
    }
    const status = await get(`${stack.controlPlaneAdminUrl}/status`)
      .then(async (response) => statusSchema.parse(await response.json()))
      .catch(() => undefined);
    if (!status) return { failures: [...failures, { message: `the control plane's /status does not answer; see ${stack.logFileOf('control-plane')}` }] };
    const envoy = envoyFailure(status, stack);
    if (envoy) failures.push(envoy);
    const toolsByRoute = new Map<string, RouteAnswer>();
    for (const route of this.registry.routes) {
      const listed = await this.toolsThroughListener(route.key);
      if (typeof listed === 'string') failures.push({ message: listed });
      else toolsByRoute.set(route.key, listed);
    }
    const degraded = status.catalog.routes.flatMap((route) =>
      route.backends.filter((backend) => backend.state !== 'ok').map((backend) => `${backend.name} (${backend.url}) on route ${route.route}: ${backend.last_error || backend.state}`),
    );
    return { failures, report: { toolsByRoute, degraded: [...new Set(degraded)] } };
  }

  /**
   * tools/list through Envoy's listener: the number of tools, the challenge of a route with auth (a
   * 401 naming its metadata document is the gateway's answer), or why the gateway did not answer it.
   */
  private async toolsThroughListener(routeKey: string): Promise<RouteAnswer | string> {
    const url = this.stack.gatewayUrl(routeKey);
    const port = this.stack.ports.listener;
    let response: Response;
    try {
      response = await postJson(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    } catch (error) {
      return `the gateway listener does not answer at ${url} (${describeError(error)}); see ${this.stack.logFileOf('envoy')}`;
    }
    const body = await response.text();
    const challenge = response.headers.get('www-authenticate') ?? '';
    if (response.status === 401 && challenge.includes('resource_metadata=')) return { challenge };
    const refusal = errorAnswer.safeParse(parseJson(body));
    if (response.status === 503 && refusal.success && refusal.data.error.message.includes(KEYS_UNAVAILABLE)) return { keysUnavailable: refusal.data.error.message };
    const parsed = toolsListAnswer.safeParse(parseJson(body));
    if (parsed.success) return { tools: parsed.data.result.tools.length };
    const answer = `HTTP ${response.status}: ${body.slice(0, 120).replace(/\s+/g, ' ')}`;
    const envoy = this.stack.processes.get('envoy')?.child.pid;
    if (envoy !== undefined && listensOn(envoy, port)) {
      return `tools/list on route ${routeKey} through the gateway answers ${answer}; see ${this.stack.logFileOf('sidecar')} and ${this.stack.logFileOf('control-plane')}`;
    }
    const owner = portOwner(port);
    return `${url} answers, but not as this gateway (${answer}): port ${port} is held by ${owner ?? 'another process'}; stop that process or choose another port with --listener-port`;
  }

  /**
   * Checks until everything serves or `timeoutMs` passes; a NACK fails at once. Throws NotServingError
   * with the first failing check.
   */
  async untilServing(timeoutMs: number): Promise<ServingReport> {
    const deadline = Date.now() + timeoutMs;
    let refreshed = false;
    for (;;) {
      const { failures, report } = await this.failures();
      if (report && failures.length === 0) {
        if (report.degraded.length === 0 || refreshed) return report;
        // A Tool Service may have come up after the control plane's first tools/list: ask once more.
        refreshed = true;
        await fetch(`${this.stack.controlPlaneAdminUrl}/catalog/refresh`, { method: 'POST', signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }).catch(() => undefined);
        continue;
      }
      const first = failures.find((failure) => failure.final) ?? failures[0];
      if (first.final || Date.now() > deadline) throw new NotServingError(first.message);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
