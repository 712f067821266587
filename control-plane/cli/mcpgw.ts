#!/usr/bin/env node
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { startControlPlane } from '../app/control-plane';
import { renderBootstrap } from '../devstack/envoy';
import { GatewayStack } from '../devstack/stack';
import { RegistryFileError, loadRegistryFile } from '../registry/static-file';
import { projectPath } from '../shared/paths';
import { startSidecar } from '../sidecar/sidecar';

const USAGE = `usage: mcpgw <command> [options]

commands:
  up              run the whole gateway locally: Redis, sample Tool Services, control plane, sidecar, Envoy
                    --registry FILE   registry YAML (default: $MCPGW_REGISTRY or registry/default.yaml)
                    --listener-port N gateway port agents connect to (default: $MCPGW_PORT or 10000)
  control-plane   run the xDS control plane
                    --registry FILE --grpc HOST:PORT --admin HOST:PORT --listener HOST:PORT --sidecar HOST:PORT
                    [--catalog-refresh-ms N] [--tool-list-timeout-ms N]
  sidecar         run the MCP sidecar (Envoy ext_proc server)
                    --ext-proc HOST:PORT --control-plane HOST:PORT [--id NAME]
  validate FILE   check a registry file; prints every problem and exits 1 if there is any
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

function parseOptions<T extends z.ZodRawShape>(args: string[], shape: T): z.output<z.ZodObject<T>> {
  const { values } = parseArgs({
    args,
    options: Object.fromEntries(Object.keys(shape).map((name) => [name, { type: 'string' as const }])),
    strict: true,
  });
  const parsed = z.object(shape).safeParse(values);
  if (!parsed.success) {
    throw new UsageError(parsed.error.issues.map((issue) => `--${issue.path.join('.')}: ${issue.message}`).join('\n'));
  }
  return parsed.data;
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
    registry: z.string(),
    grpc: hostPort,
    admin: hostPort,
    listener: hostPort,
    sidecar: hostPort,
    'catalog-refresh-ms': positiveInt.default(30000),
    'tool-list-timeout-ms': positiveInt.default(5000),
  });
  const running = await startControlPlane({
    registry: loadRegistryFile(options.registry),
    grpcAddress: `${options.grpc.address}:${options.grpc.port}`,
    admin: { host: options.admin.address, port: options.admin.port },
    gateway: { listener: options.listener, sidecar: options.sidecar },
    catalogRefreshMs: options['catalog-refresh-ms'],
    toolListTimeoutMs: options['tool-list-timeout-ms'],
  });
  onSignal(running.stop);
}

async function runSidecar(args: string[]): Promise<void> {
  const options = parseOptions(args, {
    'ext-proc': z.string().regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT'),
    'control-plane': z.string().regex(/^[^:]+:\d{1,5}$/, 'must be HOST:PORT'),
    id: z.string().default(`${os.hostname()}-${process.pid}`),
  });
  const running = await startSidecar({
    extProcAddress: options['ext-proc'],
    controlPlaneAddress: options['control-plane'],
    sidecarId: options.id,
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
    `xDS (ADS, gRPC):     127.0.0.1:${stack.ports.grpc}`,
    `redis:               redis://127.0.0.1:${stack.ports.redis}`,
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
