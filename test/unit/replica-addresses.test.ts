import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
import { projectPath } from '../../control-plane/shared/paths';
import { translate } from '../../control-plane/xds/translate';
import { EMPTY_CALL_LANE_CATALOG } from '../../control-plane/xds/translate/call-lane';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { defaultAccess } from '../../control-plane/xds/translate/access';
import { NO_SIGNING_KEYS } from '../../control-plane/xds/translate/auth';
import { GATEWAY_DEFAULTS, SIDECAR_CHECK_CLUSTER_NAME, SIDECAR_CLUSTER_NAME, SIDECAR_STREAMS_CLUSTER_NAME } from '../../control-plane/xds/translate/settings';

/** Replicas of the sidecar and the control plane as addresses: the sidecar clusters' endpoints and the ADS cluster's (docs/adr/0010-deployment.md). */
const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const REGISTRY = projectPath('test', 'fixtures', 'registries', 'two-routes.yaml');
const mcpgw = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20000 });

type Cluster = { name: string; type: string; load_assignment: { endpoints: { lb_endpoints: { endpoint: { address: { socket_address: { address: string; port_value: number } } } }[] }[] } };
const sidecarClusters = (sidecars: { address: string; port: number }[]) =>
  (
    translate(buildGatewayIR(loadRegistryFile(REGISTRY)), EMPTY_CALL_LANE_CATALOG, {
      ...GATEWAY_DEFAULTS,
      listener: { address: '127.0.0.1', port: 10000 },
      sidecars,
      egress: { address: '127.0.0.1', port: 10001 },
      access: defaultAccess({ address: '127.0.0.1', port: 10000 }),
    }, NO_SIGNING_KEYS)[TYPE_URL.cluster] as unknown as Cluster[]
  ).filter(
    (cluster) => [SIDECAR_CLUSTER_NAME, SIDECAR_CHECK_CLUSTER_NAME, SIDECAR_STREAMS_CLUSTER_NAME].includes(cluster.name),
  );
const endpointsOf = (cluster: Cluster) =>
  cluster.load_assignment.endpoints.flatMap((group) => group.lb_endpoints.map(({ endpoint }) => `${endpoint.address.socket_address.address}:${endpoint.address.socket_address.port_value}`));

describe('sidecar replicas', () => {
  it('are every one an endpoint of each of the three sidecar clusters, STATIC for addresses', () => {
    const clusters = sidecarClusters([
      { address: '10.0.0.5', port: 18080 },
      { address: '10.0.0.6', port: 18080 },
    ]);
    expect(clusters).toHaveLength(3);
    for (const cluster of clusters) {
      expect(endpointsOf(cluster)).toEqual(['10.0.0.5:18080', '10.0.0.6:18080']);
      expect(cluster.type).toBe('STATIC');
    }
  });

  it('behind a DNS name are resolved by Envoy, every record an endpoint (STRICT_DNS)', () => {
    for (const cluster of sidecarClusters([{ address: 'mcpgw-sidecar.gateway.svc.cluster.local', port: 18080 }])) expect(cluster.type).toBe('STRICT_DNS');
  });

  it('are given to the control plane and render as one comma-separated --sidecar list', () => {
    const result = mcpgw('render', '--registry', REGISTRY, '--sidecar', '127.0.0.1:18080, 127.0.0.1:18090');
    expect(result.status).toBe(0);
    const clusters = (JSON.parse(result.stdout) as Record<string, Cluster[]>)[TYPE_URL.cluster].filter((cluster) => cluster.name === SIDECAR_CHECK_CLUSTER_NAME);
    expect(endpointsOf(clusters[0])).toEqual(['127.0.0.1:18080', '127.0.0.1:18090']);
  });

  it('in a list with a bad entry are a usage error naming that entry', () => {
    const result = mcpgw('render', '--registry', REGISTRY, '--sidecar', '127.0.0.1:18080,sidecar-b');
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('"sidecar-b" must be HOST:PORT');
  });
});

describe('control plane replicas in the Envoy bootstrap', () => {
  it('are every one an endpoint of the ADS cluster, and Envoy 1.40 accepts the bootstrap', () => {
    const result = mcpgw('envoy-bootstrap', '--node-id', 'envoy-a', '--admin', '127.0.0.1:9901', '--xds', '127.0.0.1:18000,mcpgw-control-plane.gateway.svc:18000');
    expect(result.status).toBe(0);
    const bootstrap = parse(result.stdout) as { static_resources: { clusters: Cluster[] } };
    const ads = bootstrap.static_resources.clusters.find((cluster) => cluster.name === 'xds_control_plane')!;
    expect(endpointsOf(ads)).toEqual(['127.0.0.1:18000', 'mcpgw-control-plane.gateway.svc:18000']);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-bootstrap-'));
    try {
      const file = path.join(dir, 'bootstrap.yaml');
      fs.writeFileSync(file, result.stdout);
      const validated = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { encoding: 'utf8' });
      expect(`${validated.stdout}${validated.stderr}`).toContain('OK');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
