import { exposeResultUris, relayBackendMessage } from '../../control-plane/sidecar/backend-messages';
import { Decision, RequestHead } from '../../control-plane/sidecar/decision';
import { decideOnBody } from '../../control-plane/sidecar/mcp-gateway';
import { buildRouteViews } from '../../control-plane/sidecar/route-catalog';
import { sidecarContext } from '../support/sidecar-context';
import { backendCatalog, catalogSnapshot } from './catalog-fixtures';

/**
 * The sidecar's answers about prompts, resources and what clients may use (docs/adr/0015-federated-
 * resources-and-prompts.md, docs/catalog.md), from catalog messages as the control plane sends them.
 */

const json = (items: Record<string, unknown>[]) => items.map((item) => JSON.stringify(item));
const snapshot = catalogSnapshot([
  {
    route_key: 'docs',
    backends: [
      backendCatalog('files', ['read_file', 'ask_user'], {
        capabilities_json: JSON.stringify({ tools: {}, prompts: {}, resources: { subscribe: true }, completions: {}, logging: {} }),
        prompts_json: json([{ name: 'summarize' }, { name: 'interview' }]),
        resources_json: json([{ uri: 'file:///README.md', name: 'readme' }]),
        resource_templates_json: json([{ uriTemplate: 'file:///{path}', name: 'any file' }]),
        needs_json: JSON.stringify({ 'tool:ask_user': ['elicitation.form', 'elicitation.url'], 'prompt:interview': ['sampling'] }),
      }),
      backendCatalog('memo_box', ['shout'], {
        protocol_version: '2026-07-28',
        sessionful: false,
        capabilities_json: JSON.stringify({ tools: {}, resources: { subscribe: true } }),
        resources_json: json([{ uri: 'file:///README.md', name: 'readme' }]),
        needs_json: JSON.stringify({ 'tool:shout': ['sampling'] }),
      }),
    ],
  },
  { route_key: 'plain', backends: [backendCatalog('jobs', ['echo'])] },
]);
const views = buildRouteViews(snapshot);

const POST_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const head = (path = '/mcp/docs', headers: Record<string, string> = POST_HEADERS): RequestHead => ({ method: 'POST', path, headers: new Map(Object.entries(headers)) });
const body = (message: unknown) => Buffer.from(JSON.stringify(message));
const responded = async (pending: Decision | Promise<Decision>) => {
  const decision = await pending;
  if (decision.kind !== 'respond') throw new Error(`expected a response, got ${decision.kind}`);
  return { status: decision.status, message: decision.body.length ? JSON.parse(decision.body.toString()) : undefined };
};
const request = (method: string, params: Record<string, unknown> = {}) => body({ jsonrpc: '2.0', id: 3, method, params });

async function sessionWith(capabilities: Record<string, unknown>, path = '/mcp/docs', sessions = sidecarContext(views)) {
  const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities, clientInfo: { name: 'agent', version: '1' } } };
  const decision = await decideOnBody(head(path), body(initialize), sessions.context);
  if (decision.kind !== 'respond') throw new Error('initialize was not answered');
  const sessionId = decision.headers['mcp-session-id'];
  return { ...sessions, initialized: JSON.parse(decision.body.toString()).result, ask: (method: string, params?: Record<string, unknown>) => responded(decideOnBody(head(path, { ...POST_HEADERS, 'mcp-session-id': sessionId }), request(method, params), sessions.context)), sessionId };
}

