import { allows, capabilitiesFor, offeredBy } from '../../control-plane/catalog/client-needs';
import { exposeResourceUri, resourceUriProblem, schemeNameOf, splitResourceUri } from '../../control-plane/catalog/resource-naming';
import { exposeRoutePrompts, exposeRouteResources } from '../../control-plane/catalog/surface-exposure';

/**
 * How a route names its backends' resources and prompts (docs/adr/0015-federated-resources-and-prompts.md),
 * and what its tools and prompts need of clients (client-needs.ts).
 */
describe('resource URIs of a route', () => {
  it.each<[string, string, string]>([
    ['a hierarchical URI', 'file:///srv/README.md', 'docs+file:///srv/README.md'],
    ['an opaque URI', 'memo:insights', 'docs+memo:insights'],
    ['a scheme with + of its own', 'git+ssh://host/repo', 'docs+git+ssh://host/repo'],
    ['a query, a fragment and an IPv6 host', 'https://[::1]:8443/a?b=c#d', 'docs+https://[::1]:8443/a?b=c#d'],
    ['a URI template', 'demo://resource/dynamic/text/{resourceId}', 'docs+demo://resource/dynamic/text/{resourceId}'],
    ['an MCP Apps ui:// URI, which keeps its scheme', 'ui://dashboard/index.html', 'ui://docs+dashboard/index.html'],
  ])('names %s reversibly', (_case, own, exposed) => {
    expect(exposeResourceUri('docs', own)).toBe(exposed);
    expect(splitResourceUri(exposed)).toEqual({ schemeName: 'docs', own });
  });

  it('keeps a valid absolute URI valid', () => {
    for (const own of ['file:///a', 'https://h/p?q#f', 'memo:x', 'urn:isbn:0451450523']) {
      expect(URL.canParse(exposeResourceUri('my_docs', own)!)).toBe(true);
    }
  });

  it('writes a snake_case backend name as a scheme name: "_" becomes "-", which no backend name has', () => {
    expect(schemeNameOf('extra_docs')).toBe('extra-docs');
    expect(exposeResourceUri('extra_docs', 'file:///a')).toBe('extra-docs+file:///a');
  });

  it('names nothing that is not an absolute URI', () => {
    expect(exposeResourceUri('docs', '/relative/path')).toBeUndefined();
    expect(exposeResourceUri('docs', '')).toBeUndefined();
  });

  it('says what is wrong with a URI the route cannot place', () => {
    const backends = new Map([['docs', {}]]);
    expect(resourceUriProblem('file:///a', 'r', backends)).toMatch(/has no backend prefix/);
    expect(resourceUriProblem('other+file:///a', 'r', backends)).toBe('unknown backend "other" on route "r" (resource URI "other+file:///a")');
    expect(resourceUriProblem('docs+file:///a', 'r', backends)).toBeUndefined();
  });

  it('keeps two backends’ identical URIs apart, drops a second copy and a relative URI with a report', () => {
    const { resources, findings } = exposeRouteResources(
      [
        { backend: 'zeta', items: ['file:///a'] },
        { backend: 'alpha', items: ['file:///a', 'file:///a', 'relative'] },
      ],
      'resource',
    );
    expect(resources).toEqual([
      { uri: 'alpha+file:///a', backend: 'alpha', index: 0 },
      { uri: 'zeta+file:///a', backend: 'zeta', index: 0 },
    ]);
    expect(findings.map((finding) => [finding.item, finding.rule])).toEqual([
      ['alpha+file:///a', 'duplicate-uri'],
      ['relative', 'relative-uri'],
    ]);
  });
});

describe('prompt names of a route', () => {
  it('prefixes each backend’s prompts like its tools, in backend order, and reports what it leaves out', () => {
    const { prompts, findings } = exposeRoutePrompts(
      [
        { backend: 'b', items: ['greet', 'greet', ''] },
        { backend: 'a', items: ['greet'] },
      ],
      '__',
    );
    expect(prompts).toEqual([
      { name: 'a__greet', backend: 'a', index: 0 },
      { name: 'b__greet', backend: 'b', index: 0 },
    ]);
    expect(findings.map((finding) => finding.rule)).toEqual(['duplicate-name', 'empty-name']);
  });
});

describe('what a client offers, and what a tool needs', () => {
  it.each<[string, Record<string, unknown>, string[]]>([
    ['nothing', {}, []],
    ['sampling and roots', { sampling: {}, roots: { listChanged: true } }, ['sampling', 'roots']],
    ['elicitation without modes (form, as in 2025-06-18)', { elicitation: {} }, ['elicitation.form']],
    ['URL elicitation only', { elicitation: { url: {} } }, ['elicitation.url']],
    ['both elicitation modes', { elicitation: { form: {}, url: {} } }, ['elicitation.form', 'elicitation.url']],
  ])('a client declaring %s offers those', (_case, capabilities, offered) => {
    expect([...offeredBy(capabilities)].sort()).toEqual(offered.sort());
  });

  it('declares exactly what it is asked to offer', () => {
    expect(offeredBy(capabilitiesFor(['sampling', 'elicitation.url']))).toEqual(new Set(['sampling', 'elicitation.url']));
    expect(capabilitiesFor(['sampling', 'roots', 'elicitation.form', 'elicitation.url'])).toEqual({ sampling: {}, roots: {}, elicitation: { form: {}, url: {} } });
  });

  it('allows a tool when the client offers every capability of one of its alternatives', () => {
    const sampler = offeredBy({ sampling: {} });
    expect(allows(sampler, [])).toBe(true);
    expect(allows(sampler, ['sampling'])).toBe(true);
    expect(allows(sampler, ['elicitation.form', 'elicitation.url'])).toBe(false);
    expect(allows(offeredBy({ elicitation: { url: {} } }), ['elicitation.form', 'elicitation.url'])).toBe(true);
    expect(allows(sampler, ['sampling+roots'])).toBe(false);
    expect(allows(offeredBy({ sampling: {}, roots: {} }), ['sampling+roots'])).toBe(true);
  });
});
