import * as grpc from '@grpc/grpc-js';
import * as client from 'prom-client';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { GatewayIR } from '../ir/gateway-ir';
import { concurrencyLimitName } from '../ir/quotas-ir';
import { Logger } from '../shared/log';
import { METADATA_NAMESPACE } from '../xds/translate/settings';
import { LIMIT_HEADER } from '../xds/translate/quotas';

/**
 * Every tools/call, as Envoy's call lane logs it (docs/adr/0008-data-path-lanes.md): Envoy streams its
 * access log entries of call routes over gRPC (AccessLogService, batched every 50 ms, off the request
 * path) to the control plane, which decodes only what it reads (call-log-decoding.ts) and turns it
 * into per-call metrics and the dashboard's history. No call passes through Node.
 */

/**
 * What became of a call (docs/observability.md): the reliability seed's ok, failed (no fallback),
 * degraded (fallback served) and denied (policy, or an approval declined or expired), invalid —
 * refused before any backend saw it (unknown tool, malformed name, unknown or expired session) —,
 * approval_required: held until a person approves it (docs/approval-and-audit.md), and limited:
 * refused by a rate or concurrency limit (docs/quotas.md).
 */
export const CALL_OUTCOMES = ['ok', 'failed', 'degraded', 'denied', 'invalid', 'approval_required', 'limited'] as const;
export type CallOutcome = (typeof CALL_OUTCOMES)[number];

/** Outcomes of calls that went for a backend: the denominator of error ratios and the calls latency describes. */
export const BACKEND_OUTCOMES: readonly CallOutcome[] = ['ok', 'failed', 'degraded'];
/** Outcomes where the backend failed the call: the numerator of error ratios. */
export const ERROR_OUTCOMES: readonly CallOutcome[] = ['failed', 'degraded'];

/** Tools labelled per (route, backend); more distinct names are counted as `other`, so no client can grow the series without bound. */
export const TOOL_LABELS_PER_BACKEND = 100;

/** A tool name as sent is cut to this length where it is kept (the call script logs the same bound). */
const TOOL_NAME_MAX = 128;

/** One finished tools/call. */
export interface CallRecord {
  /** When the last byte of the answer left, ms since the epoch. */
  endedAt: number;
  route: string;
  backend: string;
  /** The backend's own tool name, as the client sent it (cut to 128 characters). */
  tool: string;
  /** `tool`, or `other` past TOOL_LABELS_PER_BACKEND names on this route's backend. */
  toolLabel: string;
  outcome: CallOutcome;
  seconds: number;
  /** Upstream attempts (0: the gateway answered without reaching the backend). */
  attempts: number;
  /** Envoy's response code details, e.g. `via_upstream`, `upstream_reset_before_response_started{…}`. */
  detail: string;
}

export interface CallObserver {
  record(call: CallRecord): void;
}

/** A google.protobuf.Struct/Value as decoded (protobufjs messages: `kind` names a Value's member), back to plain JSON. */
export type StructValue = { fields?: Record<string, ProtoValue> };
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

/** A Duration or Timestamp; its seconds a string (@grpc/proto-loader), a number, or a Long (protobufjs, call-log-decoding.ts). */
type ProtoDuration = { seconds?: string | number | { toString(): string }; nanos?: number };
export const secondsOf = (duration: ProtoDuration | undefined) => Number(String(duration?.seconds ?? 0)) + (duration?.nanos ?? 0) / 1e9;

/**
 * The parts of envoy.data.accesslog.v3.HTTPAccessLogEntry the gateway reads. The call log is decoded
 * for these fields only (call-log-decoding.ts READ_FIELDS and READ_NAMESPACES): a field or metadata
 * namespace read here must be named there too.
 */
export interface LogEntry {
  common_properties?: {
    upstream_remote_address?: { socket_address?: { address?: string; port_value?: number } };
    upstream_transport_failure_reason?: string;
    start_time?: ProtoDuration;
    time_to_last_downstream_tx_byte?: ProtoDuration;
    upstream_request_attempt_count?: number;
    response_flags?: Record<string, unknown>;
    metadata?: { filter_metadata?: Record<string, StructValue> };
    /** Envoy's route: `<key>/call/<backend>` (call lane), `<key>/gateway` (what the gateway answers itself), … */
    route_name?: string;
  };
  request?: { path?: string; original_path?: string; request_id?: string; request_headers?: Record<string, string> };
  response?: { response_code?: { value?: number } | null; response_code_details?: string; response_headers?: Record<string, string> };
}

