import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { ORIGIN_POLICY } from './access';
import { AUTH_ROUTE_METADATA } from './auth';
import { CHECK_STATUS, MCP_METADATA_NAMESPACE, METADATA_NAMESPACE } from './settings';
import { concurrencyLimitName } from '../../ir/quotas-ir';
import { LIMIT_HEADER, QUOTA_ROUTE_METADATA } from './quotas';
import { TYPE_URL } from './type-urls';

/**
 * Envoy's own replies in JSON-RPC form (docs/errors.md). When a tools/call fails in Envoy — no healthy
 * upstream, connection refused or reset, timeout, overflow — the agent gets a JSON-RPC error naming
 * the backend (never Envoy's text/plain body), or, for a read-only tool whose Tool Service defines a
 * fallback, a degraded result. The call script leaves the request's JSON-RPC id, backend, tool and
 * fallback in dynamic metadata (namespace `mcpgw`) for these formatters. Every other reply of Envoy's
 * own — a request the mcp filter refuses, an HTTP protocol error, the sidecars out of reach — is a
 * JSON-RPC error too. Replies that already are JSON-RPC (the call script's, the session check's) pass
 * as they are.
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
/** A rate or concurrency limit refused the request (docs/quotas.md). */
export const LIMIT_EXCEEDED_CODE = -32029;
/** No valid token on a route with auth (HTTP 401, docs/errors.md). */
export const UNAUTHORIZED_CODE = -32030;
export const GATEWAY_INTERNAL_CODE = -32603;
/** The session check could not be asked (its sidecars out of reach): Envoy's own status for it, rewritten to 503 here. */
export const SESSION_CHECK_ERROR_STATUS = 502;

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
const metadataPresent = (namespace: string, key: string) => ({
  metadata_filter: {
    matcher: { filter: namespace, path: [{ key }], value: { present_match: true } },
    match_if_key_not_found: false,
  },
});
const statusIs = (op: 'EQ' | 'GE', value: number) => ({
  status_code_filter: { comparison: { op, value: { default_value: value, runtime_key: 'mcpgw.unused' } } },
});
const all = (...filters: unknown[]) => ({ and_filter: { filters } });
/**
 * The mcp filter's verdict on the request (mcp_ok, mcp_parse_error, mcp_body_too_large, …), in its own
 * metadata. A reply to a request the filter never saw (an HTTP protocol error) has no verdict, and a
 * metadata filter matches a missing key unless told otherwise.
 */
const mcpStatusIs = (status: string) => ({
  metadata_filter: {
    matcher: { filter: MCP_METADATA_NAMESPACE, path: [{ key: 'status' }], value: { string_match: { exact: status } } },
    match_if_key_not_found: false,
  },
});

function jsonBody(body: Record<string, unknown>) {
  return { json_format: body, content_type: 'application/json' };
}

/** What Envoy says of its own reply, for operators reading a client's report. */
const ENVOY_DETAILS = { http_status: '%RESPONSE_CODE%', details: '%RESPONSE_CODE_DETAILS%' };

/**
 * MCP-Protocol-Version values of the session-based revisions. For any other value the mcp filter
 * checks the request itself (a stateless revision's headers and envelope, or an unknown version) and
 * answers in JSON-RPC; for these its refusals are plain text, put in JSON-RPC form here.
 */
const SESSION_ERA_REVISIONS = `^(${SUPPORTED_PROTOCOL_VERSIONS.join('|')})$`;

const AS_IT_IS = { text_format_source: { inline_string: '%LOCAL_REPLY_BODY%' }, content_type: 'application/json' };

const rpcError = (id: string | null, code: number, message: string, data?: Record<string, unknown>) =>
  jsonBody({ jsonrpc: '2.0', id, error: { code, message, ...(data && { data }) } });

