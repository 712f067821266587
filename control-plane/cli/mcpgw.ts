#!/usr/bin/env node
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option, OptionValues } from '@commander-js/extra-typings';
import { stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { startControlPlane } from '../app/control-plane';
import { AUDIT_DEFAULTS, AuditTarget, ROTATE_INTERVAL_PATTERN, ROTATE_SIZE_PATTERN } from '../audit/audit-log';
import { CATALOG_DEFAULTS, RELIST_DEFAULTS } from '../catalog/catalog-store';
import { TOOL_LIST_DEFAULTS } from '../catalog/tool-fetcher';
import { TOOL_NAME_POLICIES, separatorProblem } from '../catalog/tool-exposure';
import { IDP_DEFAULTS, IdpSettings } from '../credentials/idp-client';
import { TOKEN_CACHE_DEFAULTS } from '../credentials/token-cache';
import { OVERLOAD_DEFAULTS, renderBootstrap, writeBootstrapFile } from '../devstack/envoy';
import { buildGatewayIR } from '../ir/gateway-ir';
import { asStaticBootstrap, diffXds, formatDifferences } from '../xds/render';
import { XdsResources, translate } from '../xds/translate';
import { EMPTY_CALL_LANE_CATALOG } from '../xds/translate/call-lane';
import { AccessSettings, AllowList, GATEWAY_DEFAULTS, RateLimitServiceAddress, SESSION_CHECK_MARGIN_MS } from '../xds/translate/settings';
import { defaultAccess, defaultPublicUrl } from '../xds/translate/access';
import { NO_SIGNING_KEYS } from '../xds/translate/auth';
import { SIGNING_KEY_DEFAULTS } from '../auth/signing-keys';
import { DEFAULT_FILE_SETTLE_MS, FileRegistrySource } from '../registry/file-source';
import { PortalRegistrySource } from '../registry/portal-source';
import { RegistryFileError, checkRegistryFile, formatFileProblem, loadRegistryFile } from '../registry/static-file';
import { LOG_LEVELS, Logger, createLogger, logProcessEvents } from '../shared/log';
import { projectPath } from '../shared/paths';
import { REDIS_TIMEOUT_DEFAULTS, RedisAuth, RedisTimeouts, isSentinelAddress, parseRedisAddress, readRedisPassword } from '../shared/redis-client';
import { INTERNAL_ROLES, InternalTls, certificateIdentity, vouchesFor } from '../shared/internal-tls';
import { DevInside } from '../devstack/dev-inside';
import { TokenFile, readToken } from '../shared/admin-access';
import { isLoopbackHost } from '../shared/loopback';
import { SESSION_DEFAULTS } from '../sidecar/sessions/session-store';
import { ApprovalOptions, startSidecar } from '../sidecar/sidecar';
import { MIN_KEY_BYTES } from '../approval/approval-store';
import { Tracing } from '../shared/tracing';
import { BACKEND_STREAM_DEFAULTS } from '../sidecar/backend-streams';
import { stopOnSignals } from './signals';
import { startRateLimitConfigSync } from '../quotas/ratelimit-config-sync';
import { UpError, runUp } from './up';

/**
 * The `mcpgw` command, on commander: every option documented in `--help` with its default and
 * environment variable, validated with zod before anything starts. Exit codes: 0 done, 1 failed
 * (an invalid registry, a start that failed), 2 a usage error; `diff` 0 same, 1 different, 2 trouble.
 */

const USAGE_ERROR = 2;

/** Parses an option's value with a zod schema; commander names the option and the value in the error. */
function parsedBy<T>(schema: z.ZodType<T>): (value: string) => T {
  return (value) => {
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues[0].message);
    return parsed.data;
  };
}

const PORT_RULE = 'must be a port number from 1 to 65535';
const portNumber = z.coerce.number({ message: PORT_RULE }).int(PORT_RULE).min(1, PORT_RULE).max(65535, PORT_RULE);

interface HostPort {
  host: string;
  port: number;
}
const hostPort = z.string().transform((value, ctx): HostPort => {
  const match = /^([^:\s]+):(\d+)$/.exec(value);
  const port = portNumber.safeParse(match?.[2]);
  if (!match || !port.success) {
    ctx.addIssue({ code: 'custom', message: 'must be HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:18000' });
    return z.NEVER;
  }
  return { host: match[1], port: port.data };
});
const joined = (address: HostPort) => `${address.host}:${address.port}`;
/** The ratelimit service's address: HOST:PORT, or unix:<absolute path> of its gRPC socket (GRPC_UDS, docs/quotas.md). */
const rateLimitAddress = z.string().transform((value, ctx): RateLimitServiceAddress => {
  if (value.startsWith('unix:')) {
    const socketPath = value.slice('unix:'.length);
    if (path.isAbsolute(socketPath)) return { socketPath };
  } else {
    const address = hostPort.safeParse(value);
    if (address.success) return endpointOf(address.data);
  }
  ctx.addIssue({ code: 'custom', message: 'must be HOST:PORT or unix:<absolute path of a socket>, e.g. 127.0.0.1:8081 or unix:/run/mcpgw/ratelimit.sock' });
  return z.NEVER;
});
/**
 * Where a control plane takes Envoy's call log when --call-log does not say: its gRPC address's host,
 * two ports up (the port after it is the admin's by default), on either side (control-plane and envoy-bootstrap).
 */
const CALL_LOG_PORT_OFFSET = 2;
const callLogBeside = (grpc: HostPort): HostPort => ({ host: grpc.host, port: grpc.port + CALL_LOG_PORT_OFFSET });
/** HOST:PORT[,HOST:PORT…]: replicas of one part, each an endpoint (a DNS name: each of its records). */
const hostPortList = z.string().transform((value, ctx): HostPort[] => {
  const addresses: HostPort[] = [];
  for (const part of value.split(',')) {
    const parsed = hostPort.safeParse(part.trim());
    if (!parsed.success) {
      ctx.addIssue({ code: 'custom', message: `"${part}" must be HOST:PORT with a port from 1 to 65535; give several separated by commas, e.g. 10.0.0.5:18080,10.0.0.6:18080` });
      return z.NEVER;
    }
    addresses.push(parsed.data);
  }
  return addresses;
});
const positiveInt = z.coerce.number({ message: 'must be a whole number above 0' }).int('must be a whole number above 0').positive('must be a whole number above 0');
const nonNegativeInt = z.coerce.number({ message: 'must be a whole number, 0 or more' }).int('must be a whole number, 0 or more').min(0, 'must be a whole number, 0 or more');
const url = (what: string) => z.string().url(`must be ${what}`);
const redisAddress = z.string().superRefine((value, ctx) => {
  try {
    parseRedisAddress(value);
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: (error as Error).message });
  }
});
/** --redis of the control plane and the sidecar: one Redis, or its Sentinels (docs/deploying.md); from MCPGW_REDIS, so a password can come from a Secret. */
const redisOption = (description: string) => new Option('--redis <address>', description).env('MCPGW_REDIS').argParser(parsedBy(redisAddress));
const samplePorts = z
  .string()
  .transform((value, ctx) => {
    const [weather, jobs, ...rest] = value.split(',').map((part) => portNumber.safeParse(part));
    if (!weather?.success || !jobs?.success || rest.length > 0) {
      ctx.addIssue({ code: 'custom', message: `must be two ports WEATHER,JOBS, each from 1 to 65535` });
      return z.NEVER;
    }
    return { weather: weather.data, jobs: jobs.data };
  });

const publicUrl = z
  .string()
  .refine((value) => URL.canParse(value) && /^https?:$/.test(new URL(value).protocol), 'must be an http:// or https:// URL')
  .refine((value) => !URL.canParse(value) || (new URL(value).pathname === '/' && !new URL(value).search), 'must be scheme://host[:port] only, without a path')
  .transform((value) => new URL(value).origin);
/** A comma-separated list, or `*` for any value. */
const allowList = (what: string) =>
  z.string().transform((value, ctx): AllowList => {
    if (value.trim() === '*') return '*';
    const items = value.split(',').map((item) => item.trim());
    if (items.some((item) => item === '' || /\s/.test(item))) {
      ctx.addIssue({ code: 'custom', message: `must be ${what} separated by commas, or *` });
      return z.NEVER;
    }
    return items;
  });

