import * as fs from 'node:fs';
import * as path from 'node:path';
import { projectPath } from '../shared/paths';

/**
 * The ratelimit service (envoyproxy/ratelimit) of shared limits, as the dev stack and `mcpgw up` run
 * it (docs/quotas.md): gRPC for Envoy, counters in the stack's Redis, its configuration a file the
 * control plane writes and the service reloads.
 */

/** RATELIMIT_BIN, else the one scripts/test-tools.sh builds into .tools/bin/. */
export function rateLimitBinary(): string | undefined {
  const candidate = process.env.RATELIMIT_BIN ?? projectPath('.tools', 'bin', 'ratelimit');
  return fs.existsSync(candidate) ? candidate : undefined;
}

/** The over-limit cache (LOCAL_CACHE_SIZE_IN_BYTES): 1 MiB holds some ten thousand over-limit keys. */
export const OVER_LIMIT_CACHE_BYTES = 1024 * 1024;
/** Go's GC target for the service: a heap up to five times its live size between collections (tens of MB). */
export const RATELIMIT_GOGC = 400;

/** Where the service takes gRPC (Envoy's checks): a loopback port, or a Unix domain socket (GRPC_UDS). */
export type RateLimitGrpcListener = { port: number } | { socketPath: string };

export interface RateLimitServicePorts {
  grpc: RateLimitGrpcListener;
  /** Its health check (/healthcheck) and its debug endpoints (/debug/pprof), on `host`. */
  http: number;
  debug: number;
}

/** Its Redis: over TCP (TLS when a CA is given), or over Redis's Unix domain socket on the same host. */
export type RateLimitRedis = ({ host: string; port: number; tlsCaFile?: string } | { socketPath: string }) & { user?: string; password?: string };

/** Its runtime root under `dir`: the service reads every file of <root>/mcpgw/config/. */
export function rateLimitConfigFile(dir: string): string {
  return path.join(dir, 'ratelimit', 'mcpgw', 'config', 'mcpgw.yaml');
}

/**
 * Its settings (environment variables). Counters live in Redis under their own key prefix; a config
 * file that appears half-written is never read (dot files are skipped, and the control plane renames
 * a finished file into place). What it costs per call is set here too (docs/quotas.md, "Running the
 * ratelimit service"; measured in docs/adr/0016-quotas.md).
 */
export function rateLimitEnvironment(dir: string, ports: RateLimitServicePorts, redis: RateLimitRedis, host = '127.0.0.1'): NodeJS.ProcessEnv {
  return {
    // The gateway's Redis ACL user (docs/adr/0017-closed-inside.md): its keys are under mcpgw: too.
    ...(redis.password !== undefined && { REDIS_AUTH: redis.user ? `${redis.user}:${redis.password}` : redis.password }),
    // Over Redis's Unix socket each call's pipeline skips loopback TCP: 1–4 µs of Redis CPU less per call (docs/adr/0016-quotas.md).
    ...('socketPath' in redis
      ? { REDIS_SOCKET_TYPE: 'unix', REDIS_URL: redis.socketPath }
      : { REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: `${redis.host}:${redis.port}`, ...(redis.tlsCaFile && { REDIS_TLS: 'true', REDIS_TLS_CACERT: redis.tlsCaFile }) }),
    // A Unix socket for Envoy's checks (GRPC_UDS wins over GRPC_HOST/GRPC_PORT): only who may enter its
    // directory can connect (no open port on the inside, ADR-0017), at the cost of loopback TCP.
    ...('socketPath' in ports.grpc ? { GRPC_UDS: ports.grpc.socketPath } : { GRPC_HOST: host, GRPC_PORT: String(ports.grpc.port) }),
    // Without a sink the service dumps every stat into its log every 10 s; the gateway's refusals are
    // counted from Envoy's call log and Envoy's own ratelimit stats, so the service keeps none.
    DISABLE_STATS: 'true',
    // A caller already over a shared limit is refused from the service's memory until the window
    // ends: a client in a loop past its limit costs no Redis round trip.
    LOCAL_CACHE_SIZE_IN_BYTES: String(OVER_LIMIT_CACHE_BYTES),
    // Its live heap is a few MB: at Go's default (100) it collects every few hundred calls.
    GOGC: String(RATELIMIT_GOGC),
    LOG_LEVEL: 'warn',
    LOG_FORMAT: 'json',
    HOST: host,
    PORT: String(ports.http),
    DEBUG_HOST: host,
    DEBUG_PORT: String(ports.debug),
    CACHE_KEY_PREFIX: 'mcpgw:ratelimit:',
    RUNTIME_ROOT: path.join(dir, 'ratelimit'),
    RUNTIME_SUBDIRECTORY: 'mcpgw',
    RUNTIME_WATCH_ROOT: 'false',
    RUNTIME_IGNOREDOTFILES: 'true',
  };
}

