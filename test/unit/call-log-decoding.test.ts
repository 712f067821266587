import * as protobuf from 'protobufjs';
import { CallLog, CallRecord, LimitedRecord, StreamMessage } from '../../control-plane/admin/call-log';
import { callLogDecoder } from '../../control-plane/admin/call-log-decoding';
import { auditEventOf } from '../../control-plane/audit/audit-event';
import { grpcServices } from '../../control-plane/shared/grpc-packages';
import { resolveInIncludeDirs } from '../../control-plane/xds/protobuf/envoy-protos';

/**
 * The lean decoder of Envoy's call log (control-plane/admin/call-log-decoding.ts) against the whole
 * decoding it replaces (@grpc/proto-loader, as the AccessLogService's own definition decodes): the
 * same wire bytes, every field Envoy sends, must give every consumer the same calls, refusals,
 * failures, audit events and leases.
 */

function fullRoot(): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = resolveInIncludeDirs;
  root.loadSync('envoy/service/accesslog/v3/als.proto', { keepCase: true });
  root.resolveAll();
  return root;
}

const value = (item: unknown): Record<string, unknown> => {
  if (typeof item === 'string') return { stringValue: item };
  if (typeof item === 'number') return { numberValue: item };
  if (typeof item === 'boolean') return { boolValue: item };
  if (Array.isArray(item)) return { listValue: { values: item.map(value) } };
  if (item && typeof item === 'object') return { structValue: struct(item as Record<string, unknown>) };
  return { nullValue: 0 };
};
const struct = (object: Record<string, unknown>) => ({ fields: Object.fromEntries(Object.entries(object).map(([key, item]) => [key, value(item)])) });

/** Entries as Envoy sends them: every kind the consumers tell apart, with fields none of them reads. */
const common = (overrides: Record<string, unknown>) => ({
  sample_rate: 1,
  downstream_remote_address: { socket_address: { address: '127.0.0.1', port_value: 40000 } },
  start_time: { seconds: 1_800_000_000, nanos: 250_000_000 },
  time_to_last_rx_byte: { nanos: 1_000_000 },
  time_to_last_downstream_tx_byte: { nanos: 42_000_000 },
  upstream_cluster: 'tool_service.jobs',
  upstream_request_attempt_count: 1,
  route_name: 'demo/call/jobs',
  ...overrides,
});
const ENTRIES = [
  {
    common_properties: common({
      upstream_remote_address: { socket_address: { address: '127.0.0.1', port_value: 9001 } },
      metadata: {
        filter_metadata: {
          mcpgw: struct({ route: 'demo', backend: 'jobs', tool: 'echo', method: 'tools/call', outcome: 'ok', credential: 'none', arguments: '{"text":"hi"}', caller_iss: 'http://idp', caller_sub: 'a1' }),
          'envoy.filters.http.mcp': struct({ method: 'tools/call', id: 3, params: { name: 'jobs__echo', arguments: { text: 'hi', nested: [1, true, null] } } }),
          'envoy.filters.http.ext_authz': struct({ 'x-mcpgw-concurrency-lease': 'bGVhc2U' }),
          'envoy.filters.http.jwt_authn': struct({ payload: { iss: 'http://idp', sub: 'a1', scope: 'tools:call' } }),
        },
      },
    }),
    request: { request_method: 'POST', path: '/mcp/demo', request_id: 'req-1', request_headers: { 'x-other': 'a' }, request_headers_bytes: 300 },
    response: { response_code: { value: 200 }, response_code_details: 'via_upstream', response_headers: {}, response_body_bytes: 80 },
  },
  {
    common_properties: common({
      upstream_request_attempt_count: 3,
      response_flags: { upstream_connection_failure: true },
      upstream_transport_failure_reason: 'delayed connect error: Connection refused',
      metadata: { filter_metadata: { mcpgw: struct({ route: 'demo', backend: 'jobs', tool: 'read', method: 'tools/call', fallback: 'unavailable' }) } },
    }),
    request: { path: '/mcp/demo', request_id: 'req-2' },
    response: { response_code: { value: 503 }, response_code_details: 'upstream_reset_before_response_started{connection_refused}' },
  },
  {
    common_properties: common({
      upstream_request_attempt_count: 0,
      route_name: 'demo/gateway',
      response_flags: { rate_limited: true },
      metadata: { filter_metadata: { 'envoy.filters.http.mcp': struct({ method: 'tools/list', id: 1 }) } },
    }),
    request: { path: '/mcp/demo', request_id: 'req-3' },
    response: { response_code: { value: 429 }, response_code_details: 'request_rate_limited', response_headers: { 'x-mcpgw-limit': 'route:demo/discovery/per-caller' } },
  },
  {
    common_properties: common({
      upstream_request_attempt_count: 0,
      response_flags: { unauthorized_details: { reason: 'EXTERNAL_SERVICE' } },
      metadata: { filter_metadata: { mcpgw: struct({ route: 'demo', backend: 'jobs', tool: 'echo', method: 'tools/call', check: true }) } },
    }),
    request: { path: '/mcp/demo', request_id: 'req-5' },
    response: { response_code: { value: 404 }, response_code_details: 'ext_authz_denied' },
  },
  {
    common_properties: common({ upstream_request_attempt_count: 0, route_name: '', metadata: undefined }),
    request: { path: '/mcp/demo', request_id: 'req-4', request_headers: { 'x-mcpgw-claim-iss': 'http://idp', 'x-mcpgw-claim-sub': 'b2' } },
    response: { response_code: { value: 401 }, response_code_details: 'jwt_authn_access_denied{Jwt_is_missing}' },
  },
];

