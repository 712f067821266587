import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { checkRegistryFile, loadRegistryFile } from '../../control-plane/registry/static-file';
import { describeProblem, nearestKey, rejectedRouteCount, validateRegistry } from '../../control-plane/registry/validate';
import { projectPath } from '../../control-plane/shared/paths';

const service = (name: string, port = 9000, extra: Record<string, unknown> = {}) => ({
  name,
  url: `http://127.0.0.1:${port}/mcp`,
  ...extra,
});

describe('registry validation', () => {
  it('accepts a good registry and defaults each Tool Service id to its name', () => {
    const { registry, problems } = validateRegistry({ routes: [{ key: 'demo', toolServices: [service('weather')] }] });
    expect(problems).toEqual([]);
    expect(registry.routes[0].toolServices[0]).toEqual({ id: 'weather', name: 'weather', url: 'http://127.0.0.1:9000/mcp' });
  });

  it.each([
    ['a kebab-case backend name', { key: 'demo', toolServices: [service('my-tools')] }, 'routes[0].toolServices[0].name', /snake_case/],
    ['a relative URL', { key: 'demo', toolServices: [{ name: 'a', url: '/mcp' }] }, 'routes[0].toolServices[0].url', /absolute/],
    ['a non-HTTP URL', { key: 'demo', toolServices: [{ name: 'a', url: 'ftp://x/mcp' }] }, 'routes[0].toolServices[0].url', /http or https/],
    ['an upper-case route key', { key: 'Demo', toolServices: [service('a')] }, 'routes[0].key', /lowercase/],
    ['a route without Tool Services', { key: 'demo', toolServices: [] }, 'routes[0].toolServices', /at least one/],
    ['an unknown field', { key: 'demo', toolServices: [service('a', 1, { timeout: 5 })] }, 'routes[0].toolServices[0].timeout', /^unknown key$/],
    ['duplicate backend names', { key: 'demo', toolServices: [service('a', 1), service('a', 2)] }, 'routes[0].toolServices[1].name', /duplicate Tool Service name "a"/],
  ])('rejects %s, naming the route and the field', (_case, route, field, message) => {
    const { problems } = validateRegistry({ routes: [route] });
    expect(problems).toHaveLength(1);
    expect(problems[0].field).toBe(field);
    expect(problems[0].message).toMatch(message);
    expect(problems[0].route).toBe((route as { key: string }).key);
  });

  it('rejects only the bad route; the others stay', () => {
    const { registry, problems } = validateRegistry({
      routes: [
        { key: 'good', toolServices: [service('a')] },
        { key: 'bad', toolServices: [service('Bad')] },
        { key: 'also_good', toolServices: [service('b', 2)] },
      ],
    });
    expect(registry.routes.map((route) => route.key)).toEqual(['good', 'also_good']);
    expect(problems.map(describeProblem)).toEqual([
      'route "bad", routes[1].toolServices[0].name: must be snake_case (lowercase letters, digits and single underscores)',
    ]);
  });

  it('keeps the first of two routes with the same key', () => {
    const { registry, problems } = validateRegistry({
      routes: [
        { key: 'demo', toolServices: [service('a')] },
        { key: 'demo', toolServices: [service('b', 2)] },
      ],
    });
    expect(registry.routes).toHaveLength(1);
    expect(problems).toEqual([{ route: 'demo', field: 'routes[1].key', path: ['routes', 1, 'key'], message: 'duplicate route key "demo"' }]);
  });

  it('rejects one Tool Service id registered with two URLs', () => {
    const { problems } = validateRegistry({
      routes: [
        { key: 'one', toolServices: [service('a', 1, { id: 'svc' })] },
        { key: 'two', toolServices: [service('b', 2, { id: 'svc' })] },
      ],
    });
    expect(problems[0]).toMatchObject({ route: 'two', field: 'routes[1].toolServices[0]' });
    expect(problems[0].message).toMatch(/already registered with another URL, transport, credentials, fallback or quotas \(http:\/\/127.0.0.1:1\/mcp\)/);
  });

  it('rejects one Tool Service id that opts in to the pooled-call lane on one route and not on another', () => {
    const url = 'http://127.0.0.1:1/mcp';
    const { problems } = validateRegistry({
      routes: [
        { key: 'one', toolServices: [{ id: 'svc', name: 'a', url, transport: { resumeCutPooledCalls: true } }] },
        { key: 'two', toolServices: [{ id: 'svc', name: 'b', url }] },
      ],
    });
    expect(problems[0]).toMatchObject({ route: 'two', field: 'routes[1].toolServices[0]' });
    expect(problems[0].message).toMatch(/already registered with another URL, transport/);
  });

  it('rejects a pooled-call lane setting that is not a boolean', () => {
    const { problems } = validateRegistry({ routes: [{ key: 'one', toolServices: [{ name: 'a', url: 'http://127.0.0.1:1/mcp', transport: { resumeCutPooledCalls: 'yes' } }] }] });
    expect(problems.map((problem) => problem.field)).toEqual(['routes[0].toolServices[0].transport.resumeCutPooledCalls']);
  });

  it('rejects a document that is not a registry, suggesting the key an unknown one most likely meant', () => {
    expect(validateRegistry({ route: [] }).problems.map(describeProblem)).toEqual([
      'routes: Invalid input: expected array, received undefined',
      'route: unknown key (did you mean "routes"?)',
    ]);
  });

  it('suggests a known key only when one is a few edits away', () => {
    expect(nearestKey('toolServies', ['key', 'toolServices'])).toBe('toolServices');
    expect(nearestKey('ToolServices', ['key', 'toolServices'])).toBe('toolServices');
    expect(nearestKey('healthcheck', ['connectTimeoutMs', 'healthCheckPath'])).toBeUndefined();
    expect(nearestKey('x', ['key', 'toolServices'])).toBeUndefined();
  });
});

