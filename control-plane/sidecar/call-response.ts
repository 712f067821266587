/**
 * The vocabulary of a call's outcome, and the ids the call lane gives requests a backend sends its
 * client. The answer itself is rewritten in Envoy by the call script (control-plane/xds/lua/call-lane.lua,
 * docs/adr/0008-data-path-lanes.md); the sidecar only speaks this vocabulary when it answers a call itself.
 */

/** Where a call's outcome goes: `result._meta` of a result, `error.data` of a backend's own error. */
export const OUTCOME_META_KEY = 'mcpgw/outcome';

/** The reliability seed's outcome vocabulary (docs/errors.md). */
export type CallOutcomeName = 'ok' | 'failed' | 'degraded' | 'denied';

/** The reliability seed's per-call metadata (docs/errors.md), as the caller sees it. */
export interface CallOutcome {
  outcome: CallOutcomeName;
  backend: string;
  tool: string;
  attempts: number;
  elapsed_ms: number;
  fallback_used: boolean;
  last_error?: string;
  /** For `denied`: what refused it (the route's policy, or the backend's credentials for this caller). */
  reason?: 'policy' | 'credentials';
}

/**
 * The backend and its own id behind an id the call script gave a request a backend sent its client
 * (sampling, elicitation, roots) inside a tools/call stream: `mcpgw:<backend>:<its own id as JSON>`
 * (`rawId`, as the script recorded it). undefined for an id the gateway did not hand out.
 */
export function parseServerRequestId(id: unknown): { backend: string; id: string | number; rawId: string } | undefined {
  if (typeof id !== 'string') return undefined;
  const match = /^mcpgw:([a-z0-9_]+):(.+)$/s.exec(id);
  if (!match) return undefined;
  try {
    const own = JSON.parse(match[2]) as unknown;
    return typeof own === 'string' || typeof own === 'number' ? { backend: match[1], id: own, rawId: match[2] } : undefined;
  } catch {
    return undefined;
  }
}

/** A call the caller may not make with the token it presented (per-caller backend credentials): nothing was sent to the backend. */
export function deniedOutcome(backend: string, tool: string, startedAt: number, lastError: string): CallOutcome {
  return { outcome: 'denied', backend, tool, attempts: 0, elapsed_ms: Math.round(performance.now() - startedAt), fallback_used: false, reason: 'credentials', last_error: lastError };
}

/** How the sidecar names a failed call it answers itself (a backend session that could not be opened). */
export function failedOutcome(backend: string, tool: string, startedAt: number, lastError: string): CallOutcome {
  return { outcome: 'failed', backend, tool, attempts: 0, elapsed_ms: Math.round(performance.now() - startedAt), fallback_used: false, last_error: lastError };
}