const modernHeaders = (method: string) => ({ ...POST_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': method });
const modern = (method: string, capabilities: Record<string, unknown>) =>
  responded(
    decideOnBody(
      head('/mcp/docs', modernHeaders(method)),
      request(method, { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': capabilities } }),
      sidecarContext(views).context,
    ),
  );

describe('what a route declares it serves', () => {
  it('declares prompts, resources with subscriptions, completions and logging where its backends do', async () => {
    expect((await sessionWith({})).initialized.capabilities).toEqual({
      tools: { listChanged: true },
      prompts: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
      completions: {},
      logging: {},
    });
    expect((await sessionWith({}, '/mcp/plain')).initialized.capabilities).toEqual({ tools: { listChanged: true } });
  });

  it('answers a method of a capability no backend of the route declares with -32601', async () => {
    const client = await sessionWith({}, '/mcp/plain');
    for (const method of ['resources/list', 'prompts/get', 'completion/complete', 'logging/setLevel']) {
      expect((await client.ask(method)).message.error).toMatchObject({ code: -32601, message: expect.stringContaining('not served on route "plain"') });
    }
  });
});

describe('prompts and resources lists', () => {
  it('lists prompts, resources and templates under the route’s names', async () => {
    const client = await sessionWith({ sampling: {} });
    expect((await client.ask('prompts/list')).message.result.prompts.map((prompt: { name: string }) => prompt.name)).toEqual(['files__summarize', 'files__interview']);
    expect((await client.ask('resources/list')).message.result.resources.map((resource: { uri: string }) => resource.uri)).toEqual([
      'files+file:///README.md',
      'memo-box+file:///README.md',
    ]);
    const templates = (await client.ask('resources/templates/list')).message.result;
    expect(templates.resourceTemplates).toEqual([{ uriTemplate: 'files+file:///{path}', name: 'any file' }]);
    expect(templates._meta['mcpgw/federation']).toEqual({ route: 'docs', degradedBackends: [] });
  });

  it('takes no cursor of one list for another', async () => {
    const big = buildRouteViews(
      catalogSnapshot([{ route_key: 'docs', backends: [backendCatalog('files', ['a', 'b', 'c'], { prompts_json: json([{ name: 'p' }, { name: 'q' }]), capabilities_json: JSON.stringify({ tools: {}, prompts: {} }) })] }], {
        toolNameSeparator: '__',
        toolNamePolicy: 'drop',
        maxToolsPerRoute: 5000,
        toolsListPageSize: 1,
      }),
    );
    const client = await sessionWith({}, '/mcp/docs', sidecarContext(big));
    const toolsCursor = (await client.ask('tools/list')).message.result.nextCursor;
    const promptsPage = (await client.ask('prompts/list')).message.result;
    expect(promptsPage.prompts.map((prompt: { name: string }) => prompt.name)).toEqual(['files__p']);
    expect((await client.ask('prompts/list', { cursor: promptsPage.nextCursor })).message.result.prompts.map((prompt: { name: string }) => prompt.name)).toEqual(['files__q']);
    expect((await client.ask('prompts/list', { cursor: toolsCursor })).message.error).toMatchObject({ code: -32602, message: expect.stringContaining('nextCursor of an earlier prompts/list') });
  });
});

describe('lists per client capability set (finding 6)', () => {
  it('offers a session client the tools and prompts its declared capabilities allow, from session-era backends', async () => {
    const names = async (capabilities: Record<string, unknown>, method: string, key: string) =>
      ((await (await sessionWith(capabilities)).ask(method)).message.result[key] as { name: string }[]).map((item) => item.name);
    expect(await names({}, 'tools/list', 'tools')).toEqual(['files__read_file']);
    expect(await names({ elicitation: {} }, 'tools/list', 'tools')).toEqual(['files__read_file', 'files__ask_user']);
    // memo_box speaks 2026-07-28: a session client's calls reach it with an envelope that declares nothing (ADR-0007).
    expect(await names({ sampling: {} }, 'tools/list', 'tools')).toEqual(['files__read_file']);
    expect(await names({ elicitation: { url: {} } }, 'tools/list', 'tools')).toContain('files__ask_user');
    expect(await names({}, 'prompts/list', 'prompts')).toEqual(['files__summarize']);
    expect(await names({ sampling: {} }, 'prompts/list', 'prompts')).toEqual(['files__summarize', 'files__interview']);
  });

  it('offers a stateless client what needs it only from stateless backends, which get its capabilities', async () => {
    const names = async (capabilities: Record<string, unknown>) => ((await modern('tools/list', capabilities)).message.result.tools as { name: string }[]).map((tool) => tool.name);
    // files speaks 2025-11-25: a stateless client's calls go in a pooled session that declares nothing.
    expect(await names({ sampling: {}, elicitation: { form: {}, url: {} } })).toEqual(['files__read_file', 'memo_box__shout']);
    expect(await names({})).toEqual(['files__read_file']);
  });
});

describe('requests Envoy could not place', () => {
  it.each<[string, string, Record<string, unknown>, string]>([
    ['a URI without a backend prefix', 'resources/read', { uri: 'file:///README.md' }, 'resource URI "file:///README.md" has no backend prefix'],
    ['a URI of an unknown backend', 'resources/read', { uri: 'ghost+file:///a' }, 'unknown backend "ghost" on route "docs"'],
    ['a prompt without a prefix', 'prompts/get', { name: 'summarize' }, 'prompt "summarize" has no backend prefix: get it as <backend>__<prompt>'],
    ['an unknown prompt', 'prompts/get', { name: 'files__nope' }, 'backend "files" has no prompt "nope" on route "docs"'],
    ['a completion reference to a backend without completions', 'completion/complete', { ref: { type: 'ref/resource', uri: 'memo-box+file:///{x}' } }, 'backend "memo_box" offers no completions'],
    ['a subscription at a stateless backend', 'resources/subscribe', { uri: 'memo-box+file:///README.md' }, 'speaks MCP 2026-07-28, which has no resources/subscribe: subscribe with subscriptions/listen'],
    ['a read without a URI', 'resources/read', {}, 'resources/read needs params.uri'],
  ])('answers %s with -32602 naming the problem', async (_case, method, params, message) => {
    const client = await sessionWith({});
    expect((await client.ask(method, params)).message.error).toMatchObject({ code: -32602, message: expect.stringContaining(message) });
  });
});

describe('logging/setLevel', () => {
  it('sets the level at every logging backend session, opening those not open yet with the level', async () => {
    const sessions = sidecarContext(views);
    const client = await sessionWith({}, '/mcp/docs', sessions);
    expect((await client.ask('logging/setLevel', { level: 'warning' })).message.result).toEqual({});
    // files logs and had no session yet: it is opened with the level (openBackendSession sets it), nothing else posted.
    expect(sessions.opened).toEqual(['http://127.0.0.1:9/files/mcp']);
    expect((await sessions.context.sessions.get(client.sessionId))?.logLevel).toBe('warning');
    expect((await client.ask('logging/setLevel', { level: 'debug' })).message.result).toEqual({});
    expect(sessions.posted.map((posted) => posted.message)).toEqual([{ jsonrpc: '2.0', id: 1, method: 'logging/setLevel', params: { level: 'debug' } }]);
    expect((await client.ask('logging/setLevel', { level: 'loud' })).message.error.code).toBe(-32602);
  });
});

describe('messages a backend sends outside a request', () => {
  const backend = views.get('docs')!.backends.get('memo_box')!;
  it.each<[string, Record<string, unknown>, unknown]>([
    ['a log message names its backend', { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } }, { kind: 'deliver', message: { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x', logger: 'memo_box' } } }],
    ['a log message keeps its logger after the backend', { method: 'notifications/message', params: { level: 'info', logger: 'db' } }, { kind: 'deliver', message: { method: 'notifications/message', params: { level: 'info', logger: 'memo_box/db' } } }],
    ['a resource update gets the exposed URI', { method: 'notifications/resources/updated', params: { uri: 'file:///a' } }, { kind: 'deliver', message: { method: 'notifications/resources/updated', params: { uri: 'memo-box+file:///a' } } }],
    ['a list change becomes a re-listing', { method: 'notifications/prompts/list_changed' }, { kind: 'list-changed', list: 'prompts' }],
    ['a request gets a scoped id', { jsonrpc: '2.0', id: 4, method: 'roots/list' }, { kind: 'deliver', message: { jsonrpc: '2.0', id: 'mcpgw:memo_box:4', method: 'roots/list' } }],
    ['a response is dropped', { jsonrpc: '2.0', id: 4, result: {} }, { kind: 'drop' }],
  ])('%s', (_case, message, relayed) => {
    expect(relayBackendMessage(message, backend)).toEqual(relayed);
  });
});

describe('results the sidecar relays itself (a resumed stream, ADR-0018)', () => {
  it('names the resource URIs of a call’s content, a read’s contents and a prompt’s messages', () => {
    expect(
      exposeResultUris(
        {
          content: [{ type: 'text', text: 'x' }, { type: 'resource_link', uri: 'file:///a', name: 'a' }, { type: 'resource', resource: { uri: 'ui://w', text: '' } }],
          contents: [{ uri: 'file:///b', text: 'b' }],
          messages: [{ role: 'user', content: { type: 'resource_link', uri: 'file:///c', name: 'c' } }],
          _meta: { keep: true },
        },
        'memo_box',
      ),
    ).toEqual({
      content: [{ type: 'text', text: 'x' }, { type: 'resource_link', uri: 'memo-box+file:///a', name: 'a' }, { type: 'resource', resource: { uri: 'ui://memo-box+w', text: '' } }],
      contents: [{ uri: 'memo-box+file:///b', text: 'b' }],
      messages: [{ role: 'user', content: { type: 'resource_link', uri: 'memo-box+file:///c', name: 'c' } }],
      _meta: { keep: true },
    });
  });
});