describe('rejected route count', () => {
  it('counts each rejected route once, however many problems it has, and routes without a readable key by their entry', () => {
    const { problems } = validateRegistry({
      routes: [
        { key: 'good', toolServices: [service('a')] },
        { key: 'twice-wrong', toolServices: [{ name: 'Bad', url: '/relative' }] },
        { toolServices: [service('b')] },
        { key: 7, toolServices: [] },
        { key: 'good', toolServices: [service('c', 2)] },
      ],
    });
    expect(problems.length).toBeGreaterThan(4);
    // twice-wrong, entries 2 and 3, and the second "good"
    expect(rejectedRouteCount(problems)).toBe(4);
    expect(rejectedRouteCount([])).toBe(0);
  });
});

describe('static registry file', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-registry-'));
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('lists every problem of the file at once, each at its line and column', () => {
    const file = write('bad.yaml', 'routes:\n  - key: demo\n    toolServices:\n      - name: Bad\n        url: nope\n');
    expect(() => loadRegistryFile(file)).toThrow(
      /bad\.yaml:4:15: route "demo", routes\[0\]\.toolServices\[0\]\.name: must be snake_case[\s\S]*bad\.yaml:5:14: route "demo", routes\[0\]\.toolServices\[0\]\.url: must be an absolute/,
    );
  });

  it('places unknown keys at the key, missing fields at the object lacking them, and reads JSON the same way', () => {
    const yaml = write('where.yaml', 'routes:\n  - key: demo\n    toolServies:\n      - name: w\n  - key: two\n    toolServices:\n      - url: http://127.0.0.1:1/mcp\n');
    expect(checkRegistryFile(yaml).problems).toEqual([
      { line: 2, column: 5, message: 'route "demo", routes[0].toolServices: Invalid input: expected array, received undefined' },
      { line: 3, column: 5, message: 'route "demo", routes[0].toolServies: unknown key (did you mean "toolServices"?)' },
      { line: 7, column: 9, message: 'route "two", routes[1].toolServices[0].name: Invalid input: expected string, received undefined' },
    ]);
    const json = write('where.json', '{\n  "routes": [\n    { "key": "demo", "toolServices": [ { "name": "w", "url": 5 } ] }\n  ]\n}\n');
    expect(checkRegistryFile(json).problems).toEqual([
      { line: 3, column: 62, message: 'route "demo", routes[0].toolServices[0].url: Invalid input: expected string, received number' },
    ]);
  });

  it('reports YAML syntax errors and missing files', () => {
    expect(() => loadRegistryFile(write('syntax.yaml', 'routes: [\n'))).toThrow(/syntax\.yaml:2:1: not valid YAML/);
    expect(() => loadRegistryFile(path.join(dir, 'missing.yaml'))).toThrow(/cannot read registry file/);
  });

  it('`mcpgw validate` exits 1 with the problems, 0 for a good file', () => {
    const cli = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
    const bad = spawnSync(process.execPath, [cli, 'validate', write('cli-bad.yaml', 'routes:\n  - key: x\n    toolServices: []\n')], {
      encoding: 'utf8',
    });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('route "x", routes[0].toolServices: a route needs at least one Tool Service');
    const good = spawnSync(process.execPath, [cli, 'validate', projectPath('registry', 'default.yaml')], { encoding: 'utf8' });
    expect(good.status).toBe(0);
    expect(good.stdout).toContain('valid (2 routes, 3 Tool Service mappings)');
  });

  it('the control plane refuses to start on a bad registry file, logging the field and its line', () => {
    const cli = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');
    const file = write('cp-bad.yaml', 'routes:\n  - key: demo\n    toolServices:\n      - name: ok\n        url: http://127.0.0.1:1/mcp\n        tls: yes\n');
    const result = spawnSync(
      process.execPath,
      [cli, 'control-plane', '--registry', file, '--grpc', '127.0.0.1:3', '--admin', '127.0.0.1:4', '--listener', '127.0.0.1:1', '--sidecar', '127.0.0.1:2'],
      { encoding: 'utf8', timeout: 20000 },
    );
    expect(result.status).toBe(1);
    const logged = result.stderr.trim().split('\n').map((line) => JSON.parse(line));
    expect(logged).toEqual([expect.objectContaining({ level: 'error', component: 'control-plane', message: 'could not start' })]);
    expect(logged[0].error).toMatch(/cp-bad\.yaml:6:9: route "demo", routes\[0\]\.toolServices\[0\]\.tls: unknown key \(did you mean "transport\.tls"\?\)/);
  });
});

