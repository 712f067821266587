import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { projectPath } from '../../control-plane/shared/paths';
import { certificateIdentity } from '../../control-plane/shared/internal-tls';
import { testDir } from '../support/gateway-fixture';

/** The `mcpgw` command as a person types it: help, version, usage errors, validate and diff. */

const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
const FIXTURES = projectPath('test', 'fixtures', 'registries');

function mcpgw(...args: string[]) {
  const result = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 20000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('mcpgw help and usage', () => {
  it('--help and -h list every command; --version prints the package version', () => {
    for (const flag of ['--help', '-h']) {
      const help = mcpgw(flag);
      expect(help.code).toBe(0);
      for (const command of ['up', 'control-plane', 'sidecar', 'validate', 'render', 'diff', 'envoy-bootstrap', 'dev-inside', 'ratelimit-config-sync']) expect(help.stdout).toContain(`  ${command} `);
    }
    const { version } = JSON.parse(fs.readFileSync(projectPath('package.json'), 'utf8')) as { version: string };
    expect(mcpgw('--version')).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it('has help per command, with each option, its default and its environment variable', () => {
    const helpOf = (...args: string[]) => {
      const help = mcpgw(...args);
      expect(help.code).toBe(0);
      return help.stdout.replace(/\s+/g, ' ');
    };
    const up = helpOf('up', '--help');
    expect(up).toContain('--listener-port <port> the port agents connect to (default: 10000, env: MCPGW_PORT)');
    expect(up).toContain('--registry <file> the registry (routes → Tool Services), YAML or JSON (default: registry/default.yaml, env: MCPGW_REGISTRY)');
    expect(up).toMatch(/--log-level <level> .* default: "info", env: MCPGW_LOG_LEVEL\)/);
    expect(helpOf('sidecar', '-h')).toContain('--drain-timeout-ms <ms> on SIGTERM, how long requests in flight keep the sidecar (default: 10000)');
    const controlPlane = helpOf('control-plane', '--help');
    expect(controlPlane).toContain('--portal-token <token> bearer token for the Portal (env: MCPGW_PORTAL_TOKEN)');
    // Tracing (docs/observability.md#traces): off unless an endpoint is given.
    expect(controlPlane).toMatch(/--otlp-endpoint <url> .* tracing is off without it \(env: MCPGW_OTLP_ENDPOINT\)/);
    expect(controlPlane).toMatch(/--trace-sampling <ratio> .* \(default: 1, env: MCPGW_TRACE_SAMPLING\)/);
    expect(controlPlane).toMatch(/--envoy-trace-service-name <name> .* \(default: "mcpgw-envoy"\)/);
    expect(helpOf('sidecar', '--help')).toMatch(/--trace-service-name <name> .* \(default: "mcpgw-sidecar"\)/);
  });

  it('lists the bounds and Redis timeouts (docs/hardening.md) with their defaults', () => {
    const redisTimeouts = [['--redis-connect-timeout-ms <ms>', 2000], ['--redis-command-timeout-ms <ms>', 500]] as const;
    const defaults = {
      'control-plane': [
        ['--tool-list-max-bytes <bytes>', 10485760],
        ['--tool-list-max-tools <n>', 5000],
        ['--catalog-retry-min-ms <ms>', 1000],
        ['--catalog-retry-max-ms <ms>', 10000],
        ['--registry-file-settle-ms <ms>', 500],
        ...redisTimeouts,
      ],
      sidecar: [['--session-client-fields-max-bytes <bytes>', 16384], ...redisTimeouts],
    };
    for (const [command, options] of Object.entries(defaults)) {
      const help = mcpgw(command, '--help').stdout.replace(/\s+/g, ' ');
      // The option's own description (up to the next option) ends with its default.
      for (const [option, fallback] of options) expect(help).toMatch(new RegExp(`${option} (?:(?! --).)*\\(default: ${fallback}\\)`));
    }
  });

  it.each([
    [['up', '--listner-port', '1'], "mcpgw up: unknown option '--listner-port' (Did you mean --listener-port?) (see 'mcpgw up --help')"],
    [['sidecar', '--listen', 'nohost', '--control-plane', '127.0.0.1:1'], "mcpgw sidecar: option '--listen <host:port>' argument 'nohost' is invalid. must be HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:18000 (see 'mcpgw sidecar --help')"],
    [['control-plane', '--grpc', '127.0.0.1:1'], "mcpgw control-plane: required option '--listener <host:port>' not specified (see 'mcpgw control-plane --help')"],
    [['envoy-bootstrap', '--node-id', 'n', '--admin', '127.0.0.1:1', '--xds', '127.0.0.1:2', '--ads', 'REST'], "mcpgw envoy-bootstrap: option '--ads <type>' argument 'REST' is invalid. Allowed choices are GRPC, DELTA_GRPC. (see 'mcpgw envoy-bootstrap --help')"],
    [['sidecar', '--listen', '127.0.0.1:1', '--control-plane', '127.0.0.1:2', '--redis-command-timeout-ms', '0'], "mcpgw sidecar: option '--redis-command-timeout-ms <ms>' argument '0' is invalid. must be a whole number above 0 (see 'mcpgw sidecar --help')"],
    [['control-plane', '--listener', '127.0.0.1:1', '--ratelimit', 'unix:run/ratelimit.sock'], "mcpgw control-plane: option '--ratelimit <host:port|unix:path>' argument 'unix:run/ratelimit.sock' is invalid. must be HOST:PORT or unix:<absolute path of a socket>, e.g. 127.0.0.1:8081 or unix:/run/mcpgw/ratelimit.sock (see 'mcpgw control-plane --help')"],
    [['control-plane', '--listener', '127.0.0.1:1', '--ratelimit', 'ratelimit'], "mcpgw control-plane: option '--ratelimit <host:port|unix:path>' argument 'ratelimit' is invalid. must be HOST:PORT or unix:<absolute path of a socket>, e.g. 127.0.0.1:8081 or unix:/run/mcpgw/ratelimit.sock (see 'mcpgw control-plane --help')"],
    [['lift-off'], "mcpgw: unknown command 'lift-off' (see 'mcpgw --help')"],
    [['up', '--trace-sampling', '5'], "mcpgw up: option '--trace-sampling <ratio>' argument '5' is invalid. must be a number from 0 to 1, e.g. 0.01 for 1 % (see 'mcpgw up --help')"],
    [['sidecar', '--listen', '127.0.0.1:1', '--control-plane', '127.0.0.1:2', '--otlp-endpoint', 'grpc://127.0.0.1:4317'], "mcpgw sidecar: option '--otlp-endpoint <url>' argument 'grpc://127.0.0.1:4317' is invalid. must be an http:// or https:// URL (OTLP over HTTP) (see 'mcpgw sidecar --help')"],
  ])('answers a usage error (%j) with one line naming it, exit 2', (args, line) => {
    expect(mcpgw(...args)).toEqual({ code: 2, stdout: '', stderr: `${line}\n` });
  });
});

describe('mcpgw validate and diff', () => {
  const dir = testDir('cli');
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };

  it('validate names the line and column of every problem and the key an unknown one most likely meant', () => {
    const file = write(
      'typos.yaml',
      ['routes:', '  - key: demo', '    toolServies:', '      - name: weather', '  - key: other', '    toolServices:', '      - name: jobs', '        url: 42', ''].join('\n'),
    );
    expect(mcpgw('validate', file)).toEqual({
      code: 1,
      stdout: '',
      stderr: [
        `${file}:2:5: route "demo", routes[0].toolServices: Invalid input: expected array, received undefined`,
        `${file}:3:5: route "demo", routes[0].toolServies: unknown key (did you mean "toolServices"?)`,
        `${file}:8:14: route "other", routes[1].toolServices[0].url: Invalid input: expected string, received number`,
        `${file}: 3 problems`,
        '',
      ].join('\n'),
    });
  });

  it('diff exits 0 when the same, 1 when different, 2 on an invalid or unreadable input, with the reason on stderr', () => {
    const twoRoutes = path.join(FIXTURES, 'two-routes.yaml');
    expect(mcpgw('diff', twoRoutes, projectPath('registry', 'default.yaml'))).toMatchObject({ code: 0, stdout: 'no differences\n' });
    expect(mcpgw('diff', twoRoutes, path.join(FIXTURES, 'tls-and-dns.yaml')).code).toBe(1);

    const invalid = write('invalid.yaml', 'routes:\n  - key: Demo\n    toolServices: []\n');
    const troubled = mcpgw('diff', twoRoutes, invalid);
    expect(troubled.code).toBe(2);
    expect(troubled.stdout).toBe('');
    expect(troubled.stderr).toContain(`${invalid}:2:10: route "Demo", routes[0].key: must be 1-63 characters`);

    const missing = mcpgw('diff', path.join(dir, 'missing.yaml'), twoRoutes);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^mcpgw diff: cannot read registry file .*missing\.yaml: ENOENT/);
  });
});

