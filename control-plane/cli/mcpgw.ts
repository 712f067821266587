#!/usr/bin/env node
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { startControlPlane } from '../app/control-plane';
import { CATALOG_DEFAULTS, RELIST_DEFAULTS } from '../catalog/catalog-store';
import { TOOL_LIST_DEFAULTS } from '../catalog/tool-fetcher';
import { TOOL_NAME_POLICIES, separatorProblem } from '../catalog/tool-exposure';
import { renderBootstrap } from '../devstack/envoy';
import { GatewayStack } from '../devstack/stack';
import { buildGatewayIR } from '../ir/gateway-ir';
import { asStaticBootstrap, diffXds, formatDifferences } from '../xds/render';
import { XdsResources, translate } from '../xds/translate';
import { EMPTY_CALL_LANE_CATALOG } from '../xds/translate/call-lane';
import { GATEWAY_DEFAULTS, GatewaySettings } from '../xds/translate/settings';
import { DEFAULT_FILE_SETTLE_MS, FileRegistrySource } from '../registry/file-source';
import { PortalRegistrySource } from '../registry/portal-source';
import { RegistryFileError, loadRegistryFile } from '../registry/static-file';
import { projectPath } from '../shared/paths';
import { REDIS_TIMEOUT_DEFAULTS, RedisTimeouts } from '../shared/redis-client';
import { SESSION_DEFAULTS } from '../sidecar/sessions/session-store';
import { startSidecar } from '../sidecar/sidecar';

const USAGE = `usage: mcpgw <command> [options]

commands:
  up              run the whole gateway locally: Redis, sample Tool Services, control plane, sidecar, Envoy
                    --registry FILE   registry YAML (default: $MCPGW_REGISTRY or registry/default.yaml)
                    --listener-port N gateway port agents connect to (default: $MCPGW_PORT or 10000)
  control-plane   run the xDS control plane
                    (--registry FILE | --portal URL [--portal-token T or $MCPGW_PORTAL_TOKEN])
                    --grpc HOST:PORT --admin HOST:PORT --listener HOST:PORT --sidecar HOST:PORT
                    [--redis redis://HOST:PORT [--redis-prefix mcpgw:]]
                    [--registry-refresh-ms N] [--catalog-refresh-ms N] [--tool-list-timeout-ms N] [--catalog-fetch-concurrency 32]
                    [--tool-list-max-bytes 10485760] [--tool-list-max-tools 5000]  one Tool Service's tools/list, over all pages
                    [--catalog-retry-min-ms 1000] [--catalog-retry-max-ms 10000]   re-listing a failing Tool Service
                    [--registry-file-settle-ms 500]  a registry file is read once unchanged this long
                    [--redis-connect-timeout-ms 2000] [--redis-command-timeout-ms 500]
                    [--tool-name-separator S]      exposed names are <backend>S<tool> (default: __)
                    [--tool-name-policy warn|drop] for names outside ^[a-zA-Z0-9_-]{1,64}$ (default: drop)
                    [--max-tools-per-route N]      tools a route serves at most (default: 5000)
                    [--tools-list-page-size N]     tools per tools/list answer (default: 100)
                    (naming rules and defaults: docs/tools-list.md)
  sidecar         run the MCP sidecar (the gateway lane and the session check, behind Envoy)
                    --listen HOST:PORT --control-plane HOST:PORT [--id NAME]
                    [--redis redis://HOST:PORT [--redis-prefix mcpgw:]] [--session-ttl-s 3600]
                    [--backend-session-timeout-ms 5000] [--admin HOST:PORT]  GET /metrics and /healthz
                    [--session-client-fields-max-bytes 16384]  initialize's clientInfo + capabilities stored per session
                    [--redis-connect-timeout-ms 2000] [--redis-command-timeout-ms 500]
                    [--drain-timeout-ms 10000]     on SIGTERM, how long requests in flight keep the sidecar
                    [--max-request-body-bytes 1048576] [--max-streams-per-session 4]
  validate FILE   check a registry file; prints every problem and exits 1 if there is any
  render          print the xDS a registry produces
                    --registry FILE [--format json|yaml|bootstrap] [--listener HOST:PORT] [--sidecar HOST:PORT]
                    (bootstrap: a static Envoy bootstrap to check with \`envoy --mode validate -c FILE\`)
  diff OLD NEW    show what changes in Envoy between two registry files; exits 1 when they differ
                    [--listener HOST:PORT] [--sidecar HOST:PORT]
  envoy-bootstrap print envoy/bootstrap.yaml filled in
                    --node-id ID --admin HOST:PORT --xds HOST:PORT [--ads GRPC|DELTA_GRPC]
`;