/** The access settings: given ones as they are, the rest the safe defaults for the listener's address (docs/auth.md). */
function accessOf(listener: HostPort, options: { publicUrl?: string; allowedHosts?: AllowList; allowedOrigins?: AllowList }): AccessSettings {
  const address = { address: listener.host, port: listener.port };
  const defaults = defaultAccess(address, options.publicUrl ?? defaultPublicUrl(address));
  return {
    publicUrl: defaults.publicUrl,
    allowedHosts: options.allowedHosts ?? defaults.allowedHosts,
    allowedOrigins: options.allowedOrigins ?? defaults.allowedOrigins,
  };
}

const accessOptions = () =>
  [
    new Option('--public-url <url>', "the gateway's public origin clients use, scheme://host[:port]: a route's resource URL is <url>/mcp/<key> (docs/auth.md)")
      .env('MCPGW_PUBLIC_URL')
      .argParser(parsedBy(publicUrl)),
    new Option('--allowed-hosts <hosts>', 'Host values served, comma-separated (*.example.com allowed), or *; others get 403. Default: loopback names and the public URL\'s host on a loopback listener, any host otherwise')
      .env('MCPGW_ALLOWED_HOSTS')
      .argParser(parsedBy(allowList('host names'))),
    new Option('--allowed-origins <origins>', 'browser Origin values served and answered with CORS, comma-separated (* inside one matches a host or port, e.g. http://localhost:*), or *; others get 403. Default: loopback origins and the public URL\'s origin on a loopback listener, the public URL\'s origin otherwise')
      .env('MCPGW_ALLOWED_ORIGINS')
      .argParser(parsedBy(allowList('origins'))),
  ] as const;

const hostPortOption = <Flags extends string>(flags: Flags, description: string) => new Option(flags, description).argParser(parsedBy(hostPort));
const positiveIntOption = <Flags extends string>(flags: Flags, description: string, fallback: number) =>
  new Option(flags, description).argParser(parsedBy(positiveInt)).default(fallback);
const nonNegativeIntOption = <Flags extends string>(flags: Flags, description: string, fallback: number) =>
  new Option(flags, description).argParser(parsedBy(nonNegativeInt)).default(fallback);
const EDGE = GATEWAY_DEFAULTS.edge;
const redisConnectTimeoutOption = () =>
  positiveIntOption('--redis-connect-timeout-ms <ms>', 'limit for connecting to Redis; reconnects are tried again with backoff', REDIS_TIMEOUT_DEFAULTS.connectTimeoutMs);
const redisCommandTimeoutOption = () =>
  positiveIntOption('--redis-command-timeout-ms <ms>', "limit for one Redis command's reply; a hung Redis fails the command, never hangs it", REDIS_TIMEOUT_DEFAULTS.commandTimeoutMs);
const redisTimeoutsOf = (options: { redisConnectTimeoutMs: number; redisCommandTimeoutMs: number }): RedisTimeouts => ({
  connectTimeoutMs: options.redisConnectTimeoutMs,
  commandTimeoutMs: options.redisCommandTimeoutMs,
});
const SAMPLING_RULE = 'must be a number from 0 to 1, e.g. 0.01 for 1 %';
const samplingRatio = z.coerce.number({ message: SAMPLING_RULE }).min(0, SAMPLING_RULE).max(1, SAMPLING_RULE);
const otlpEndpoint = z
  .string()
  .url('must be the OTLP/HTTP base URL of a collector, e.g. http://127.0.0.1:4318')
  .refine((value) => /^https?:$/.test(new URL(value).protocol), 'must be an http:// or https:// URL (OTLP over HTTP)');
/** Tracing (docs/observability.md#traces): the same collector and sampling for every component; off without an endpoint. */
const otlpEndpointOption = () =>
  new Option('--otlp-endpoint <url>', 'OTLP/HTTP base URL of the trace collector (spans go to <url>/v1/traces); tracing is off without it')
    .env('MCPGW_OTLP_ENDPOINT')
    .argParser(parsedBy(otlpEndpoint));
const traceSamplingOption = () =>
  new Option('--trace-sampling <ratio>', "share of the traces started here that are kept, 0 to 1 (a caller's sampled flag is followed)")
    .env('MCPGW_TRACE_SAMPLING')
    .argParser(parsedBy(samplingRatio))
    .default(1);
const traceServiceNameOption = (component: string) => new Option('--trace-service-name <name>', 'service.name of its spans').default(component);
/** This process's spans: exported when an endpoint is given, none at all otherwise. */
function tracingOf(options: { otlpEndpoint?: string; traceSampling: number; traceServiceName: string }, log: Logger): Tracing {
  if (!options.otlpEndpoint) return Tracing.off;
  return Tracing.start({ otlpEndpoint: options.otlpEndpoint, samplingRatio: options.traceSampling, serviceName: options.traceServiceName }, log);
}

const logLevelOption = () =>
  new Option('--log-level <level>', 'the least severe log lines written').choices(LOG_LEVELS).env('MCPGW_LOG_LEVEL').default('info' as const);

/** Mutual TLS inside (docs/adr/0017-closed-inside.md): one directory per process, cert-manager's layout. */
const internalTlsOption = () =>
  new Option('--internal-tls <dir>', "mutual TLS inside: this process's certificate and key and the internal CA (tls.crt, tls.key, ca.crt), read again when they change; required unless every internal address is loopback").env('MCPGW_INTERNAL_TLS');
const adminTokenFileOption = () =>
  new Option('--admin-token-file <file>', 'a bearer token (at least 16 characters) every admin request but /healthz and /readyz must carry; required when --admin is not loopback').env('MCPGW_ADMIN_TOKEN_FILE');
const redisPasswordFileOption = () =>
  new Option('--redis-password-file <file>', "the Redis ACL user's password (the user goes in the address: redis://USER@HOST:PORT); overrides a password in the address").env('MCPGW_REDIS_PASSWORD_FILE');
const redisCaOption = () => new Option('--redis-ca <file>', 'the CA the certificates of a rediss:// Redis or of sentinels:// Sentinels and their Redis must chain to (default: the system CAs)').env('MCPGW_REDIS_CA');
const redisAuthOf = (options: { redisPasswordFile?: string; redisCa?: string }): RedisAuth => ({
  ...(options.redisPasswordFile && { password: readRedisPassword(options.redisPasswordFile) }),
  ...(options.redisCa && { tlsCaFile: options.redisCa }),
});

const SECURING_DOCS = 'docs/operating.md#securing-the-inside';
/** The control plane's admin port by default: loopback (off loopback it needs --admin-token-file). */
const CONTROL_PLANE_ADMIN: HostPort = { host: '127.0.0.1', port: 18001 };

/** The control plane's options of the closed inside, added with withOptions (its typed chain is as long as TypeScript follows one) and read back checked. */
const CONTROL_PLANE_INSIDE_OPTIONS = [
  redisPasswordFileOption,
  redisCaOption,
  adminTokenFileOption,
  internalTlsOption,
  () =>
    new Option('--envoy-internal-tls <dir>', "where every Envoy finds its internal certificate on its own host (tls.crt, tls.key, ca.crt) for its calls to the sidecars; Envoy reads the files itself").default(
      undefined,
      'the --internal-tls directory (one mount path for every pod)',
    ),
];
const controlPlaneInsideValues = z.object({
  redisPasswordFile: z.string().optional(),
  redisCa: z.string().optional(),
  adminTokenFile: z.string().optional(),
  internalTls: z.string().optional(),
  envoyInternalTls: z.string().optional(),
});

/**
 * The rules of a closed inside, checked before anything starts: a plain internal channel only between
 * loopback addresses, an admin port off loopback only with a token. The first broken one, in one line.
 */
function insideProblem(settings: {
  internalTls?: string;
  internal: { flag: string; addresses: HostPort[] }[];
  admin?: { flag: string; address: HostPort; tokenFile?: string; tokenFlag?: string };
}): string | undefined {
  if (!settings.internalTls) {
    for (const { flag, addresses } of settings.internal) {
      const open = addresses.find((address) => !isLoopbackHost(address.host));
      if (open) return `${flag} ${joined(open)} is not a loopback address, and the gateway's inside is plain without --internal-tls DIR: give --internal-tls (mutual TLS) or use 127.0.0.1 (${SECURING_DOCS})`;
    }
  }
  const { admin } = settings;
  if (admin && !admin.tokenFile && !isLoopbackHost(admin.address.host)) {
    return `${admin.flag} ${joined(admin.address)} is not a loopback address: give ${admin.tokenFlag ?? '--admin-token-file'} FILE (a bearer token) or bind it to 127.0.0.1 (${SECURING_DOCS})`;
  }
  return undefined;
}