describe('mcpgw dev-inside', () => {
  it('writes one certificate per part under one CA, an admin token and a Redis ACL user whose password is in its file', () => {
    const dir = path.join(testDir('cli-dev-inside'), 'inside');
    const result = mcpgw('dev-inside', '--dir', dir, '--days', '2', '--redis-prefix', 'gw:');
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout.trim().split('\n').map((file) => path.relative(dir, file))).toEqual(['envoy-envoy', 'sidecar-sidecar', 'control-plane-control-plane', 'admin-token', 'redis-password', 'redis.conf']);
    for (const role of ['envoy', 'sidecar', 'control-plane'] as const) {
      expect(certificateIdentity(path.join(dir, `${role}-${role}`), role)).toEqual({ role, name: role });
      expect(fs.readFileSync(path.join(dir, `${role}-${role}`, 'ca.crt'), 'utf8')).toBe(fs.readFileSync(path.join(dir, 'envoy-envoy', 'ca.crt'), 'utf8'));
    }
    expect(fs.readFileSync(path.join(dir, 'admin-token'), 'utf8').trim().length).toBeGreaterThanOrEqual(16);
    const password = fs.readFileSync(path.join(dir, 'redis-password'), 'utf8').trim();
    expect(fs.readFileSync(path.join(dir, 'redis.conf'), 'utf8')).toBe(`user default off\nuser mcpgw on >${password} ~gw:* &gw:* +@all -@dangerous +info\n`);
    expect(fs.statSync(path.join(dir, 'redis.conf')).mode & 0o077).toBe(0);
  });
});
