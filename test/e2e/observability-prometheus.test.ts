import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse, stringify } from 'yaml';
import { z } from 'zod';
import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { SampleBackends, connectClient, startGateway } from '../support/gateway-fixture';
import { OBSERVABILITY_DIR, grafanaDashboard } from '../support/observability';
import { Prometheus, startPrometheus } from '../support/prometheus';

/**
 * A real Prometheus scrapes a running gateway (control plane, sidecar, Envoy) with deploy/observability's
 * scrape jobs and a copy of its alerting rules on short windows: a Tool Service outage raises the
 * matching alerts, which resolve when it is back; every query of the Grafana dashboard runs.
 */

/** The shipped rules with every `for` at 2 s, every range at 10 s and evaluation every second, so the test takes seconds. */
function quickRules(): string {
  const rules = parse(fs.readFileSync(path.join(OBSERVABILITY_DIR, 'mcpgw-alerts.yaml'), 'utf8')) as { groups: { interval?: string; rules: { for?: string; expr: string }[] }[] };
  for (const group of rules.groups) {
    group.interval = '1s';
    for (const rule of group.rules) {
      rule.for = '2s';
      rule.expr = rule.expr.replace(/\[\d+m\]/g, '[10s]');
    }
  }
  return stringify(rules);
}

const alertsSchema = z.object({ data: z.object({ alerts: z.array(z.object({ labels: z.record(z.string(), z.string()), state: z.string() })) }) });
const querySchema = z.object({ status: z.string(), error: z.string().optional(), data: z.object({ result: z.array(z.object({ metric: z.record(z.string(), z.string()) })) }).optional() });

describe('Prometheus with the shipped rules, against a running gateway', () => {
  let stack: GatewayStack;
  let backends: SampleBackends;
  let dir: string;
  let prometheus: Prometheus;

  beforeAll(async () => {
    ({ stack, backends, dir } = await startGateway(
      'observability-prometheus',
      (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }] }),
      { catalogRefreshMs: 1000 },
    ));
    const prometheusDir = path.join(dir, 'prometheus');
    fs.mkdirSync(prometheusDir, { recursive: true });
    fs.writeFileSync(path.join(prometheusDir, 'mcpgw-alerts.yaml'), quickRules());
    // The shipped scrape config with this stack's addresses and a 1 s interval.
    const config = parse(fs.readFileSync(path.join(OBSERVABILITY_DIR, 'prometheus.yml'), 'utf8')) as {
      global: Record<string, string>;
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    config.global = { scrape_interval: '1s', evaluation_interval: '1s' };
    const targets: Record<string, string> = {
      'mcpgw-control-plane': new URL(stack.controlPlaneAdminUrl).host,
      'mcpgw-sidecar': new URL(stack.sidecarAdminUrl).host,
      'mcpgw-envoy': new URL(stack.envoyAdminUrl).host,
    };
    for (const job of config.scrape_configs) job.static_configs = [{ targets: [targets[job.job_name]] }];
    prometheus = await startPrometheus(prometheusDir, config);
  });
  afterAll(async () => {
    await prometheus?.stop();
    await stack?.stop();
  });

  const query = async (promql: string) => querySchema.parse(await (await fetch(`${prometheus.url}/api/v1/query?query=${encodeURIComponent(promql)}`)).json());
  const firing = async () =>
    alertsSchema
      .parse(await (await fetch(`${prometheus.url}/api/v1/alerts`)).json())
      .data.alerts.filter((alert) => alert.state === 'firing')
      .map((alert) => alert.labels);
  const jobs = () => `tool-service-jobs-${backends.ports.jobs}`;
  /** A tools/call of jobs__echo by a real client: its result, or the JSON-RPC error code it got. */
  const callJobs = async (client: Client) => {
    try {
      return (await client.callTool({ name: 'jobs__echo', arguments: { text: 'hello' } })).content;
    } catch (error) {
      return (error as McpError).code;
    }
  };

  it('scrapes the control plane, the sidecar and Envoy, and nothing fires on a healthy gateway', async () => {
    await waitFor('every target scraped', async () => {
      const up = (await query('up == 1')).data?.result.map((series) => series.metric.job).sort();
      return up?.join() === 'mcpgw-control-plane,mcpgw-envoy,mcpgw-sidecar' ? up : undefined;
    });
    const client = await connectClient(stack.gatewayUrl('demo'));
    for (let call = 0; call < 12; call++) expect(await callJobs(client)).toEqual([{ type: 'text', text: 'hello' }]);
    await client.close();
    await waitFor('the calls in Prometheus', async () => ((await query('sum(mcpgw_tool_calls_total{outcome="ok"}) == 12')).data?.result.length ? true : undefined));
    expect(await firing()).toEqual([]);
  });

  it('raises the Tool Service and error ratio alerts when a Tool Service goes down, and resolves them when it is back', async () => {
    const client = await connectClient(stack.gatewayUrl('demo'));
    // Its backend session opened before the outage: the calls reach Envoy, which cannot connect.
    expect(await callJobs(client)).toEqual([{ type: 'text', text: 'hello' }]);
    await stack.stopProcess(jobs());
    for (let call = 0; call < 12; call++) expect(await callJobs(client)).toBe(-32004);
    const raised = await waitFor(
      'both alerts to fire',
      async () => {
        const alerts = await firing();
        const names = alerts.map((alert) => alert.alertname).sort();
        return names.includes('McpGatewayToolServiceDegraded') && names.includes('McpGatewayToolErrorRatioHigh') ? alerts : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(raised).toEqual(
      expect.arrayContaining([
        { alertname: 'McpGatewayToolServiceDegraded', severity: 'warning', tool_service: 'jobs', state: 'stale' },
        { alertname: 'McpGatewayToolErrorRatioHigh', severity: 'warning', route: 'demo', backend: 'jobs' },
      ]),
    );
    // Only what the outage explains.
    expect(raised.map((alert) => alert.alertname).sort()).toEqual(['McpGatewayToolErrorRatioHigh', 'McpGatewayToolServiceDegraded']);

    await stack.startSample('jobs', backends.ports.jobs);
    await waitFor('every alert to resolve', async () => ((await firing()).length === 0 ? true : undefined), { timeoutMs: 30_000, intervalMs: 500 });
    expect(await callJobs(client)).toEqual([{ type: 'text', text: 'hello' }]);
    await client.close();
  });

  it("runs every query of the Grafana dashboard, and joins Envoy's cluster stats to Tool Services", async () => {
    const panels = grafanaDashboard().panels.filter((panel) => panel.type !== 'row');
    const expressions = panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel: panel.title, expr: target.expr })));
    for (const { panel, expr } of expressions) {
      const result = await query(expr.replaceAll('$__rate_interval', '1m').replaceAll('$route', '.*').replaceAll('$backend', '.*'));
      expect([panel, expr, result.status, result.error]).toEqual([panel, expr, 'success', undefined]);
    }
    const retries = panels.find((panel) => panel.title.startsWith('Envoy retries'))!.targets![0].expr.replaceAll('$__rate_interval', '1m');
    const joined = (await query(retries)).data?.result.map((series) => series.metric.tool_service).sort();
    expect(joined).toEqual(['jobs', 'weather']);
  });
});