/** Reads the files a closed inside needs; a file that does not load is one line and exit code 1. */
function loadInsideFiles<T>(commandPath: string, load: () => T): T {
  try {
    return load();
  } catch (error) {
    process.stderr.write(`${commandPath}: ${(error as Error).message}\n`);
    process.exit(1);
  }
}

function packageVersion(): string {
  const manifest = z.object({ version: z.string() }).parse(JSON.parse(fs.readFileSync(projectPath('package.json'), 'utf8')));
  return manifest.version;
}

const program = new Command('mcpgw')
  .description('MCP federation gateway: Envoy data path, xDS control plane and MCP sidecar')
  .version(packageVersion(), '-v, --version', 'print the version')
  .helpOption('-h, --help', 'show help (also after any command: mcpgw up --help)')
  .helpCommand(false)
  .exitOverride();

/**
 * A subcommand whose usage errors are one line: what is wrong (the option and its value) and where
 * the options are described, instead of the whole usage text.
 */
function subcommand(name: string, description: string) {
  const commandPath = `mcpgw ${name}`;
  return program
    .command(name)
    .description(description)
    .helpOption('-h, --help', 'show this help')
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(oneLineError(commandPath, text)) });
}

function oneLineError(commandPath: string, text: string): string {
  return `${commandPath}: ${text.replace(/^error: /, '').trim().replace(/\s*\n\s*/g, ' ')} (see '${commandPath} --help')\n`;
}
program.configureOutput({ outputError: (text, write) => write(oneLineError('mcpgw', text)) });

const DEFAULT_EGRESS = { host: '127.0.0.1', port: 10001 };
const egressOption = (description: string) => hostPortOption('--egress <host:port>', description).default(DEFAULT_EGRESS, '127.0.0.1:10001');
const ENVOY_EGRESS_DESCRIPTION = "Envoy's egress listener, for the sidecars' own requests to Tool Services (backend sessions, notifications, DELETE): with --internal-tls it takes only sidecar certificates, without it must be loopback";

const gatewayAddressOptions = [
  hostPortOption('--listener <host:port>', "Envoy's listener agents connect to").default({ host: '127.0.0.1', port: 10000 }, '127.0.0.1:10000'),
  new Option('--sidecar <host:port,...>', "the sidecars' --listen addresses").argParser(parsedBy(hostPortList)).default([{ host: '127.0.0.1', port: 18080 }], '127.0.0.1:18080'),
  egressOption(ENVOY_EGRESS_DESCRIPTION),
] as const;

const endpointOf = (value: HostPort) => ({ address: value.host, port: value.port });

/** The gateway's identity provider (token exchange, client credentials): docs/auth.md, Backends. */
const IDP_OPTIONS = {
  tokenEndpoint: () =>
    new Option('--idp-token-endpoint <url>', "the gateway's IdP token endpoint (RFC 8693 token exchange, client credentials)")
      .env('MCPGW_IDP_TOKEN_ENDPOINT')
      .argParser(parsedBy(url('an http(s) URL of a token endpoint'))),
  clientId: () => new Option('--idp-client-id <id>', "the gateway's own client id at the IdP").env('MCPGW_IDP_CLIENT_ID'),
  clientSecretFile: () =>
    new Option('--idp-client-secret-file <file>', "a file holding that client's secret (read at every token request, so it can rotate)").env('MCPGW_IDP_CLIENT_SECRET_FILE'),
  name: () => new Option('--idp-name <name>', "how errors name the IdP (default: the token endpoint's host)").env('MCPGW_IDP_NAME'),
  timeout: () => positiveIntOption('--idp-timeout-ms <ms>', 'limit for one token request', IDP_DEFAULTS.timeoutMs),
};

/**
 * Adds options to a command without adding them to its options' type: the control plane's command
 * has so many options that more levels of inferred type are past what the type checker follows
 * (TS2589). Their values are read back, checked by a schema (idpOptionsOf, credentialOptionsOf, quotaOptionsOf).
 */
function withOptions<C extends Command<unknown[], OptionValues, OptionValues>>(command: C, makers: readonly (() => Option<string, unknown, unknown, unknown, boolean, unknown>)[]): C {
  for (const make of makers) command.addOption(make());
  return command;
}

const withIdpOptions = <C extends Command<unknown[], OptionValues, OptionValues>>(command: C) => withOptions(command, Object.values(IDP_OPTIONS));

/** The control plane's options of backend credentials and the agents' TLS (docs/auth.md). */
const CREDENTIAL_OPTIONS = [
  () => new Option('--listener-tls-cert <file>', "agents' listener: TLS with this certificate (PEM, on the Envoy host; Envoy follows its rotation)").env('MCPGW_LISTENER_TLS_CERT'),
  () => new Option('--listener-tls-key <file>', "agents' listener: the certificate's private key (PEM, on the Envoy host)").env('MCPGW_LISTENER_TLS_KEY'),
  () => new Option('--allow-token-passthrough', "let registries give Tool Services credentials.mode passthrough (the caller's own token, to a backend that is its audience)"),
];
const credentialOptionsSchema = z.object({ listenerTlsCert: z.string().optional(), listenerTlsKey: z.string().optional(), allowTokenPassthrough: z.boolean().optional() });
const credentialOptionsOf = (command: { opts(): OptionValues }) => credentialOptionsSchema.parse(command.opts());

/** The control plane's options of rate limits (docs/quotas.md). */
const QUOTA_OPTIONS = [
  () =>
    new Option('--ratelimit <host:port|unix:path>', "the ratelimit service's gRPC address (envoyproxy/ratelimit), which counts shared limits for every Envoy: a port, or a Unix socket on Envoy's host (docs/quotas.md)").argParser(
      parsedBy(rateLimitAddress),
    ),
  () => new Option('--ratelimit-config <file>', "where the control plane writes the ratelimit service's configuration of the registry's shared limits (the service reloads it)"),
  () => positiveIntOption('--ratelimit-timeout-ms <ms>', "how long Envoy waits for the ratelimit service before a shared limit's whenServiceDown applies", GATEWAY_DEFAULTS.quotas.rateLimitTimeoutMs),
  () => positiveIntOption('--max-tracked-callers <n>', 'callers each per-instance limit counts apart; past it, the least recently seen starts over', GATEWAY_DEFAULTS.quotas.maxTrackedCallers),
  () =>
    new Option(
      '--shared-limit-lease-workers <n>',
      "lease shared limits of tools/call per Envoy worker instead of asking the ratelimit service per call; n = the Envoy workers of every Envoy together (each lease is at most 1/20 of a limit over them; docs/adr/0016-quotas.md)",
    ).argParser(parsedBy(positiveInt)),
];
const quotaOptionsSchema = z.object({
  ratelimit: z.union([z.object({ address: z.string(), port: z.number() }), z.object({ socketPath: z.string() })]).optional(),
  ratelimitConfig: z.string().optional(),
  ratelimitTimeoutMs: z.number(),
  maxTrackedCallers: z.number(),
  sharedLimitLeaseWorkers: z.number().optional(),
});
const quotaOptionsOf = (command: { opts(): OptionValues }) => quotaOptionsSchema.parse(command.opts());

const idpOptionsSchema = z.object({
  idpTokenEndpoint: z.string().optional(),
  idpClientId: z.string().optional(),
  idpClientSecretFile: z.string().optional(),
  idpName: z.string().optional(),
  idpTimeoutMs: z.number(),
});
type IdpOptionValues = z.output<typeof idpOptionsSchema>;

/** The IdP options a command parsed (withIdpOptions). */
const idpOptionsOf = (command: { opts(): OptionValues }): IdpOptionValues => idpOptionsSchema.parse(command.opts());

/** The IdP settings, or a usage error naming what is missing; none without --idp-token-endpoint. */
function idpSettingsOf(options: IdpOptionValues, fail: (message: string) => never): IdpSettings | undefined {
  if (!options.idpTokenEndpoint) return undefined;
  if (!options.idpClientId || !options.idpClientSecretFile) fail('--idp-token-endpoint needs --idp-client-id and --idp-client-secret-file');
  return {
    name: options.idpName ?? new URL(options.idpTokenEndpoint).host,
    tokenEndpoint: options.idpTokenEndpoint,
    clientId: options.idpClientId!,
    clientSecretFile: path.resolve(options.idpClientSecretFile!),
    timeoutMs: options.idpTimeoutMs,
  };
}

