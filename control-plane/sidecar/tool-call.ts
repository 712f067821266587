import { z } from 'zod';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
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

/**
 * The SSE event ids the call script gives a call's stream (control-plane/xds/lua/call-lane.lua): the
 * first event carries RESUME_CALL_PREFIX and what identifies the call, the call's final answer
 * RESUME_DONE. A client whose stream broke resumes it (MCP resumability) with a GET carrying the last
 * one it saw as Last-Event-ID.
 */
export const RESUME_CALL_PREFIX = 'mcpgw-call.';
export const RESUME_DONE = 'mcpgw-done';

const resumeTokenSchema = z.object({
  b: z.string(),
  t: z.string(),
  i: z.union([z.string(), z.number(), z.null()]),
});

/**
 * A GET resuming a call's stream. Envoy cannot add an answer to a stream it had to reset (the Tool
 * Service reset it, stopped, or ran past its deadline after answering began), and holds none of the
 * backend's events: the client, resuming at once, gets its call answered here with the JSON-RPC error
 * instead of waiting for its own timeout. A stream whose answer was sent has nothing more (405, which
 * ends a client's resumption). undefined for any other Last-Event-ID, or none.
 */
export function answerResumedCall(lastEventId: string | undefined): Decision | undefined {
  if (lastEventId === RESUME_DONE) {
    return respondError(405, null, JSON_RPC.INVALID_REQUEST, 'the call of this stream was answered: nothing follows', 'call_stream_done', { allow: 'POST, DELETE' });
  }
  if (!lastEventId?.startsWith(RESUME_CALL_PREFIX)) return undefined;
  let token: unknown;
  try {
    token = JSON.parse(Buffer.from(lastEventId.slice(RESUME_CALL_PREFIX.length), 'base64').toString('utf8'));
  } catch {
    token = undefined;
  }
  const call = resumeTokenSchema.safeParse(token);
  if (!call.success) return undefined;
  const { b: backend, t: tool, i: id } = call.data;
  const lastError = 'the stream ended before the answer (the Tool Service reset it, stopped, or ran past its deadline)';
  const outcome = { outcome: 'failed', backend, tool, fallback_used: false, last_error: lastError };
  const error = jsonRpcError(id, BACKEND_UNAVAILABLE_CODE, `backend ${backend} ended the stream of tools/call ${tool} before its answer: the call may or may not have run`, outcome);
  return {
    kind: 'respond',
    status: 200,
    headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' },
    body: `id: ${RESUME_DONE}\nevent: message\ndata: ${JSON.stringify(error)}\n\n`,
    reason: 'call_stream_broken',
    metadata: { backend, tool, outcome: 'failed' },
  };
}