/** The request's JSON-RPC id as the mcp filter parsed it (either lane), with its JSON type. */
const requestId = `%DYNAMIC_METADATA(${MCP_METADATA_NAMESPACE}:id)%`;
const routeQuota = (key: string) => `%METADATA(ROUTE:${QUOTA_ROUTE_METADATA}:${key})%`;
/**
 * The limit a rate-limit refusal is for: a per-instance limit's filter names it (x-mcpgw-limit); for a
 * shared one, Envoy's x-ratelimit-limit lists the shared limits that applied, each with its name.
 */
const REFUSING_LIMIT = `%RESP(${LIMIT_HEADER.toUpperCase()}?X-RATELIMIT-LIMIT)%`;

/** Refusals of the quota filters (docs/quotas.md, docs/errors.md): MCP's shape, 429 with Retry-After. */
function quotaMappers(callLane: unknown) {
  return [
    // A per-caller concurrency limit the session check refused: its own JSON-RPC answer, Retry-After and limit.
    { filter: all(failedWith(['UAEX']), statusIs('EQ', 429)), body_format_override: AS_IT_IS },
    {
      // A rate limit: the filter's 429 already carries Retry-After (and the limit's name).
      filter: statusIs('EQ', 429),
      body_format_override: jsonBody({
        jsonrpc: '2.0',
        id: requestId,
        error: {
          code: LIMIT_EXCEEDED_CODE,
          message: `rate limit exceeded: ${REFUSING_LIMIT}; retry after %RESP(RETRY-AFTER)% s`,
          data: { outcome: 'limited', limit: REFUSING_LIMIT, retry_after_s: '%RESP(RETRY-AFTER)%', details: '%RESPONSE_CODE_DETAILS%', backend: meta('backend'), tool: meta('tool') },
        },
      }),
    },
    {
      // A Tool Service's calls in flight at its limit (its cluster's circuit breaker): refused at once.
      // Only on a route whose Tool Service has one: any other overflow is the gateway's own bound (-32004).
      filter: all(failedWith(['UO']), callLane, cel(`'concurrency' in xds.route_metadata.filter_metadata['${QUOTA_ROUTE_METADATA}']`)),
      status_code: 429,
      headers_to_add: [
        { header: { key: 'retry-after', value: '1' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
        { header: { key: LIMIT_HEADER, value: concurrencyLimitName(routeQuota('tool_service')) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
      ],
      body_format_override: jsonBody({
        jsonrpc: '2.0',
        id: requestId,
        error: {
          code: LIMIT_EXCEEDED_CODE,
          message: `concurrency limit reached: ${concurrencyLimitName(routeQuota('tool_service'))} (tools/call in flight at once); retry after 1 s`,
          data: {
            outcome: 'limited',
            limit: concurrencyLimitName(routeQuota('tool_service')),
            in_flight_limit: routeQuota('concurrency'),
            retry_after_s: 1,
            backend: meta('backend'),
            tool: meta('tool'),
          },
        },
      }),
    },
    {
      // The ratelimit service could not answer for a shared limit that refuses what it cannot count.
      filter: failedWith(['RLSE']),
      status_code: 503,
      body_format_override: rpcError(requestId, GATEWAY_INTERNAL_CODE, 'rate limit service unavailable: a shared limit of this request refuses calls it cannot count (whenServiceDown: refuse); try again', {
        outcome: 'limited',
        ...ENVOY_DETAILS,
      }),
    },
  ];
}

/** A CEL condition on the reply (Envoy's CEL access-log filter): used where no other filter can tell replies apart. */
const cel = (expression: string) => ({
  extension_filter: { name: 'envoy.access_loggers.extension_filters.cel', typed_config: { '@type': TYPE_URL.celFilter, expression } },
});

/** Replies of Envoy's own that only their details tell apart (no response flag, no status of their own). */
const codeDetailsAre = (details: string) => cel(`response.code_details == ${JSON.stringify(details)}`);

/** jwt_authn's verdict on a token, as Envoy's details name it (`jwt_authn_access_denied{Jwt_is_expired}`). */
const jwtRefused = (verdict?: string) =>
  cel(verdict ? `response.code_details == 'jwt_authn_access_denied{${verdict}}'` : `response.code_details.startsWith('jwt_authn_access_denied')`);

/** The route's challenge parameters (resource_metadata, scope), from its metadata (auth.ts). */
const ROUTE_CHALLENGE = `%METADATA(ROUTE:${AUTH_ROUTE_METADATA}:challenge)%`;

/**
 * jwt_authn's refusals as the MCP authorization spec has them (RFC 6750 §3, RFC 9728 §5.1): 401 with
 * `WWW-Authenticate: Bearer resource_metadata="…"` naming the route's metadata document — without an
 * error code when the request carried no token, with `error="invalid_token"` and a description when its
 * token is not good here (expired, another issuer or audience, a bad signature, not a JWT). jwt_authn's
 * own 403 for an audience it does not accept becomes 401 too: the token is invalid for this resource.
 */
function tokenRefusals() {
  const refusal = (filter: unknown, challenge: string, message: string) => ({
    filter,
    status_code: 401,
    headers_to_add: [{ header: { key: 'www-authenticate', value: `Bearer ${challenge}` }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
    body_format_override: rpcError(null, UNAUTHORIZED_CODE, message, ENVOY_DETAILS),
  });
  const invalid = (description: string) => `error="invalid_token", error_description="${description}", ${ROUTE_CHALLENGE}`;
  return [
    refusal(jwtRefused('Jwt_is_missing'), ROUTE_CHALLENGE, 'unauthorized: this route needs a bearer token (see WWW-Authenticate)'),
    refusal(jwtRefused('Jwt_is_expired'), invalid('the access token expired'), 'unauthorized: the access token expired'),
    refusal(
      jwtRefused('Audiences_in_Jwt_are_not_allowed'),
      invalid('the access token is not for this resource (audience)'),
      'unauthorized: the access token is not for this resource (audience)',
    ),
    refusal(jwtRefused('Jwt_issuer_is_not_configured'), invalid('the access token is from an issuer this route does not accept'), 'unauthorized: the access token is from an issuer this route does not accept'),
    refusal(jwtRefused(), invalid('the access token is invalid'), 'unauthorized: the access token is invalid (%LOCAL_REPLY_BODY%)'),
  ];
}

export function localReplyConfig() {
  const callLane = metadataPresent(METADATA_NAMESPACE, 'backend');
  return {
    mappers: [
      // The call script's own answers (unknown or denied tool, the scope challenge, …) are JSON-RPC already.
      { filter: metadataPresent(METADATA_NAMESPACE, 'answered'), body_format_override: AS_IT_IS },
      ...tokenRefusals(),
      {
        // The listener's origin check (access.ts): a browser page of an origin that is not allowed.
        filter: cel(`response.code_details == 'rbac_access_denied_matched_policy[${ORIGIN_POLICY}]'`),
        body_format_override: rpcError(null, -32600, 'Origin not allowed: this gateway serves browser pages of its allowed origins only (settings: --allowed-origins)', ENVOY_DETAILS),
      },
      ...quotaMappers(callLane),
      {
        // Read-only tool with a fallback: the agent gets a degraded result instead of an error.
        filter: all(failedWith(ALL_FAILURE_FLAGS), metadataPresent(METADATA_NAMESPACE, 'fallback')),
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
        filter: all(failedWith(flags), callLane),
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
        // The session check could not be asked: the call went nowhere.
        filter: all(failedWith(['UAEX']), statusIs('EQ', SESSION_CHECK_ERROR_STATUS)),
        status_code: 503,
        body_format_override: rpcError(meta('rpc_id'), GATEWAY_INTERNAL_CODE, 'gateway sidecar unavailable: the session check of this call failed, try again'),
      },
      {
        // The session check's JSON-RPC errors for the client (a backend session it could not open, …):
        // sent with 200, since MCP clients read a JSON-RPC error only from a 2xx answer (and 200 itself
        // means "allowed" to Envoy's ext_authz).
        filter: all(failedWith(['UAEX']), statusIs('EQ', CHECK_STATUS.JSON_RPC_ERROR)),
        status_code: 200,
        body_format_override: AS_IT_IS,
      },
      // The session check refused the call otherwise (an unknown session: 404): its own JSON-RPC answer.
      { filter: failedWith(['UAEX']), body_format_override: AS_IT_IS },
      {
        // The gateway lane's sidecars out of reach (down, restarting, overloaded).
        filter: all(failedWith(ALL_FAILURE_FLAGS), statusIs('GE', 500)),
        body_format_override: rpcError(null, GATEWAY_INTERNAL_CODE, 'gateway sidecar unavailable: %RESPONSE_CODE_DETAILS%, try again'),
      },
      {
        // Over the body limit, on any HTTP version: the mcp filter stops reading and refuses it.
        filter: { or_filter: { filters: [statusIs('EQ', 413), mcpStatusIs('mcp_body_too_large')] } },
        status_code: 413,
        body_format_override: rpcError(null, -32600, 'request body too large for the gateway (settings: --max-request-body-bytes)', ENVOY_DETAILS),
      },
      {
        // Over the header limits (size or count): Envoy's codec refuses the request before any filter.
        filter: statusIs('EQ', 431),
        body_format_override: rpcError(null, -32600, 'request headers too large for the gateway (settings: --max-request-headers-kb, --max-headers-count)', ENVOY_DETAILS),
      },
      {
        // A client too slow to send its request's headers, or all of it (never a slow response).
        filter: statusIs('EQ', 408),
        body_format_override: rpcError(null, -32600, 'request not received in time (settings: --request-headers-timeout-ms, --request-timeout-ms)', ENVOY_DETAILS),
      },
      {
        // A path Envoy refuses to normalize (an escaped slash): its own reply has no words.
        filter: codeDetailsAre('path_normalization_failed'),
        body_format_override: rpcError(null, -32600, 'path refused: an escaped slash or backslash is not allowed in gateway paths', ENVOY_DETAILS),
      },
      {
        // Envoy's overload manager refuses new requests (memory near --max-heap-bytes, envoy/bootstrap.yaml):
        // nothing was sent on. Such a reply carries no response flag, only its details.
        filter: codeDetailsAre('overload'),
        body_format_override: rpcError(null, GATEWAY_INTERNAL_CODE, 'gateway overloaded: try again shortly', ENVOY_DETAILS),
      },
      {
        // The mcp filter's checks of a request of the stateless revision or of an unknown one (headers
        // against the body, the request envelope, the version) answer in JSON-RPC already (-32020,
        // -32602, -32022).
        filter: all(
          mcpStatusIs('mcp_not_jsonrpc'),
          { header_filter: { header: { name: 'mcp-protocol-version', present_match: true } } },
          { header_filter: { header: { name: 'mcp-protocol-version', string_match: { safe_regex: { regex: SESSION_ERA_REVISIONS } }, invert_match: true } } },
        ),
        body_format_override: AS_IT_IS,
      },
      {
        // The mcp filter could not parse the body.
        filter: mcpStatusIs('mcp_parse_error'),
        body_format_override: rpcError(null, -32700, 'Parse error: %LOCAL_REPLY_BODY%'),
      },
      {
        // Any other failure of Envoy's own (overload, an internal error).
        filter: statusIs('GE', 500),
        body_format_override: rpcError(null, GATEWAY_INTERNAL_CODE, 'gateway error: %LOCAL_REPLY_BODY%', ENVOY_DETAILS),
      },
      {
        // The mcp filter's other refusals, and HTTP protocol errors (HTTP/1.0, conflicting lengths, …).
        filter: statusIs('GE', 400),
        body_format_override: rpcError(null, -32600, '%LOCAL_REPLY_BODY%', ENVOY_DETAILS),
      },
    ],
  };
}