/**
 * The xDS a registry file makes. The call routes' per-tool rules come from the live catalog (the
 * backends' tools/list), which a file alone does not have: rendered here, every call route serves no tool yet.
 */
function xdsOf(
  registryFile: string,
  settings: { listener: HostPort; sidecar: readonly HostPort[]; egress: HostPort; publicUrl?: string; allowedHosts?: AllowList; allowedOrigins?: AllowList },
): XdsResources {
  const access = accessOf(settings.listener, settings);
  // No identity provider is read here: routes with auth render as refusing until their keys are read (docs/auth.md).
  return translate(
    buildGatewayIR(loadRegistryFile(registryFile, { allowTokenPassthrough: true }), { publicUrl: access.publicUrl }),
    EMPTY_CALL_LANE_CATALOG,
    { ...GATEWAY_DEFAULTS, listener: endpointOf(settings.listener), sidecars: settings.sidecar.map(endpointOf), egress: endpointOf(settings.egress), access },
    NO_SIGNING_KEYS,
  );
}

/** The component's logger; from here on, everything it says on stderr is a JSON log line. */
function componentLogger(component: string, level: (typeof LOG_LEVELS)[number]): Logger {
  const log = createLogger(component, level);
  logProcessEvents(log);
  return log;
}

/** A component that cannot start logs why and exits 1. */
function failStart(log: Logger, error: unknown): never {
  log.error('could not start', { error: error instanceof RegistryFileError ? error.message : (error as Error).stack });
  process.exit(1);
}

subcommand('up', 'run the whole gateway on 127.0.0.1: Redis, two sample Tool Services, dev Portal, control plane, sidecar, Envoy')
  .addOption(new Option('--registry <file>', 'the registry (routes → Tool Services), YAML or JSON').env('MCPGW_REGISTRY').default(projectPath('registry', 'default.yaml'), 'registry/default.yaml'))
  .addOption(new Option('--listener-port <port>', 'the port agents connect to').env('MCPGW_PORT').argParser(parsedBy(portNumber)).default(10000))
  .addOption(
    new Option('--sample-ports <weather,jobs>', 'ports of the sample Tool Services (the registry must point at them)')
      .env('MCPGW_SAMPLE_PORTS')
      .argParser(parsedBy(samplePorts))
      .default({ weather: 18101, jobs: 18102 }, '18101,18102'),
  )
  .addOption(new Option('--log-dir <dir>', 'where every process writes <name>.log (JSON lines)').env('MCPGW_LOG_DIR').default(projectPath('.run', 'logs'), '.run/logs'))
  .addOption(logLevelOption())
  .addOption(new Option('--redis-tls', 'the Redis up starts serves TLS only (a certificate of the dev CA); the processes use rediss:// and --redis-ca'))
  .addOption(
    new Option('--ratelimit-service', 'run the ratelimit service of shared limits even when the registry has none yet (it runs whenever the registry has some)').env('MCPGW_RATELIMIT_SERVICE'),
  )
  .addOption(otlpEndpointOption())
  .addOption(traceSamplingOption())
  .action(async (options) => {
    try {
      await runUp(
        {
          registryFile: path.resolve(options.registry),
          listenerPort: options.listenerPort,
          samplePorts: options.samplePorts,
          logDir: path.resolve(options.logDir),
          logLevel: options.logLevel,
          redisTls: options.redisTls,
          rateLimitService: Boolean(options.ratelimitService),
          ...(options.otlpEndpoint && { tracing: { otlpEndpoint: options.otlpEndpoint, samplingRatio: options.traceSampling } }),
        },
        (line) => process.stdout.write(`${line}\n`),
      );
    } catch (error) {
      if (!(error instanceof UpError || error instanceof RegistryFileError)) throw error;
      process.stderr.write(`mcpgw up: ${error.message}\n`);
      process.exit(1);
    }
  });