describe('Tool Service credentials in the registry', () => {
  // Per-caller credentials need the route's auth: every route here has one, but the test that says so.
  const AUTH = { issuer: 'https://idp.example/realms/agents' };
  const withCredentials = (credentials: unknown, extra: Record<string, unknown> = {}, auth: unknown = AUTH) => ({
    routes: [{ key: 'demo', ...(auth ? { auth } : {}), toolServices: [service('weather', 9000, { credentials, ...extra })] }],
  });
  const problemsOf = (document: unknown, allowTokenPassthrough = false) =>
    validateRegistry(document, { allowTokenPassthrough }).problems.map((problem) => `${problem.field}: ${problem.message}`);

  it('accepts each mode with what it needs', () => {
    for (const credentials of [
      { mode: 'none' },
      { mode: 'serviceAccount', tokenFile: '/var/run/secrets/weather/token' },
      { mode: 'tokenExchange', audience: 'tool-weather', scopes: ['weather:read'], resource: 'https://weather.example/mcp' },
    ]) {
      expect(problemsOf(withCredentials(credentials))).toEqual([]);
    }
    expect(problemsOf(withCredentials({ mode: 'passthrough', audience: 'https://gw/mcp/demo' }), true)).toEqual([]);
  });

  it.each([
    ['an unknown mode', { mode: 'oauth' }, 'routes[0].toolServices[0].credentials.mode: must be one of none, serviceAccount, tokenExchange, passthrough'],
    ['a service account without its file', { mode: 'serviceAccount' }, 'routes[0].toolServices[0].credentials.tokenFile: Invalid input: expected string, received undefined'],
    ['a relative token file', { mode: 'serviceAccount', tokenFile: 'token' }, 'routes[0].toolServices[0].credentials.tokenFile: must be an absolute path to a file on the Envoy host (e.g. a mounted secret)'],
    ['a scope with a space', { mode: 'tokenExchange', audience: 'a', scopes: ['a b'] }, 'routes[0].toolServices[0].credentials.scopes[0]: must be one OAuth scope (printable ASCII, no spaces, quotes or backslashes)'],
    ['a misspelt key', { mode: 'serviceAccount', tokenfile: '/t' }, 'routes[0].toolServices[0].credentials.tokenfile: unknown key (did you mean "tokenFile"?)'],
  ])('rejects %s, naming the field', (_case, credentials, problem) => {
    expect(problemsOf(withCredentials(credentials))).toContain(problem);
  });

  it('refuses passthrough unless the gateway allows it', () => {
    expect(problemsOf(withCredentials({ mode: 'passthrough', audience: 'x' }))).toEqual([
      "routes[0].toolServices[0].credentials.mode: passthrough (the caller's own token to the backend) is off on this gateway: start the control plane with --allow-token-passthrough, or use tokenExchange",
    ]);
  });

  it('refuses credentials made from the caller\'s token on a route that validates no token', () => {
    expect(problemsOf(withCredentials({ mode: 'tokenExchange', audience: 'tool-weather' }, {}, null))).toEqual([
      "routes[0].toolServices[0].credentials.mode: tokenExchange makes the backend's credentials from the caller's token, which the gateway must validate first: give the route an auth (or the document a default auth)",
    ]);
    expect(problemsOf(withCredentials({ mode: 'passthrough', audience: 'x' }, {}, null), true)).toHaveLength(1);
    expect(problemsOf(withCredentials({ mode: 'serviceAccount', tokenFile: '/t' }, {}, null))).toEqual([]);
  });

  it('wants a client certificate and its key together', () => {
    expect(problemsOf(withCredentials({ mode: 'none' }, { url: 'https://w.example/mcp', transport: { tls: { clientCertFile: '/c/tls.crt' } } }))).toEqual([
      'routes[0].toolServices[0].transport.tls.clientKeyFile: a client certificate needs both clientCertFile and clientKeyFile',
    ]);
  });

  it('keeps one credential per Tool Service id across routes', () => {
    const { problems } = validateRegistry({
      routes: [
        { key: 'one', toolServices: [service('w', 1, { id: 'svc' })] },
        { key: 'two', toolServices: [service('w', 1, { id: 'svc', credentials: { mode: 'serviceAccount', tokenFile: '/t' } })] },
      ],
    });
    expect(problems.map((problem) => problem.route)).toEqual(['two']);
  });

  it('says where the old transport.catalogBearerTokenFile went', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-moved-')), 'old.yaml');
    fs.writeFileSync(file, 'routes:\n  - key: demo\n    toolServices:\n      - name: w\n        url: http://127.0.0.1:1/mcp\n        transport:\n          catalogBearerTokenFile: /t\n');
    expect(checkRegistryFile(file).problems).toEqual([
      {
        line: 7,
        column: 11,
        message:
          "route \"demo\", routes[0].toolServices[0].transport.catalogBearerTokenFile: moved: use credentials: { mode: serviceAccount, tokenFile: <file> } on the Tool Service (the token then authenticates its calls and the sidecar's requests too, injected by Envoy)",
      },
    ]);
  });
});
