import * as grpc from '@grpc/grpc-js';
import * as protobuf from 'protobufjs';
import { resolveInIncludeDirs } from '../xds/protobuf/envoy-protos';
import { EXT_AUTHZ_METADATA_NAMESPACE, MCP_METADATA_NAMESPACE, METADATA_NAMESPACE } from '../xds/translate/settings';
import { StreamMessage, StructValue } from './call-log';

/**
 * Envoy's call log, decoded for what the gateway reads (docs/adr/0008-data-path-lanes.md, "The two
 * access logs"). Envoy's gRPC access logger sends every entry whole — request, response, addresses,
 * timings, and the request's whole dynamic metadata, the mcp filter's parse of the call's arguments
 * included — and decoding all of it into objects (@grpc/proto-loader, defaults filled in) was most of
 * the control plane's CPU per call. Here Envoy's message types keep only the fields LogEntry names
 * (protobufjs skips the others unread), and of the metadata only the namespaces the consumers read are
 * decoded, each when a consumer first reads it.
 */

/** The fields read, per message type; every other field of these types is skipped on the wire. */
const READ_FIELDS: Record<string, string[]> = {
  'envoy.service.accesslog.v3.StreamAccessLogsMessage': ['http_logs'],
  'envoy.data.accesslog.v3.HTTPAccessLogEntry': ['common_properties', 'request', 'response'],
  'envoy.data.accesslog.v3.AccessLogCommon': [
    'start_time',
    'time_to_last_downstream_tx_byte',
    'upstream_remote_address',
    'upstream_transport_failure_reason',
    'upstream_request_attempt_count',
    'response_flags',
    'metadata',
    'route_name',
  ],
  'envoy.data.accesslog.v3.HTTPRequestProperties': ['path', 'original_path', 'request_id', 'request_headers'],
  'envoy.data.accesslog.v3.HTTPResponseProperties': ['response_code', 'response_code_details', 'response_headers'],
};

/** The metadata namespaces a consumer reads: the call script's, the mcp filter's parse, the session check's headers. */
const READ_NAMESPACES = [METADATA_NAMESPACE, MCP_METADATA_NAMESPACE, EXT_AUTHZ_METADATA_NAMESPACE];

function leanRoot(): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = resolveInIncludeDirs;
  root.loadSync('envoy/service/accesslog/v3/als.proto', { keepCase: true });
  for (const [typeName, kept] of Object.entries(READ_FIELDS)) {
    const type = root.lookupType(typeName);
    for (const field of [...type.fieldsArray]) if (!kept.includes(field.name)) type.remove(field);
  }
  // Each namespace's Struct stays as its bytes on the wire until a consumer reads it.
  const metadata = root.lookupType('envoy.config.core.v3.Metadata');
  for (const field of [...metadata.fieldsArray]) metadata.remove(field);
  metadata.add(new protobuf.MapField('filter_metadata', 1, 'string', 'bytes'));
  root.resolveAll();
  return root;
}

/** A namespace's Struct, decoded the first time it is read (protobufjs messages: `kind` names a Value's member). */
function lazyNamespaces(structType: protobuf.Type, encoded: Record<string, Uint8Array>): Record<string, StructValue> {
  const namespaces: Record<string, StructValue> = {};
  for (const name of READ_NAMESPACES) {
    const bytes = encoded[name];
    if (!bytes) continue;
    let decoded: StructValue | undefined;
    Object.defineProperty(namespaces, name, { enumerable: true, get: () => (decoded ??= structType.decode(bytes) as unknown as StructValue) });
  }
  return namespaces;
}

/** Decodes one StreamAccessLogsMessage of Envoy's call log into the shape the consumers read. */
export function callLogDecoder(): (bytes: Buffer) => StreamMessage {
  const root = leanRoot();
  const messageType = root.lookupType('envoy.service.accesslog.v3.StreamAccessLogsMessage');
  const structType = root.lookupType('google.protobuf.Struct');
  return (bytes) => {
    const message = messageType.decode(bytes) as unknown as StreamMessage;
    for (const entry of message.http_logs?.log_entry ?? []) {
      const metadata = entry.common_properties?.metadata as { filter_metadata?: Record<string, Uint8Array> } | undefined;
      if (metadata?.filter_metadata) (metadata as { filter_metadata: unknown }).filter_metadata = lazyNamespaces(structType, metadata.filter_metadata);
    }
    return message;
  };
}

/** envoy.service.accesslog.v3.AccessLogService with the lean decoder of its stream's messages. */
export function leanAccessLogService(service: grpc.ServiceDefinition): grpc.ServiceDefinition {
  return { StreamAccessLogs: { ...service.StreamAccessLogs, requestDeserialize: callLogDecoder() } };
}