withOptions(withOptions(withOptions(withIdpOptions(subcommand('control-plane', 'run the xDS control plane (ADS for Envoy, catalog stream for sidecars, admin HTTP)')), CREDENTIAL_OPTIONS), QUOTA_OPTIONS), CONTROL_PLANE_INSIDE_OPTIONS)
  .addOption(new Option('--registry <file>', 'a static registry file (phase F1, docs/adr/0000-federation-decisions.md §10); or --portal').conflicts('portal'))
  .addOption(new Option('--portal <url>', 'the Portal base URL, e.g. http://portal:8080').argParser(parsedBy(url('the Portal base URL, e.g. http://portal:8080'))))
  .addOption(new Option('--portal-token <token>', 'bearer token for the Portal').env('MCPGW_PORTAL_TOKEN'))
  .addOption(redisOption('Redis for last-good state and giving back per-caller concurrency slots (the same Redis as the sidecars): redis://HOST:PORT, or sentinel://HOST:PORT[,HOST:PORT...]/PRIMARY_NAME (rediss:// and sentinels:// for TLS)'))
  .addOption(new Option('--redis-prefix <prefix>', 'prefix of every Redis key').default('mcpgw:'))
  .addOption(hostPortOption('--grpc <host:port>', 'gRPC server: ADS for Envoy and the catalog stream for sidecars').makeOptionMandatory())
  .addOption(hostPortOption('--call-log <host:port>', `where Envoy's call log arrives (TCP; mutual TLS with --internal-tls); default: --grpc's host, its port + ${CALL_LOG_PORT_OFFSET}`))
  .addOption(hostPortOption('--admin <host:port>', 'admin HTTP: /healthz /readyz /status /metrics /config/xds /dashboard').default(CONTROL_PLANE_ADMIN, '127.0.0.1:18001'))
  .addOption(hostPortOption('--listener <host:port>', "Envoy's listener agents connect to").makeOptionMandatory())
  .addOption(
    new Option('--sidecar <host:port,...>', "the sidecars' --listen addresses (the gateway lane and the session check): one per replica, or a DNS name whose every record is one")
      .argParser(parsedBy(hostPortList))
      .makeOptionMandatory(),
  )
  .addOption(egressOption(ENVOY_EGRESS_DESCRIPTION))
  .addOption(positiveIntOption('--max-request-body-bytes <bytes>', 'largest JSON-RPC request body, on every HTTP version (413 past it)', GATEWAY_DEFAULTS.maxRequestBodyBytes))
  .addOption(new Option('--no-envoy-access-log', "no JSON line per request in Envoy's stdout (saves Envoy about 25 µs of CPU per request; calls, metrics and audit are unchanged)"))
  .addOption(
    new Option('--session-check-timeout-ms <ms>', `how long Envoy waits for the session check; the check answers ${SESSION_CHECK_MARGIN_MS} ms before, naming a backend too slow to open its session (-32004)`)
      .argParser(parsedBy(positiveInt.refine((ms) => ms > SESSION_CHECK_MARGIN_MS, `must be above ${SESSION_CHECK_MARGIN_MS}`)))
      .default(GATEWAY_DEFAULTS.sessionCheckTimeoutMs),
  )
  .addOption(positiveIntOption('--per-connection-buffer-limit-bytes <bytes>', "a client connection's buffers before back-pressure", EDGE.perConnectionBufferLimitBytes))
  .addOption(positiveIntOption('--request-headers-timeout-ms <ms>', "from a request's first byte to the end of its headers (408, or the connection closed, past it)", EDGE.requestHeadersTimeoutMs))
  .addOption(positiveIntOption('--request-timeout-ms <ms>', "from a request's first byte to the end of its body; never cuts a response (408 past it)", EDGE.requestTimeoutMs))
  .addOption(positiveIntOption('--stream-idle-timeout-ms <ms>', 'a request with no bytes either way, where its route sets no idle limit of its own', EDGE.streamIdleTimeoutMs))
  .addOption(positiveIntOption('--connection-idle-timeout-ms <ms>', 'a client connection with no request in flight (shortened under connection or memory pressure)', EDGE.connectionIdleTimeoutMs))
  .addOption(positiveIntOption('--max-request-headers-kb <kb>', "one request's headers, in KiB (431 past it)", EDGE.maxRequestHeadersKb))
  .addOption(positiveIntOption('--max-headers-count <n>', "one request's headers, counted (431 past it)", EDGE.maxHeadersCount))
  .addOption(nonNegativeIntOption('--xff-num-trusted-hops <n>', 'load balancers in front whose X-Forwarded-For entries are trusted (0: the gateway is the edge)', EDGE.xffNumTrustedHops))
  .addOption(positiveIntOption('--http2-max-concurrent-streams <n>', 'streams at once on one HTTP/2 client connection', EDGE.http2MaxConcurrentStreams))
  .addOption(positiveIntOption('--http2-initial-stream-window-bytes <bytes>', 'HTTP/2 flow-control window of one stream', EDGE.http2InitialStreamWindowBytes))
  .addOption(positiveIntOption('--http2-initial-connection-window-bytes <bytes>', 'HTTP/2 flow-control window of one connection', EDGE.http2InitialConnectionWindowBytes))
  .addOption(positiveIntOption('--tool-service-max-requests <n>', 'calls in flight to one Tool Service; past it its calls wait for a connection (--tool-service-max-pending)', GATEWAY_DEFAULTS.toolServiceLimits.maxRequests))
  .addOption(positiveIntOption('--tool-service-max-pending <n>', 'calls waiting for a connection to one Tool Service; past it they fail at once (-32004)', GATEWAY_DEFAULTS.toolServiceLimits.maxPendingRequests))
  .addOption(positiveIntOption('--registry-refresh-ms <ms>', 'registry poll interval (long-poll wait for a Portal)', 30000))
  .addOption(positiveIntOption('--catalog-refresh-ms <ms>', "how often every Tool Service's tools/list is fetched", 30000))
  .addOption(positiveIntOption('--tool-list-timeout-ms <ms>', 'deadline of one tools/list fetch', 5000))
  .addOption(positiveIntOption('--catalog-fetch-concurrency <n>', 'tools/list fetches at the same time', 32))
  .addOption(
    new Option('--tool-name-separator <text>', 'exposed names are <backend><separator><tool>')
      .argParser(
        parsedBy(
          z.string().superRefine((separator, ctx) => {
            const problem = separatorProblem(separator);
            if (problem) ctx.addIssue({ code: 'custom', message: problem });
          }),
        ),
      )
      .default(CATALOG_DEFAULTS.toolNameSeparator),
  )
  .addOption(new Option('--tool-name-policy <policy>', 'for names outside ^[a-zA-Z0-9_-]{1,64}$ (docs/tools-list.md)').choices(TOOL_NAME_POLICIES).default(CATALOG_DEFAULTS.toolNamePolicy))
  .addOption(positiveIntOption('--max-tools-per-route <n>', 'tools a route serves at most', CATALOG_DEFAULTS.maxToolsPerRoute))
  .addOption(
    new Option('--tools-list-page-size <n>', 'tools per tools/list answer, the rest through nextCursor; 0: every tool in one answer')
      .argParser(parsedBy(z.coerce.number({ message: 'must be a whole number, 0 or more' }).int('must be a whole number, 0 or more').min(0, 'must be a whole number, 0 or more')))
      .default(CATALOG_DEFAULTS.toolsListPageSize),
  )
  .addOption(positiveIntOption('--tool-list-max-bytes <bytes>', "one Tool Service's tools/list over all pages; past it the backend is degraded, its last good copy served", TOOL_LIST_DEFAULTS.maxBytes))
  .addOption(positiveIntOption('--tool-list-max-tools <n>', "tools in one Tool Service's tools/list; past it the backend is degraded, its last good copy served", TOOL_LIST_DEFAULTS.maxTools))
  .addOption(positiveIntOption('--catalog-retry-min-ms <ms>', 'first wait before a failing Tool Service is listed again (doubling)', RELIST_DEFAULTS.retryMinMs))
  .addOption(positiveIntOption('--catalog-retry-max-ms <ms>', 'longest wait before a failing Tool Service is listed again', RELIST_DEFAULTS.retryMaxMs))
  .addOption(positiveIntOption('--registry-file-settle-ms <ms>', 'a registry file is read once it has been unchanged this long', DEFAULT_FILE_SETTLE_MS))
  .addOption(accessOptions()[0])
  .addOption(accessOptions()[1])
  .addOption(accessOptions()[2])
  .addOption(positiveIntOption('--signing-keys-refresh-ms <ms>', "how often an issuer's signing keys (JWKS) are read again; a failed read keeps the last keys", SIGNING_KEY_DEFAULTS.refreshMs))
  .addOption(positiveIntOption('--signing-keys-timeout-ms <ms>', "deadline of one read of an issuer's discovery document and keys", SIGNING_KEY_DEFAULTS.timeoutMs))
  .addOption(new Option('--audit-log <target>', 'audit events as JSON lines (docs/approval-and-audit.md): "stdout", or a file rotated by size; none when absent').env('MCPGW_AUDIT_LOG'))
  .addOption(
    new Option('--audit-log-rotate-size <size>', 'rotate the audit file when it reaches this size: a number and B, K, M or G')
      .argParser(parsedBy(z.string().regex(ROTATE_SIZE_PATTERN, 'must be a size such as 100M (B, K, M or G)')))
      .default(AUDIT_DEFAULTS.rotateSize),
  )
  .addOption(
    new Option('--audit-log-rotate-interval <interval>', 'also rotate the audit file this often: a number and s, m, h, d or M (months)').argParser(
      parsedBy(z.string().regex(ROTATE_INTERVAL_PATTERN, 'must be an interval such as 1d (s, m, h, d or M)')),
    ),
  )
  .addOption(positiveIntOption('--audit-log-max-files <n>', 'rotated audit files kept (gzipped); older ones are removed', AUDIT_DEFAULTS.maxFiles))
  .addOption(redisConnectTimeoutOption())
  .addOption(redisCommandTimeoutOption())
  .addOption(logLevelOption())
  .addOption(otlpEndpointOption())
  .addOption(traceSamplingOption())
  .addOption(traceServiceNameOption('mcpgw-control-plane'))
  .addOption(new Option('--envoy-trace-service-name <name>', "service.name of Envoy's spans (with --otlp-endpoint)").default('mcpgw-envoy'))
  .action(async (options, command) => {
    const usageError = (message: string): never => command.error(message, { exitCode: USAGE_ERROR });
    if (!options.registry && !options.portal) usageError('give one registry source: --registry FILE or --portal URL');
    const credentialOptions = credentialOptionsOf(command);
    const quotaOptions = quotaOptionsOf(command);
    if (!credentialOptions.listenerTlsCert !== !credentialOptions.listenerTlsKey) usageError('--listener-tls-cert and --listener-tls-key go together');
    const idp = idpSettingsOf(idpOptionsOf(command), usageError);
    const registryPolicy = { allowTokenPassthrough: credentialOptions.allowTokenPassthrough === true };
    const insideOptions = controlPlaneInsideValues.parse(command.opts());
    const problem = insideProblem({
      internalTls: insideOptions.internalTls,
      internal: [
        { flag: '--grpc', addresses: [options.grpc] },
        { flag: '--call-log', addresses: [options.callLog ?? callLogBeside(options.grpc)] },
        { flag: '--sidecar', addresses: options.sidecar },
        { flag: '--egress', addresses: [options.egress] },
      ],
      admin: { flag: '--admin', address: options.admin, tokenFile: insideOptions.adminTokenFile },
    });
    if (problem) usageError(problem);
    if (options.requestTimeoutMs <= options.sessionCheckTimeoutMs) {
      // Envoy's request timeout runs until the request goes upstream, the session check included.
      usageError(`--request-timeout-ms (${options.requestTimeoutMs}) must be above --session-check-timeout-ms (${options.sessionCheckTimeoutMs})`);
    }
    const audit: AuditTarget | undefined =
      options.auditLog === undefined
        ? undefined
        : options.auditLog === 'stdout'
          ? { kind: 'stdout' }
          : {
              kind: 'file',
              file: path.resolve(options.auditLog),
              rotateSize: options.auditLogRotateSize,
              rotateInterval: options.auditLogRotateInterval,
              maxFiles: options.auditLogMaxFiles,
            };
    const log = componentLogger('control-plane', options.logLevel);
    const inside = loadInsideFiles('mcpgw control-plane', () => ({
      internalTls: insideOptions.internalTls ? new InternalTls(insideOptions.internalTls, 'control-plane', log) : undefined,
      adminTokenFile: insideOptions.adminTokenFile ? new TokenFile(insideOptions.adminTokenFile) : undefined,
      redisAuth: redisAuthOf(insideOptions),
    }));
    try {
      // A file is the operator's own: problems at start are fatal. Later edits are isolated per route.
      if (options.registry) loadRegistryFile(options.registry, registryPolicy);
      const running = await startControlPlane({
        source: options.registry
          ? new FileRegistrySource(options.registry, options.registryFileSettleMs)
          : new PortalRegistrySource({ baseUrl: options.portal!, token: options.portalToken || undefined }),
        redis: options.redis ? { url: options.redis, prefix: options.redisPrefix, timeouts: redisTimeoutsOf(options), auth: inside.redisAuth } : undefined,
        grpcAddress: joined(options.grpc),
        callLogAddress: options.callLog ?? callLogBeside(options.grpc),
        admin: options.admin,
        adminTokenFile: inside.adminTokenFile,
        internalTls: inside.internalTls,
        gateway: {
          listener: { address: options.listener.host, port: options.listener.port },
          sidecars: options.sidecar.map(endpointOf),
          ...(insideOptions.internalTls && { internalTls: { envoyDir: path.resolve(insideOptions.envoyInternalTls ?? insideOptions.internalTls) } }),
          egress: endpointOf(options.egress),
          ...(credentialOptions.listenerTlsCert && credentialOptions.listenerTlsKey && {
            listenerTls: { certFile: path.resolve(credentialOptions.listenerTlsCert), keyFile: path.resolve(credentialOptions.listenerTlsKey) },
          }),
          maxRequestBodyBytes: options.maxRequestBodyBytes,
          sessionCheckTimeoutMs: options.sessionCheckTimeoutMs,
          quotas: {
            ...(quotaOptions.ratelimit && { rateLimitService: quotaOptions.ratelimit }),
            rateLimitTimeoutMs: quotaOptions.ratelimitTimeoutMs,
            maxTrackedCallers: quotaOptions.maxTrackedCallers,
            ...(quotaOptions.sharedLimitLeaseWorkers !== undefined && { sharedLimitLeases: { workers: quotaOptions.sharedLimitLeaseWorkers } }),
          },
          edge: {
            perConnectionBufferLimitBytes: options.perConnectionBufferLimitBytes,
            requestHeadersTimeoutMs: options.requestHeadersTimeoutMs,
            requestTimeoutMs: options.requestTimeoutMs,
            streamIdleTimeoutMs: options.streamIdleTimeoutMs,
            connectionIdleTimeoutMs: options.connectionIdleTimeoutMs,
            maxRequestHeadersKb: options.maxRequestHeadersKb,
            maxHeadersCount: options.maxHeadersCount,
            xffNumTrustedHops: options.xffNumTrustedHops,
            http2MaxConcurrentStreams: options.http2MaxConcurrentStreams,
            http2InitialStreamWindowBytes: options.http2InitialStreamWindowBytes,
            http2InitialConnectionWindowBytes: options.http2InitialConnectionWindowBytes,
          },
          toolServiceLimits: { maxRequests: options.toolServiceMaxRequests, maxPendingRequests: options.toolServiceMaxPending },
          access: accessOf(options.listener, options),
          auditArguments: audit !== undefined,
          envoyAccessLog: options.envoyAccessLog,
          ...(options.otlpEndpoint && {
            tracing: { otlpEndpoint: options.otlpEndpoint, samplingRatio: options.traceSampling, serviceName: options.envoyTraceServiceName },
          }),
        },
        ...(quotaOptions.ratelimitConfig && { rateLimitConfigFile: path.resolve(quotaOptions.ratelimitConfig) }),
        idp,
        registryPolicy,
        signingKeys: { ...SIGNING_KEY_DEFAULTS, refreshMs: options.signingKeysRefreshMs, timeoutMs: options.signingKeysTimeoutMs },
        audit,
        registryRefreshMs: options.registryRefreshMs,
        catalogRefreshMs: options.catalogRefreshMs,
        toolList: { timeoutMs: options.toolListTimeoutMs, maxBytes: options.toolListMaxBytes, maxTools: options.toolListMaxTools },
        relist: { retryMinMs: options.catalogRetryMinMs, retryMaxMs: options.catalogRetryMaxMs },
        catalogFetchConcurrency: options.catalogFetchConcurrency,
        catalog: {
          toolNameSeparator: options.toolNameSeparator,
          toolNamePolicy: options.toolNamePolicy,
          maxToolsPerRoute: options.maxToolsPerRoute,
          toolsListPageSize: options.toolsListPageSize,
        },
        tracing: tracingOf(options, log),
        log,
      });
      stopOnSignals(running.stop);
    } catch (error) {
      failStart(log, error);
    }
  });

