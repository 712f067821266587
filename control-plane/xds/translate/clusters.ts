import { isIP } from 'node:net';
import { GatewayIR, ToolServiceIR } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { duration } from './duration';
import { internalTransportSocket } from './internal-tls';
import { clientCertificateSecretName, sdsSecret, tokenSecretName, trustedCaSecretName } from './secrets';
import { GatewaySettings, SIDECAR_CHECK_CLUSTER_NAME, ToolServiceLimits, SIDECAR_CLUSTER_NAME, SIDECAR_STREAMS_CLUSTER_NAME } from './settings';
import { TYPE_URL, typedStruct } from './type-urls';
import { rateLimitServiceCluster } from './quotas';

/**
 * Cluster defaults (docs/xds.md explains each): a Tool Service that stops accepting connections is
 * taken out by the health check within ~10 s, one that keeps failing by outlier detection, and no
 * single backend can hold more than its circuit-breaker limits (--tool-service-max-requests,
 * --tool-service-max-pending) of Envoy's connections and requests: past them its own calls fail at once,
 * the other backends' are untouched (docs/adr/0009-edge-hardening.md).
 */
export const CLUSTER_DEFAULTS = {
  healthCheck: { interval: '5s', timeout: '1s', unhealthy_threshold: 2, healthy_threshold: 1 },
  outlierDetection: {
    consecutive_5xx: 5,
    consecutive_gateway_failure: 3,
    interval: '10s',
    base_ejection_time: '30s',
    max_ejection_percent: 100,
  },
  /** Retries in flight to one backend at once; calls are limited by GatewaySettings.toolServiceLimits. */
  maxRetries: 3,
  /** A connection's buffers towards a backend before back-pressure (Envoy's edge recommendation). */
  perConnectionBufferLimitBytes: 32 * 1024,
};

/**
 * HTTP/1.1 to a backend: one call per connection, so calls in flight and connections share one limit.
 * A Tool Service's own concurrency limit (docs/quotas.md) lowers its calls in flight only: past it a
 * call overflows at once (answered 429), where past the connections it would wait for one.
 */
function toolServiceCircuitBreakers(limits: ToolServiceLimits, concurrency: number | undefined) {
  const bound = { max_connections: limits.maxRequests, max_requests: limits.maxRequests, max_pending_requests: limits.maxPendingRequests, max_retries: CLUSTER_DEFAULTS.maxRetries };
  return {
    thresholds: [
      { priority: 'DEFAULT', ...bound, ...(concurrency !== undefined && { max_requests: concurrency }) },
      // The gateway's own requests through the egress listener (HIGH priority routes): apart from the calls.
      ...(concurrency !== undefined ? [{ priority: 'HIGH', ...bound }] : []),
    ],
  };
}

export interface Endpoint {
  address: string;
  port: number;
}

/** STATIC when every endpoint is an IP address; STRICT_DNS (each record of each name an endpoint) otherwise. */
export const discoveryTypeFor = (endpoints: Endpoint[]) => (endpoints.every((endpoint) => isIP(endpoint.address)) ? 'STATIC' : 'STRICT_DNS');

export function loadAssignment(clusterName: string, endpoints: Endpoint[]) {
  return {
    cluster_name: clusterName,
    endpoints: [{ lb_endpoints: endpoints.map(({ address, port }) => ({ endpoint: { address: { socket_address: { address, port_value: port } } } })) }],
  };
}

function healthCheck(service: ToolServiceIR) {
  const check = service.healthCheckPath
    ? { http_health_check: { path: service.healthCheckPath, host: service.endpoint.tls?.sni ?? service.endpoint.host } }
    : { tcp_health_check: {} };
  return { ...CLUSTER_DEFAULTS.healthCheck, ...check };
}

/**
 * TLS to the Tool Service: its CA and (mTLS) the gateway's client certificate come by SDS from files
 * Envoy watches, so a rotation reaches new connections without a cluster change; the name checked
 * stays in the cluster.
 */
function upstreamTlsSocket(tls: NonNullable<ToolServiceIR['endpoint']['tls']>) {
  return tlsSocketTo(tls.sni, {
    ...(tls.clientCert && { tls_certificate_sds_secret_configs: [sdsSecret(clientCertificateSecretName(tls.clientCert.certFile, tls.clientCert.keyFile))] }),
    combined_validation_context: {
      default_validation_context: { match_typed_subject_alt_names: [sanIs(tls.sni)] },
      validation_context_sds_secret_config: sdsSecret(trustedCaSecretName(tls.caFile)),
    },
  });
}

/** An upstream TLS transport socket: the server must name `sni` (checked by the context's SAN matcher). */
const tlsSocketTo = (sni: string, commonTlsContext: Record<string, unknown>) => ({
  name: 'envoy.transport_sockets.tls',
  typed_config: { '@type': TYPE_URL.upstreamTls, sni, common_tls_context: commonTlsContext },
});
const sanIs = (sni: string) => ({ san_type: 'DNS', matcher: { exact: sni } });

/**
 * A service-account Tool Service: Envoy's credential injector (an upstream filter of the cluster, so
 * on every request the cluster sends — calls and the gateway's own requests through the egress
 * listener alike) sets `Authorization: Bearer <the token file>`, replacing whatever the request had.
 */
