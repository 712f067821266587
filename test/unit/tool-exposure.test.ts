import { CATALOG_DEFAULTS } from '../../control-plane/catalog/catalog-store';
import { ExposureSettings, exposeRouteTools, separatorProblem } from '../../control-plane/catalog/tool-exposure';

const settings = (overrides: Partial<ExposureSettings> = {}): ExposureSettings => ({ ...CATALOG_DEFAULTS, ...overrides });
const names = (result: ReturnType<typeof exposeRouteTools>) => result.tools.map((tool) => tool.name);

describe('exposed tool names', () => {
  it('joins backend and tool with the separator, ordered by backend name then the backend\'s own order', () => {
    const result = exposeRouteTools(
      [
        { backend: 'weather', toolNames: ['get_forecast', 'get_alerts'] },
        { backend: 'jobs', toolNames: ['run_job', 'echo'] },
      ],
      settings(),
    );
    expect(result.tools).toEqual([
      { name: 'jobs__run_job', backend: 'jobs', tool_index: 0 },
      { name: 'jobs__echo', backend: 'jobs', tool_index: 1 },
      { name: 'weather__get_forecast', backend: 'weather', tool_index: 0 },
      { name: 'weather__get_alerts', backend: 'weather', tool_index: 1 },
    ]);
    expect(result.findings).toEqual([]);
  });

  it('orders backends by code unit, whatever the locale would say', () => {
    // localeCompare puts "_" before digits; code-unit order puts it after.
    const result = exposeRouteTools([{ backend: 'a_b', toolNames: ['x'] }, { backend: 'a1', toolNames: ['x'] }], settings());
    expect(names(result)).toEqual(['a1__x', 'a_b__x']);
  });

  it('uses the configured separator', () => {
    const result = exposeRouteTools([{ backend: 'jobs', toolNames: ['echo'] }], settings({ toolNameSeparator: '-' }));
    expect(names(result)).toEqual(['jobs-echo']);
  });
});

describe('the MCP tool-name rule (1-128 of A-Za-z0-9_.-): always dropped', () => {
  it.each([
    ['a space', 'get forecast', /contains " "; MCP allows/],
    ['a slash and a colon', 'a/b:c', /contains "\/", ":"/],
    ['non-ASCII letters', 'météo', /contains "é"/],
    ['more than 128 characters', 'x'.repeat(124), /is 129 characters long; MCP allows 1-128/],
    ['an empty name', '', /empty name/],
  ])('drops a name with %s, under either policy', (_case, toolName, reason) => {
    for (const toolNamePolicy of ['warn', 'drop'] as const) {
      const result = exposeRouteTools([{ backend: 'svc', toolNames: [toolName, 'ok'] }], settings({ toolNamePolicy }));
      expect(names(result)).toEqual(['svc__ok']);
      expect(result.findings).toEqual([
        { tool: `svc__${toolName}`, backend: 'svc', rule: 'mcp-tool-name', action: 'dropped', reason: expect.stringMatching(reason) },
      ]);
    }
  });
});

describe('the client tool-name rule ^[a-zA-Z0-9_-]{1,64}$: policy warn or drop', () => {
  const backends = [{ backend: 'svc', toolNames: ['admin.tools.list', 'y'.repeat(60), 'fine'] }];

  it('keeps the tools under warn and reports each', () => {
    const result = exposeRouteTools(backends, settings({ toolNamePolicy: 'warn' }));
    expect(names(result)).toEqual(['svc__admin.tools.list', `svc__${'y'.repeat(60)}`, 'svc__fine']);
    expect(result.findings).toEqual([
      {
        tool: 'svc__admin.tools.list',
        backend: 'svc',
        rule: 'client-tool-name',
        action: 'kept',
        reason: 'contains "."; popular clients accept only ^[a-zA-Z0-9_-]{1,64}$',
      },
      {
        tool: `svc__${'y'.repeat(60)}`,
        backend: 'svc',
        rule: 'client-tool-name',
        action: 'kept',
        reason: 'is 65 characters long; popular clients accept only ^[a-zA-Z0-9_-]{1,64}$',
      },
    ]);
  });

  it('leaves them out under drop, the default, and reports each', () => {
    const result = exposeRouteTools(backends, settings());
    expect(names(result)).toEqual(['svc__fine']);
    expect(result.findings.map(({ tool, rule, action }) => [tool, rule, action])).toEqual([
      ['svc__admin.tools.list', 'client-tool-name', 'dropped'],
      [`svc__${'y'.repeat(60)}`, 'client-tool-name', 'dropped'],
    ]);
  });

  it('names both problems of a long dotted name', () => {
    const [finding] = exposeRouteTools([{ backend: 'svc', toolNames: [`a.${'b'.repeat(70)}`] }], settings()).findings;
    expect(finding.reason).toBe('is 77 characters long and contains "."; popular clients accept only ^[a-zA-Z0-9_-]{1,64}$');
  });

  it('counts the prefix: a 60-character tool name breaks the rule once prefixed', () => {
    expect(names(exposeRouteTools([{ backend: 'svc', toolNames: ['z'.repeat(59), 'z'.repeat(60)] }], settings()))).toEqual([
      `svc__${'z'.repeat(59)}`,
    ]);
  });
});

