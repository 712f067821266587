import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { stringify } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
import { projectPath } from '../../control-plane/shared/paths';
import { asStaticBootstrap, diffXds, formatDifferences } from '../../control-plane/xds/render';
import { translate } from '../../control-plane/xds/translate';
import { EMPTY_CALL_LANE_CATALOG } from '../../control-plane/xds/translate/call-lane';
import { GATEWAY_DEFAULTS } from '../../control-plane/xds/translate/settings';
import { defaultAccess } from '../../control-plane/xds/translate/access';
import { fixtureKeysFor } from '../support/signing-keys';

const settings = {
  ...GATEWAY_DEFAULTS,
  listener: { address: '127.0.0.1', port: 10000 },
  sidecars: [{ address: '127.0.0.1', port: 18080 }],
  egress: { address: '127.0.0.1', port: 10001 },
  access: defaultAccess({ address: '127.0.0.1', port: 10000 }),
};
const FIXTURES = projectPath('test', 'fixtures', 'registries');
const xdsOf = (file: string) => {
  const ir = buildGatewayIR(loadRegistryFile(path.join(FIXTURES, file)));
  return translate(ir, EMPTY_CALL_LANE_CATALOG, settings, fixtureKeysFor(ir));
};
const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
/** The Envoy cluster a Tool Service of a fixture registry goes to (named after its upstream). */
const clusterOf = (file: string, toolServiceId: string) =>
  buildGatewayIR(loadRegistryFile(path.join(FIXTURES, file))).toolServices.find((service) => service.id === toolServiceId)!.clusterName;

describe('rendered xDS', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-render-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it.each(fs.readdirSync(FIXTURES).filter((file) => file.endsWith('.yaml')))(
    'of %s passes `envoy --mode validate` (Envoy 1.40)',
    (file) => {
      const bootstrap = path.join(dir, `${file}.bootstrap.yaml`);
      fs.writeFileSync(bootstrap, stringify(asStaticBootstrap(xdsOf(file))));
      const result = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', bootstrap, '--log-level', 'error'], { encoding: 'utf8' });
      expect(`${result.stdout}${result.stderr}`).toContain('OK');
      expect(result.status).toBe(0);
    },
  );

  it('is rejected by Envoy when a resource is broken, so the check can fail', () => {
    const broken = asStaticBootstrap(xdsOf('two-routes.yaml')) as { static_resources: { clusters: Record<string, unknown>[] } };
    broken.static_resources.clusters[1].lb_policy = 'RING_HASH_TYPO';
    const bootstrap = path.join(dir, 'broken.yaml');
    fs.writeFileSync(bootstrap, stringify(broken));
    const result = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', bootstrap, '--log-level', 'error'], { encoding: 'utf8' });
    expect(result.status).not.toBe(0);
  });
});

describe('xDS diff', () => {
  it('names added, removed and changed resources, and the changed fields by resource name', () => {
    const differences = diffXds(xdsOf('two-routes.yaml'), xdsOf('tls-and-dns.yaml'));
    const text = formatDifferences(differences);
    expect(text).toContain(`+ clusters/${clusterOf('tls-and-dns.yaml', 'cluster-manager-prod')}`);
    expect(text).toContain(`- clusters/${clusterOf('two-routes.yaml', 'weather')}`);
    expect(text).toContain('~ route_configurations/mcp_routes');
    expect(text).toContain('.virtual_hosts[mcp].routes[demo/call/jobs]: {');
    expect(differences.find((difference) => difference.type === 'listeners')).toBeUndefined();
  });

  it('finds nothing between a registry and itself', () => {
    expect(formatDifferences(diffXds(xdsOf('two-routes.yaml'), xdsOf('two-routes.yaml')))).toBe('no differences\n');
  });

  it('`mcpgw diff` exits 1 when the registries differ and 0 when they do not', () => {
    const differ = spawnSync(process.execPath, [CLI, 'diff', path.join(FIXTURES, 'two-routes.yaml'), path.join(FIXTURES, 'tls-and-dns.yaml')], {
      encoding: 'utf8',
    });
    expect(differ.status).toBe(1);
    expect(differ.stdout).toContain(`+ clusters/${clusterOf('tls-and-dns.yaml', 'cluster-manager-dev')}`);
    const same = spawnSync(process.execPath, [CLI, 'diff', path.join(FIXTURES, 'two-routes.yaml'), projectPath('registry', 'default.yaml')], {
      encoding: 'utf8',
    });
    expect(same.status).toBe(0);
    expect(same.stdout).toBe('no differences\n');
  });

  it('`mcpgw render --format bootstrap` prints a static bootstrap', () => {
    const result = spawnSync(process.execPath, [CLI, 'render', '--registry', path.join(FIXTURES, 'two-routes.yaml'), '--format', 'bootstrap'], {
      encoding: 'utf8',
    });
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('route_config:');
    expect(result.stdout).not.toContain('rds:');
  });
});
