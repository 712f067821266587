import * as path from 'node:path';
import { Client as V2Client, StreamableHTTPClientTransport as V2Transport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ClientCapabilities,
  LoggingMessageNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { ManagedProcess, freePort, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { startEverythingServer } from '../support/everything-server';
import { listedTools, postJsonRpc, startGateway, testDir } from '../support/gateway-fixture';
import { ScriptedToolService } from '../support/scripted-tool-service';

/**
 * The MCP surface beyond tools through the gateway (issue 13, findings 3, 6 and 7; ADR-0015): real
 * Envoy 1.40, sidecar, control plane and Redis, two server-everything backends (SDK v1, stateful) and
 * SDK v1 and v2 clients.
 */

const DOC = 'demo://resource/static/document/architecture.md';
const TEXT_TEMPLATE = 'demo://resource/dynamic/text/{resourceId}';

/** An SDK v1 client of one route, declaring these capabilities. */
async function sessionClient(url: string, capabilities: ClientCapabilities = {}): Promise<Client> {
  const client = new Client({ name: 'surface-test', version: '1.0.0' }, { capabilities });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/** An SDK v2 client pinned to the stateless revision (2026-07-28). */
async function statelessClient(url: string, capabilities: Record<string, unknown> = {}): Promise<V2Client> {
  const client = new V2Client({ name: 'surface-test-v2', version: '1.0.0' }, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new V2Transport(new URL(url)));
  return client;
}

const toolNames = async (client: Client | V2Client) => (await client.listTools()).tools.map((tool) => tool.name);

describe('resources, prompts, completion and logging through the gateway (two server-everything backends)', () => {
  let stack: GatewayStack;
  let every: ManagedProcess;
  let extra: ManagedProcess;
  let jobsUrl: string;

  beforeAll(async () => {
    const dir = testDir('federated-surface-backends');
    const [everyPort, extraPort] = [await freePort(), await freePort()];
    every = await startEverythingServer(everyPort, path.join(dir, 'every.log'));
    extra = await startEverythingServer(extraPort, path.join(dir, 'extra.log'));
    let backends;
    ({ stack, backends } = await startGateway(
      'federated-surface',
      (b) => ({
        routes: [
          {
            key: 'surface',
            toolServices: [
              { name: 'every', url: `http://127.0.0.1:${everyPort}/mcp` },
              { name: 'extra_docs', url: `http://127.0.0.1:${extraPort}/mcp` },
            ],
          },
          { key: 'tools_only', toolServices: [{ name: 'jobs', url: b.jobs }] },
        ],
      }),
      { catalogRefreshMs: 600_000 },
    ));
    jobsUrl = backends.jobs;
    await waitFor('both backends in the catalog', async () => (((await listedTools(stack.gatewayUrl('surface'))) ?? []).some((name) => name.startsWith('extra_docs__')) ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await every?.stop();
    await extra?.stop();
  });

  it('lists the resources and templates of both backends under reversible URIs, and reads each from its own backend', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    try {
      expect(client.getServerCapabilities()).toMatchObject({ resources: { subscribe: true, listChanged: true }, prompts: { listChanged: true }, completions: {}, logging: {} });
      const uris = (await client.listResources()).resources.map((resource) => resource.uri);
      expect(uris).toContain(`every+${DOC}`);
      expect(uris).toContain(`extra-docs+${DOC}`);
      expect(uris.every((uri) => URL.canParse(uri))).toBe(true);
      const templates = (await client.listResourceTemplates()).resourceTemplates.map((template) => template.uriTemplate);
      expect(templates).toEqual(expect.arrayContaining([`every+${TEXT_TEMPLATE}`, `extra-docs+${TEXT_TEMPLATE}`]));

      const doc = await client.readResource({ uri: `extra-docs+${DOC}` });
      expect(doc.contents).toEqual([expect.objectContaining({ uri: `extra-docs+${DOC}`, mimeType: 'text/markdown' })]);
      const dynamic = await client.readResource({ uri: 'every+demo://resource/dynamic/text/7' });
      expect(dynamic.contents).toEqual([expect.objectContaining({ uri: 'every+demo://resource/dynamic/text/7', text: expect.stringContaining('Resource 7') })]);
    } finally {
      await client.close();
    }
  });

  it('answers a URI no backend of the route prefixes with an explicit error', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    try {
      await expect(client.readResource({ uri: DOC })).rejects.toThrow(/no backend prefix/);
      await expect(client.readResource({ uri: `nobody+${DOC}` })).rejects.toThrow(/unknown backend/);
    } finally {
      await client.close();
    }
  });

  it('subscribes a client to a resource and relays the backend’s update under the exposed URI', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    const updated: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (notification) => {
      updated.push(notification.params.uri);
    });
    try {
      // The SDK opens its GET stream after initialization: the gateway listens to the backends for it.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await client.subscribeResource({ uri: `every+${DOC}` });
      // server-everything sends an update for every subscribed URI as soon as this tool is toggled on.
      await client.callTool({ name: 'every__toggle-subscriber-updates', arguments: {} });
      await waitFor('the resource update', async () => (updated.length > 0 ? true : undefined), { timeoutMs: 10_000 });
      expect(updated[0]).toBe(`every+${DOC}`);
      await client.unsubscribeResource({ uri: `every+${DOC}` });
    } finally {
      await client.close();
    }
  });

  it('lists the prompts of both backends with prefixed names, and gets one with its embedded resource named for the gateway', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    try {
      const prompts = (await client.listPrompts()).prompts.map((prompt) => prompt.name);
      expect(prompts).toEqual(expect.arrayContaining(['every__simple-prompt', 'every__resource-prompt', 'extra_docs__args-prompt']));
      const args = await client.getPrompt({ name: 'extra_docs__args-prompt', arguments: { city: 'Oslo', state: 'Viken' } });
      expect(JSON.stringify(args.messages)).toContain('Oslo');
      const withResource = await client.getPrompt({ name: 'every__resource-prompt', arguments: { resourceType: 'Text', resourceId: '2' } });
      const embedded = withResource.messages.find((message) => message.content.type === 'resource');
      expect(embedded?.content).toMatchObject({ resource: { uri: 'every+demo://resource/dynamic/text/2' } });
      await expect(client.getPrompt({ name: 'every__no-such-prompt' })).rejects.toThrow(/has no prompt/);
    } finally {
      await client.close();
    }
  });

  it('completes a prompt argument and a resource template variable at the backend named by the reference', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    try {
      const department = await client.complete({ ref: { type: 'ref/prompt', name: 'every__completable-prompt' }, argument: { name: 'department', value: 'Mar' } });
      expect(department.completion.values).toEqual(['Marketing']);
      const id = await client.complete({ ref: { type: 'ref/resource', uri: `extra-docs+${TEXT_TEMPLATE}` }, argument: { name: 'resourceId', value: '42' } });
      expect(id.completion.values).toEqual(['42']);
    } finally {
      await client.close();
    }
  });

  it('passes logging/setLevel to every backend session and relays each backend’s log messages with the backend named', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    const messages: { logger?: string; level: string }[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, async (notification) => {
      messages.push({ logger: notification.params.logger, level: notification.params.level });
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 500));
      await client.setLoggingLevel('debug');
      // Each backend sends a log message at once when simulated logging is toggled on.
      await client.callTool({ name: 'every__toggle-simulated-logging', arguments: {} });
      await client.callTool({ name: 'extra_docs__toggle-simulated-logging', arguments: {} });
      await waitFor('a log message from each backend', async () => {
        const loggers = new Set(messages.map((message) => message.logger));
        return loggers.has('every') && loggers.has('extra_docs') ? true : undefined;
      }, { timeoutMs: 10_000 });
      await client.callTool({ name: 'every__toggle-simulated-logging', arguments: {} });
      await client.callTool({ name: 'extra_docs__toggle-simulated-logging', arguments: {} });
    } finally {
      await client.close();
    }
  });

  it('advertises only what the route can serve', async () => {
    const client = await sessionClient(stack.gatewayUrl('tools_only'));
    try {
      expect(client.getServerCapabilities()).toEqual({ tools: { listChanged: true } });
      await expect(client.listResources()).rejects.toThrow(/-32601|not served|Method not found/);
    } finally {
      await client.close();
    }
  });

  it('lists to each client only the tools its declared capabilities let it use (finding 6)', async () => {
    const bare = await sessionClient(stack.gatewayUrl('surface'));
    const sampler = await sessionClient(stack.gatewayUrl('surface'), { sampling: {} });
    const everything = await sessionClient(stack.gatewayUrl('surface'), { sampling: {}, roots: {}, elicitation: { form: {}, url: {} } });
    const modern = await statelessClient(stack.gatewayUrl('surface'), { sampling: {}, elicitation: { form: {}, url: {} } });
    try {
      const bareTools = await toolNames(bare);
      expect(bareTools).toContain('every__echo');
      expect(bareTools).not.toContain('every__trigger-sampling-request');
      expect(bareTools).not.toContain('every__trigger-elicitation-request');
      expect(bareTools).not.toContain('every__get-roots-list');

      const samplerTools = await toolNames(sampler);
      expect(samplerTools).toContain('every__trigger-sampling-request');
      expect(samplerTools).not.toContain('every__trigger-elicitation-request');

      // The catalog is listed as a client that declares everything, URL elicitation included.
      const everythingTools = await toolNames(everything);
      expect(everythingTools).toEqual(expect.arrayContaining(['every__trigger-url-elicitation', 'every__trigger-elicitation-request', 'every__get-roots-list']));

      // A stateless client's calls to a session-era backend go in a pooled session that declares no
      // capabilities (ADR-0007): tools that need the client are never listed to it.
      const modernTools = await toolNames(modern);
      expect(modernTools).toContain('every__echo');
      expect(modernTools).not.toContain('every__trigger-sampling-request');
      expect(modernTools).not.toContain('every__trigger-url-elicitation');
    } finally {
      await Promise.all([bare.close(), sampler.close(), everything.close(), modern.close()]);
    }
  });

  it('serves resources, prompts and completion to a stateless (2026-07-28) client', async () => {
    const client = await statelessClient(stack.gatewayUrl('surface'));
    try {
      const uris = (await client.listResources()).resources.map((resource) => resource.uri);
      expect(uris).toContain(`extra-docs+${DOC}`);
      const read = await client.readResource({ uri: `extra-docs+${DOC}` });
      expect(read.contents[0]).toMatchObject({ uri: `extra-docs+${DOC}` });
      const prompt = await client.getPrompt({ name: 'every__simple-prompt' });
      expect(prompt.messages.length).toBeGreaterThan(0);
      const completion = await client.complete({ ref: { type: 'ref/prompt', name: 'every__completable-prompt' }, argument: { name: 'department', value: 'Sa' } });
      expect(completion.completion.values).toEqual(['Sales']);
    } finally {
      await client.close();
    }
  });

  it('tells session clients of both list kinds when they change', async () => {
    const client = await sessionClient(stack.gatewayUrl('surface'));
    let prompts = 0;
    let resources = 0;
    client.setNotificationHandler(PromptListChangedNotificationSchema, async () => {
      prompts++;
    });
    client.setNotificationHandler(ResourceListChangedNotificationSchema, async () => {
      resources++;
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 500));
      // A route change that removes a backend changes both lists.
      await stack.setPortalRegistry({
        routes: [
          { key: 'surface', toolServices: [{ name: 'every', url: `http://127.0.0.1:${every.options.env!.PORT}/mcp` }] },
          { key: 'tools_only', toolServices: [{ name: 'jobs', url: jobsUrl }] },
        ],
      });
      await waitFor('both list_changed notifications', async () => (prompts > 0 && resources > 0 ? true : undefined), { timeoutMs: 15_000 });
    } finally {
      await client.close();
    }
  });
});

