import { resourceUriProblem, splitResourceUri } from '../catalog/resource-naming';
import { MODERN_PROTOCOL_VERSION } from './modern-era';
import { Decision, respondError } from './decision';
import { JSON_RPC, JsonRpcId, isObject } from './json-rpc';
import { BackendView, RouteCatalogView } from './route-catalog';

/**
 * Requests for one backend's prompt or resource that reached the gateway lane (docs/adr/0015-federated-
 * resources-and-prompts.md): Envoy's routes place every prompts/get, completion/complete,
 * resources/read, resources/subscribe and resources/unsubscribe whose name or URI carries a backend
 * prefix of the route, so what comes here names none of its backends — or one Envoy has not been told
 * of yet. Each gets the explicit error, never a guess.
 */

/** The methods Envoy routes to one backend by the prefix of a name or URI in their params. */
export const PLACED_METHODS = ['prompts/get', 'completion/complete', 'resources/read', 'resources/subscribe', 'resources/unsubscribe'] as const;
export type PlacedMethod = (typeof PLACED_METHODS)[number];
export const isPlacedMethod = (method: string): method is PlacedMethod => (PLACED_METHODS as readonly string[]).includes(method);

/** The prompt name or resource URI a placed request names, and which of the two it is. */
function targetOf(method: PlacedMethod, params: Record<string, unknown> | undefined): { kind: 'prompt' | 'resource'; value: unknown } {
  if (method === 'prompts/get') return { kind: 'prompt', value: params?.name };
  if (method !== 'completion/complete') return { kind: 'resource', value: params?.uri };
  const ref = isObject(params?.ref) ? params.ref : {};
  return ref.type === 'ref/prompt' ? { kind: 'prompt', value: ref.name } : { kind: 'resource', value: ref.uri };
}

function promptNameProblem(view: RouteCatalogView, name: string): string | undefined {
  if (view.prompts.byKey.has(name)) return undefined;
  const separator = view.toolNameSeparator;
  const at = separator ? name.indexOf(separator) : -1;
  if (at <= 0) return `prompt "${name}" has no backend prefix: get it as <backend>${separator}<prompt>`;
  const backend = name.slice(0, at);
  if (!view.backends.has(backend)) return `unknown backend "${backend}" on route "${view.key}" (prompt "${name}")`;
  return `backend "${backend}" has no prompt "${name.slice(at + separator.length)}" on route "${view.key}"`;
}

/** Why a backend the request does name cannot take it: it declared no such feature, or its revision has no such method. */
function backendProblem(method: PlacedMethod, backend: BackendView | undefined): string | undefined {
  if (!backend) return undefined;
  const { capabilities } = backend;
  if (method === 'completion/complete' && capabilities.completions === undefined) return `backend "${backend.name}" offers no completions`;
  if (method.startsWith('resources/') && capabilities.resources === undefined) return `backend "${backend.name}" serves no resources`;
  if (method === 'resources/subscribe' || method === 'resources/unsubscribe') {
    if (backend.protocolVersion === MODERN_PROTOCOL_VERSION) {
      return `backend "${backend.name}" speaks MCP ${MODERN_PROTOCOL_VERSION}, which has no ${method}: subscribe with subscriptions/listen in that revision`;
    }
    if (capabilities.resources?.subscribe !== true) return `backend "${backend.name}" takes no resource subscriptions`;
  }
  return undefined;
}

export function answerUnplacedRequest(method: PlacedMethod, params: Record<string, unknown> | undefined, id: JsonRpcId, view: RouteCatalogView): Decision {
  const { kind, value } = targetOf(method, params);
  if (typeof value !== 'string') {
    const what = method === 'completion/complete' ? 'params.ref with a prompt name or a resource URI' : kind === 'prompt' ? 'params.name' : 'params.uri';
    return respondError(200, id, JSON_RPC.INVALID_PARAMS, `${method} needs ${what}`, 'invalid_params');
  }
  const named = kind === 'prompt' ? view.backends.get(value.split(view.toolNameSeparator, 1)[0]) : view.backendsBySchemeName.get(splitResourceUri(value)?.schemeName ?? '');
  const problem = backendProblem(method, named) ?? (kind === 'prompt' ? promptNameProblem(view, value) : resourceUriProblem(value, view.key, view.backendsBySchemeName));
  // A known backend's prefix that Envoy did not place: the catalog that reached this sidecar is ahead of Envoy's routes, for a moment at most.
  if (problem === undefined) return respondError(200, id, JSON_RPC.INTERNAL_ERROR, `${method} for "${value}" is being added to the gateway's routes: ask again`, 'route_pending');
  return respondError(200, id, JSON_RPC.INVALID_PARAMS, problem, kind === 'prompt' ? 'unknown_prompt' : 'unknown_resource');
}