const originOnly = z
  .string()
  .url('must be the gateway\'s public origin, e.g. https://gateway.example.com')
  .refine((value) => !URL.canParse(value) || (/^https?:$/.test(new URL(value).protocol) && new URL(value).pathname === '/' && !new URL(value).search), 'must be scheme://host[:port] only, without a path')
  .transform((value) => new URL(value).origin);

/** The four settings approvals need together; none of them: approvals are off. */
function approvalOptionsOf(options: {
  approvalPublicUrl?: string;
  approvalIssuer?: string;
  approvalClientId?: string;
  approvalClientSecretFile?: string;
  approvalKeyFile?: string;
  approvalTtlS: number;
  approvalGroupsClaim: string;
}): ApprovalOptions | string | undefined {
  const required = { '--approval-public-url': options.approvalPublicUrl, '--approval-issuer': options.approvalIssuer, '--approval-client-id': options.approvalClientId, '--approval-key-file': options.approvalKeyFile };
  const given = Object.entries(required).filter(([, value]) => value !== undefined);
  if (given.length === 0) return undefined;
  if (given.length < 4) return `approvals need all of ${Object.keys(required).join(', ')}; missing ${Object.entries(required).filter(([, value]) => value === undefined).map(([name]) => name).join(', ')}`;
  let key: Buffer;
  let secret: string | undefined;
  try {
    key = fs.readFileSync(options.approvalKeyFile!);
    secret = options.approvalClientSecretFile ? fs.readFileSync(options.approvalClientSecretFile, 'utf8').trim() : undefined;
  } catch (error) {
    return `cannot read an approval file: ${(error as Error).message}`;
  }
  if (key.length < MIN_KEY_BYTES) return `--approval-key-file ${options.approvalKeyFile} holds ${key.length} bytes; at least ${MIN_KEY_BYTES} random bytes are needed (e.g. head -c 32 /dev/urandom > FILE)`;
  return {
    publicUrl: options.approvalPublicUrl!,
    ttlMs: options.approvalTtlS * 1000,
    key,
    signIn: { issuer: options.approvalIssuer!, clientId: options.approvalClientId!, ...(secret ? { clientSecret: secret } : {}), groupsClaim: options.approvalGroupsClaim },
  };
}