class UsageError extends Error {}

const hostPort = z
  .string()
  .regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT')
  .transform((value) => {
    const [address, port] = value.split(':');
    return { address, port: Number(port) };
  });
const positiveInt = z.coerce.number().int().positive();

function parseOptions<T extends z.ZodRawShape>(
  args: string[],
  shape: T,
  positionals = 0,
): z.output<z.ZodObject<T>> & { positionals: string[] } {
  let parsedArgs;
  try {
    parsedArgs = parseArgs({
      args,
      options: Object.fromEntries(Object.keys(shape).map((name) => [name, { type: 'string' as const }])),
      strict: true,
      allowPositionals: positionals > 0,
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals: given } = parsedArgs;
  if (given.length !== positionals) throw new UsageError(`expected ${positionals} file argument(s), got ${given.length}`);
  const parsed = z.object(shape).safeParse(values);
  if (!parsed.success) {
    throw new UsageError(parsed.error.issues.map((issue) => `--${issue.path.join('.')}: ${issue.message}`).join('\n'));
  }
  return { ...parsed.data, positionals: given };
}

const redisTimeoutOptions = {
  'redis-connect-timeout-ms': positiveInt.default(REDIS_TIMEOUT_DEFAULTS.connectTimeoutMs),
  'redis-command-timeout-ms': positiveInt.default(REDIS_TIMEOUT_DEFAULTS.commandTimeoutMs),
};
const redisTimeoutsOf = (options: { 'redis-connect-timeout-ms': number; 'redis-command-timeout-ms': number }): RedisTimeouts => ({
  connectTimeoutMs: options['redis-connect-timeout-ms'],
  commandTimeoutMs: options['redis-command-timeout-ms'],
});

const gatewayAddressOptions = {
  listener: hostPort.default({ address: '127.0.0.1', port: 10000 }),
  sidecar: hostPort.default({ address: '127.0.0.1', port: 18080 }),
};

/**
 * The xDS a registry file makes. The call routes' per-tool rules come from the live catalog (the
 * backends' tools/list), which a file alone does not have: rendered here, every call route serves no tool yet.
 */
function xdsOf(registryFile: string, addresses: Pick<GatewaySettings, 'listener' | 'sidecar'>): XdsResources {
  return translate(buildGatewayIR(loadRegistryFile(registryFile)), EMPTY_CALL_LANE_CATALOG, { ...GATEWAY_DEFAULTS, ...addresses });
}

function runRender(args: string[]): void {
  const options = parseOptions(args, {
    registry: z.string(),
    format: z.enum(['json', 'yaml', 'bootstrap']).default('json'),
    ...gatewayAddressOptions,
  });
  const resources = xdsOf(options.registry, options);
  const output =
    options.format === 'json'
      ? `${JSON.stringify(resources, null, 2)}\n`
      : toYaml(options.format === 'yaml' ? resources : asStaticBootstrap(resources));
  process.stdout.write(output);
}

function runDiff(args: string[]): void {
  const options = parseOptions(args, gatewayAddressOptions, 2);
  const [before, after] = options.positionals.map((file) => xdsOf(file, options));
  const differences = diffXds(before, after);
  process.stdout.write(formatDifferences(differences));
  process.exitCode = differences.length === 0 ? 0 : 1;
}

function onSignal(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = () => {
    if (stopping) return;
    stopping = true;
    void stop().then(() => process.exit(0));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}

async function runControlPlane(args: string[]): Promise<void> {
  const options = parseOptions(args, {
    registry: z.string().optional(),
    portal: z.string().url('must be the Portal base URL, e.g. http://portal:8080').optional(),
    'portal-token': z.string().optional().default(process.env.MCPGW_PORTAL_TOKEN ?? ''),
    redis: z.string().url('must be a redis:// URL').optional(),
    'redis-prefix': z.string().default('mcpgw:'),
    grpc: hostPort,
    admin: hostPort,
    listener: hostPort,
    sidecar: hostPort,
    'max-request-body-bytes': positiveInt.default(GATEWAY_DEFAULTS.maxRequestBodyBytes),
    'session-check-timeout-ms': positiveInt.default(GATEWAY_DEFAULTS.sessionCheckTimeoutMs),
    'registry-refresh-ms': positiveInt.default(30000),
    'catalog-refresh-ms': positiveInt.default(30000),
    'tool-list-timeout-ms': positiveInt.default(5000),
    'catalog-fetch-concurrency': positiveInt.default(32),
    'tool-name-separator': z
      .string()
      .superRefine((separator, ctx) => {
        const problem = separatorProblem(separator);
        if (problem) ctx.addIssue({ code: 'custom', message: problem });
      })
      .default(CATALOG_DEFAULTS.toolNameSeparator),
    'tool-name-policy': z.enum(TOOL_NAME_POLICIES).default(CATALOG_DEFAULTS.toolNamePolicy),
    'max-tools-per-route': positiveInt.default(CATALOG_DEFAULTS.maxToolsPerRoute),
    'tools-list-page-size': positiveInt.default(CATALOG_DEFAULTS.toolsListPageSize),
    'tool-list-max-bytes': positiveInt.default(TOOL_LIST_DEFAULTS.maxBytes),
    'tool-list-max-tools': positiveInt.default(TOOL_LIST_DEFAULTS.maxTools),
    'catalog-retry-min-ms': positiveInt.default(RELIST_DEFAULTS.retryMinMs),
    'catalog-retry-max-ms': positiveInt.default(RELIST_DEFAULTS.retryMaxMs),
    'registry-file-settle-ms': positiveInt.default(DEFAULT_FILE_SETTLE_MS),
    ...redisTimeoutOptions,
  });
  if (Boolean(options.registry) === Boolean(options.portal)) {
    throw new UsageError('give exactly one registry source: --registry FILE or --portal URL');
  }
  // A file is the operator's own: problems at start are fatal. Later edits are isolated per route.
  if (options.registry) loadRegistryFile(options.registry);
  const running = await startControlPlane({
    source: options.registry
      ? new FileRegistrySource(options.registry, options['registry-file-settle-ms'])
      : new PortalRegistrySource({ baseUrl: options.portal!, token: options['portal-token'] || undefined }),
    redis: options.redis ? { url: options.redis, prefix: options['redis-prefix'], timeouts: redisTimeoutsOf(options) } : undefined,
    grpcAddress: `${options.grpc.address}:${options.grpc.port}`,
    admin: { host: options.admin.address, port: options.admin.port },
    gateway: {
      listener: options.listener,
      sidecar: options.sidecar,
      maxRequestBodyBytes: options['max-request-body-bytes'],
      sessionCheckTimeoutMs: options['session-check-timeout-ms'],
    },
    registryRefreshMs: options['registry-refresh-ms'],
    catalogRefreshMs: options['catalog-refresh-ms'],
    toolList: { timeoutMs: options['tool-list-timeout-ms'], maxBytes: options['tool-list-max-bytes'], maxTools: options['tool-list-max-tools'] },
    relist: { retryMinMs: options['catalog-retry-min-ms'], retryMaxMs: options['catalog-retry-max-ms'] },
    catalogFetchConcurrency: options['catalog-fetch-concurrency'],
    catalog: {
      toolNameSeparator: options['tool-name-separator'],
      toolNamePolicy: options['tool-name-policy'],
      maxToolsPerRoute: options['max-tools-per-route'],
      toolsListPageSize: options['tools-list-page-size'],
    },
  });
  onSignal(running.stop);
}

async function runSidecar(args: string[]): Promise<void> {
  const options = parseOptions(args, {
    listen: z.string().regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT'),
    'control-plane': z.string().regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT'),
    id: z.string().default(`${os.hostname()}-${process.pid}`),
    redis: z.string().url('must be a redis:// URL').optional(),
    'redis-prefix': z.string().default('mcpgw:'),
    'session-ttl-s': positiveInt.default(3600),
    'backend-session-timeout-ms': positiveInt.default(5000),
    admin: z.string().regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT').optional(),
    'drain-timeout-ms': positiveInt.default(10_000),
    'max-request-body-bytes': positiveInt.default(GATEWAY_DEFAULTS.maxRequestBodyBytes),
    'max-streams-per-session': positiveInt.default(4),
    'session-client-fields-max-bytes': positiveInt.default(SESSION_DEFAULTS.maxClientFieldsBytes),
    ...redisTimeoutOptions,
  });
  const running = await startSidecar({
    drainTimeoutMs: options['drain-timeout-ms'],
    adminAddress: options.admin,
    address: options.listen,
    maxRequestBodyBytes: options['max-request-body-bytes'],
    maxStreamsPerSession: options['max-streams-per-session'],
    controlPlaneAddress: options['control-plane'],
    sidecarId: options.id,
    redis: options.redis ? { url: options.redis, prefix: options['redis-prefix'], timeouts: redisTimeoutsOf(options) } : undefined,
    sessionLimits: { maxClientFieldsBytes: options['session-client-fields-max-bytes'] },
    sessionIdleTtlSeconds: options['session-ttl-s'],
    backendSessionTimeoutMs: options['backend-session-timeout-ms'],
  });
  onSignal(running.stop);
}

const SAMPLE_SERVICES = [
  { service: 'weather', port: 18101 },
  { service: 'jobs', port: 18102 },
];

async function runUp(args: string[]): Promise<void> {
  const options = parseOptions(args, {
    registry: z.string().default(process.env.MCPGW_REGISTRY ?? projectPath('registry', 'default.yaml')),
    'listener-port': positiveInt.default(Number(process.env.MCPGW_PORT ?? 10000)),
  });
  const registryFile = path.resolve(options.registry);
  const registry = loadRegistryFile(registryFile);
  const logDir = projectPath('.run', 'logs');
  process.stdout.write(`starting the gateway (logs in ${logDir}) ...\n`);
  const stack = await GatewayStack.start({
    registryFile,
    logDir,
    samples: SAMPLE_SERVICES,
    ports: { listener: options['listener-port'] },
  });
  onSignal(async () => {
    process.stdout.write('\nstopping ...\n');
    await stack.stop();
  });
  const lines = [
    '',
    'MCP federation gateway is up. Register one URL per route with your agent:',
    ...registry.routes.map((route) => `route ${route.key}: ${stack.gatewayUrl(route.key)}`),
    '',
    `envoy admin:         ${stack.envoyAdminUrl}`,
    `control plane admin: ${stack.controlPlaneAdminUrl} (/readyz, /status, /config/xds)`,
    `sidecar admin:       ${stack.sidecarAdminUrl} (/metrics, /healthz)`,
    `xDS (ADS, gRPC):     127.0.0.1:${stack.ports.grpc}`,
    `dev portal:          ${stack.portalUrl}/v1/registry (serving ${registryFile}; edit the file to change routes)`,
    `redis:               ${stack.redisUrl}`,
    '',
    'Ctrl-C stops everything.',
    '',
  ];
  process.stdout.write(lines.join('\n'));
}

function runValidate(args: string[]): void {
  if (args.length !== 1) throw new UsageError('validate takes exactly one registry file');
  const registry = loadRegistryFile(args[0]);
  const services = registry.routes.reduce((sum, route) => sum + route.toolServices.length, 0);
  process.stdout.write(`${args[0]}: valid (${registry.routes.length} routes, ${services} Tool Service mappings)\n`);
}

function runEnvoyBootstrap(args: string[]): void {
  const options = parseOptions(args, {
    'node-id': z.string().min(1),
    admin: hostPort,
    xds: hostPort,
    ads: z.enum(['GRPC', 'DELTA_GRPC']).default('GRPC'),
  });
  process.stdout.write(
    renderBootstrap({
      nodeId: options['node-id'],
      adsApiType: options.ads,
      adminAddress: options.admin.address,
      adminPort: options.admin.port,
      xdsHost: options.xds.address,
      xdsPort: options.xds.port,
    }),
  );
}

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  switch (command) {
    case 'up':
      return runUp(args);
    case 'control-plane':
      return runControlPlane(args);
    case 'sidecar':
      return runSidecar(args);
    case 'validate':
      return runValidate(args);
    case 'envoy-bootstrap':
      return runEnvoyBootstrap(args);
    case 'render':
      return runRender(args);
    case 'diff':
      return runDiff(args);
    default:
      throw new UsageError(command ? `unknown command "${command}"` : 'no command given');
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`mcpgw: ${error.message}\n\n${USAGE}`);
    process.exit(2);
  }
  process.stderr.write(`mcpgw: ${error instanceof RegistryFileError ? error.message : (error as Error).stack}\n`);
  process.exit(1);
});