function wire(): Buffer {
  const type = fullRoot().lookupType('envoy.service.accesslog.v3.StreamAccessLogsMessage');
  const message = { identifier: { node: { id: 'envoy-1', cluster: 'mcp-gateway' }, log_name: 'mcpgw_calls' }, http_logs: { log_entry: ENTRIES } };
  return Buffer.from(type.encode(type.fromObject(message)).finish());
}

/** What every consumer makes of a decoded message. */
function consumed(message: StreamMessage) {
  const calls: CallRecord[] = [];
  const limited: LimitedRecord[] = [];
  const failures: string[] = [];
  const log = new CallLog([{ record: (call) => calls.push(call) }], () => 0, [{ backendFailed: (...args) => failures.push(args.join(' | ')) }], [{ record: (item) => limited.push(item) }]);
  const entries = message.http_logs?.log_entry ?? [];
  for (const entry of entries) log.add(entry);
  const audit = entries.map(auditEventOf);
  const leases = entries.map((entry) => entry.common_properties?.metadata?.filter_metadata?.['envoy.filters.http.ext_authz']?.fields?.['x-mcpgw-concurrency-lease']?.stringValue);
  return { calls, limited, failures, audit, leases };
}

describe("the lean decoder of Envoy's call log", () => {
  const bytes = wire();
  const whole = grpcServices.accessLog().service.StreamAccessLogs.requestDeserialize(bytes) as StreamMessage;
  const lean = callLogDecoder()(bytes);

  it('gives every consumer what the whole decoding gives it', () => {
    const expected = consumed(whole);
    expect(expected.calls.map((call) => call.outcome)).toEqual(['ok', 'degraded', 'invalid']);
    expect(expected.limited).toHaveLength(1);
    expect(expected.failures).toHaveLength(1);
    expect(expected.audit.filter(Boolean)).toHaveLength(4);
    expect(expected.leases[0]).toBe('bGVhc2U');
    expect(consumed(lean)).toEqual(expected);
  });

  it('never decodes a metadata namespace no consumer reads', () => {
    const namespaces = lean.http_logs?.log_entry?.[0].common_properties?.metadata?.filter_metadata ?? {};
    expect(Object.keys(namespaces).sort()).toEqual(['envoy.filters.http.ext_authz', 'envoy.filters.http.mcp', 'mcpgw']);
  });
});
