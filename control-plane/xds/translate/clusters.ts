import { isIP } from 'node:net';
import { GatewayIR, ToolServiceIR } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { GatewaySettings, SIDECAR_CLUSTER_NAME } from './settings';
import { TYPE_URL } from './type-urls';

/** Debian's CA bundle; per-service CA files arrive with the Portal's transport settings. */
const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

function loadAssignment(clusterName: string, host: string, port: number) {
  return {
    cluster_name: clusterName,
    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: host, port_value: port } } } }] }],
  };
}

const discoveryTypeFor = (host: string) => (isIP(host) ? 'STATIC' : 'STRICT_DNS');

function toolServiceCluster(service: ToolServiceIR): TypedJson {
  const { host, port, tls } = service.endpoint;
  return {
    '@type': TYPE_URL.cluster,
    name: service.clusterName,
    type: discoveryTypeFor(host),
    connect_timeout: '2s',
    lb_policy: 'ROUND_ROBIN',
    load_assignment: loadAssignment(service.clusterName, host, port),
    ...(tls && {
      transport_socket: {
        name: 'envoy.transport_sockets.tls',
        typed_config: {
          '@type': TYPE_URL.upstreamTls,
          sni: host,
          common_tls_context: { validation_context: { trusted_ca: { filename: SYSTEM_CA_BUNDLE } } },
        },
      },
    }),
  };
}

/** ext_proc is gRPC, so the sidecar cluster speaks HTTP/2 to it. */
function sidecarCluster(settings: GatewaySettings): TypedJson {
  return {
    '@type': TYPE_URL.cluster,
    name: SIDECAR_CLUSTER_NAME,
    type: discoveryTypeFor(settings.sidecar.address),
    connect_timeout: '1s',
    load_assignment: loadAssignment(SIDECAR_CLUSTER_NAME, settings.sidecar.address, settings.sidecar.port),
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': TYPE_URL.httpProtocolOptions,
        explicit_http_config: { http2_protocol_options: {} },
      },
    },
  };
}

export function buildClusters(ir: GatewayIR, settings: GatewaySettings): TypedJson[] {
  return [sidecarCluster(settings), ...ir.toolServices.map(toolServiceCluster)];
}
