import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { BackendView } from './route-catalog';

/** A tool may ask for its own deadline in its tools/list entry: `_meta: { "mcpgw/timeoutMs": 30000 }`. */
export const TOOL_TIMEOUT_META_KEY = 'mcpgw/timeoutMs';

export interface CallPolicy {
  /** Envoy's per-request controls, set by the sidecar only (clients' copies are removed). */
  headers: Record<string, string>;
  /** Degraded answer Envoy gives if every attempt fails; only for read-only tools. */
  fallback?: string;
  /** The tool's own deadline, if it asks for one. */
  timeoutMs?: number;
}

/**
 * How Envoy treats one tools/call. Retries beyond "never reached the backend" (which the route always
 * allows) only for tools the catalog marks read-only or idempotent: running a side-effecting tool
 * twice is worse than failing once. Envoy never retries after response bytes went downstream.
 */
export function callPolicy(tool: Tool, backend: BackendView): CallPolicy {
  const headers: Record<string, string> = {};
  const requested = tool._meta?.[TOOL_TIMEOUT_META_KEY];
  const timeoutMs = typeof requested === 'number' && Number.isInteger(requested) && requested > 0 ? requested : undefined;
  if (timeoutMs !== undefined) headers['x-envoy-upstream-rq-timeout-ms'] = String(timeoutMs);
  const readOnly = tool.annotations?.readOnlyHint === true;
  if (readOnly || tool.annotations?.idempotentHint === true) {
    headers['x-envoy-retry-on'] = '5xx,reset,connect-failure,reset-before-request';
    headers['x-envoy-max-retries'] = '2';
  }
  return {
    headers,
    ...(readOnly && backend.fallbackText && { fallback: backend.fallbackText }),
    ...(timeoutMs !== undefined && { timeoutMs }),
  };
}