function serviceAccountOptions(tokenFile: string) {
  return {
    'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
      '@type': TYPE_URL.httpProtocolOptions,
      explicit_http_config: { http_protocol_options: {} },
      http_filters: [
        {
          name: 'envoy.filters.http.credential_injector',
          typed_config: {
            '@type': TYPE_URL.credentialInjector,
            overwrite: true,
            credential: {
              name: 'envoy.http.injected_credentials.generic',
              typed_config: typedStruct(TYPE_URL.genericCredential, {
                credential: sdsSecret(tokenSecretName(tokenFile)),
                header: 'authorization',
                header_value_prefix: 'Bearer ',
              }),
            },
          },
        },
        { name: 'envoy.filters.http.upstream_codec', typed_config: { '@type': TYPE_URL.upstreamCodec } },
      ],
    },
  };
}

function toolServiceCluster(service: ToolServiceIR, limits: ToolServiceLimits): TypedJson {
  const { host, port, tls } = service.endpoint;
  const { credentials } = service;
  const endpoints = [{ address: host, port }];
  return {
    '@type': TYPE_URL.cluster,
    name: service.clusterName,
    type: discoveryTypeFor(endpoints),
    connect_timeout: duration(service.timeouts.connectTimeoutMs),
    lb_policy: 'ROUND_ROBIN',
    load_assignment: loadAssignment(service.clusterName, endpoints),
    health_checks: [healthCheck(service)],
    outlier_detection: CLUSTER_DEFAULTS.outlierDetection,
    // A Tool Service's concurrency limit (docs/quotas.md) is its own cluster's max_requests.
    circuit_breakers: toolServiceCircuitBreakers(limits, service.quotas.concurrency),
    per_connection_buffer_limit_bytes: CLUSTER_DEFAULTS.perConnectionBufferLimitBytes,
    ...(tls && { transport_socket: upstreamTlsSocket(tls) }),
    ...(credentials.mode === 'serviceAccount' && { typed_extension_protocol_options: serviceAccountOptions(credentials.tokenFile) }),
  };
}

/**
 * TLS to an upstream whose CA is a fixed file read once (the system bundle: the OTLP collector): its
 * certificate must chain to `caFile` and name `sni`. Tool Services take their CA and client
 * certificate by SDS instead (upstreamTlsSocket), so that they rotate.
 */
export function upstreamTls(tls: { sni: string; caFile: string }) {
  return tlsSocketTo(tls.sni, { validation_context: { trusted_ca: { filename: tls.caFile }, match_typed_subject_alt_names: [sanIs(tls.sni)] } });
}

/**
 * The sidecars, over HTTP/1.1 (mutual TLS with the internal certificates, or plain on loopback), as three clusters with limits of their own (docs/adr/0008): the
 * gateway lane's short requests, the call lane's session checks, and clients' long-lived GET streams —
 * so that streams held open can never take the slots of checks or answers. The short requests share
 * a few kept-alive connections and wait for one in Envoy's queue: a burst of new connections past the
 * sidecar's accept backlog (Node's 511) would be dropped by the kernel and fail the calls it carried
 * after the 1 s connect timeout (measured: 1,100 calls in one session at once, 511 of them failed).
 */
export const SIDECAR_LIMITS = {
  [SIDECAR_CLUSTER_NAME]: { max_connections: 256, max_pending_requests: 4096, max_requests: 4096, max_retries: 3 },
  [SIDECAR_CHECK_CLUSTER_NAME]: { max_connections: 256, max_pending_requests: 4096, max_requests: 4096, max_retries: 3 },
  [SIDECAR_STREAMS_CLUSTER_NAME]: { max_connections: 4096, max_pending_requests: 256, max_requests: 4096, max_retries: 3 },
};

/**
 * A sidecar replica that stops answering is taken out of all three clusters by what Envoy sees of
 * real requests: a refused or reset connection (a dead process) or a 502/503/504 counts as a gateway
 * failure, and two in a row eject it for 10 s (doubling while it keeps failing), checked every second.
 * Every replica may be ejected at once: with all of them failing there is nothing better to send to.
 * The gateway lane retries a refused connection on another replica (route-configuration.ts), and
 * Kubernetes takes a replica that is not ready out of the headless Service's DNS records.
 */
export const SIDECAR_OUTLIER_DETECTION = {
  consecutive_5xx: 0,
  consecutive_gateway_failure: 2,
  enforcing_consecutive_gateway_failure: 100,
  interval: '1s',
  base_ejection_time: '10s',
  max_ejection_percent: 100,
};

function sidecarCluster(name: keyof typeof SIDECAR_LIMITS, settings: GatewaySettings): TypedJson {
  return {
    '@type': TYPE_URL.cluster,
    name,
    type: discoveryTypeFor(settings.sidecars),
    connect_timeout: '1s',
    load_assignment: loadAssignment(name, settings.sidecars),
    outlier_detection: SIDECAR_OUTLIER_DETECTION,
    circuit_breakers: { thresholds: [{ priority: 'DEFAULT', ...SIDECAR_LIMITS[name] }] },
    ...(settings.internalTls && { transport_socket: internalTransportSocket('sidecar') }),
  };
}

export function buildClusters(ir: GatewayIR, settings: GatewaySettings): TypedJson[] {
  return [
    sidecarCluster(SIDECAR_CLUSTER_NAME, settings),
    sidecarCluster(SIDECAR_CHECK_CLUSTER_NAME, settings),
    sidecarCluster(SIDECAR_STREAMS_CLUSTER_NAME, settings),
    rateLimitServiceCluster(settings.quotas),
    ...ir.clusters.map((cluster) => toolServiceCluster(cluster, settings.toolServiceLimits)),
  ];
}