/** What consumes Envoy's call-log entries: the calls (CallLog) and the audit (control-plane/audit/). */
export interface CallLogConsumer {
  add(entry: LogEntry): void;
}

export interface StreamMessage {
  http_logs?: { log_entry?: LogEntry[] };
}

/** Envoy's failure flags are booleans, except `unauthorized_details` (an ext_authz denial), an object when set. */
const envoyFailed = (flags: Record<string, unknown>) => Object.values(flags).some(Boolean);

/**
 * The call script records the outcome when it knows it (denied, or the answer's final message). A
 * call it or the session check refused as the client's mistake is `invalid`: the script's own error
 * replies carry no outcome, and a session the check does not know is a 404 (the answer's `_meta` says
 * `failed` there, but nothing failed). A call Envoy itself answered (backend down, timed out, reset)
 * has only Envoy's failure flags: degraded when a fallback was served, failed otherwise.
 */
export function outcomeOf(ours: Record<string, unknown>, entry: LogEntry): CallOutcome {
  const sessionUnknown = entry.response?.response_code_details === 'ext_authz_denied' && entry.response?.response_code?.value === 404;
  if (sessionUnknown) return 'invalid';
  if (refusedByLimit(entry)) return 'limited';
  const recorded = ours.outcome;
  if (typeof recorded === 'string' && (CALL_OUTCOMES as readonly string[]).includes(recorded)) return recorded as CallOutcome;
  if (ours.answered === true) return 'invalid';
  if (envoyFailed(entry.common_properties?.response_flags ?? {})) return ours.fallback !== undefined ? 'degraded' : 'failed';
  return 'ok';
}

/**
 * A limit refused the request (docs/quotas.md): a rate limit (429, Envoy's RL flag), a shared limit
 * whose service could not answer and that refuses then (RLSE), or a Tool Service's calls in flight at
 * their limit (its circuit breaker, answered 429), or a caller's (the session check, answered 429).
 */
function refusedByLimit(entry: LogEntry): boolean {
  const flags = entry.common_properties?.response_flags ?? {};
  const status = entry.response?.response_code?.value;
  return Boolean(flags.rate_limited || flags.rate_limit_service_error || ((flags.upstream_overflow || flags.unauthorized_details) && status === 429));
}

/** A request a limit refused, on either lane. */
export interface LimitedRecord {
  route: string;
  lane: 'calls' | 'discovery';
  /** The limit's name (docs/quotas.md); the shared limits that applied, for a shared one. */
  limit: string;
}

export interface LimitObserver {
  record(limited: LimitedRecord): void;
}

/** The shared limits Envoy's x-ratelimit-limit lists: `3, 3;w=60;name="route:a/calls/per-caller", …`. */
const sharedLimitNames = (header: string) => [...header.matchAll(/name="([^"]*)"/g)].map((match) => match[1]);

export function limitedRecordOf(entry: LogEntry): LimitedRecord | undefined {
  if (!refusedByLimit(entry)) return undefined;
  const [route, kind] = (entry.common_properties?.route_name ?? '').split('/');
  if (!route || (kind !== 'call' && kind !== 'gateway')) return undefined;
  const headers = entry.response?.response_headers ?? {};
  const named = headers[LIMIT_HEADER] ?? sharedLimitNames(headers['x-ratelimit-limit'] ?? '').join(' | ');
  return { route, lane: kind === 'call' ? 'calls' : 'discovery', limit: named || 'shared (the ratelimit service did not answer)' };
}

/** mcpgw_limited_requests_total: requests a limit refused, by route, lane and limit. */
export class LimitMetrics implements LimitObserver {
  private readonly limited: client.Counter<'route' | 'lane' | 'limit'>;

  constructor(registry: client.Registry) {
    this.limited = new client.Counter({
      name: 'mcpgw_limited_requests_total',
      help: 'requests a rate or concurrency limit refused, by route, lane (calls: tools/call; discovery: what the gateway answers itself) and limit (its name, docs/quotas.md)',
      labelNames: ['route', 'lane', 'limit'] as const,
      registers: [registry],
    });
  }

