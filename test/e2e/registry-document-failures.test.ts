import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { SampleBackends, callToolContent, controlPlaneStatus, listedTools, metricValue, startGateway } from '../support/gateway-fixture';

/**
 * "No failure empties the list" (docs/adr/0000-portal-registry-decisions.md §6): a registry document that is not a registry at all
 * (empty, `{}`, `routes: null`, `routes` not a list, cut short) keeps the last good registry, whether
 * it comes from the static file or through the Portal contract. Real Envoy, sidecar, Redis, SDK peers.
 */

const EXPECTED_TOOLS = {
  demo: ['jobs__run_job', 'jobs__echo', 'jobs__whoami', 'weather__get_forecast', 'weather__get_alerts'],
  'weather-only': ['weather__get_forecast', 'weather__get_alerts'],
};

const registryOf = (backends: SampleBackends) => ({
  routes: [
    { key: 'demo', toolServices: [{ name: 'weather', url: backends.weather }, { name: 'jobs', url: backends.jobs }] },
    { key: 'weather-only', toolServices: [{ name: 'weather', url: backends.weather }] },
  ],
});

/** Every route lists all its tools and answers a call through Envoy. */
async function expectEveryRouteServing(stack: GatewayStack): Promise<void> {
  for (const [route, tools] of Object.entries(EXPECTED_TOOLS)) {
    expect(await listedTools(stack.gatewayUrl(route))).toEqual(tools);
    expect(await callToolContent(stack.gatewayUrl(route), 'weather__get_forecast', { city: 'Oslo' })).toEqual([
      { type: 'text', text: 'Forecast for Oslo: sunny, 14°C' },
    ]);
  }
}

/** Waits until the control plane has taken the document in: either it reports the rejection, or a route stopped answering. */
async function afterDocument(stack: GatewayStack, reason: string, rejectionsBefore: number): Promise<'rejected' | string> {
  return waitFor(
    `the control plane to take in a document (${reason})`,
    async () => {
      for (const route of Object.keys(EXPECTED_TOOLS)) {
        if ((await listedTools(stack.gatewayUrl(route))) === undefined) return `route ${route} stopped answering`;
      }
      const rejections = await metricValue(stack, 'mcpgw_registry_document_rejections_total', { reason });
      return rejections > rejectionsBefore ? 'rejected' : undefined;
    },
    { timeoutMs: 10_000, intervalMs: 50 },
  );
}

async function expectRejected(stack: GatewayStack, reason: string, write: () => Promise<void> | void): Promise<void> {
  const before = await metricValue(stack, 'mcpgw_registry_document_rejections_total', { reason });
  const changedBefore = await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'changed' });
  await write();
  expect(await afterDocument(stack, reason, before)).toBe('rejected');
  await expectEveryRouteServing(stack);
  const status = (await controlPlaneStatus(stack)).registry;
  expect(status.rejectedDocument).toMatchObject({ reason, message: expect.any(String), since: expect.any(String), at: expect.any(String) });
  expect(status.lastError.message).toBe(status.rejectedDocument.message);
  expect(await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'rejected' })).toBeGreaterThan(0);
  expect(await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'changed' })).toBe(changedBefore);
  expect(await metricValue(stack, 'mcpgw_routes')).toBe(2);
}

