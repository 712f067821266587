import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import { projectPath } from '../../control-plane/shared/paths';
import { OBSERVABILITY_DIR, OBSERVABILITY_DOC, documentedMetrics, grafanaDashboard } from '../support/observability';
import { tools } from '../support/tools';

/**
 * deploy/observability/: the alerting rules pass promtool's checks and their own unit tests, every
 * alert is tested firing and has its runbook section, and the Grafana dashboard reads documented
 * metrics only.
 */
const dir = OBSERVABILITY_DIR;
const promtool = (...args: string[]) => spawnSync(tools().promtool, args, { cwd: dir, encoding: 'utf8' });

const rulesSchema = z.object({
  groups: z.array(z.object({ name: z.string(), rules: z.array(z.object({ alert: z.string(), expr: z.string(), for: z.string(), labels: z.object({ severity: z.enum(['critical', 'warning']) }), annotations: z.object({ summary: z.string(), runbook: z.string() }) })) })),
});
const alerts = rulesSchema.parse(parse(fs.readFileSync(`${dir}/mcpgw-alerts.yaml`, 'utf8'))).groups.flatMap((group) => group.rules);

const unitTestsSchema = z.object({
  tests: z.array(z.object({ alert_rule_test: z.array(z.object({ alertname: z.string(), exp_alerts: z.array(z.unknown()) })) })),
});

describe('alerting rules', () => {
  it.each([
    ['check config', 'prometheus.yml'],
    ['check rules', 'mcpgw-alerts.yaml'],
    ['test rules', 'mcpgw-alerts.test.yaml'],
  ])('pass promtool %s %s', (command, file) => {
    const result = promtool(...command.split(' '), file);
    expect(`${result.stdout}${result.stderr}`).toMatch(/SUCCESS/);
    expect(result.status).toBe(0);
  });

  it('each fire in a unit test, and each have a runbook section in docs/observability.md', () => {
    const tests = unitTestsSchema.parse(parse(fs.readFileSync(`${dir}/mcpgw-alerts.test.yaml`, 'utf8'))).tests.flatMap((test) => test.alert_rule_test);
    const doc = fs.readFileSync(OBSERVABILITY_DOC, 'utf8');
    expect(alerts.length).toBeGreaterThanOrEqual(9);
    for (const alert of alerts) {
      expect([alert.alert, tests.some((test) => test.alertname === alert.alert && test.exp_alerts.length > 0)]).toEqual([alert.alert, true]);
      expect(alert.annotations.runbook).toBe(`docs/observability.md#${alert.alert.toLowerCase()}`);
      expect(doc).toContain(`\n#### ${alert.alert}\n`);
    }
  });

  it('read documented metrics only', () => {
    expect(unknownMetrics(alerts.map((alert) => alert.expr))).toEqual([]);
  });
});

const DOCUMENTED = new Set(documentedMetrics().map((metric) => metric.name));
const LABELS = new Set(documentedMetrics().flatMap((metric) => metric.labels));
/** Metric names in PromQL expressions (or prose) that are neither documented metrics (histogram series by their family) nor their labels. */
function unknownMetrics(expressions: string[]): string[] {
  // A prefix such as `mcpgw_sidecar_*` ends with an underscore: not a name.
  const names = expressions.flatMap((expr) => [...expr.matchAll(/\b((?:mcpgw|envoy)_[a-z0-9_]*[a-z0-9])\b/g)].map((match) => match[1]));
  return [...new Set(names)].filter((name) => !LABELS.has(name) && !DOCUMENTED.has(name) && !DOCUMENTED.has(name.replace(/_(bucket|sum|count)$/, '')));
}

describe('the Grafana dashboard', () => {
  const dashboard = grafanaDashboard();
  const panels = dashboard.panels.filter((panel) => panel.type !== 'row');

  it('queries the chosen Prometheus data source in every panel', () => {
    expect(dashboard.templating.list.map((variable) => variable.name)).toEqual(['datasource', 'route', 'backend']);
    expect(panels.length).toBeGreaterThan(15);
    for (const panel of panels) {
      expect([panel.title, panel.datasource?.uid]).toEqual([panel.title, '${datasource}']);
      expect(panel.targets?.length).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) expect(target.datasource.uid).toBe('${datasource}');
    }
  });

  it('reads documented metrics only', () => {
    expect(unknownMetrics(panels.flatMap((panel) => (panel.targets ?? []).map((target) => target.expr)))).toEqual([]);
  });
});

describe('the other docs', () => {
  /**
   * Names in the docs that look like metrics but are not: an access log field, the call log's names,
   * the egress listener's reply format and the agents' listener certificate's SDS secret.
   */
  const NOT_METRICS = ['envoy_route', 'mcpgw_calls', 'mcpgw_leased_calls', 'mcpgw_egress', 'mcpgw_listener_certificate'];
  it.each(['README.md', 'docs/errors.md', 'docs/hardening.md', 'docs/portal-contract.md', 'docs/registry.md', 'docs/tools-list.md', 'docs/xds.md'])('%s name documented metrics only', (file) => {
    expect(unknownMetrics([fs.readFileSync(projectPath(file), 'utf8')]).filter((name) => !NOT_METRICS.includes(name))).toEqual([]);
  });
});
