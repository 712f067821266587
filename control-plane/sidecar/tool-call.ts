import { z } from 'zod';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
import { CallOutcome } from './call-response';
import { Decision, TOOL_DENIED_CODE, TextRespond, respondError, respondJson } from './decision';
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
  /** The attempts the call took, and when it started (ms since the epoch): a resumed result's outcome. Absent in a token of an older call script. */
  a: z.number().int().min(0).optional(),
  s: z.number().int().min(0).optional(),
});

/** The call a resumed stream belongs to, as its resume token names it. */
export type ResumedCall = z.output<typeof resumeTokenSchema>;

/** What a client's Last-Event-ID names (docs/adr/0018-stream-relaying.md). */
export type ResumeTarget =
  /** The call's final answer was sent: nothing follows. */
  | { kind: 'done' }
  /**
   * A call's stream: its priming id (`mcpgw-call.<token>`), or one of the backend's own events in it
   * (`mcpgw-call.<token>.<the backend's event id>`), where the call is resumed at the backend.
   */
  | { kind: 'call'; token: string; call: ResumedCall; backendEventId?: string }
  /** Another method's stream: one of the backend's own events (`mcpgw:<backend>:<its id>`). */
  | { kind: 'backend'; backend: string; backendEventId: string };

export function resumeTargetOf(lastEventId: string | undefined): ResumeTarget | undefined {
  if (lastEventId === RESUME_DONE) return { kind: 'done' };
  if (lastEventId?.startsWith(RESUME_CALL_PREFIX)) {
    const rest = lastEventId.slice(RESUME_CALL_PREFIX.length);
    // A base64 token has no '.': what follows the first one is the backend's own event id.
    const dot = rest.indexOf('.');
    const token = dot < 0 ? rest : rest.slice(0, dot);
    let decoded: unknown;
    try {
      decoded = JSON.parse(Buffer.from(token, 'base64').toString('utf8'));
    } catch {
      decoded = undefined;
    }
    const call = resumeTokenSchema.safeParse(decoded);
    if (!call.success) return undefined;
    return { kind: 'call', token, call: call.data, ...(dot >= 0 && { backendEventId: rest.slice(dot + 1) }) };
  }
  const named = lastEventId === undefined ? undefined : /^mcpgw:([^:]+):(.+)$/s.exec(lastEventId);
  return named ? { kind: 'backend', backend: named[1], backendEventId: named[2] } : undefined;
}

/**
 * A call's stream that cannot be resumed at its backend. Envoy cannot add an answer to a stream it had
 * to reset (the Tool Service reset it, stopped, or ran past its deadline after answering began), and
 * holds none of the backend's events: the client, resuming at once, gets its call answered here with
 * the JSON-RPC error instead of waiting for its own timeout.
 */
export function brokenCallAnswer(call: ResumedCall): TextRespond {
  const { b: backend, t: tool, i: id } = call;
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

/**
 * The outcome of a call whose answer came on a resumed stream, as the call script gives a direct one
 * (ok, or failed with the backend's error message): the attempts its token names, the time since the
 * call started. undefined for a token of an older call script, which names neither.
 */
export function resumedCallOutcome(call: ResumedCall, lastError?: string): CallOutcome | undefined {
  if (call.a === undefined || call.s === undefined) return undefined;
  return {
    outcome: lastError === undefined ? 'ok' : 'failed',
    backend: call.b,
    tool: call.t,
    attempts: call.a,
    elapsed_ms: Math.max(0, Date.now() - call.s),
    fallback_used: false,
    ...(lastError !== undefined && { last_error: lastError }),
  };
}

/**
 * A GET resuming a stream that is answered without a session: a call's stream resumed at its priming
 * id, whose backend gave no event to resume at (brokenCallAnswer); a stream whose answer was sent
 * (405, which ends a client's resumption). undefined for any other Last-Event-ID (a backend's event:
 * resumed there, in the client's session), or none.
 */
export function answerResumedCall(lastEventId: string | undefined): Decision | undefined {
  const target = resumeTargetOf(lastEventId);
  if (target?.kind === 'done') {
    return respondError(405, null, JSON_RPC.INVALID_REQUEST, 'the call of this stream was answered: nothing follows', 'call_stream_done', { allow: 'POST, DELETE' });
  }
  return target?.kind === 'call' && target.backendEventId === undefined ? brokenCallAnswer(target.call) : undefined;
}
