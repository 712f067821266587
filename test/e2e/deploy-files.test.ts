import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { projectPath } from '../../control-plane/shared/paths';
import { testDir } from '../support/gateway-fixture';
import { kubeconform, writeKubeconformSchemas } from '../support/kubernetes-schemas';
import { tools } from '../support/tools';

/**
 * The deployment files, checked as far as this machine can (no cluster runs here, docs/deploying.md):
 * the Helm chart linted and rendered over several value sets, every rendered manifest validated
 * against the Kubernetes API's own OpenAPI document (and the ServiceMonitor CRD) by kubeconform
 * -strict, what the manifests wire together, and docker-compose.yml by docker-compose's own parser.
 * Every mcpgw option the chart and the compose file pass is one the command knows.
 */

const CHART = projectPath('deploy', 'helm', 'mcp-gateway');
const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const NAMESPACE = 'gateway';
const RELEASE = 'mcpgw';
const VALUE_SETS = ['default', ...fs.readdirSync(path.join(CHART, 'ci')).map((file) => file.replace(/-values\.yaml$/, ''))];
const valuesFile = (set: string) => (set === 'default' ? [] : ['-f', path.join(CHART, 'ci', `${set}-values.yaml`)]);

const helm = (...args: string[]) => spawnSync(tools().helm, args, { encoding: 'utf8', timeout: 60_000 });

interface Manifest {
  kind: string;
  metadata: { name: string };
  spec?: any;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
}

function render(set: string, extra: string[] = []): { file: string; manifests: Manifest[] } {
  const result = helm('template', RELEASE, CHART, '--namespace', NAMESPACE, ...valuesFile(set), ...extra);
  if (result.status !== 0) throw new Error(`helm template (${set}) failed: ${result.stderr}`);
  const file = path.join(dir, `${set}.yaml`);
  fs.writeFileSync(file, result.stdout);
  return { file, manifests: parseAllDocuments(result.stdout).map((document) => document.toJS() as Manifest).filter(Boolean) };
}

const named = (manifests: Manifest[], kind: string, name: string) => {
  const found = manifests.find((manifest) => manifest.kind === kind && manifest.metadata.name === `${RELEASE}-mcp-gateway-${name}`);
  if (!found) throw new Error(`no ${kind} ${name} among ${manifests.map((manifest) => `${manifest.kind}/${manifest.metadata.name}`).join(', ')}`);
  return found;
};
const containerOf = (deployment: Manifest, name: string) => (deployment.spec.template.spec.containers as any[]).find((container) => container.name === name);
const serviceHost = (component: string) => `${RELEASE}-mcp-gateway-${component}.${NAMESPACE}.svc.cluster.local`;

/** The options `mcpgw <command> --help` lists. */
function knownOptions(command: string): Set<string> {
  const help = spawnSync(process.execPath, [CLI, command, '--help'], { encoding: 'utf8' }).stdout;
  return new Set([...help.matchAll(/--[a-z][a-z0-9-]*/g)].map((match) => match[0]));
}
/** Options in an argument list that `mcpgw <command>` does not know. */
const unknownOptions = (args: string[]) => {
  const [command, ...rest] = args;
  const known = knownOptions(command);
  return rest.map((arg) => arg.split('=')[0]).filter((option) => option.startsWith('--') && !known.has(option));
};

let dir: string;
let schemaLocation: string;

beforeAll(() => {
  dir = testDir('deploy-files');
  schemaLocation = writeKubeconformSchemas(path.join(dir, 'schemas'));
});

