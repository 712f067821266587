import { Decision, TOOL_DENIED_CODE, respondError, respondJson } from './decision';
import { JSON_RPC, JsonRpcId, jsonRpcError } from './json-rpc';
import { RouteCatalogView, resolveTool } from './route-catalog';

/**
 * A tools/call that reached the gateway lane: the call lane (Envoy, docs/adr/0008-data-path-lanes.md)
 * places every call whose name carries a backend prefix of the route, so what comes here names no
 * backend of it — or names one Envoy has not been told of yet. Each gets the explicit error, never a guess.
 */
export function answerUnplacedCall(params: Record<string, unknown> | undefined, id: JsonRpcId, view: RouteCatalogView): Decision {
  const name = params?.name;
  if (typeof name !== 'string') {
    return respondError(200, id, JSON_RPC.INVALID_PARAMS, 'tools/call needs params.name', 'invalid_params');
  }
  const resolution = resolveTool(view, name);
  if (!resolution.ok && resolution.denied) {
    const { backend, toolName, rule } = resolution.denied;
    const outcome = { outcome: 'denied', backend: backend.name, tool: toolName, attempts: 0, elapsed_ms: 0, fallback_used: false, rule };
    return {
      ...respondJson(200, jsonRpcError(id, TOOL_DENIED_CODE, resolution.message, outcome), 'tool_denied'),
      metadata: { backend: backend.name, tool: toolName, outcome: 'denied' },
    };
  }
  if (!resolution.ok) return respondError(200, id, JSON_RPC.INVALID_PARAMS, resolution.message, 'unknown_tool');
  // The catalog that reached this sidecar is ahead of the routes Envoy has: a moment, at most.
  return respondError(200, id, JSON_RPC.INTERNAL_ERROR, `tool "${name}" is being added to the gateway's routes: call it again`, 'call_route_pending');
}
