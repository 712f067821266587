import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CallLaneBackend, ROUTE_CONTEXT_DEFAULTS, callRouteFilters, callScriptFilter, surfaceRouteFilters } from '../../control-plane/xds/translate/call-lane';

/**
 * What every call route shares reaches Envoy once, in the call script's prelude; a route's context
 * carries only what differs (docs/adr/0008-data-path-lanes.md, Envoy memory).
 */
const backend = (extra: Partial<CallLaneBackend> = {}): CallLaneBackend => ({
  era: 'session',
  sessionful: true,
  tools: new Map([['get', 'r']]),
  denied: new Map(),
  approvals: new Map(),
  prompts: new Set(),
  serves: { prompts: false, resources: false, subscriptions: false, completions: false },
  fallbackText: '',
  ...extra,
});

type LuaPerRoute = { filter_context: Record<string, unknown> };
const callContext = (rules: CallLaneBackend, credentials: 'none' | 'tokenExchange' = 'none', separator = '__', pooledCallLane = false) =>
  (callRouteFilters('demo', 'weather_eu', separator, { backends: new Map([['weather_eu', rules]]), accessRules: [] }, undefined, {
    annotate: true,
    auditArguments: false,
    credentials,
    pooledCallLane,
  })['envoy.filters.http.lua'] as unknown as LuaPerRoute).filter_context;

describe("a call route's context", () => {
  it('carries none of the gateway constants or defaults', () => {
    expect(callContext(backend())).toEqual({ route: 'demo', backend: 'weather_eu', scheme: 'weather-eu', 'tool:get': 'r', digest: expect.any(String) });
  });

  it('carries each value that differs from the defaults', () => {
    expect(callContext(backend({ era: 'modern', sessionful: false, fallbackText: 'later' }), 'tokenExchange', '.')).toEqual({
      route: 'demo',
      backend: 'weather_eu',
      scheme: 'weather-eu',
      separator: '.',
      era: 'modern',
      sessionful: false,
      fallback: 'later',
      per_caller_credentials: true,
      credential_mode: 'tokenExchange',
      'tool:get': 'r',
      digest: expect.any(String),
    });
  });

  it('says it takes the pooled-call lane only when its Tool Service opted in (transport.resumeCutPooledCalls)', () => {
    expect(callContext(backend(), 'none', '__', true).pooled_call_lane).toBe(true);
    expect(callContext(backend())).not.toHaveProperty('pooled_call_lane');
  });

  it("of a prompt or resource route says it does not annotate answers (the default is a call route's)", () => {
    const filters = surfaceRouteFilters('demo', 'weather_eu', '__', backend(), undefined, 'none')['envoy.filters.http.lua'] as unknown as LuaPerRoute;
    expect(filters.filter_context.annotate).toBe(false);
  });
});

describe("the call script's route defaults, on LuaJIT", () => {
  const source = (callScriptFilter(false) as unknown as { typed_config: { value: { default_source_code: { inline_string: string } } } }).typed_config.value
    .default_source_code.inline_string;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'route-defaults-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  /** The value route_context gives for `key` when the route's own context is `own` (a Lua table literal). */
  const lookUp = (own: string, key: string) => {
    const script = path.join(dir, 'call-lane.lua');
    fs.writeFileSync(script, source);
    const probe = `dofile(${JSON.stringify(script)})
local own = ${own}
local h = { filterContext = function() return { get = function(_, key) return own[key] end } end }
print(tostring(mcpgw_call_lane.route_context(h):get(${JSON.stringify(key)})))`;
    const run = spawnSync('luajit', ['-e', probe], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    return run.stdout.trim();
  };

  it('keeps the line numbers of the file: the prelude shares its first line', () => {
    expect(source.split('\n').length).toBe(fs.readFileSync(path.join(__dirname, '../../control-plane/xds/lua/call-lane.lua'), 'utf8').split('\n').length);
  });

  it.each(Object.entries(ROUTE_CONTEXT_DEFAULTS))('gives the default of %s when the route leaves it out', (key, value) => {
    expect(lookUp('{}', key)).toBe(String(value));
  });

  it("gives the route's own value over the default, false included", () => {
    expect(lookUp('{ sessionful = false }', 'sessionful')).toBe('false');
    expect(lookUp('{ separator = "." }', 'separator')).toBe('.');
  });

  it('gives nil for a key that is neither', () => {
    expect(lookUp('{}', 'tool:missing')).toBe('nil');
  });
});