  /**
   * Every limit the registry names starts at 0 on its route and lane (a tool's per-instance or
   * concurrency limit is named per tool, when a call of it is refused): a rate over the first refusal needs the sample before it.
   */
  expect(ir: GatewayIR): void {
    const services = new Map(ir.toolServices.map((service) => [service.catalogKey, service]));
    for (const route of ir.routes) {
      const start = (lane: LimitedRecord['lane'], limit: string) => this.limited.inc({ route: route.key, lane, limit }, 0);
      for (const limit of route.quotas.calls) start('calls', limit.name);
      for (const limit of route.quotas.discovery) start('discovery', limit.name);
      if (route.quotas.concurrencyPerCaller) start('calls', route.quotas.concurrencyPerCaller.name);
      for (const backend of route.backends) {
        const service = services.get(backend.catalogKey);
        if (!service) continue;
        for (const limit of service.quotas.calls) start('calls', limit.name);
        for (const limit of service.quotas.tools.flatMap((tool) => tool.calls)) if (limit.shared) start('calls', limit.name);
        if (service.quotas.concurrency !== undefined) start('calls', concurrencyLimitName(service.id));
        if (service.quotas.concurrencyPerCaller) start('calls', service.quotas.concurrencyPerCaller.name);
      }
    }
  }

  record({ route, lane, limit }: LimitedRecord): void {
    this.limited.inc({ route, lane, limit });
  }
}

/** Caps the tool names labelled per (route, backend); the rest are `other`. */
class ToolLabels {
  private readonly known = new Map<string, Set<string>>();

  label(route: string, backend: string, tool: string): string {
    const key = `${route}\n${backend}`;
    const names = this.known.get(key) ?? new Set<string>();
    this.known.set(key, names);
    if (names.has(tool)) return tool;
    if (names.size >= TOOL_LABELS_PER_BACKEND) return 'other';
    names.add(tool);
    return tool;
  }
}

/** Told of every request to a backend that the backend failed, whatever its method (prompts and resources too). */
export interface BackendFailureObserver {
  backendFailed(route: string, backend: string, reason: string): void;
}

/** Envoy's response code details name a failed connection's cause in words joined by `_`, inside braces after the kind of failure. */
const detailWords = (details: string) => (/\{(.*)\}$/s.exec(details)?.[1] ?? details).replace(/_/g, ' ');

/**
 * Why a request's backend failed it, named by its cause as a failed listing is (docs/tools-list.md
 * `lastError`): connection refused, a reset, a TLS error, a timeout, no healthy host, an HTTP 5xx of
 * the backend's own. undefined when the backend did not fail it (it answered, even with a JSON-RPC
 * error, or the gateway refused the request before it).
 */
export function backendFailureOf(entry: LogEntry): string | undefined {
  const common = entry.common_properties ?? {};
  const flags = common.response_flags ?? {};
  const details = entry.response?.response_code_details ?? '';
  const status = entry.response?.response_code?.value ?? 0;
  const socket = common.upstream_remote_address?.socket_address;
  const where = socket?.address ? ` (${socket.address}${socket.port_value ? `:${socket.port_value}` : ''})` : '';
  if (/connection.?refused/i.test(details)) return `connection refused${where}`;
  const tls = common.upstream_transport_failure_reason || (/TLS.?error/i.test(details) ? details : '');
  if (tls) return `TLS error: ${detailWords(tls).replace(/^.*?TLS error:?\s*/i, '').slice(0, 200)}`;
  if (flags.upstream_request_timeout) return `timed out after ${Math.round(secondsOf(common.time_to_last_downstream_tx_byte) * 1000)} ms`;
  if (flags.no_healthy_upstream) return 'no healthy upstream (Envoy\'s health checks or outlier detection took every endpoint out)';
  if (flags.upstream_connection_failure) return `connection failed${where}: ${detailWords(details)}`;
  if (flags.upstream_connection_termination || flags.upstream_remote_reset) return `connection reset by the Tool Service${where}`;
  if (status >= 500 && details === 'via_upstream') return `HTTP ${status} from the Tool Service`;
  return undefined;
}

/**
 * Turns Envoy's call-lane entries into CallRecords of tools/call for every observer (an entry of
 * another lane, or of another method, is skipped), and tells the failure observers of every request a
 * backend failed.
 */
