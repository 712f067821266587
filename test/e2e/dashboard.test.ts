import * as path from 'node:path';
import { Browser, Page } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { launchChromium } from '../support/chromium';
import { FlakyToolService } from '../support/flaky-tool-service';
import { connectClient, listedTools, metricValue, postJsonRpc, startGateway } from '../support/gateway-fixture';

/**
 * The operator dashboard in a real headless Chromium, over a running gateway (real Envoy, control
 * plane and sidecar): calls driven through Envoy show up on the page, which refreshes by itself.
 */
describe('the operator dashboard', () => {
  let stack: GatewayStack;
  let flaky: FlakyToolService;
  let dir: string;
  let browser: Browser;
  let page: Page;
  let client: Client;
  /** Every URL the page asked for, and every error it threw. */
  const requested: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    flaky = await FlakyToolService.start();
    ({ stack, dir } = await startGateway('dashboard', (b) => ({
      routes: [
        { key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] },
        { key: 'ops', toolServices: [{ name: 'reports', url: flaky.url, fallback: { text: 'reports are unavailable' }, policy: { denyTools: ['send_email'] } }] },
      ],
    })));
    await waitFor('the reports tools', async () => ((await listedTools(stack.gatewayUrl('ops'))) ?? []).includes('reports__read_report') || undefined);
    client = await connectClient(stack.gatewayUrl('demo'));
    browser = await launchChromium();
  });
  afterAll(async () => {
    await client?.close();
    await browser?.close();
    await stack?.stop();
    await flaky?.stop();
  });

  const callOps = (tool: string, id: number) =>
    postJsonRpc(stack.gatewayUrl('ops'), { jsonrpc: '2.0', id, method: 'tools/call', params: { name: `reports__${tool}`, arguments: {} } });
  const echo = (times: number) => Promise.all(Array.from({ length: times }, (_, index) => client.callTool({ name: 'jobs__echo', arguments: { text: `hello ${index}` } })));
  const echoCalls = () => metricValue(stack, 'mcpgw_tool_calls_total', { route: 'demo', backend: 'jobs', outcome: 'ok' });

  it('shows routes, Tool Services and their state, per-tool figures with charts, and denials and fallbacks', async () => {
    await echo(5);
    expect((await callOps('read_report', 1)).json().result.content[0].text).toBe('report');
    expect((await callOps('send_email', 2)).json().error.code).toBe(-32003);
    await flaky.stop();
    expect((await callOps('read_report', 3)).json().result._meta['mcpgw/outcome'].outcome).toBe('degraded');
    // Envoy sends its call log at least every second.
    await waitFor('the calls in the call log', async () =>
      (await echoCalls()) === 5 && (await metricValue(stack, 'mcpgw_tool_calls_total', { route: 'ops', outcome: 'degraded' })) === 1 ? true : undefined,
    );

    page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
    page.on('request', (request) => requested.push(request.url()));
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(`${stack.controlPlaneAdminUrl}/dashboard`);
    expect(await page.title()).toBe('MCP gateway · operator dashboard');
    await page.waitForSelector('#tools tr[data-tool="echo"]');

    // The summary, and every backend of every route with its state.
    expect(await page.textContent('[data-card="routes"] .value')).toBe('2');
    expect(await page.textContent('[data-card="Tool Services"] .value')).toBe('3');
    expect(await page.textContent('[data-card="Envoys connected"] .value')).toBe('1');
    const states = await page.$$eval('#routes tbody tr', (rows) => rows.map((row) => `${row.getAttribute('data-route')}/${row.getAttribute('data-backend')} ${row.getAttribute('data-state')}`));
    expect(states).toEqual(expect.arrayContaining(['demo/weather ok', 'demo/jobs ok']));
    // The fallback served: its latest call fell back (degraded), or its listing has failed since (stale).
    expect(states.find((state) => state.startsWith('ops/reports'))).toMatch(/ (degraded|stale)$/);
    expect(await page.textContent('#routes tr[data-backend="reports"] td.error-text')).toMatch(/\S/);
    expect(await page.textContent('#routes tr[data-backend="jobs"] td.number')).toBe('3 / 3');

    // Per tool: figures of the last 5 minutes and three charts of the hour.
    const echoRow = '#tools tr[data-route="demo"][data-backend="jobs"][data-tool="echo"]';
    expect(await page.textContent(`${echoRow} td.calls`)).toBe('5');
    expect(await page.textContent(`${echoRow} td.error-ratio`)).toBe('0.0 %');
    expect(await page.textContent(`${echoRow} td.p50`)).toMatch(/^\d+(\.\d+)? (ms|s)$/);
    expect(await page.textContent(`${echoRow} td.p99`)).toMatch(/^\d+(\.\d+)? (ms|s)$/);
    // Calls: a bar per 10 s with calls (the five may straddle two); no errors: no bar; p50 and p99 marked.
    expect(await page.$$eval(`${echoRow} td.chart-rate svg rect`, (bars) => bars.length)).toBeGreaterThanOrEqual(1);
    expect(await page.textContent(`${echoRow} td.chart-rate svg text`)).toMatch(/^0\.[1-5]0\/s$/);
    expect(await page.$$eval(`${echoRow} td.chart-errors svg rect`, (bars) => bars.length)).toBe(0);
    const latencyMarks = await page.$$eval(`${echoRow} td.chart-latency svg :is(circle, path)`, (marks) => marks.map((mark) => mark.getAttribute('class')));
    expect(new Set(latencyMarks)).toEqual(new Set(['p50', 'p99']));
    const readRow = '#tools tr[data-backend="reports"][data-tool="read_report"]';
    expect(await page.textContent(`${readRow} td.calls`)).toBe('2');
    expect(await page.textContent(`${readRow} td.error-ratio`)).toBe('50.0 %');

    // The denial with its policy rule, and the fallback.
    const notable = await page.$$eval('#notable tbody tr', (rows) => rows.map((row) => [...row.querySelectorAll('td')].slice(1).map((cell) => cell.textContent)));
    expect(notable).toEqual([
      ['ops', 'reports', 'read_report', 'fallback served', expect.any(String), expect.any(String), expect.stringMatching(/upstream|connect/)],
      ['ops', 'reports', 'send_email', 'denied', '0', expect.any(String), 'policy: denyTools "send_email"'],
    ]);

    for (const selector of ['#summary', '#routes', '#tools', '#notable', '#freshness', `${echoRow} td.chart-latency svg`]) {
      expect(await page.isVisible(selector)).toBe(true);
    }
    const screenshot = await page.screenshot({ path: path.join(dir, 'dashboard.png'), fullPage: true });
    expect(screenshot.subarray(1, 4).toString()).toBe('PNG');
  });

  it('updates by itself', async () => {
    const echoRow = '#tools tr[data-route="demo"][data-backend="jobs"][data-tool="echo"]';
    const generatedAt = await page.getAttribute('#freshness', 'data-generated-at');
    await echo(3);
    await page.locator(`${echoRow} td.calls`, { hasText: /^8$/ }).waitFor({ timeout: 15_000 });
    expect(await page.getAttribute('#freshness', 'data-generated-at')).not.toBe(generatedAt);
    await page.screenshot({ path: path.join(dir, 'dashboard-updated.png'), fullPage: true });
  });

  it('is self-contained: it asked nothing of any other origin, and threw nothing', () => {
    expect(requested.length).toBeGreaterThan(3);
    expect(requested.filter((url) => !url.startsWith(`${stack.controlPlaneAdminUrl}/dashboard`))).toEqual([]);
    expect(pageErrors).toEqual([]);
  });
});
