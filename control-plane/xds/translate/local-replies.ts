import { BACKEND_CLUSTER_HEADER, METADATA_NAMESPACE } from './settings';

/**
 * Envoy's own replies in JSON-RPC form. When a steered tools/call fails in Envoy — no healthy
 * upstream, connection refused or reset, timeout, overflow — the agent gets a JSON-RPC error naming
 * the backend (never Envoy's text/plain body), or, for a read-only tool whose Tool Service defines
 * a fallback, a degraded result. The sidecar leaves the request's JSON-RPC id, backend, tool and
 * fallback in dynamic metadata (namespace `mcpgw`) for these formatters. Error codes: docs/errors.md.
 */

/**
 * Upstream failures by the HTTP status class they map to (Envoy access-log flag names). The mapper
 * rewrites the status to 200, so the class is written into the body, not read back from Envoy.
 */
const FAILURE_CLASSES = [
  { httpStatus: 504, flags: ['UT'], reason: 'timed out' },
  { httpStatus: 502, flags: ['UC', 'UR'], reason: 'reset the connection' },
  { httpStatus: 503, flags: ['UH', 'UF', 'UO', 'NR', 'URX', 'NC', 'UMSDR'], reason: 'is unavailable' },
];
const ALL_FAILURE_FLAGS = FAILURE_CLASSES.flatMap((failure) => failure.flags);

export const BACKEND_UNAVAILABLE_CODE = -32004;
export const GATEWAY_INTERNAL_CODE = -32603;

const meta = (key: string) => `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:${key})%`;

/** Failure metadata from the reliability seed (004): attempts, elapsed_ms, fallback_used, last error. */
const failureData = (outcome: 'failed' | 'degraded', httpStatus?: number) => ({
  outcome,
  backend: meta('backend'),
  tool: meta('tool'),
  attempts: '%UPSTREAM_REQUEST_ATTEMPT_COUNT%',
  elapsed_ms: '%DURATION%',
  fallback_used: outcome === 'degraded',
  ...(httpStatus && { http_status: httpStatus }),
  last_error: '%RESPONSE_CODE_DETAILS% %RESPONSE_FLAGS% %UPSTREAM_TRANSPORT_FAILURE_REASON%',
});

const failedWith = (flags: string[]) => ({ response_flag_filter: { flags } });
const hasFallback = {
  metadata_filter: {
    matcher: { filter: METADATA_NAMESPACE, path: [{ key: 'fallback' }], value: { present_match: true } },
    match_if_key_not_found: false,
  },
};

function jsonBody(body: Record<string, unknown>) {
  return { json_format: body, content_type: 'application/json' };
}

export function localReplyConfig() {
  return {
    mappers: [
      {
        // Read-only tool with a fallback: the agent gets a degraded result instead of an error.
        filter: { and_filter: { filters: [failedWith(ALL_FAILURE_FLAGS), hasFallback] } },
        status_code: 200,
        body_format_override: jsonBody({
          jsonrpc: '2.0',
          id: meta('rpc_id'),
          result: {
            content: [{ type: 'text', text: meta('fallback') }],
            isError: false,
            _meta: { 'mcpgw/outcome': failureData('degraded') },
          },
        }),
      },
      // HTTP 200 so that MCP clients surface the JSON-RPC error itself (they report non-2xx bodies as text).
      ...FAILURE_CLASSES.map(({ httpStatus, flags, reason }) => ({
        filter: failedWith(flags),
        status_code: 200,
        body_format_override: jsonBody({
          jsonrpc: '2.0',
          id: meta('rpc_id'),
          error: {
            code: BACKEND_UNAVAILABLE_CODE,
            message: `backend ${meta('backend')} ${reason}: tools/call ${meta('tool')} failed (%RESPONSE_CODE_DETAILS%)`,
            data: failureData('failed', httpStatus),
          },
        }),
      })),
      {
        filter: { status_code_filter: { comparison: { op: 'EQ', value: { default_value: 413, runtime_key: 'mcpgw.unused' } } } },
        body_format_override: jsonBody({
          jsonrpc: '2.0',
          id: null,
          error: { code: -32600, message: 'request body too large for the gateway (limit: Envoy per-connection buffer, 1 MiB by default)' },
        }),
      },
      {
        // The sidecar did not handle the request (down or too slow; ext_proc fails open so that
        // streams survive it): the unsteered route's own JSON-RPC answer, as it is.
        filter: {
          and_filter: {
            filters: [
              { status_code_filter: { comparison: { op: 'GE', value: { default_value: 500, runtime_key: 'mcpgw.unused' } } } },
              { header_filter: { header: { name: BACKEND_CLUSTER_HEADER, present_match: false } } },
            ],
          },
        },
        body_format_override: { text_format_source: { inline_string: '%LOCAL_REPLY_BODY%' }, content_type: 'application/json' },
      },
      {
        // Any other failure of Envoy's own: in JSON-RPC form.
        filter: { status_code_filter: { comparison: { op: 'GE', value: { default_value: 500, runtime_key: 'mcpgw.unused' } } } },
        body_format_override: jsonBody({
          jsonrpc: '2.0',
          id: null,
          error: { code: GATEWAY_INTERNAL_CODE, message: 'gateway error: %RESPONSE_CODE_DETAILS%', data: { http_status: '%RESPONSE_CODE%' } },
        }),
      },
    ],
  };
}
