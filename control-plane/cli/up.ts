import { envoyBinary } from '../devstack/envoy';
import { portProblem } from '../devstack/port-owner';
import { CHILDREN_DIE_WITH_PARENT, onPath } from '../devstack/processes';
import { ServingCheck } from '../devstack/serving-check';
import { DEV_REDIS_USER } from '../devstack/dev-inside';
import { GatewayStack, RestartEvent, StackTracing } from '../devstack/stack';
import { rateLimitBinary } from '../devstack/ratelimit';
import { buildGatewayIR } from '../ir/gateway-ir';
import { hasSharedLimits } from '../quotas/ratelimit-service-config';
import { Route } from '../registry/model';
import { loadRegistryFile } from '../registry/static-file';
import { LogLevel } from '../shared/log';
import { stopOnSignals } from './signals';

export interface UpOptions {
  registryFile: string;
  listenerPort: number;
  samplePorts: { weather: number; jobs: number };
  logDir: string;
  logLevel: LogLevel;
  /** The Redis up starts serves TLS only (a certificate of the dev CA). */
  redisTls?: boolean;
  /** Run the ratelimit service even when the registry has no shared limits (yet). */
  rateLimitService?: boolean;
  /** Spans of Envoy, the control plane and the sidecar to this OTLP/HTTP collector. */
  tracing?: StackTracing;
}

/** What keeps `up` from starting or serving, said in one line with its cause and its fix. */
export class UpError extends Error {}

const HOST = '127.0.0.1';
/** How long the started stack may take to serve before `up` gives up and names what does not. */
const SERVING_TIMEOUT_MS = 20_000;

function restartLine(event: RestartEvent): string {
  const exit = `${event.exit}${event.lastWords ? `: ${event.lastWords}` : ''}`;
  if (event.failure) {
    return `${event.name} exited (${exit}); restart ${event.restarts} failed (${event.failure}); next try in ${(event.retryInMs! / 1000).toFixed(1)} s`;
  }
  return `${event.name} exited (${exit}) and was restarted; serving again after ${(event.downMs! / 1000).toFixed(1)} s (restart ${event.restarts})`;
}

/** What the demo secures, in one line: the inside is closed on one host as it would be across many. */
function insideLine(stack: GatewayStack, options: UpOptions): string {
  const inside = stack.inside!;
  return [
    `secured inside:      mutual TLS (dev CA in ${inside.dir}) on ADS, the catalog stream, Envoy → sidecar and sidecar → Envoy's egress listener;`,
    `Redis ACL user ${DEV_REDIS_USER}${options.redisTls ? ' over TLS' : ''} (password in ${inside.redisPasswordFile});`,
    'every admin port and the inside on 127.0.0.1 only (docs/operating.md#securing-the-inside)',
  ].join(' ');
}

/** Everything fixed in advance that cannot be had, checked before anything starts. */
async function preflight(options: UpOptions, samples: { service: string; port: number }[], rateLimit: boolean): Promise<void> {
  envoyBinary();
  if (!onPath('redis-server')) throw new UpError('redis-server not found on PATH: run scripts/setup.sh (installs it from Debian)');
  if (rateLimit && !rateLimitBinary()) {
    throw new UpError(
      'the registry has shared limits, which the ratelimit service counts, and it is not installed: run scripts/test-tools.sh (builds envoyproxy/ratelimit into .tools/bin/) or set RATELIMIT_BIN',
    );
  }
  const problems = await Promise.all([
    portProblem(options.listenerPort, HOST, 'the gateway listener', 'stop that process or choose another port with --listener-port'),
    ...samples.map((sample) =>
      portProblem(sample.port, HOST, `sample Tool Service ${sample.service}`, 'stop that process or choose other ports with --sample-ports'),
    ),
  ]);
  const found = problems.filter((problem): problem is string => problem !== undefined);
  if (found.length > 0) throw new UpError(found.join('; '));
}

/**
 * `mcpgw up`: starts the whole gateway on loopback, says it is up only once every part answers and a
 * request through Envoy's listener gets the gateway's answer, then keeps every process running until
 * SIGINT or SIGTERM. Any failure stops what was started and throws an UpError.
 */
