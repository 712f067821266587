import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { rateLimitEnvironment } from '../../control-plane/devstack/ratelimit';
import { DEV_REDIS_USER } from '../../control-plane/devstack/dev-inside';
import { loadRegistryFile } from '../../control-plane/registry/static-file';
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
/** Extended key usages (RFC 5280): TLS server and TLS client. */
const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';
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
/** A Secret's data written as the kubelet mounts it (one file per key), for a command that reads the mount. */
function secretDirectory(secret: Manifest, target: string): string {
  fs.rmSync(target, { recursive: true, force: true });
  fs.mkdirSync(target, { recursive: true, mode: 0o700 });
  for (const [key, value] of Object.entries(secret.data ?? {})) fs.writeFileSync(path.join(target, key), Buffer.from(value, 'base64'), { mode: 0o600 });
  return target;
}
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

/** The value of `--name=value` in an argument list. */
const optionValue = (args: string[], name: string) => args.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1);
/** A container's environment variables that have a value of their own (not from a Secret). */
const envOf = (container: { env: { name: string; value?: string }[] }) =>
  Object.fromEntries(container.env.filter((entry) => entry.value !== undefined).map((entry) => [entry.name, entry.value!]));
/** The mount of a container under which `file` lies. */
const mountHolding = (container: { volumeMounts: { name: string; mountPath: string; readOnly?: boolean }[] }, file: string) =>
  container.volumeMounts.find((mount) => file.startsWith(`${mount.mountPath}/`));
/**
 * The ratelimit service's settings `mcpgw up` and the dev stack use (control-plane/devstack/ratelimit.ts)
 * that do not depend on where it runs: a deployment must run it with the same ones.
 */
