import * as fs from 'node:fs';
import { projectPath } from '../../control-plane/shared/paths';

/** Where a documented metric is scraped from. */
export type MetricSource = 'control plane' | 'sidecar' | 'envoy';

export interface DocumentedMetric {
  source: MetricSource;
  name: string;
  type: 'counter' | 'gauge' | 'histogram';
  labels: string[];
}

export const OBSERVABILITY_DOC = projectPath('docs', 'observability.md');
/** The Prometheus config, alerting rules and Grafana dashboard shipped for operators. */
export const OBSERVABILITY_DIR = projectPath('deploy', 'observability');

const SECTIONS: Record<string, MetricSource> = { 'Control plane': 'control plane', Sidecar: 'sidecar', Envoy: 'envoy' };

/**
 * The metric tables of docs/observability.md ("### Control plane", "### Sidecar", "### Envoy"): one
 * row per metric, `| `name` | type | `label`, `label` | meaning |`.
 */
export function documentedMetrics(): DocumentedMetric[] {
  const metrics: DocumentedMetric[] = [];
  let source: MetricSource | undefined;
  for (const line of fs.readFileSync(OBSERVABILITY_DOC, 'utf8').split('\n')) {
    const heading = /^#{2,3} (.+)$/.exec(line);
    if (heading) source = SECTIONS[heading[1]];
    const row = /^\| `([a-z0-9_]+)` \| (counter|gauge|histogram) \|([^|]*)\|/.exec(line);
    if (!source || !row) continue;
    const labels = [...row[3].matchAll(/`([a-z_]+)`/g)].map((match) => match[1]);
    metrics.push({ source, name: row[1], type: row[2] as DocumentedMetric['type'], labels });
  }
  return metrics;
}

export interface ScrapedSeries {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Samples of a Prometheus text exposition, and the metric families it declares (# TYPE). */
export function parseExposition(text: string): { families: Map<string, string>; series: ScrapedSeries[] } {
  const families = new Map<string, string>();
  const series: ScrapedSeries[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) families.set(type[1], type[2]);
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!sample) continue;
    const labels = Object.fromEntries([...(sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((match) => [match[1], match[2]]));
    series.push({ name: sample[1], labels, value: Number(sample[3]) });
  }
  return { families, series };
}

export interface GrafanaPanel {
  type: string;
  title: string;
  datasource?: { uid: string };
  targets?: { expr: string; datasource: { uid: string } }[];
}

/** deploy/observability/grafana-dashboard.json, as far as the tests read it. */
export function grafanaDashboard(): { panels: GrafanaPanel[]; templating: { list: { name: string }[] } } {
  return JSON.parse(fs.readFileSync(`${OBSERVABILITY_DIR}/grafana-dashboard.json`, 'utf8'));
}
