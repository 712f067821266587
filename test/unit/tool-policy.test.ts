import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { CATALOG_DEFAULTS, CatalogStore } from '../../control-plane/catalog/catalog-store';
import { policyDenial } from '../../control-plane/catalog/tool-policy';
import { buildGatewayIR } from '../../control-plane/ir/gateway-ir';
import { ToolPolicy } from '../../control-plane/registry/model';
import { describeProblem, validateRegistry } from '../../control-plane/registry/validate';
import { quietLogger } from '../support/quiet-logger';

const tool = (name: string, readOnly?: boolean): Tool => ({
  name,
  inputSchema: { type: 'object' },
  ...(readOnly !== undefined && { annotations: { readOnlyHint: readOnly } }),
});

describe('tool policy of a route', () => {
  it.each<[string, ToolPolicy | undefined, Tool, string | undefined]>([
    ['no policy serves everything', undefined, tool('drop_table'), undefined],
    ['a deny pattern', { denyTools: ['drop_*'] }, tool('drop_table'), 'denyTools "drop_*"'],
    ['deny wins over allow', { allowTools: ['*'], denyTools: ['drop_table'] }, tool('drop_table'), 'denyTools "drop_table"'],
    ['outside the allow list', { allowTools: ['get_*', 'list_*'] }, tool('run_job'), 'not in allowTools ["get_*","list_*"]'],
    ['inside the allow list', { allowTools: ['get_*', 'list_*'] }, tool('list_jobs'), undefined],
    ['a pattern is literal apart from *', { allowTools: ['get.*'] }, tool('getx'), 'not in allowTools ["get.*"]'],
    ['read-only route, unannotated tool', { readOnly: true }, tool('run_job'), 'readOnly: the tool is not annotated readOnlyHint: true'],
    ['read-only route, tool that says it writes', { readOnly: true }, tool('run_job', false), 'readOnly: the tool is not annotated readOnlyHint: true'],
    ['read-only route, read-only tool', { readOnly: true }, tool('get_job', true), undefined],
  ])('%s', (_case, policy, candidate, denial) => {
    expect(policyDenial(policy, candidate)).toBe(denial);
  });

  it('keeps denied tools out of the served list, and names them with their rule for the sidecars', async () => {
    const url = 'http://127.0.0.1:1/jobs';
    const ir = buildGatewayIR({
      routes: [
        { key: 'ops', toolServices: [{ id: 'jobs', name: 'jobs', url, policy: { denyTools: ['delete_*'] } }] },
        { key: 'full', toolServices: [{ id: 'jobs', name: 'jobs', url }] },
      ],
    });
    const store = new CatalogStore(async () => ({ tools: [tool('get_job', true), tool('delete_job')], protocolVersion: '2025-11-25' }), CATALOG_DEFAULTS, quietLogger);
    store.setGateway(ir);
    await store.refresh();
    const routes = new Map(store.current().routes.map((route) => [route.route_key, route]));
    expect(routes.get('ops')!.tools.map((exposed) => exposed.name)).toEqual(['jobs__get_job']);
    expect(routes.get('ops')!.backends[0].denied_tools).toEqual([{ tool: 'delete_job', rule: 'denyTools "delete_*"' }]);
    // The same Tool Service on another route, without a policy, serves everything.
    expect(routes.get('full')!.tools.map((exposed) => exposed.name)).toEqual(['jobs__get_job', 'jobs__delete_job']);
    // A policy is the registry's wish, not a problem: no finding.
    expect(store.toolFindings('ops')).toEqual([]);
  });

  it('rejects a malformed policy, naming the field', () => {
    const { problems } = validateRegistry({
      routes: [{ key: 'ops', toolServices: [{ name: 'jobs', url: 'http://127.0.0.1:1/mcp', policy: { denyTools: [], readonly: true } }] }],
    });
    expect(problems.map(describeProblem)).toEqual([
      'route "ops", routes[0].toolServices[0].policy.denyTools: Too small: expected array to have >=1 items',
      'route "ops", routes[0].toolServices[0].policy.readonly: unknown key (did you mean "readOnly"?)',
    ]);
  });
});
