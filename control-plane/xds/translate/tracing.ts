import { SYSTEM_CA_BUNDLE } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { HttpFilter } from './call-lane';
import { discoveryTypeFor, loadAssignment, upstreamTls } from './clusters';
import { GatewayTracing, MCP_METADATA_NAMESPACE, METADATA_NAMESPACE, OTEL_COLLECTOR_CLUSTER_NAME, SPAN_IDS_HEADER } from './settings';
import { TYPE_URL, typedStruct } from './type-urls';

/**
 * Envoy's spans (docs/observability.md#traces): the HCM's OpenTelemetry tracer exports one span per
 * request over OTLP/HTTP to the collector cluster. Without tracing settings none of this exists: no
 * tracer, no cluster, no extra filter, no route decorations.
 */

/** Span names, by what the route does. */
export const GATEWAY_SPANS = {
  /** A tools/call carried to its backend: child of the agent's span, parent of the backend's. */
  forward: 'mcp.gateway.forward',
  /** A request the sidecar answers (initialize, tools/list, ping, notifications, DELETE, …). */
  answer: 'mcp.gateway.answer',
  /** A client's standalone GET stream. */
  stream: 'mcp.gateway.stream',
} as const;

/** Longest value a client chooses that a span attribute carries (the JSON-RPC method, a tool name). */
const MAX_CLIENT_VALUE = { method: 64, tool: 128 };

function collectorOf(otlpEndpoint: string) {
  const url = new URL(otlpEndpoint);
  const tls = url.protocol === 'https:';
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return { host, port: url.port ? Number(url.port) : tls ? 443 : 80, tls, tracesUrl: `${url.origin}${url.pathname.replace(/\/+$/, '')}/v1/traces` };
}

/** The OTLP collector, over HTTP/1.1 (TLS for an https:// endpoint, checked against the system's CAs). */
export function collectorCluster(tracing: GatewayTracing): TypedJson {
  const { host, port, tls } = collectorOf(tracing.otlpEndpoint);
  const endpoints = [{ address: host, port }];
  return {
    '@type': TYPE_URL.cluster,
    name: OTEL_COLLECTOR_CLUSTER_NAME,
    type: discoveryTypeFor(endpoints),
    connect_timeout: '1s',
    load_assignment: loadAssignment(OTEL_COLLECTOR_CLUSTER_NAME, endpoints),
    ...(tls && { transport_socket: upstreamTls({ sni: host, caFile: SYSTEM_CA_BUNDLE }) }),
  };
}

/** A span attribute from the call script's metadata (namespace mcpgw); none when the script set no value. */
const fromCallScript = (tag: string, key: string) => ({
  tag,
  metadata: { kind: { request: {} }, metadata_key: { key: METADATA_NAMESPACE, path: [{ key }] } },
});

/**
 * OpenTelemetry's `parentbased_traceidratio`, as the sidecar and control plane sample: a request whose
 * traceparent says "sampled" (or "not sampled") is traced (or not) as its caller decided; of the others,
 * this share (by trace id). Envoy 1.40's tracer ignores the HCM's random_sampling for requests without
 * a traceparent (every one is traced), so the sampler is the tracer's own.
 */
function parentBasedSampler(samplingRatio: number) {
  return {
    name: 'envoy.tracers.opentelemetry.samplers.parent_based',
    typed_config: typedStruct(TYPE_URL.parentBasedSampler, {
      wrapped_sampler: {
        name: 'envoy.tracers.opentelemetry.samplers.trace_id_ratio_based',
        typed_config: {
          '@type': TYPE_URL.traceIdRatioSampler,
          sampling_percentage: { numerator: Math.round(samplingRatio * 1_000_000), denominator: 'MILLION' },
        },
      },
    }),
  };
}

/** The HttpConnectionManager's `tracing`: the tracer, the sampling, the attributes every span gets. */
export function connectionManagerTracing(tracing: GatewayTracing) {
  return {
    provider: {
      name: 'envoy.tracers.opentelemetry',
      typed_config: {
        '@type': TYPE_URL.openTelemetryConfig,
        service_name: tracing.serviceName,
        http_service: { http_uri: { uri: collectorOf(tracing.otlpEndpoint).tracesUrl, cluster: OTEL_COLLECTOR_CLUSTER_NAME, timeout: '5s' } },
        sampler: parentBasedSampler(tracing.samplingRatio),
      },
    },
    custom_tags: [
      // The mcp filter's parse of every MCP request; "-" for a GET or DELETE.
      { tag: 'mcp.method.name', value: `%DYNAMIC_METADATA(${MCP_METADATA_NAMESPACE}:method):${MAX_CLIENT_VALUE.method}%` },
      fromCallScript('mcp.gateway.outcome', 'outcome'),
      fromCallScript('mcp.gateway.attempts', 'attempts'),
      fromCallScript('mcp.session.present', 'session_present'),
      // Envoy's tracer sets a span's error status only from a 5xx status, and a failed call is answered
      // with HTTP 200 (a JSON-RPC error, which MCP clients read only from a 2xx answer): the call
      // script gives its span the status the call failed with.
      fromCallScript('http.status_code', 'failure_status'),
    ],
  };
}

/**
 * Puts the ids of Envoy's span of this request into a header the call script reads (and removes), so
 * that it can name that span in params._meta too. A substitution format string needs a filter: the
 * Lua filter has no access to the span. Only for a request with a traceparent header: the script names
 * the gateway's span in _meta only when the header names the same trace (Envoy's span continues the
 * header's trace), so without one nobody reads the ids, and the filter is skipped (match_delegate)
 * instead of formatting them on every call.
 */
export function spanIdsFilter(): HttpFilter {
  const spanIds = {
    name: 'envoy.filters.http.header_mutation',
    typed_config: {
      '@type': TYPE_URL.headerMutation,
      mutations: {
        request_mutations: [
          { append: { header: { key: SPAN_IDS_HEADER, value: '%TRACE_ID%-%SPAN_ID%' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' } },
        ],
      },
    },
  };
  const hasTraceparent = {
    single_predicate: {
      input: { name: 'traceparent', typed_config: { '@type': TYPE_URL.requestHeaderInput, header_name: 'traceparent' } },
      value_match: { safe_regex: { google_re2: {}, regex: '.*' } },
    },
  };
  return {
    name: 'envoy.filters.http.match_delegate',
    typed_config: {
      '@type': TYPE_URL.extensionWithMatcher,
      extension_config: spanIds,
      xds_matcher: {
        matcher_list: {
          matchers: [{ predicate: { not_matcher: hasTraceparent }, on_match: { action: { name: 'skip', typed_config: { '@type': TYPE_URL.skipFilter } } } }],
        },
      },
    },
  };
}

/** A route's span name and attributes: its route key, and on a call route its backend and tool. */
export function routeTracing(span: (typeof GATEWAY_SPANS)[keyof typeof GATEWAY_SPANS], routeKey: string, backend?: string) {
  const literal = (tag: string, value: string) => ({ tag, literal: { value } });
  return {
    // Not propagated: the backend gets the span's context in traceparent, never Envoy's own header.
    decorator: { operation: span, propagate: false },
    tracing: {
      custom_tags: [
        literal('mcp.gateway.route', routeKey),
        ...(backend
          ? [literal('mcp.gateway.backend', backend), { tag: 'gen_ai.tool.name', value: `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:tool):${MAX_CLIENT_VALUE.tool}%` }]
          : []),
      ],
    },
  };
}
