import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { tools } from './tools';

/**
 * kubeconform's JSON schemas, made from the Kubernetes API's own OpenAPI document (swagger.json of
 * k8s.io/kubernetes, installed by scripts/test-tools.sh) and from the ServiceMonitor CRD, the way
 * kubeconform's schema sets are made (its openapi2jsonschema): every definition kept as the API
 * defines it, in one `_definitions.json`, and a file per kind that refers to its definition. Strict,
 * as `kubectl apply --validate=strict` is: an object with properties allows no others; an optional
 * field may be null; int-or-string takes either.
 */

type Json = unknown;

const swaggerSchema = z.object({
  definitions: z.record(
    z.string(),
    z.looseObject({ 'x-kubernetes-group-version-kind': z.array(z.object({ group: z.string(), version: z.string(), kind: z.string() })).optional() }),
  ),
});

const crdSchema = z.object({
  kind: z.literal('CustomResourceDefinition'),
  spec: z.object({
    group: z.string(),
    names: z.object({ kind: z.string() }),
    versions: z.array(z.object({ name: z.string(), schema: z.object({ openAPIV3Schema: z.record(z.string(), z.unknown()) }) })),
  }),
});

/** kubeconform's file name of a kind: {{.ResourceKind}}{{.KindSuffix}}.json (the group's first label). */
const schemaFileName = (group: string, version: string, kind: string) =>
  `${kind.toLowerCase()}-${group ? `${group.split('.')[0].toLowerCase()}-` : ''}${version.toLowerCase()}.json`;

function strict(schema: Json, required: string[] = []): Json {
  if (Array.isArray(schema)) return schema.map((item) => strict(item));
  if (typeof schema !== 'object' || schema === null) return schema;
  const object = schema as Record<string, Json>;
  if (object.format === 'int-or-string') return { oneOf: [{ type: 'string' }, { type: 'integer' }] };
  const result: Record<string, Json> = {};
  for (const [key, value] of Object.entries(object)) {
    if (key === 'properties' && typeof value === 'object' && value !== null) {
      const requiredHere = Array.isArray(object.required) ? (object.required as string[]) : [];
      result.properties = Object.fromEntries(
        Object.entries(value as Record<string, Json>).map(([name, property]) => [name, nullableUnless(strict(property, requiredHere), requiredHere.includes(name))]),
      );
    } else {
      result[key] = strict(value, required);
    }
  }
  if (result.properties && result.additionalProperties === undefined && !result['x-kubernetes-preserve-unknown-fields']) result.additionalProperties = false;
  return result;
}

/** The API server takes null for an optional field (it is left unset). */
function nullableUnless(schema: Json, required: boolean): Json {
  if (required || typeof schema !== 'object' || schema === null) return schema;
  const object = schema as Record<string, Json>;
  if (typeof object.type === 'string') return { ...object, type: [object.type, 'null'] };
  return schema;
}

/** Writes the schemas into `dir` and answers kubeconform's -schema-location for them. */
export function writeKubeconformSchemas(dir: string): string {
  const { swagger, serviceMonitorCrd } = tools().kubernetesOpenApi;
  fs.mkdirSync(dir, { recursive: true });
  const definitions = swaggerSchema.parse(JSON.parse(fs.readFileSync(swagger, 'utf8'))).definitions;
  fs.writeFileSync(path.join(dir, '_definitions.json'), JSON.stringify({ definitions: strict(definitions) }));
  for (const [name, definition] of Object.entries(definitions)) {
    for (const { group, version, kind } of definition['x-kubernetes-group-version-kind'] ?? []) {
      fs.writeFileSync(path.join(dir, schemaFileName(group, version, kind)), JSON.stringify({ $ref: `_definitions.json#/definitions/${name}` }));
    }
  }
  for (const document of parseAllDocuments(fs.readFileSync(serviceMonitorCrd, 'utf8'))) {
    const crd = crdSchema.parse(document.toJS());
    for (const version of crd.spec.versions) {
      fs.writeFileSync(path.join(dir, schemaFileName(crd.spec.group, version.name, crd.spec.names.kind)), JSON.stringify(strict(version.schema.openAPIV3Schema)));
    }
  }
  return path.join(dir, '{{.ResourceKind}}{{.KindSuffix}}.json');
}

const kubeconformReport = z.object({
  resources: z.array(z.object({ filename: z.string(), kind: z.string(), name: z.string(), version: z.string(), status: z.string(), msg: z.string() })).default([]),
  summary: z.object({ valid: z.number(), invalid: z.number(), errors: z.number(), skipped: z.number() }),
});
export type KubeconformReport = z.infer<typeof kubeconformReport>;

/** kubeconform -strict over manifest files, against the schemas only (no download: every kind must be known). */
export function kubeconform(schemaLocation: string, files: string[]): KubeconformReport {
  const result = spawnSync(tools().kubeconform, ['-strict', '-summary', '-output', 'json', '-verbose', '-schema-location', schemaLocation, ...files], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (result.error) throw result.error;
  return kubeconformReport.parse(JSON.parse(result.stdout));
}