export async function runUp(options: UpOptions, say: (line: string) => void): Promise<void> {
  const startedAt = Date.now();
  const registry = loadRegistryFile(options.registryFile);
  const samples = [
    { service: 'weather', port: options.samplePorts.weather },
    { service: 'jobs', port: options.samplePorts.jobs },
  ];
  // Shared limits are counted by the ratelimit service (docs/quotas.md): run it when the registry has any.
  const rateLimit = Boolean(options.rateLimitService) || hasSharedLimits(buildGatewayIR(registry));
  await preflight(options, samples, rateLimit);
  if (!CHILDREN_DIE_WITH_PARENT) say('warning: setpriv (util-linux) not found: if up is killed with SIGKILL, the processes it started keep running');
  say(`starting the gateway (logs in ${options.logDir}) ...`);
  const stack = await GatewayStack.prepare({
    registryFile: options.registryFile,
    logDir: options.logDir,
    samples,
    ports: { listener: options.listenerPort },
    logLevel: options.logLevel,
    tracing: options.tracing,
    envoyBaseId: options.listenerPort,
    redisTls: options.redisTls,
    rateLimit,
    onRestart: (event) => say(restartLine(event)),
  });
  const signals = stopOnSignals(async () => {
    say('stopping ...');
    await stack.stop();
  });
  let report;
  try {
    await stack.startAll();
    report = await new ServingCheck(stack, registry, samples).untilServing(SERVING_TIMEOUT_MS);
  } catch (error) {
    // Stopping on a signal makes the start fail; that stop is already under way and exits by itself.
    if (signals.signalled) return;
    await stack.stop();
    throw new UpError((error as Error).message);
  }
  const seconds = ((Date.now() - startedAt) / 1000).toFixed(1);
  const routeLine = (route: Route) => {
    const answer = report.toolsByRoute.get(route.key);
    const issuer = route.auth ? route.auth.issuer : 'its issuer';
    const served =
      answer && 'tools' in answer
        ? `${answer.tools} tools`
        : answer && 'keysUnavailable' in answer
          ? `a token of ${issuer} required; refusing every request until the keys of ${issuer} can be read`
          : `a token of ${issuer} required`;
    return `route ${route.key}: ${stack.gatewayUrl(route.key)} (${served})`;
  };
  const open = registry.routes.filter((route) => !route.auth);
  say(
    [
      '',
      `MCP federation gateway is up (${seconds} s). Register one URL per route with your agent:`,
      ...registry.routes.map(routeLine),
      ...(open.length > 0
        ? [
            `authentication: off on ${open.length === registry.routes.length ? 'every route' : `route ${open.map((route) => route.key).join(', ')}`}: anyone who reaches ${HOST}:${options.listenerPort} can call ${open.length === registry.routes.length ? 'every' : 'their'} tool (fine on loopback; docs/auth.md turns it on, e.g. --registry examples/auth-keycloak.yaml)`,
          ]
        : []),
      ...report.degraded.map((backend) => `warning: Tool Service ${backend}; its tools are left out until it answers`),
      '',
      `envoy admin:         ${stack.envoyAdminUrl} (base id ${stack.envoyBaseId})`,
      `control plane admin: ${stack.controlPlaneAdminUrl} (/dashboard, /readyz, /status, /config/xds)`,
      `sidecar admin:       ${stack.sidecarAdminUrl} (/metrics, /healthz)`,
      `xDS (ADS, gRPC):     ${HOST}:${stack.ports.grpc}`,
      `dev portal:          ${stack.portalUrl}/v1/registry (serving ${options.registryFile}; edit the file to change routes)`,
      `redis:               ${stack.redisUrl}`,
      insideLine(stack, options),
      ...(rateLimit ? [`ratelimit service:   unix:${stack.rateLimitSocket} (shared limits; its configuration ${stack.rateLimitConfigFile})`] : []),
      `audit log:           ${stack.auditFile} (one JSON line per tools/call and refused request)`,
      '',
      'Ctrl-C stops everything; a process that exits on its own is restarted.',
      '',
    ].join('\n'),
  );
}