withIdpOptions(subcommand('sidecar', 'run the MCP sidecar: the gateway lane (what the gateway answers itself) and the call lane\'s session check, behind Envoy'))
  .addOption(hostPortOption('--listen <host:port>', 'the HTTP address Envoy sends the gateway lane and the session checks to').makeOptionMandatory())
  .addOption(hostPortOption('--control-plane <host:port>', "the control plane's --grpc (catalog stream)").makeOptionMandatory())
  .addOption(
    new Option('--id <name>', 'this replica in the control plane’s logs; with --internal-tls its certificate must vouch for it (its name, or NAME/…)').default(
      undefined,
      'HOSTNAME-PID, with --internal-tls CERTIFICATE_NAME/HOSTNAME-PID',
    ),
  )
  .addOption(internalTlsOption())
  .addOption(redisOption('Redis for sessions and per-caller concurrency slots shared by every replica: redis://HOST:PORT, or sentinel://HOST:PORT[,HOST:PORT...]/PRIMARY_NAME (rediss:// and sentinels:// for TLS); without it sessions live in this process'))
  .addOption(
    new Option('--redis-wait-replicas <n>', 'Redis replicas that must hold a new session before initialize is answered (WAIT, 200 ms at most); default 1 with sentinel://, else 0')
      .argParser(parsedBy(z.coerce.number({ message: 'must be a whole number, 0 or more' }).int('must be a whole number, 0 or more').min(0, 'must be a whole number, 0 or more'))),
  )
  .addOption(redisPasswordFileOption())
  .addOption(redisCaOption())
  .addOption(new Option('--redis-prefix <prefix>', 'prefix of every Redis key').default('mcpgw:'))
  .addOption(positiveIntOption('--session-ttl-s <s>', 'idle gateway sessions expire after this', 3600))
  .addOption(positiveIntOption('--backend-session-timeout-ms <ms>', "limit for opening or ending a backend's session (a call's check answers by the control plane's --session-check-timeout-ms in any case)", 5000))
  .addOption(egressOption("where the sidecar reaches Envoy's egress listener (the control plane's --egress) for its own requests to Tool Services"))
  .addOption(positiveIntOption('--token-cache-max-entries <n>', 'exchanged tokens kept at most (least recently used out first)', TOKEN_CACHE_DEFAULTS.maxEntries))
  .addOption(positiveIntOption('--token-renew-before-expiry-ms <ms>', 'an exchanged token is renewed this long before it expires (at most a tenth of its lifetime)', TOKEN_CACHE_DEFAULTS.renewBeforeExpiryMs))
  .addOption(hostPortOption('--admin <host:port>', 'GET /metrics and /healthz (none without it)'))
  .addOption(adminTokenFileOption())
  .addOption(positiveIntOption('--drain-timeout-ms <ms>', 'on SIGTERM, how long requests in flight keep the sidecar', 10_000))
  .addOption(positiveIntOption('--max-request-body-bytes <bytes>', 'largest request body the gateway lane reads', GATEWAY_DEFAULTS.maxRequestBodyBytes))
  .addOption(positiveIntOption('--max-streams-per-session <n>', 'GET streams one session may hold at a time (429 past it)', 4))
  .addOption(positiveIntOption('--max-backend-streams-per-session <n>', "backend sessions listened to on one client's behalf while it holds its GET stream (or backends per subscriptions/listen)", BACKEND_STREAM_DEFAULTS.perSession))
  .addOption(positiveIntOption('--max-backend-streams <n>', "backend streams this sidecar holds on clients' behalf, in all", BACKEND_STREAM_DEFAULTS.total))
  .addOption(positiveIntOption('--session-client-fields-max-bytes <bytes>', "initialize's clientInfo + capabilities stored per session; more is refused (-32602)", SESSION_DEFAULTS.maxClientFieldsBytes))
  .addOption(
    new Option('--approval-public-url <origin>', "the gateway's public origin, as approvers' browsers reach it: approval links are <origin>/approvals/<id>")
      .env('MCPGW_APPROVAL_PUBLIC_URL')
      .argParser(parsedBy(originOnly)),
  )
  .addOption(new Option('--approval-issuer <url>', 'the OpenID Connect issuer approvers sign in at').env('MCPGW_APPROVAL_ISSUER').argParser(parsedBy(url('an issuer URL, e.g. https://idp.example.com/realms/main'))))
  .addOption(new Option('--approval-client-id <id>', "the approval pages' OAuth client at that issuer (authorization code + PKCE)").env('MCPGW_APPROVAL_CLIENT_ID'))
  .addOption(new Option('--approval-client-secret-file <file>', "that client's secret, for a confidential client").env('MCPGW_APPROVAL_CLIENT_SECRET_FILE'))
  .addOption(new Option('--approval-key-file <file>', 'at least 32 random bytes that sign approvals; the same file on every replica').env('MCPGW_APPROVAL_KEY_FILE'))
  .addOption(positiveIntOption('--approval-ttl-s <s>', 'how long an approver has to decide; an approval is good until then', 900))
  .addOption(new Option('--approval-groups-claim <claim>', "the ID token claim with the approver's groups").default('groups'))
  .addOption(redisConnectTimeoutOption())
  .addOption(redisCommandTimeoutOption())
  .addOption(logLevelOption())
  .addOption(otlpEndpointOption())
  .addOption(traceSamplingOption())
  .addOption(traceServiceNameOption('mcpgw-sidecar'))
  .action(async (options, command) => {
    const problem = insideProblem({
      internalTls: options.internalTls,
      internal: [
        { flag: '--listen', addresses: [options.listen] },
        { flag: '--control-plane', addresses: [options.controlPlane] },
        { flag: '--egress', addresses: [options.egress] },
      ],
      admin: options.admin && { flag: '--admin', address: options.admin, tokenFile: options.adminTokenFile },
    });
    if (problem) command.error(problem, { exitCode: USAGE_ERROR });
    const idp = idpSettingsOf(idpOptionsOf(command), (message) => command.error(message, { exitCode: USAGE_ERROR }));
    const approvals = approvalOptionsOf(options);
    if (typeof approvals === 'string') command.error(approvals, { exitCode: USAGE_ERROR });
    const log = componentLogger('sidecar', options.logLevel);
    const inside = loadInsideFiles('mcpgw sidecar', () => ({
      internalTls: options.internalTls ? new InternalTls(options.internalTls, 'sidecar', log) : undefined,
      adminTokenFile: options.adminTokenFile ? new TokenFile(options.adminTokenFile) : undefined,
      redisAuth: redisAuthOf(options),
    }));
    const instance = `${os.hostname()}-${process.pid}`;
    const sidecarId = options.id ?? (inside.internalTls ? `${inside.internalTls.identity.name}/${instance}` : instance);
    if (inside.internalTls && !vouchesFor(inside.internalTls.identity, 'sidecar', sidecarId)) {
      const { role, name } = inside.internalTls.identity;
      command.error(`--id ${sidecarId} is not what the certificate in ${options.internalTls} vouches for (${role}/${name}): a sidecar certificate names the id or its prefix NAME/ (${SECURING_DOCS})`, { exitCode: USAGE_ERROR });
    }
    try {
      const running = await startSidecar({
        egressAddress: joined(options.egress),
        idp,
        tokenCache: { maxEntries: options.tokenCacheMaxEntries, renewBeforeExpiryMs: options.tokenRenewBeforeExpiryMs },
        drainTimeoutMs: options.drainTimeoutMs,
        adminAddress: options.admin && joined(options.admin),
        adminTokenFile: inside.adminTokenFile,
        internalTls: inside.internalTls,
        address: joined(options.listen),
        maxRequestBodyBytes: options.maxRequestBodyBytes,
        maxStreamsPerSession: options.maxStreamsPerSession,
        backendStreams: { perSession: options.maxBackendStreamsPerSession, total: options.maxBackendStreams },
        controlPlaneAddress: joined(options.controlPlane),
        sidecarId,
        redis: options.redis
          ? {
              url: options.redis,
              auth: inside.redisAuth,
              prefix: options.redisPrefix,
              timeouts: redisTimeoutsOf(options),
              waitReplicas: options.redisWaitReplicas ?? (isSentinelAddress(options.redis) ? 1 : 0),
            }
          : undefined,
        sessionLimits: { maxClientFieldsBytes: options.sessionClientFieldsMaxBytes },
        sessionIdleTtlSeconds: options.sessionTtlS,
        backendSessionTimeoutMs: options.backendSessionTimeoutMs,
        approvals: approvals as ApprovalOptions | undefined,
        tracing: tracingOf(options, log),
        log,
      });
      stopOnSignals(running.stop);
    } catch (error) {
      failStart(log, error);
    }
  });

subcommand('ratelimit-config-sync', "keep a ratelimit service's configuration file in step with a control plane's (its admin's GET /config/ratelimit), where the service runs beside Envoy rather than beside a control plane (docs/deploying.md)")
  .addOption(new Option('--control-plane <url>', "a control plane's admin base URL, e.g. http://control-plane:18001").argParser(parsedBy(url('an http(s) URL of a control plane admin port'))).makeOptionMandatory())
  .addOption(new Option('--admin-token-file <file>', "the control planes' admin token (needed off loopback; read at every request)").env('MCPGW_ADMIN_TOKEN_FILE'))
  .requiredOption('--output <file>', "the service's configuration file: <RUNTIME_ROOT>/<RUNTIME_SUBDIRECTORY>/config/<name>.yaml (written whole, only when it changed)")
  .addOption(positiveIntOption('--interval-ms <ms>', 'how often to ask', 5000))
  .addOption(positiveIntOption('--timeout-ms <ms>', 'limit for one request', 2000))
  .addOption(logLevelOption())
  .action((options) => {
    const log = componentLogger('ratelimit-config-sync', options.logLevel);
    const running = startRateLimitConfigSync({
      controlPlane: options.controlPlane,
      adminTokenFile: options.adminTokenFile,
      output: path.resolve(options.output),
      intervalMs: options.intervalMs,
      timeoutMs: options.timeoutMs,
      log,
    });
    stopOnSignals(running.stop);
  });