describe('faster truth about a backend (finding 7)', () => {
  let stack: GatewayStack;
  let flaky: ScriptedToolService | undefined;
  let flakyPort: number;

  beforeAll(async () => {
    flakyPort = await freePort();
    flaky = await ScriptedToolService.start(['ping'], 50, flakyPort);
    ({ stack } = await startGateway(
      'federated-surface-truth',
      (b) => ({ routes: [{ key: 'truth', toolServices: [{ name: 'jobs', url: b.jobs }, { name: 'flaky', url: flaky!.url }] }] }),
      // No periodic refresh during the test: only calls and re-listings tell the catalog.
      { catalogRefreshMs: 600_000 },
    ));
    await waitFor('the flaky backend in the catalog', async () => (((await listedTools(stack.gatewayUrl('truth'))) ?? []).includes('flaky__ping') ? true : undefined));
  });
  afterAll(async () => {
    await stack?.stop();
    await flaky?.stop();
  });

  const degraded = async () => {
    const response = await postJsonRpc(stack.gatewayUrl('truth'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    return response.json().result._meta['mcpgw/federation'].degradedBackends as { name: string; state: string; lastError: string }[];
  };

  it('shows a backend degraded as soon as a call to it fails, with the cause, and lists it again within seconds when it returns', async () => {
    await flaky!.stop();
    flaky = undefined;
    const call = await postJsonRpc(stack.gatewayUrl('truth'), { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'flaky__ping', arguments: {} } });
    expect(call.json().error.code).toBe(-32004);
    const marked = await waitFor('the failed call to mark the backend degraded', async () => {
      const found = (await degraded()).find((backend) => backend.name === 'flaky');
      return found ?? undefined;
    }, { timeoutMs: 5_000 });
    expect(marked).toMatchObject({ state: 'stale', lastError: expect.stringMatching(/^connection refused/) });

    flaky = await ScriptedToolService.start(['ping', 'pong'], 50, flakyPort);
    await waitFor('the backend listed again', async () => ((await degraded()).length === 0 && ((await listedTools(stack.gatewayUrl('truth'))) ?? []).includes('flaky__pong') ? true : undefined), {
      timeoutMs: 15_000,
    });
  });
});