describe('duplicate names inside a route', () => {
  it('keeps the first and reports every repetition', () => {
    const result = exposeRouteTools([{ backend: 'svc', toolNames: ['echo', 'run', 'echo', 'echo'] }], settings());
    expect(result.tools).toEqual([
      { name: 'svc__echo', backend: 'svc', tool_index: 0 },
      { name: 'svc__run', backend: 'svc', tool_index: 1 },
    ]);
    expect(result.findings).toEqual([
      { tool: 'svc__echo', backend: 'svc', rule: 'duplicate-name', action: 'dropped', reason: 'backend "svc" lists "echo" more than once; the first is served' },
      { tool: 'svc__echo', backend: 'svc', rule: 'duplicate-name', action: 'dropped', reason: 'backend "svc" lists "echo" more than once; the first is served' },
    ]);
  });

  it('reports a repeated name once as a duplicate, not again under the client rule', () => {
    const result = exposeRouteTools([{ backend: 'svc', toolNames: ['a.b', 'a.b'] }], settings({ toolNamePolicy: 'warn' }));
    expect(names(result)).toEqual(['svc__a.b']);
    expect(result.findings.map(({ rule, action }) => [rule, action])).toEqual([
      ['client-tool-name', 'kept'],
      ['duplicate-name', 'dropped'],
    ]);
  });
});

describe('the per-route cap', () => {
  it('keeps the first N tools in the route order and reports the rest', () => {
    const result = exposeRouteTools(
      [
        { backend: 'beta', toolNames: ['b1', 'b2'] },
        { backend: 'alpha', toolNames: ['a1', 'a2'] },
      ],
      settings({ maxToolsPerRoute: 3 }),
    );
    expect(names(result)).toEqual(['alpha__a1', 'alpha__a2', 'beta__b1']);
    expect(result.findings).toEqual([
      { tool: 'beta__b2', backend: 'beta', rule: 'route-tool-cap', action: 'dropped', reason: 'the route already serves 3 tools (the per-route cap)' },
    ]);
  });

  it('counts only tools that are served: dropped names leave room for later ones', () => {
    const result = exposeRouteTools([{ backend: 'svc', toolNames: ['bad name', 'a', 'a', 'b'] }], settings({ maxToolsPerRoute: 2 }));
    expect(names(result)).toEqual(['svc__a', 'svc__b']);
    expect(result.findings.map((finding) => finding.rule)).toEqual(['mcp-tool-name', 'duplicate-name']);
  });
});

describe('separator setting', () => {
  it.each(['__', '.', '-', '--', '_.', 'X', '__x'])('accepts %j: it cannot occur inside a snake_case backend name', (separator) => {
    expect(separatorProblem(separator)).toBeUndefined();
  });

  it.each([
    ['_', /could occur inside a snake_case backend name/],
    ['x', /could occur inside a snake_case backend name/],
    ['a_b', /could occur inside a snake_case backend name/],
    ['', /1-8 characters/],
    ['/', /1-8 characters/],
    [':', /1-8 characters/],
    ['_________', /1-8 characters/],
  ])('rejects %j', (separator, problem) => {
    expect(separatorProblem(separator)).toMatch(problem);
  });
});