subcommand('dev-inside', 'write a dev CA, one internal certificate per part, an admin token and a Redis ACL configuration into a directory (docker compose; production uses its own CA)')
  .requiredOption('--dir <dir>', 'where to write (emptied first): <role>-<role>/ certificate directories, admin-token, redis-password, redis.conf')
  .addOption(positiveIntOption('--days <days>', 'validity of the certificates', 30))
  .addOption(new Option('--redis-prefix <prefix>', "the processes' --redis-prefix: the ACL user may use only keys under it").default('mcpgw:'))
  .action((options) => {
    const inside = DevInside.create(path.resolve(options.dir), options.days * 24 * 60);
    const written = [
      ...INTERNAL_ROLES.map((role) => inside.certificateDir({ role, name: role })),
      inside.adminTokenFile(),
      inside.redisPasswordFile,
      inside.redisConfigFile(options.redisPrefix),
    ];
    process.stdout.write(written.map((file) => `${file}\n`).join(''));
  });

subcommand('validate', 'check a registry file (YAML or JSON): every problem with its line and column; exits 1 if there is any')
  .argument('<file>', 'the registry file')
  .addOption(new Option('--allow-token-passthrough', 'as the control plane with --allow-token-passthrough: credentials.mode passthrough is allowed'))
  .action((file, options) => {
    const { registry, problems } = checkRegistryFile(file, { allowTokenPassthrough: options.allowTokenPassthrough === true });
    if (problems.length > 0) {
      process.stderr.write(problems.map((problem) => `${formatFileProblem(file, problem)}\n`).join(''));
      process.stderr.write(`${file}: ${problems.length} problem${problems.length === 1 ? '' : 's'}\n`);
      process.exitCode = 1;
      return;
    }
    const services = registry.routes.reduce((sum, route) => sum + route.toolServices.length, 0);
    process.stdout.write(`${file}: valid (${registry.routes.length} routes, ${services} Tool Service mappings)\n`);
  });

subcommand('render', 'print the xDS a registry produces')
  .requiredOption('--registry <file>', 'the registry file')
  .addOption(new Option('--format <format>', 'bootstrap: a static Envoy bootstrap to check with `envoy --mode validate -c FILE`').choices(['json', 'yaml', 'bootstrap'] as const).default('json' as const))
  .addOption(gatewayAddressOptions[0])
  .addOption(gatewayAddressOptions[1])
  .addOption(gatewayAddressOptions[2])
  .addOption(accessOptions()[0])
  .addOption(accessOptions()[1])
  .addOption(accessOptions()[2])
  .action((options) => {
    const resources = xdsOf(options.registry, options);
    const output =
      options.format === 'json'
        ? `${JSON.stringify(resources, null, 2)}\n`
        : toYaml(options.format === 'yaml' ? resources : asStaticBootstrap(resources));
    process.stdout.write(output);
  });

subcommand('diff', 'show what changes in Envoy between two registry files; exits 0 same, 1 different, 2 trouble')
  .argument('<old>', 'the registry file as it is')
  .argument('<new>', 'the registry file as it would be')
  .addOption(gatewayAddressOptions[0])
  .addOption(gatewayAddressOptions[1])
  .addOption(gatewayAddressOptions[2])
  .addOption(accessOptions()[0])
  .addOption(accessOptions()[1])
  .addOption(accessOptions()[2])
  .action((before, after, options) => {
    let differences;
    try {
      differences = diffXds(xdsOf(before, options), xdsOf(after, options));
    } catch (error) {
      if (!(error instanceof RegistryFileError)) throw error;
      process.stderr.write(`mcpgw diff: ${error.message}\n`);
      process.exitCode = USAGE_ERROR;
      return;
    }
    process.stdout.write(formatDifferences(differences));
    process.exitCode = differences.length === 0 ? 0 : 1;
  });

subcommand('envoy-bootstrap', 'print envoy/bootstrap.yaml filled in (or write it, and its SDS files, with --output)')
  .requiredOption('--node-id <id>', "Envoy's node id (unique per Envoy); with --internal-tls its certificate must vouch for it (its name, or NAME/…)")
  .addOption(hostPortOption('--admin <host:port>', "Envoy's admin interface: loopback only (it has no authentication)").makeOptionMandatory())
  .addOption(new Option('--xds <host:port,...>', "the control planes' --grpc addresses, one per replica (or a DNS name)").argParser(parsedBy(hostPortList)).makeOptionMandatory())
  .addOption(new Option('--call-log <host:port,...>', `the control planes' --call-log addresses; default: each --xds address, its port + ${CALL_LOG_PORT_OFFSET}`).argParser(parsedBy(hostPortList)))
  .addOption(new Option('--ads <type>', 'state of the world (GRPC) or incremental (DELTA_GRPC)').choices(['GRPC', 'DELTA_GRPC'] as const).default('GRPC' as const))
  .addOption(internalTlsOption())
  .addOption(new Option('--output <file>', 'write the bootstrap here instead of printing it; with --internal-tls its two SDS files go beside it (required then)'))
  .addOption(hostPortOption('--stats-listener <host:port>', 'a listener for probes and Prometheus: GET /ready and GET /stats/prometheus of the admin, nothing else'))
  .addOption(new Option('--stats-token-file <file>', 'a bearer token (at least 16 characters) /stats/prometheus asks for; required when --stats-listener is not loopback (Envoy reads it when the bootstrap is written)').env('MCPGW_STATS_TOKEN_FILE'))
  .addOption(positiveIntOption('--max-heap-bytes <bytes>', "Envoy's heap its overload actions are measured against (set below its memory limit)", OVERLOAD_DEFAULTS.maxHeapBytes))
  .addOption(positiveIntOption('--max-downstream-connections <n>', "client connections at once; at most half of Envoy's file-descriptor limit", OVERLOAD_DEFAULTS.maxDownstreamConnections))
  .action((options, command) => {
    if (!isLoopbackHost(options.admin.host)) {
      command.error(`--admin ${joined(options.admin)} is not a loopback address: Envoy's admin interface has no authentication and must stay on 127.0.0.1 (${SECURING_DOCS})`, { exitCode: USAGE_ERROR });
    }
    const problem = insideProblem({
      internalTls: options.internalTls,
      internal: [
        { flag: '--xds', addresses: options.xds },
        { flag: '--call-log', addresses: options.callLog ?? options.xds.map(callLogBeside) },
      ],
      admin: options.statsListener && { flag: '--stats-listener', address: options.statsListener, tokenFile: options.statsTokenFile, tokenFlag: '--stats-token-file' },
    });
    if (problem) command.error(problem, { exitCode: USAGE_ERROR });
    if (options.internalTls && !options.output) command.error('--internal-tls needs --output FILE: the bootstrap refers to two SDS files written beside it', { exitCode: USAGE_ERROR });
    if (options.internalTls) {
      const certDir = path.resolve(options.internalTls);
      const identity = loadInsideFiles('mcpgw envoy-bootstrap', () => certificateIdentity(certDir, 'envoy'));
      if (!vouchesFor(identity, 'envoy', options.nodeId)) {
        command.error(`--node-id ${options.nodeId} is not what the certificate in ${certDir} vouches for (envoy/${identity.name}): use ${identity.name} or ${identity.name}/<instance> (${SECURING_DOCS})`, { exitCode: USAGE_ERROR });
      }
    }
    const values = {
      nodeId: options.nodeId,
      adsApiType: options.ads,
      adminAddress: options.admin.host,
      adminPort: options.admin.port,
      xds: options.xds,
      callLog: options.callLog ?? options.xds.map(callLogBeside),
      overload: { maxHeapBytes: options.maxHeapBytes, maxDownstreamConnections: options.maxDownstreamConnections },
      ...(options.internalTls && { internalTls: { certDir: path.resolve(options.internalTls), sdsDir: path.dirname(path.resolve(options.output!)) } }),
      ...(options.statsListener && {
        statsListener: { ...options.statsListener, ...(options.statsTokenFile && { token: loadInsideFiles('mcpgw envoy-bootstrap', () => readToken(options.statsTokenFile!)) }) },
      }),
    };
    if (options.output) writeBootstrapFile(values, path.resolve(options.output));
    else process.stdout.write(renderBootstrap(values));
  });

program.parseAsync(process.argv).catch((error: unknown) => {
  if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? 0 : USAGE_ERROR);
  if (error instanceof RegistryFileError) {
    process.stderr.write(`mcpgw: ${error.message}\n`);
    process.exit(1);
  }
  process.stderr.write(`mcpgw: ${(error as Error).stack}\n`);
  process.exit(1);
});
