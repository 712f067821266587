import * as grpc from '@grpc/grpc-js';
import * as client from 'prom-client';
import { Logger } from '../shared/log';
import { METADATA_NAMESPACE } from '../xds/translate/settings';

/**
 * Every tools/call, as Envoy's call lane logs it (docs/adr/0008-data-path-lanes.md): Envoy streams its
 * access log entries of call routes over gRPC (AccessLogService, batched every second, off the request
 * path) to the control plane, which turns them into per-call metrics. No call passes through Node.
 */

/** The reliability seed's outcomes (docs/errors.md), and what a call that never got one counts as. */
const OUTCOMES = ['ok', 'failed', 'degraded', 'denied', 'approval_required'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** Tools labelled per (route, backend); more distinct names are counted as `other`, so no client can grow the series without bound. */
export const TOOL_LABELS_PER_BACKEND = 100;

/** A google.protobuf.Struct/Value as @grpc/proto-loader decodes it, back to plain JSON. */
type StructValue = { fields?: Record<string, ProtoValue> };
type ProtoValue = { kind?: string; stringValue?: string; numberValue?: number; boolValue?: boolean; structValue?: StructValue; listValue?: { values?: ProtoValue[] } };

function fromValue(value: ProtoValue): unknown {
  switch (value.kind) {
    case 'stringValue':
      return value.stringValue;
    case 'numberValue':
      return value.numberValue;
    case 'boolValue':
      return value.boolValue;
    case 'structValue':
      return fromStruct(value.structValue);
    case 'listValue':
      return (value.listValue?.values ?? []).map(fromValue);
    default:
      return null;
  }
}

export function fromStruct(struct: StructValue | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(struct?.fields ?? {}).map(([key, value]) => [key, fromValue(value)]));
}

type ProtoTime = { seconds?: string; nanos?: number };

/** The parts of an envoy.data.accesslog.v3.HTTPAccessLogEntry the control plane reads. */
export interface LogEntry {
  common_properties?: {
    start_time?: ProtoTime;
    time_to_last_downstream_tx_byte?: ProtoTime;
    response_flags?: Record<string, unknown>;
    metadata?: { filter_metadata?: Record<string, StructValue> };
    route_name?: string;
    upstream_request_attempt_count?: number;
  };
  request?: { path?: string; original_path?: string; request_id?: string };
  response?: { response_code?: { value?: number } | null; response_code_details?: string };
}

/** Seconds of a google.protobuf.Duration or Timestamp. */
export const secondsOf = (time: ProtoTime | undefined) => Number(time?.seconds ?? 0) + (time?.nanos ?? 0) / 1e9;

/** One consumer of the call log. */
export interface CallLogRecorder {
  record(entry: LogEntry): void;
}

interface StreamMessage {
  http_logs?: { log_entry?: LogEntry[] };
}

export class CallMetrics implements CallLogRecorder {
  private readonly tools = new Map<string, Set<string>>();
  private readonly calls: client.Counter<'route' | 'backend' | 'outcome'>;
  private readonly seconds: client.Histogram<'route' | 'backend' | 'tool' | 'outcome'>;

  constructor(registry: client.Registry) {
    this.calls = new client.Counter({
      name: 'mcpgw_tool_calls_total',
      help: 'tools/call by route, backend and outcome (ok, failed, degraded, denied), from Envoy\'s call lane',
      labelNames: ['route', 'backend', 'outcome'] as const,
      registers: [registry],
    });
    this.seconds = new client.Histogram({
      name: 'mcpgw_tool_call_duration_seconds',
      help: `tools/call time in the gateway, from the request to the last byte of the answer, by route, backend, tool (at most ${TOOL_LABELS_PER_BACKEND} per backend, the rest "other") and outcome`,
      labelNames: ['route', 'backend', 'tool', 'outcome'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
      registers: [registry],
    });
  }

  private toolLabel(route: string, backend: string, tool: string): string {
    const key = `${route}\n${backend}`;
    const known = this.tools.get(key) ?? new Set<string>();
    this.tools.set(key, known);
    if (known.has(tool)) return tool;
    if (known.size >= TOOL_LABELS_PER_BACKEND) return 'other';
    known.add(tool);
    return tool;
  }

  record(entry: LogEntry): void {
    const common = entry.common_properties ?? {};
    const ours = fromStruct(common.metadata?.filter_metadata?.[METADATA_NAMESPACE]);
    const route = typeof ours.route === 'string' ? ours.route : undefined;
    const backend = typeof ours.backend === 'string' ? ours.backend : undefined;
    if (!route || !backend) return;
    const tool = typeof ours.tool === 'string' ? ours.tool : '';
    const outcome = outcomeOf(ours.outcome, ours.fallback !== undefined, common.response_flags ?? {});
    const seconds = secondsOf(common.time_to_last_downstream_tx_byte);
    this.calls.inc({ route, backend, outcome });
    this.seconds.observe({ route, backend, tool: this.toolLabel(route, backend, tool), outcome }, seconds);
  }
}

/**
 * The call script records the outcome when it sees the final message; a call Envoy itself answered
 * (backend down, timed out, reset) has none but Envoy's failure flags: degraded when a fallback was
 * served, failed otherwise.
 */
export function outcomeOf(recorded: unknown, hasFallback: boolean, flags: Record<string, unknown>): Outcome {
  if (typeof recorded === 'string' && (OUTCOMES as readonly string[]).includes(recorded)) return recorded as Outcome;
  // Booleans, and unauthorized_details: a message, set when ext_authz refused the call.
  const envoyFailed = Object.values(flags).some(Boolean);
  if (envoyFailed) return hasFallback ? 'degraded' : 'failed';
  return 'ok';
}

/** envoy.service.accesslog.v3.AccessLogService: Envoy's stream of call-log entries, each given to every recorder. */
export function accessLogServiceHandlers(recorders: CallLogRecorder[], log: Logger): grpc.UntypedServiceImplementation {
  return {
    StreamAccessLogs(call: grpc.ServerReadableStream<StreamMessage, unknown>, callback: grpc.sendUnaryData<unknown>) {
      call.on('data', (message: StreamMessage) => {
        for (const entry of message.http_logs?.log_entry ?? []) {
          for (const recorder of recorders) recorder.record(entry);
        }
      });
      call.on('error', (error: Error) => log.warn('an Envoy access log stream failed', { error: error.message }));
      call.on('end', () => callback(null, {}));
    },
  };
}