describe('the Helm chart', () => {
  it.each(VALUE_SETS)('passes helm lint with the %s values', (set) => {
    const result = helm('lint', CHART, ...valuesFile(set));
    expect(`${result.stdout}${result.stderr}`).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(result.status).toBe(0);
  });

  it.each(VALUE_SETS)('renders with the %s values into manifests the Kubernetes API schema accepts (kubeconform -strict)', (set) => {
    const { file, manifests } = render(set);
    const report = kubeconform(schemaLocation, [file]);
    const invalid = report.resources.filter((resource) => resource.status !== 'statusValid');
    expect(invalid).toEqual([]);
    expect(report.summary).toEqual({ valid: manifests.length, invalid: 0, errors: 0, skipped: 0 });
    expect(manifests.length).toBeGreaterThan(10);
  });

  it('has a validation that can fail: a misspelt field and a wrong type are rejected', () => {
    const { manifests } = render('default');
    const deployment = structuredClone(named(manifests, 'Deployment', 'sidecar'));
    deployment.spec.replicas = 'two';
    deployment.spec.template.spec.containers[0].readinessProbe.httpGett = deployment.spec.template.spec.containers[0].readinessProbe.httpGet;
    const file = path.join(dir, 'broken.yaml');
    fs.writeFileSync(file, stringify(deployment));
    const report = kubeconform(schemaLocation, [file]);
    expect(report.summary.invalid).toBe(1);
    expect(report.resources[0].msg).toMatch(/replicas|httpGett/);
  });

  it('refuses values it does not know, or combinations that cannot work, naming the value', () => {
    expect(helm('template', RELEASE, CHART, '--set', 'redis.mode=externl').stderr).toContain("at '/redis/mode': value must be one of 'sentinel', 'external'");
    expect(helm('template', RELEASE, CHART, '--set', 'envoy.replica=3').stderr).toContain("additional properties 'replica' not allowed");
    expect(helm('template', RELEASE, CHART, '--set', 'registry.source=portal').stderr).toContain('set registry.portal.url');
    expect(helm('template', RELEASE, CHART, '--set', 'redis.mode=external').stderr).toContain('set redis.external.address or redis.external.existingSecret.name');
    expect(helm('template', RELEASE, CHART, '--set', 'redis.sentinel.quorum=4').stderr).toContain('quorum is larger than');
  });

  it('wires the parts: Envoy to every control plane and sidecar by their headless Services, the gateway to Redis through Sentinel', () => {
    const { manifests } = render('default');
    const controlPlane = containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane');
    expect(controlPlane.args).toContain(`--sidecar=${serviceHost('sidecar')}:18080`);
    expect(controlPlane.args).toContain('--registry=/etc/mcpgw/registry/registry.yaml');
    // The sidecars reach Tool Services through Envoy's egress listener, by its own Service.
    expect(controlPlane.args).toContain('--egress=0.0.0.0:10001');
    expect(containerOf(named(manifests, 'Deployment', 'sidecar'), 'sidecar').args).toContain(`--egress=${serviceHost('envoy-egress')}:10001`);
    expect((named(manifests, 'Service', 'envoy-egress').spec.ports as any[]).map((port) => port.targetPort)).toEqual(['egress']);
    for (const component of ['sidecar', 'control-plane']) expect(named(manifests, 'Service', component).spec.clusterIP).toBe('None');

    const envoy = named(manifests, 'Deployment', 'envoy');
    const bootstrap = envoy.spec.template.spec.initContainers[0].command.join(' ');
    expect(bootstrap).toContain(`--xds=${serviceHost('control-plane')}:18000`);
    expect(bootstrap).toContain('--node-id="$POD_NAME"');

    // Every Sentinel by its pod's name, one per Redis pod.
    const address = named(manifests, 'Secret', 'redis-address').stringData!.address;
    expect(address).toBe(`sentinel://${[0, 1, 2].map((ordinal) => `${RELEASE}-mcp-gateway-redis-${ordinal}.${serviceHost('redis')}:26379`).join(',')}/mcpgw`);
    expect(named(manifests, 'StatefulSet', 'redis').spec.replicas).toBe(3);
  });

  it('mounts the registry ConfigMap as a directory, so edits arrive through the ..data swap without a restart', () => {
    const { manifests } = render('default');
    const mount = containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane').volumeMounts.find((entry: any) => entry.name === 'registry');
    expect(mount).toEqual({ name: 'registry', mountPath: '/etc/mcpgw/registry', readOnly: true });
    expect(mount.subPath).toBeUndefined();
    expect(parse(named(manifests, 'ConfigMap', 'registry').data!['registry.yaml'])).toEqual({ routes: [] });
  });

  it('probes every container and gives every part a disruption budget', () => {
    const { manifests } = render('default');
    const workloads = manifests.filter((manifest) => manifest.kind === 'Deployment' || manifest.kind === 'StatefulSet');
    expect(workloads).toHaveLength(4);
    for (const workload of workloads) {
      for (const container of workload.spec.template.spec.containers) {
        expect([workload.metadata.name, container.name, Boolean(container.readinessProbe && container.livenessProbe)]).toEqual([workload.metadata.name, container.name, true]);
        expect(container.resources.requests).toBeDefined();
      }
    }
    expect(containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane').readinessProbe.httpGet.path).toBe('/readyz');
    expect(containerOf(named(manifests, 'Deployment', 'sidecar'), 'sidecar').readinessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' });
    const budgets = manifests.filter((manifest) => manifest.kind === 'PodDisruptionBudget').map((manifest) => manifest.metadata.name);
    expect(budgets.sort()).toEqual(['control-plane', 'envoy', 'redis', 'sidecar'].map((component) => `${RELEASE}-mcp-gateway-${component}`));
  });

  it("lets only Envoy reach the sidecars, only the sidecars Envoy's egress listener, Envoy and the sidecars the control planes, only the gateway Redis", () => {
    const { manifests } = render('default');
    const peersOf = (component: string) =>
      Object.fromEntries(
        (named(manifests, 'NetworkPolicy', component).spec.ingress as any[]).map((rule) => [
          rule.ports[0].port,
          (rule.from ?? ['anyone']).map((peer: any) => peer.podSelector?.matchLabels['app.kubernetes.io/component'] ?? peer),
        ]),
      );
    expect(peersOf('sidecar')).toEqual({ http: ['envoy'] });
    expect(peersOf('control-plane')).toEqual({ grpc: ['envoy', 'sidecar'] });
    expect(peersOf('redis')).toEqual({ redis: ['sidecar', 'control-plane', 'redis'], sentinel: ['sidecar', 'control-plane', 'redis'] });
    expect(peersOf('envoy')).toEqual({ mcp: ['anyone'], egress: ['sidecar'] });
  });

  it('takes the registry from a Portal with its token from a Secret', () => {
    const { manifests } = render('portal');
    const controlPlane = containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane');
    expect(controlPlane.args).toContain('--portal=http://portal.portal.svc:8080');
    expect(controlPlane.env).toContainEqual({ name: 'MCPGW_PORTAL_TOKEN', valueFrom: { secretKeyRef: { name: 'portal-token', key: 'token' } } });
    expect(manifests.some((manifest) => manifest.kind === 'ConfigMap' && manifest.metadata.name.endsWith('-registry'))).toBe(false);
  });

  it("uses an external Redis from its Secret, mounts the cert-manager TLS Secret and the Tool Services' credentials where the registry names them, and serves agents TLS", () => {
    const { manifests } = render('external-redis');
    expect(manifests.some((manifest) => manifest.kind === 'StatefulSet')).toBe(false);
    const sidecar = containerOf(named(manifests, 'Deployment', 'sidecar'), 'sidecar');
    expect(sidecar.env).toContainEqual({ name: 'MCPGW_REDIS', valueFrom: { secretKeyRef: { name: 'managed-redis', key: 'url' } } });
    expect(sidecar.args).toContain('--redis-wait-replicas=0');
    for (const [deployment, container] of [['envoy', 'envoy'], ['control-plane', 'control-plane']]) {
      expect(containerOf(named(manifests, 'Deployment', deployment), container).volumeMounts).toContainEqual({ name: 'tls', mountPath: '/etc/mcpgw/tls', readOnly: true });
      expect(containerOf(named(manifests, 'Deployment', deployment), container).volumeMounts).toContainEqual({ name: 'backend-secret-0', mountPath: '/etc/mcpgw/backends/weather', readOnly: true });
    }
    expect(containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane').args).toEqual(
      expect.arrayContaining(['--listener-tls-cert=/etc/mcpgw/tls/tls.crt', '--listener-tls-key=/etc/mcpgw/tls/tls.key']),
    );
    expect(helm('template', RELEASE, CHART, '--set', 'tls.listener=true').stderr).toContain('tls.listener needs tls.secretName');
  });

  it('adds a ServiceMonitor for each part when monitoring is on, and lets the monitoring namespace scrape', () => {
    const { manifests } = render('monitoring');
    const monitors = manifests.filter((manifest) => manifest.kind === 'ServiceMonitor');
    expect(monitors.map((monitor) => monitor.spec.endpoints[0].path).sort()).toEqual(['/metrics', '/metrics', '/stats/prometheus']);
    const envoyAdmin = named(manifests, 'Service', 'envoy-admin');
    expect(named(manifests, 'ServiceMonitor', 'envoy').spec.selector.matchLabels).toMatchObject({ 'mcpgw.dev/metrics': 'envoy' });
    expect((envoyAdmin.spec.ports as any[]).map((port) => port.name)).toEqual(['admin']);
    expect(render('default').manifests.some((manifest) => manifest.kind === 'ServiceMonitor')).toBe(false);
  });

  it.each(VALUE_SETS)('passes (%s values) only options mcpgw knows', (set) => {
    const { manifests } = render(set);
    for (const deployment of manifests.filter((manifest) => manifest.kind === 'Deployment' && !manifest.metadata.name.endsWith('-envoy'))) {
      const args = deployment.spec.template.spec.containers[0].args as string[];
      expect([deployment.metadata.name, unknownOptions(args)]).toEqual([deployment.metadata.name, []]);
    }
  });

  it("runs an init container whose command writes a bootstrap Envoy 1.40 accepts, named after its pod", () => {
    const { manifests } = render('default');
    const [, , script] = named(manifests, 'Deployment', 'envoy').spec.template.spec.initContainers[0].command as string[];
    const bootstrapDir = path.join(dir, 'bootstrap');
    fs.mkdirSync(bootstrapDir, { recursive: true });
    // The image's working directory is the project's root, as here; /bootstrap is the pod's emptyDir.
    const result = spawnSync('sh', ['-c', script.replaceAll('/bootstrap/', `${bootstrapDir}/`)], { cwd: projectPath(), encoding: 'utf8', env: { ...process.env, POD_NAME: 'mcpgw-envoy-abc12' } });
    expect(result.stderr).toBe('');
    const file = path.join(bootstrapDir, 'envoy.yaml');
    const bootstrap = parse(fs.readFileSync(file, 'utf8')) as { node: { id: string }; overload_manager: { resource_monitors: { typed_config: { max_heap_size_bytes?: number } }[] } };
    expect(bootstrap.node.id).toBe('mcpgw-envoy-abc12');
    // The overload manager's heap is below the container's memory limit, so its actions come before the kernel's.
    const heap = bootstrap.overload_manager.resource_monitors.map((monitor) => monitor.typed_config.max_heap_size_bytes).find(Boolean)!;
    const limit = containerOf(named(manifests, 'Deployment', 'envoy'), 'envoy').resources.limits.memory as string;
    expect(heap).toBeLessThan(Number(/^(\d+)Mi$/.exec(limit)![1]) * 1024 * 1024);
    const validated = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { encoding: 'utf8' });
    expect(`${validated.stdout}${validated.stderr}`).toContain('OK');
  });
});

describe("the chart's README", () => {
  /** Value paths the README's table documents; `a.b.c` / `.d` stands for a.b.c and a.b.d. */
  function documentedValues(): string[] {
    const readme = fs.readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Values'));
    return [...section.matchAll(/^\| (`[^|]+`) \|/gm)].flatMap(([, cell]) => {
      const [first, ...more] = [...cell.matchAll(/`([^`]+)`/g)].map((match) => match[1]);
      const parent = first.slice(0, first.lastIndexOf('.'));
      return [first, ...more.map((suffix) => `${parent}${suffix}`)];
    });
  }
  /** Every value path of values.yaml, objects with nothing under them and lists counted as one value. */
  function valuePaths(value: unknown, prefix = ''): string[] {
    if (typeof value !== 'object' || value === null || Array.isArray(value) || Object.keys(value).length === 0) return [prefix];
    return Object.entries(value).flatMap(([key, inner]) => valuePaths(inner, prefix ? `${prefix}.${key}` : key));
  }

  it('documents every value in its table, and nothing that is not a value', () => {
    const documented = documentedValues();
    const values = valuePaths(parse(fs.readFileSync(path.join(CHART, 'values.yaml'), 'utf8')));
    expect(values.filter((value) => !documented.some((doc) => value === doc || value.startsWith(`${doc}.`)))).toEqual([]);
    expect(documented.filter((doc) => !values.some((value) => value === doc || value.startsWith(`${doc}.`)))).toEqual([]);
    expect(documented.length).toBeGreaterThan(50);
  });
});

describe('docker-compose.yml', () => {
  const compose = (file: string) => spawnSync(tools().dockerCompose, ['-f', file, 'config', '-q'], { encoding: 'utf8', cwd: projectPath(), timeout: 60_000 });
  const composeFile = projectPath('docker-compose.yml');

  it('is valid for docker-compose (config -q)', () => {
    const result = compose(composeFile);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('has a validation that can fail: an unknown depends_on condition is rejected', () => {
    const broken = path.join(projectPath(), '.run', 'test', 'deploy-files-compose.yml');
    fs.mkdirSync(path.dirname(broken), { recursive: true });
    fs.writeFileSync(broken, fs.readFileSync(composeFile, 'utf8').replace('condition: service_healthy', 'condition: service_ready'));
    const result = compose(broken);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('service_ready');
  });

  it('checks the health of every long-running service and starts each part after what it needs is healthy', () => {
    const services = parse(fs.readFileSync(composeFile, 'utf8')).services as Record<string, { healthcheck?: unknown; depends_on?: Record<string, { condition: string }> }>;
    for (const [name, service] of Object.entries(services)) if (name !== 'envoy-bootstrap') expect([name, Boolean(service.healthcheck)]).toEqual([name, true]);
    expect(services.sidecar.depends_on).toEqual({ redis: { condition: 'service_healthy' }, 'control-plane': { condition: 'service_healthy' } });
    expect(services.envoy.depends_on).toMatchObject({ 'envoy-bootstrap': { condition: 'service_completed_successfully' }, sidecar: { condition: 'service_healthy' } });
  });

  it('passes only options mcpgw knows, to the commands as they are now', () => {
    const services = parse(fs.readFileSync(composeFile, 'utf8')).services as Record<string, { command?: string[]; entrypoint?: string[] }>;
    for (const name of ['control-plane', 'sidecar']) expect([name, unknownOptions(services[name].command!)]).toEqual([name, []]);
    const bootstrap = services['envoy-bootstrap'].entrypoint!.join(' ');
    expect(unknownOptions(['envoy-bootstrap', ...bootstrap.split(/\s+/).filter((word) => word.startsWith('--'))])).toEqual([]);
  });
});