describe('a broken registry file keeps the last good registry (static file source)', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let file: string;
  let goodText: string;

  beforeAll(async () => {
    let dir: string;
    ({ stack, backends, dir } = await startGateway('registry-document-file', registryOf, { registrySource: 'file' }));
    file = path.join(dir, 'registry.yaml');
    goodText = stringify(registryOf(backends));
    await waitFor('both routes', async () => ((await listedTools(stack.gatewayUrl('weather-only'))) ? true : undefined));
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it.each([
    ['an empty file', 'empty', ''],
    ['a file with comments only', 'empty', '# being rewritten\n'],
    ['{}', 'not-a-registry', '{}\n'],
    ['routes: null', 'not-a-registry', 'routes: null\n'],
    ['routes that are not a list', 'not-a-registry', 'routes: demo\n'],
    ['a file cut short (JSON-style YAML)', 'syntax', 'CUT'],
  ])('keeps every route serving after %s', async (_name, reason, text) => {
    const content = text === 'CUT' ? JSON.stringify(registryOf(backends), null, 2).slice(0, 150) : text;
    await expectRejected(stack, reason, () => fs.writeFileSync(file, content));
    expect((await controlPlaneStatus(stack)).registry.rejectedDocument.message).toContain(file);
  });

  it('never applies a file while it is being written (two writes 200 ms apart)', async () => {
    fs.writeFileSync(file, goodText);
    await waitFor('the good file back', async () => ((await controlPlaneStatus(stack)).registry.rejectedDocument ? undefined : true));
    const changedBefore = await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'changed' });
    // The first part alone is a valid registry without the route weather-only.
    const cut = goodText.indexOf('  - key: weather-only');
    const handle = fs.openSync(file, 'w');
    const failures: string[] = [];
    let writing = true;
    const watching = (async () => {
      while (writing) {
        if ((await listedTools(stack.gatewayUrl('weather-only'))) === undefined) failures.push(new Date().toISOString());
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    try {
      fs.writeSync(handle, goodText.slice(0, cut));
      await new Promise((resolve) => setTimeout(resolve, 200));
      fs.writeSync(handle, goodText.slice(cut));
    } finally {
      fs.closeSync(handle);
    }
    await new Promise((resolve) => setTimeout(resolve, 1500));
    writing = false;
    await watching;
    expect(failures).toEqual([]);
    expect(await metricValue(stack, 'mcpgw_registry_polls_total', { outcome: 'changed' })).toBe(changedBefore);
  });

  it('applies the next good document, and a route leaves only when a valid document stops declaring it', async () => {
    fs.writeFileSync(file, '{}\n');
    await waitFor('the rejection', async () => ((await controlPlaneStatus(stack)).registry.rejectedDocument ? true : undefined));
    fs.writeFileSync(file, stringify({ routes: [registryOf(backends).routes[0]] }));
    await waitFor('weather-only to leave', async () => ((await listedTools(stack.gatewayUrl('weather-only'))) === undefined ? true : undefined));
    expect(await listedTools(stack.gatewayUrl('demo'))).toEqual(EXPECTED_TOOLS.demo);
    expect((await controlPlaneStatus(stack)).registry.rejectedDocument).toBeUndefined();
  });
});

describe('a broken registry document through the Portal contract keeps the last good registry', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let file: string;

  beforeAll(async () => {
    let dir: string;
    ({ stack, backends, dir } = await startGateway('registry-document-portal', registryOf));
    file = path.join(dir, 'registry.yaml');
    await waitFor('both routes', async () => ((await listedTools(stack.gatewayUrl('weather-only'))) ? true : undefined));
  });

  afterAll(async () => {
    await stack?.stop();
  });

  /** Makes the dev Portal answer with this exact body, as a Portal cut off mid-response or gone wrong would. */
  const servePortalText = async (text: string) => {
    const response = await fetch(`${stack.portalUrl}/dev/registry-text`, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: text });
    expect(response.status).toBe(200);
  };

  it.each([
    ['{}', 'not-a-registry', {}],
    ['routes: null', 'not-a-registry', { routes: null }],
    ['routes that are not a list', 'not-a-registry', { routes: { key: 'demo' } }],
  ])('keeps every route serving after %s', async (_name, reason, document) => {
    await expectRejected(stack, reason, () => stack.setPortalRegistry(document));
  });

  it('keeps every route serving after the registry file behind the dev Portal is emptied', async () => {
    await expectRejected(stack, 'not-a-registry', () => fs.writeFileSync(file, ''));
  });

  it.each([
    ['a body cut short', 'syntax', '{"routes": [{"key": "demo", "toolServ'],
    ['an empty body', 'empty', ''],
  ])('keeps every route serving after %s', async (_name, reason, text) => {
    await expectRejected(stack, reason, () => servePortalText(text));
  });

  it('applies the next good document', async () => {
    await stack.setPortalRegistry({ routes: [registryOf(backends).routes[1]] });
    await waitFor('demo to leave', async () => ((await listedTools(stack.gatewayUrl('demo'))) === undefined ? true : undefined));
    expect(await listedTools(stack.gatewayUrl('weather-only'))).toEqual(EXPECTED_TOOLS['weather-only']);
    expect((await controlPlaneStatus(stack)).registry.rejectedDocument).toBeUndefined();
  });
});
