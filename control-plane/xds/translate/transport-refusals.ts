import { GATEWAY_LANE_FILTERS } from './call-lane';
import { TYPE_URL } from './type-urls';

/**
 * Requests the Streamable HTTP transport refuses on their headers alone, answered with the status that
 * says what is wrong (RFC 9110) rather than the mcp filter's blanket 400 "Only MCP traffic is allowed":
 * a method no gateway path serves (405, with `Allow`), a POST to an MCP endpoint whose body is not JSON
 * (415), and one whose `Accept` does not list both answer types the transport requires (406). The tests
 * mirror the mcp filter's own (its `isValidMcpPostRequest`: case-sensitive, `application/json` alone or
 * followed by parameters), so a request either filter passes the other passes too.
 *
 * They are the first routes of the served virtual host: Envoy matches them on headers before the mcp
 * filter reads the body, and neither the mcp filter nor the call script runs on them (nothing to parse).
 * Envoy's local-reply mappers give each the JSON-RPC shape of its other replies (-32600, the text below).
 */

/** The methods the gateway's paths serve (OPTIONS passes too: the CORS filter answers browsers' preflights). */
export const ALLOWED_METHODS = ['GET', 'POST', 'DELETE'];

const NOTHING_TO_PARSE = {
  ...GATEWAY_LANE_FILTERS,
  'envoy.filters.http.mcp': { '@type': TYPE_URL.filterConfig, disabled: true },
};

const refusal = (name: string, match: Record<string, unknown>, status: number, message: string, headers: Record<string, string> = {}) => ({
  name,
  match,
  direct_response: { status, body: { inline_string: message } },
  ...(Object.keys(headers).length > 0 && {
    response_headers_to_add: Object.entries(headers).map(([key, value]) => ({ header: { key, value }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' })),
  }),
  typed_per_filter_config: NOTHING_TO_PARSE,
});

// An absent header is read as empty, so that it fails the test too (Envoy's default: no match at all).
const headerNotMatching = (name: string, regex: string) => ({ name, string_match: { safe_regex: { regex } }, invert_match: true, treat_missing_header_as_empty: true });
const headerNotContaining = (name: string, text: string) => ({ name, string_match: { contains: text }, invert_match: true, treat_missing_header_as_empty: true });
const post = { name: ':method', string_match: { exact: 'POST' } };
const onMcpPaths = (...headers: Record<string, unknown>[]) => ({ path_separated_prefix: '/mcp', headers: [post, ...headers] });

export function transportRefusalRoutes() {
  return [
    refusal(
      'method_not_allowed',
      { prefix: '/', headers: [headerNotMatching(':method', `^(${[...ALLOWED_METHODS, 'OPTIONS'].join('|')})$`)] },
      405,
      `method not allowed: MCP endpoints take ${ALLOWED_METHODS.join(', ')}`,
      { allow: ALLOWED_METHODS.join(', ') },
    ),
    refusal(
      'unsupported_media_type',
      onMcpPaths(headerNotMatching('content-type', '^application/json([ ;].*)?$')),
      415,
      'unsupported media type: a POST to an MCP endpoint carries Content-Type: application/json',
    ),
    ...['application/json', 'text/event-stream'].map((type) =>
      refusal(
        `not_acceptable_without_${type.split('/')[1].replace(/-/g, '_')}`,
        onMcpPaths(headerNotContaining('accept', type)),
        406,
        'not acceptable: a POST to an MCP endpoint must accept both application/json and text/event-stream (Accept)',
      ),
    ),
  ];
}
