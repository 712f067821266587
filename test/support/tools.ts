import * as fs from 'node:fs';
import { z } from 'zod';
import { projectPath } from '../../control-plane/shared/paths';

/**
 * Where the real parts installed by scripts/test-tools.sh live. The script writes .tools/tools.json;
 * the versions are named once, in that script.
 */
const ToolsManifest = z.object({
  keycloak: z.object({ version: z.string(), home: z.string(), javaHome: z.string() }),
  jaeger: z.string(),
  promtool: z.string(),
  prometheus: z.string(),
  helm: z.string(),
  ratelimit: z.string(),
  kubeconform: z.string(),
  /** The Kubernetes API's own OpenAPI document and the ServiceMonitor CRD the chart's manifests are checked against. */
  kubernetesOpenApi: z.object({ version: z.string(), swagger: z.string(), serviceMonitorCrd: z.string() }),
  dockerCompose: z.string(),
  chromium: z.string(),
  redisSentinel: z.string(),
  openssl: z.string(),
});
export type ToolsManifest = z.infer<typeof ToolsManifest>;

let manifest: ToolsManifest | undefined;

export function tools(): ToolsManifest {
  if (manifest) return manifest;
  const file = projectPath('.tools', 'tools.json');
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: run scripts/test-tools.sh (scripts/test.sh runs it)`);
  const parsed = ToolsManifest.safeParse(JSON.parse(fs.readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`${file}: ${z.prettifyError(parsed.error)}; run scripts/test-tools.sh again`);
  manifest = parsed.data;
  return manifest;
}
