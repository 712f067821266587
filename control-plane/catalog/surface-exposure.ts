import { compareBackendNames, exposedToolName } from './tool-exposure';
import { exposeResourceUri } from './resource-naming';

/**
 * Which prompts, resources and resource templates a route serves, and under which names (docs/catalog.md):
 * decided once by the control plane, like its tools, so that every sidecar serves the same lists.
 */

export interface ExposedPromptMessage {
  /** What agents see and get: `<backend><separator><prompt>`. */
  name: string;
  backend: string;
  /** Position of the prompt in its backend's prompts_json. */
  index: number;
}

export interface ExposedResourceMessage {
  /** The URI (or, for a template, the URI template) agents see: resource-naming.ts. */
  uri: string;
  backend: string;
  /** Position in its backend's resources_json (or resource_templates_json). */
  index: number;
}

/** A prompt, resource or template a rule left out, and why (reported in /status, like tools). */
export interface ItemFinding {
  kind: 'prompt' | 'resource' | 'resource-template';
  /** The exposed name or URI, or the backend's own URI when it has none. */
  item: string;
  backend: string;
  rule: 'empty-name' | 'duplicate-name' | 'relative-uri' | 'duplicate-uri';
  reason: string;
}

/** A backend's own names (prompts) or URIs (resources, templates), in its order. */
export interface BackendItems {
  backend: string;
  items: string[];
}

const inBackendOrder = (backends: BackendItems[]) => [...backends].sort((a, b) => compareBackendNames(a.backend, b.backend));

/**
 * Prompts in the route's order (backends by name, then each backend's own order), named like tools. A
 * prompt without a name, or one its backend lists twice, is left out and reported; prompt names have
 * no character rule of their own in MCP, so no other rule applies.
 */
export function exposeRoutePrompts(backends: BackendItems[], separator: string): { prompts: ExposedPromptMessage[]; findings: ItemFinding[] } {
  const prompts: ExposedPromptMessage[] = [];
  const findings: ItemFinding[] = [];
  const seen = new Set<string>();
  for (const { backend, items } of inBackendOrder(backends)) {
    items.forEach((own, index) => {
      const name = exposedToolName(backend, separator, own);
      if (own.length === 0) {
        findings.push({ kind: 'prompt', item: name, backend, rule: 'empty-name', reason: 'the backend declared a prompt with an empty name' });
      } else if (seen.has(name)) {
        findings.push({ kind: 'prompt', item: name, backend, rule: 'duplicate-name', reason: `backend "${backend}" lists prompt "${own}" more than once; the first is served` });
      } else {
        seen.add(name);
        prompts.push({ name, backend, index });
      }
    });
  }
  return { prompts, findings };
}

/**
 * Resources (or resource templates) in the route's order under their exposed URIs. One that is not an
 * absolute URI cannot carry a backend prefix and is left out, as is a second copy of one URI.
 */
export function exposeRouteResources(backends: BackendItems[], kind: 'resource' | 'resource-template'): { resources: ExposedResourceMessage[]; findings: ItemFinding[] } {
  const resources: ExposedResourceMessage[] = [];
  const findings: ItemFinding[] = [];
  const seen = new Set<string>();
  for (const { backend, items } of inBackendOrder(backends)) {
    items.forEach((own, index) => {
      const uri = exposeResourceUri(backend, own);
      if (uri === undefined) {
        findings.push({ kind, item: own, backend, rule: 'relative-uri', reason: `"${own}" is not an absolute URI (scheme:…), so it cannot be named for the gateway` });
      } else if (seen.has(uri)) {
        findings.push({ kind, item: uri, backend, rule: 'duplicate-uri', reason: `backend "${backend}" lists "${own}" more than once; the first is served` });
      } else {
        seen.add(uri);
        resources.push({ uri, backend, index });
      }
    });
  }
  return { resources, findings };
}