export class CallLog implements CallLogConsumer {
  private readonly toolLabels = new ToolLabels();

  constructor(
    private readonly observers: CallObserver[],
    private readonly now = () => Date.now(),
    private readonly failureObservers: BackendFailureObserver[] = [],
    private readonly limitObservers: LimitObserver[] = [],
  ) {}

  recordOf(entry: LogEntry): CallRecord | undefined {
    const common = entry.common_properties ?? {};
    const ours = fromStruct(common.metadata?.filter_metadata?.[METADATA_NAMESPACE]);
    const route = typeof ours.route === 'string' ? ours.route : undefined;
    const backend = typeof ours.backend === 'string' ? ours.backend : undefined;
    if (!route || !backend) return undefined;
    const tool = typeof ours.tool === 'string' ? ours.tool.slice(0, TOOL_NAME_MAX) : '';
    const seconds = secondsOf(common.time_to_last_downstream_tx_byte);
    const started = common.start_time ? secondsOf(common.start_time) * 1000 : undefined;
    return {
      endedAt: started !== undefined && started > 0 ? started + seconds * 1000 : this.now(),
      route,
      backend,
      tool,
      toolLabel: this.toolLabels.label(route, backend, tool),
      outcome: outcomeOf(ours, entry),
      seconds,
      attempts: common.upstream_request_attempt_count ?? 0,
      detail: entry.response?.response_code_details ?? '',
    };
  }

  add(entry: LogEntry): void {
    // A refusal by a limit, on either lane: the gateway lane's carry no backend.
    const limited = limitedRecordOf(entry);
    if (limited) for (const observer of this.limitObservers) observer.record(limited);
    const ours = fromStruct(entry.common_properties?.metadata?.filter_metadata?.[METADATA_NAMESPACE]);
    if (typeof ours.route !== 'string' || typeof ours.backend !== 'string') return;
    const failure = ours.answered === true ? undefined : backendFailureOf(entry);
    if (failure) for (const observer of this.failureObservers) observer.backendFailed(ours.route, ours.backend, failure);
    // The forwarded methods of prompts and resources run on the same script; only calls are counted as calls.
    if (ours.method !== undefined && ours.method !== 'tools/call') return;
    const call = this.recordOf(entry);
    if (call) for (const observer of this.observers) observer.record(call);
  }
}

/** mcpgw_tool_calls_total and mcpgw_tool_call_duration_seconds. */
export class CallMetrics implements CallObserver {
  private readonly calls: client.Counter<'route' | 'backend' | 'outcome'>;
  private readonly seconds: client.Histogram<'route' | 'backend' | 'tool' | 'outcome'>;

  constructor(registry: client.Registry) {
    this.calls = new client.Counter({
      name: 'mcpgw_tool_calls_total',
      help: `tools/call by route, backend and outcome (${CALL_OUTCOMES.join(', ')}), from Envoy's call lane`,
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

  /**
   * Every outcome of every backend the catalog serves starts at 0: a rate or an increase over a
   * counter's first failure needs the sample before it.
   */
  expect(catalog: CatalogSnapshotMessage): void {
    for (const route of catalog.routes) {
      for (const backend of route.backends) {
        for (const outcome of CALL_OUTCOMES) this.calls.inc({ route: route.route_key, backend: backend.name, outcome }, 0);
      }
    }
  }

  record(call: CallRecord): void {
    const { route, backend, outcome } = call;
    this.calls.inc({ route, backend, outcome });
    this.seconds.observe({ route, backend, tool: call.toolLabel, outcome }, call.seconds);
  }
}

/** envoy.service.accesslog.v3.AccessLogService: Envoy's stream of call-log entries, each given to every consumer. */
export function accessLogServiceHandlers(consumers: CallLogConsumer[], log: Logger): grpc.UntypedServiceImplementation {
  return {
    StreamAccessLogs(call: grpc.ServerReadableStream<StreamMessage, unknown>, callback: grpc.sendUnaryData<unknown>) {
      call.on('data', (message: StreamMessage) => {
        for (const entry of message.http_logs?.log_entry ?? []) {
          for (const consumer of consumers) consumer.add(entry);
        }
      });
      call.on('error', (error: Error) => log.warn('an Envoy access log stream failed', { error: error.message }));
      call.on('end', () => callback(null, {}));
    },
  };
}