function devstackRateLimitSettings(): Record<string, string> {
  const placeOrStore = new Set(['HOST', 'PORT', 'DEBUG_HOST', 'DEBUG_PORT', 'RUNTIME_ROOT', 'GRPC_UDS', 'GRPC_HOST', 'GRPC_PORT']);
  const environment = rateLimitEnvironment('/any', { grpc: { socketPath: '/any.sock' }, http: 1, debug: 2 }, { host: 'redis', port: 6379 });
  return Object.fromEntries(Object.entries(environment).filter(([name]) => !placeOrStore.has(name) && !name.startsWith('REDIS_')) as [string, string][]);
}
/** The commit test/tools/ratelimit/go.mod pins (the service the tests and `mcpgw up` run): upstream tags its image by the first 8 hex digits. */
function pinnedRateLimitCommit(): string {
  const goMod = fs.readFileSync(projectPath('test', 'tools', 'ratelimit', 'go.mod'), 'utf8');
  return /github\.com\/envoyproxy\/ratelimit v\S+-([0-9a-f]{12})\b/.exec(goMod)![1].slice(0, 8);
}

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
    expect(bootstrap).toContain('--node-id="envoy/$POD_NAME"');

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

  it("lets only Envoy reach the sidecars, only the sidecars Envoy's egress listener, Envoy and the sidecars the control planes (Envoy alone their call-log port), only the gateway Redis", () => {
    const { manifests } = render('default');
    const peersOf = (component: string) =>
      Object.fromEntries(
        (named(manifests, 'NetworkPolicy', component).spec.ingress as any[]).map((rule) => [
          rule.ports[0].port,
          (rule.from ?? ['anyone']).map((peer: any) => peer.podSelector?.matchLabels['app.kubernetes.io/component'] ?? peer),
        ]),
      );
    expect(peersOf('sidecar')).toEqual({ http: ['envoy'] });
    expect(peersOf('control-plane')).toEqual({ grpc: ['envoy', 'sidecar'], 'call-log': ['envoy'] });
    expect(peersOf('redis')).toEqual({ redis: ['sidecar', 'control-plane', 'redis'], sentinel: ['sidecar', 'control-plane', 'redis'] });
    expect(peersOf('envoy')).toEqual({ mcp: ['anyone'], egress: ['sidecar'] });
  });

  it("runs the ratelimit service in each Envoy pod (rateLimit.enabled): on the socket the control plane's --ratelimit names, in a directory only Envoy shares, configured from the file the config sync writes, with the dev stack's settings", () => {
    const { manifests } = render('ratelimit');
    const envoyDeployment = named(manifests, 'Deployment', 'envoy');
    const pod = envoyDeployment.spec.template.spec;
    const envoy = containerOf(envoyDeployment, 'envoy');
    const rateLimit = containerOf(envoyDeployment, 'ratelimit');
    expect(rateLimit).toBeDefined();
    const settings = envOf(rateLimit);

    // The socket: where the control plane tells Envoy to ask, where the service listens, in one emptyDir of the pod.
    const controlPlane = containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane');
    const socket = optionValue(controlPlane.args, '--ratelimit')!.replace(/^unix:/, '');
    expect(settings.GRPC_UDS).toBe(socket);
    const socketMounts = [envoy, rateLimit].map((container) => mountHolding(container, socket));
    expect(socketMounts[0]).toEqual(socketMounts[1]);
    expect(pod.volumes).toContainEqual({ name: socketMounts[0]!.name, emptyDir: {} });
    for (const container of [...pod.containers, ...pod.initContainers].filter((entry: any) => !['envoy', 'ratelimit'].includes(entry.name))) {
      expect([container.name, (container.volumeMounts as any[]).some((mount) => mount.name === socketMounts[0]!.name)]).toEqual([container.name, false]);
    }
    // No port on the pod's address: gRPC on the socket only, health and debug on loopback.
    expect(rateLimit.ports).toBeUndefined();
    expect([settings.HOST, settings.DEBUG_HOST, settings.GRPC_HOST]).toEqual(['127.0.0.1', '127.0.0.1', undefined]);
    // Envoy's uid: the socket the service creates is its owner's, and Envoy connects to it.
    expect(rateLimit.securityContext.runAsUser).toBe(envoy.securityContext.runAsUser);

    // The configuration: the sync (started first, kept running) writes the file the service reads, through one emptyDir.
    const sync = (pod.initContainers as any[]).find((container) => container.name === 'ratelimit-config-sync');
    expect(sync.restartPolicy).toBe('Always');
    expect(pod.initContainers.map((container: any) => container.name)).toEqual(['bootstrap', 'ratelimit-config-sync']);
    expect(unknownOptions(sync.args)).toEqual([]);
    const output = optionValue(sync.args, '--output')!;
    expect(path.dirname(output)).toBe(path.posix.join(settings.RUNTIME_ROOT, settings.RUNTIME_SUBDIRECTORY, 'config'));
    const [written, read] = [sync, rateLimit].map((container) => mountHolding(container, output));
    expect(written).toEqual({ name: read!.name, mountPath: read!.mountPath });
    expect(read).toMatchObject({ mountPath: settings.RUNTIME_ROOT, readOnly: true });
    expect(pod.volumes).toContainEqual({ name: read!.name, emptyDir: {} });
    expect(sync.startupProbe.exec.command).toEqual(['test', '-s', output]);
    // It asks the control planes' admin Service, with the admin token the pod mounts.
    expect(optionValue(sync.args, '--control-plane')).toBe(`http://${serviceHost('control-plane')}:18001`);
    expect(mountHolding(sync, optionValue(sync.args, '--admin-token-file')!)).toMatchObject({ name: 'admin-token' });

    // Every setting of the dev stack that does not depend on where the service runs.
    expect(settings).toMatchObject(devstackRateLimitSettings());
    // The image the tests run (built from the same commit), by its exact tag.
    expect(rateLimit.image).toBe(`envoyproxy/ratelimit:${pinnedRateLimitCommit()}`);
    expect(rateLimit.resources.requests).toBeDefined();
    // The pod is ready while its service answers its health check (the image has no probe of its own).
    expect(sync.readinessProbe.exec.command.join(' ')).toContain(`http://127.0.0.1:${settings.PORT}/healthcheck`);
    expect([rateLimit.readinessProbe, rateLimit.livenessProbe]).toEqual([undefined, undefined]);
    expect(sync.livenessProbe).toBeDefined();

    // The chart's Redis through its Sentinels, with the gateway's password for Redis and Sentinels alike.
    expect(settings.REDIS_TYPE).toBe('SENTINEL');
    expect(settings.REDIS_URL).toBe(['mcpgw', ...[0, 1, 2].map((ordinal) => `${RELEASE}-mcp-gateway-redis-${ordinal}.${serviceHost('redis')}:26379`)].join(','));
    expect(rateLimit.env).toContainEqual({ name: 'REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: `${RELEASE}-mcp-gateway-redis-auth`, key: 'password' } } });
    expect([settings.REDIS_AUTH, settings.REDIS_SENTINEL_AUTH]).toEqual(['$(REDIS_PASSWORD)', '$(REDIS_PASSWORD)']);
    expect(settings.REDIS_TLS).toBeUndefined();
    // Only Envoy pods are let in besides: to the control planes' admin port and to Redis.
    const peersOf = (component: string, port: string) =>
      (named(manifests, 'NetworkPolicy', component).spec.ingress as any[]).find((rule) => rule.ports[0].port === port).from.map((peer: any) => peer.podSelector.matchLabels['app.kubernetes.io/component']);
    expect(peersOf('control-plane', 'admin')).toEqual(['envoy']);
    expect(peersOf('redis', 'redis')).toContain('envoy');
    expect(peersOf('redis', 'sentinel')).toContain('envoy');

    // Off (the default): no service, no --ratelimit.
    const off = render('default').manifests;
    expect((named(off, 'Deployment', 'envoy').spec.template.spec.containers as any[]).map((container) => container.name)).toEqual(['envoy']);
    expect(containerOf(named(off, 'Deployment', 'control-plane'), 'control-plane').args.some((arg: string) => arg.startsWith('--ratelimit'))).toBe(false);
  });

  it('warns after install when the chart-made registry has shared limits but no ratelimit service runs', () => {
    const notes = (...extra: string[]) => {
      const result = helm('install', RELEASE, CHART, '--dry-run=client', '--namespace', NAMESPACE, ...valuesFile('ratelimit'), ...extra);
      expect(result.status).toBe(0);
      return result.stdout.slice(result.stdout.indexOf('NOTES:'));
    };
    expect(notes('--set', 'rateLimit.enabled=false')).toContain('WARNING: the registry has shared limits (shared: true) but no ratelimit service runs');
    expect(notes()).not.toContain('WARNING');
    expect(notes('--set', 'rateLimit.enabled=false', '--set', 'registry.configMap.content=routes: []')).not.toContain('WARNING');
  });

  it("gives the ratelimit service the gateway's Redis TLS: the chart's Sentinels' CA, or an external Redis's address, ACL user and CA", () => {
    const tls = render('sentinel-tls').manifests;
    const sentinel = containerOf(named(tls, 'Deployment', 'envoy'), 'ratelimit');
    expect(envOf(sentinel)).toMatchObject({ REDIS_TLS: 'true', REDIS_TLS_CACERT: '/etc/mcpgw/redis-ca/ca.crt' });
    expect(mountHolding(sentinel, '/etc/mcpgw/redis-ca/ca.crt')).toMatchObject({ name: 'redis-ca' });
    expect(named(tls, 'Deployment', 'envoy').spec.template.spec.volumes).toContainEqual({ name: 'redis-ca', secret: { secretName: `${RELEASE}-mcp-gateway-redis-tls` } });

    const external = render('external-redis').manifests;
    const service = containerOf(named(external, 'Deployment', 'envoy'), 'ratelimit');
    const controlPlane = containerOf(named(external, 'Deployment', 'control-plane'), 'control-plane');
    expect(envOf(service)).toMatchObject({ REDIS_TYPE: 'SINGLE', REDIS_URL: 'redis.example.internal:6380', REDIS_AUTH: 'mcpgw:$(REDIS_PASSWORD)', REDIS_TLS: 'true' });
    // The same CA file and password the control planes are given.
    expect(`--redis-ca=${envOf(service).REDIS_TLS_CACERT}`).toBe(controlPlane.args.find((arg: string) => arg.startsWith('--redis-ca=')));
    expect(service.env).toContainEqual({ name: 'REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: 'managed-redis-password', key: 'password' } } });
    expect(helm('template', RELEASE, CHART, '--set', 'rateLimit.enabled=true,redis.mode=external,redis.external.address=redis://r:6379').stderr).toContain('set rateLimit.externalRedis.url');
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
    // Over TLS, with its CA and the gateway user's password from Secrets of yours.
    for (const [deployment, container] of [['sidecar', 'sidecar'], ['control-plane', 'control-plane']]) {
      const workload = containerOf(named(manifests, 'Deployment', deployment), container);
      expect(workload.args).toEqual(expect.arrayContaining(['--redis-ca=/etc/mcpgw/redis-ca/ca.pem', '--redis-password-file=/etc/mcpgw/redis-auth/password']));
      const volumes = named(manifests, 'Deployment', deployment).spec.template.spec.volumes as any[];
      expect(volumes).toContainEqual({ name: 'redis-ca', secret: { secretName: 'managed-redis-ca' } });
      expect(volumes).toContainEqual({ name: 'redis-auth', secret: { secretName: 'managed-redis-password' } });
    }
    expect(manifests.some((manifest) => manifest.kind === 'Secret' && manifest.metadata.name.endsWith('-redis-auth'))).toBe(false);
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
    expect((envoyAdmin.spec.ports as any[]).map((port) => port.name)).toEqual(['stats']);
    // Every scrape carries the admin token: the admin ports and Envoy's stats listener ask for it.
    for (const monitor of monitors) {
      expect(monitor.spec.endpoints[0].authorization).toEqual({ type: 'Bearer', credentials: { name: `${RELEASE}-mcp-gateway-admin-token`, key: 'token' } });
    }
    expect(render('default').manifests.some((manifest) => manifest.kind === 'ServiceMonitor')).toBe(false);
  });

  it.each(VALUE_SETS)('passes (%s values) only options mcpgw knows', (set) => {
    const { manifests } = render(set);
    for (const deployment of manifests.filter((manifest) => manifest.kind === 'Deployment' && !manifest.metadata.name.endsWith('-envoy'))) {
      const args = deployment.spec.template.spec.containers[0].args as string[];
      expect([deployment.metadata.name, unknownOptions(args)]).toEqual([deployment.metadata.name, []]);
    }
  });

  it("runs an init container whose command writes, from the chart's own certificate, a bootstrap Envoy 1.40 accepts, named after its pod", () => {
    const { manifests } = render('default');
    const [, , script] = named(manifests, 'Deployment', 'envoy').spec.template.spec.initContainers[0].command as string[];
    const bootstrapDir = path.join(dir, 'bootstrap');
    fs.mkdirSync(bootstrapDir, { recursive: true });
    // The pod's mounts, here: the envoy certificate Secret the chart generated, and the admin token.
    const certDir = secretDirectory(named(manifests, 'Secret', 'envoy-internal-tls'), path.join(dir, 'envoy-internal'));
    const tokenDir = secretDirectory(named(manifests, 'Secret', 'admin-token'), path.join(dir, 'admin-token'));
    const local = script.replaceAll('/bootstrap/', `${bootstrapDir}/`).replaceAll('/etc/mcpgw/internal', certDir).replaceAll('/etc/mcpgw/admin-token', tokenDir);
    // The image's working directory is the project's root, as here.
    const result = spawnSync('sh', ['-c', local], { cwd: projectPath(), encoding: 'utf8', env: { ...process.env, POD_NAME: 'mcpgw-envoy-abc12' } });
    expect(result.stderr).toBe('');
    const file = path.join(bootstrapDir, 'envoy.yaml');
    const bootstrap = parse(fs.readFileSync(file, 'utf8')) as {
      node: { id: string };
      admin: { address: { socket_address: { address: string } } };
      static_resources: { listeners: { address: { socket_address: unknown } }[] };
      overload_manager: { resource_monitors: { typed_config: { max_heap_size_bytes?: number } }[] };
    };
    expect(bootstrap.node.id).toBe('envoy/mcpgw-envoy-abc12');
    // The admin on loopback; the stats listener on the pod's address.
    expect(bootstrap.admin.address.socket_address.address).toBe('127.0.0.1');
    expect(bootstrap.static_resources.listeners[0].address.socket_address).toEqual({ address: '0.0.0.0', port_value: 9902 });
    // The overload manager's heap is below the container's memory limit, so its actions come before the kernel's.
    const heap = bootstrap.overload_manager.resource_monitors.map((monitor) => monitor.typed_config.max_heap_size_bytes).find(Boolean)!;
    const limit = containerOf(named(manifests, 'Deployment', 'envoy'), 'envoy').resources.limits.memory as string;
    expect(heap).toBeLessThan(Number(/^(\d+)Mi$/.exec(limit)![1]) * 1024 * 1024);
    const validated = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { encoding: 'utf8' });
    expect(`${validated.stdout}${validated.stderr}`).toContain('OK');
  });

  it('closes the inside: each part its own certificate of one CA, naming its role; admin ports behind the token; Redis behind a password', () => {
    const { manifests } = render('default');
    const ca = Buffer.from(named(manifests, 'Secret', 'internal-ca').data!['tls.crt'], 'base64').toString();
    for (const part of ['envoy', 'sidecar', 'control-plane']) {
      const secret = named(manifests, 'Secret', `${part}-internal-tls`);
      const certificate = new X509Certificate(Buffer.from(secret.data!['tls.crt'], 'base64'));
      expect([part, certificate.subjectAltName]).toEqual([part, `DNS:${part}.${part}.mcpgw.internal`]);
      expect(certificate.verify(new X509Certificate(ca).publicKey)).toBe(true);
      expect(Buffer.from(secret.data!['ca.crt'], 'base64').toString()).toBe(ca);
      // Server and client alike: Envoy serves its egress listener with its certificate, the sidecars call it with theirs.
      expect([part, certificate.keyUsage]).toEqual([part, expect.arrayContaining([SERVER_AUTH, CLIENT_AUTH])]);
    }
    const controlPlane = containerOf(named(manifests, 'Deployment', 'control-plane'), 'control-plane');
    const sidecar = containerOf(named(manifests, 'Deployment', 'sidecar'), 'sidecar');
    for (const container of [controlPlane, sidecar]) {
      expect(container.args).toEqual(expect.arrayContaining(['--internal-tls=/etc/mcpgw/internal', '--admin-token-file=/etc/mcpgw/admin-token/token', '--redis-password-file=/etc/mcpgw/redis-auth/password']));
    }
    expect(controlPlane.args).toContain('--envoy-internal-tls=/etc/mcpgw/envoy-internal');
    expect(sidecar.args).toContain('--id=sidecar/$(POD_NAME)');
    const secretOf = (deployment: string, volume: string) =>
      (named(manifests, 'Deployment', deployment).spec.template.spec.volumes as any[]).find((entry) => entry.name === volume).secret.secretName;
    expect(secretOf('control-plane', 'internal-tls')).toBe(`${RELEASE}-mcp-gateway-control-plane-internal-tls`);
    expect(secretOf('control-plane', 'envoy-internal-tls')).toBe(`${RELEASE}-mcp-gateway-envoy-internal-tls`);
    expect(secretOf('sidecar', 'internal-tls')).toBe(`${RELEASE}-mcp-gateway-sidecar-internal-tls`);
    expect(secretOf('envoy', 'internal-tls')).toBe(`${RELEASE}-mcp-gateway-envoy-internal-tls`);
    // The sidecars present the certificate they mount to Envoy's egress listener, which serves TLS.
    const mountOf = (deployment: string, container: string, volume: string) =>
      (containerOf(named(manifests, 'Deployment', deployment), container).volumeMounts as any[]).find((mount) => mount.name === volume)?.mountPath;
    expect(mountOf('sidecar', 'sidecar', 'internal-tls')).toBe('/etc/mcpgw/internal');
    expect((named(manifests, 'Service', 'envoy-egress').spec.ports as any[]).map((port) => port.appProtocol)).toEqual(['https']);
    // Envoy's admin is nowhere on the pod's address: no container port, probes on the stats listener or loopback.
    const envoy = containerOf(named(manifests, 'Deployment', 'envoy'), 'envoy');
    expect(envoy.ports.map((port: any) => port.name)).toEqual(['mcp', 'egress', 'stats']);
    expect(envoy.readinessProbe.httpGet).toEqual({ path: '/ready', port: 'stats' });
    expect(envoy.livenessProbe.exec.command.join(' ')).toContain('/dev/tcp/127.0.0.1/9901');
    // The chart's Redis and Sentinels ask for the password the gateway gets.
    const redis = named(manifests, 'StatefulSet', 'redis').spec.template.spec.containers as any[];
    for (const container of redis) {
      expect(container.env).toContainEqual({ name: 'REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: `${RELEASE}-mcp-gateway-redis-auth`, key: 'password' } } });
    }
    const scripts = named(manifests, 'ConfigMap', 'redis-scripts').data!;
    expect(scripts['start-redis.sh']).toContain('requirepass');
    expect(scripts['start-sentinel.sh']).toMatch(/requirepass "\$REDIS_PASSWORD"\n\s*sentinel auth-pass mcpgw \$REDIS_PASSWORD/);
  });

  it("serves the chart's Redis and Sentinels over TLS only when redis.sentinel.tls is on, and the gateway connects with sentinels:// and the CA", () => {
    const { manifests } = render('sentinel-tls');
    const ca = Buffer.from(named(manifests, 'Secret', 'internal-ca').data!['tls.crt'], 'base64').toString();
    const tlsSecret = named(manifests, 'Secret', 'redis-tls');
    const certificate = new X509Certificate(Buffer.from(tlsSecret.data!['tls.crt'], 'base64'));
    expect(certificate.verify(new X509Certificate(ca).publicKey)).toBe(true);
    expect(Buffer.from(tlsSecret.data!['ca.crt'], 'base64').toString()).toBe(ca);
    // Every pod's name under the headless Service (the Sentinels announce those), loopback for the probes.
    expect(certificate.checkHost(`${RELEASE}-mcp-gateway-redis-4.${serviceHost('redis')}`)).toBeDefined();
    expect(certificate.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect([certificate.keyUsage]).toEqual([expect.arrayContaining([SERVER_AUTH, CLIENT_AUTH])]);

    const scripts = named(manifests, 'ConfigMap', 'redis-scripts').data!;
    expect(scripts['start-redis.sh']).toContain('--port 0 --tls-port 6379 --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key --tls-ca-cert-file /tls/ca.crt');
    expect(scripts['start-redis.sh']).toContain('--tls-replication yes');
    const sentinelConf = scripts['start-sentinel.sh'].split('\n').map((line) => line.trim());
    expect(sentinelConf).toEqual(expect.arrayContaining(['port 0', 'tls-port 26379', 'tls-cert-file /tls/tls.crt', 'tls-key-file /tls/tls.key', 'tls-ca-cert-file /tls/ca.crt', 'tls-replication yes']));
    expect(sentinelConf).not.toContain('port 26379');
    for (const script of Object.values(scripts)) expect(script).not.toMatch(/redis-cli (?!--tls --cacert \/tls\/ca\.crt)/);
    const redisPod = named(manifests, 'StatefulSet', 'redis').spec.template.spec;
    for (const container of redisPod.containers) {
      expect(container.volumeMounts).toContainEqual({ name: 'tls', mountPath: '/tls', readOnly: true });
      expect(container.readinessProbe.exec.command.slice(0, 4)).toEqual(['redis-cli', '--tls', '--cacert', '/tls/ca.crt']);
    }
    expect(redisPod.volumes).toContainEqual({ name: 'tls', secret: { secretName: `${RELEASE}-mcp-gateway-redis-tls` } });

    const address = named(manifests, 'Secret', 'redis-address').stringData!.address;
    expect(address).toMatch(/^sentinels:\/\//);
    for (const deployment of ['control-plane', 'sidecar']) {
      const pod = named(manifests, 'Deployment', deployment).spec.template.spec;
      expect(containerOf(named(manifests, 'Deployment', deployment), deployment).args).toContain('--redis-ca=/etc/mcpgw/redis-ca/ca.crt');
      expect(pod.volumes).toContainEqual({ name: 'redis-ca', secret: { secretName: `${RELEASE}-mcp-gateway-redis-tls` } });
    }

    // Off (the default): plain ports, no certificate, no CA.
    const plain = render('default').manifests;
    expect(plain.some((manifest) => manifest.metadata.name.endsWith('redis-tls'))).toBe(false);
    expect(named(plain, 'ConfigMap', 'redis-scripts').data!['start-sentinel.sh']).not.toContain('tls-port');
    expect(containerOf(named(plain, 'Deployment', 'sidecar'), 'sidecar').args.some((arg: string) => arg.startsWith('--redis-ca'))).toBe(false);
  });

  it('asks for the Redis TLS Secret when the internal certificates are yours, and uses the one given', () => {
    const yours = ['--set', 'inside.certificates.source=existingSecrets', '--set', 'inside.certificates.existingSecrets.envoy=e,inside.certificates.existingSecrets.sidecar=s,inside.certificates.existingSecrets.controlPlane=c'];
    expect(helm('template', RELEASE, CHART, ...valuesFile('sentinel-tls'), ...yours).stderr).toContain('set redis.sentinel.tls.existingSecret');
    const { manifests } = render('sentinel-tls', [...yours, '--set', 'redis.sentinel.tls.existingSecret=my-redis-tls']);
    expect(named(manifests, 'StatefulSet', 'redis').spec.template.spec.volumes).toContainEqual({ name: 'tls', secret: { secretName: 'my-redis-tls' } });
    expect(named(manifests, 'Deployment', 'sidecar').spec.template.spec.volumes).toContainEqual({ name: 'redis-ca', secret: { secretName: 'my-redis-tls' } });
  });

  it('takes the internal certificates and the Redis password from Secrets of yours, and asks for all three', () => {
    const { manifests } = render('default', [
      '--set', 'inside.certificates.source=existingSecrets',
      '--set', 'inside.certificates.existingSecrets.envoy=envoy-cert,inside.certificates.existingSecrets.sidecar=sidecar-cert,inside.certificates.existingSecrets.controlPlane=cp-cert',
      '--set', 'redis.auth.existingSecret=my-redis-password,inside.adminTokenSecret=my-admin-token',
    ]);
    expect(manifests.filter((manifest) => manifest.kind === 'Secret').map((manifest) => manifest.metadata.name)).toEqual([`${RELEASE}-mcp-gateway-redis-address`]);
    const volumes = (deployment: string) => Object.fromEntries((named(manifests, 'Deployment', deployment).spec.template.spec.volumes as any[]).filter((entry) => entry.secret).map((entry) => [entry.name, entry.secret.secretName]));
    expect(volumes('control-plane')).toEqual({ 'internal-tls': 'cp-cert', 'envoy-internal-tls': 'envoy-cert', 'admin-token': 'my-admin-token', 'redis-auth': 'my-redis-password' });
    expect(volumes('sidecar')).toEqual({ 'internal-tls': 'sidecar-cert', 'admin-token': 'my-admin-token', 'redis-auth': 'my-redis-password' });
    expect(volumes('envoy')).toEqual({ 'internal-tls': 'envoy-cert', 'admin-token': 'my-admin-token' });
    expect(helm('template', RELEASE, CHART, '--set', 'inside.certificates.source=existingSecrets').stderr).toContain('set inside.certificates.existingSecrets.');
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
    // One-shot services (what others wait to have completed) need no health check.
    const oneShot = new Set(Object.values(services).flatMap((service) => Object.entries(service.depends_on ?? {}).filter(([, { condition }]) => condition === 'service_completed_successfully').map(([name]) => name)));
    expect([...oneShot].sort()).toEqual(['envoy-bootstrap', 'inside']);
    for (const [name, service] of Object.entries(services)) if (!oneShot.has(name)) expect([name, Boolean(service.healthcheck)]).toEqual([name, true]);
    expect(services.sidecar.depends_on).toEqual({ redis: { condition: 'service_healthy' }, 'control-plane': { condition: 'service_healthy' } });
    expect(services.envoy.depends_on).toMatchObject({ 'envoy-bootstrap': { condition: 'service_completed_successfully' }, sidecar: { condition: 'service_healthy' } });
  });

  it("runs the ratelimit service on the socket the control plane's --ratelimit names, in a volume only Envoy shares, reading the file the control plane writes, with the dev stack's settings", () => {
    type Service = { environment?: Record<string, string>; volumes?: string[]; command?: string[]; build?: { context: string; dockerfile: string }; depends_on?: Record<string, unknown> };
    const services = parse(fs.readFileSync(composeFile, 'utf8')).services as Record<string, Service>;
    const rateLimit = services.ratelimit;
    expect(rateLimit).toBeDefined();
    const settings = rateLimit.environment!;
    /** A service's mount (volume, path in the container, read-only) under which `file` lies. */
    const mountOf = (service: Service, file: string) =>
      (service.volumes ?? []).map((entry) => entry.split(':')).map(([volume, target, mode]) => ({ volume, target, readOnly: mode === 'ro' })).find(({ target }) => file.startsWith(`${target}/`));

    const controlPlane = services['control-plane'].command!;
    const socket = optionValue(controlPlane, '--ratelimit')!.replace(/^unix:/, '');
    expect(settings.GRPC_UDS).toBe(socket);
    const socketMount = mountOf(services.envoy, socket);
    expect(mountOf(rateLimit, socket)).toEqual(socketMount);
    // Besides the two, only the one-shot `inside` (which gives the volume to uid 1000) mounts it.
    const withSocket = Object.entries(services).filter(([, service]) => (service.volumes ?? []).some((entry) => entry.startsWith(`${socketMount!.volume}:`))).map(([name]) => name);
    expect(withSocket.sort()).toEqual(['envoy', 'inside', 'ratelimit']);
    expect([settings.HOST, settings.DEBUG_HOST, settings.GRPC_HOST]).toEqual(['127.0.0.1', '127.0.0.1', undefined]);

    const configFile = optionValue(controlPlane, '--ratelimit-config')!;
    expect(path.dirname(configFile)).toBe(path.posix.join(settings.RUNTIME_ROOT, settings.RUNTIME_SUBDIRECTORY, 'config'));
    const written = mountOf(services['control-plane'], configFile);
    expect(mountOf(rateLimit, configFile)).toEqual({ ...written, readOnly: true });
    expect(rateLimit.depends_on).toMatchObject({ 'control-plane': { condition: 'service_healthy' } });
    expect(services.envoy.depends_on).toMatchObject({ ratelimit: { condition: 'service_healthy' } });

    expect(settings).toMatchObject(devstackRateLimitSettings());
    // The compose stack's Redis as the gateway's ACL user, the password from its file.
    expect(settings).toMatchObject({ REDIS_TYPE: 'SINGLE', REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: 'redis:6379', REDIS_PASSWORD_FILE: '/inside/dev/redis-password' });
    const dockerfile = fs.readFileSync(projectPath(rateLimit.build!.context, rateLimit.build!.dockerfile), 'utf8');
    expect(dockerfile).toContain(`FROM envoyproxy/ratelimit:${pinnedRateLimitCommit()} AS service`);
    expect(dockerfile).toContain(`REDIS_AUTH=\\"${DEV_REDIS_USER}:$(cat \\"$REDIS_PASSWORD_FILE\\")\\"`);
    // The registry it mounts has a shared limit, and it is one the control plane accepts.
    const registry = loadRegistryFile(projectPath('registry', 'compose.yaml'));
    expect(JSON.stringify(registry)).toContain('"shared":true');
  });

  it('passes only options mcpgw knows, to the commands as they are now', () => {
    const services = parse(fs.readFileSync(composeFile, 'utf8')).services as Record<string, { command?: string[]; entrypoint?: string[] }>;
    for (const name of ['control-plane', 'sidecar']) expect([name, unknownOptions(services[name].command!)]).toEqual([name, []]);
    for (const command of ['envoy-bootstrap', 'dev-inside']) {
      const script = Object.values(services).map((service) => (service.entrypoint ?? []).join(' ')).find((line) => line.includes(`mcpgw.js ${command} `))!;
      expect([command, unknownOptions([command, ...script.split(/\s+/).filter((word) => word.startsWith('--'))])]).toEqual([command, []]);
    }
  });
});
