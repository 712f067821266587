import * as client from 'prom-client';
import { z } from 'zod';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { GatewayIR } from '../ir/gateway-ir';
import { concurrencyLimitName } from '../ir/quotas-ir';
import { Logger } from '../shared/log';

/**
 * Every tools/call, as Envoy's call lane logs it (docs/adr/0008-data-path-lanes.md): Envoy's fluentd
 * access logger sends a record of each (the call script's record as one value, and Envoy's own fields
 * read here and by the audit), batched
 * every 250 ms (50 ms for calls that hold concurrency slots: listener.ts), off the request path, to the
 * control plane (call-log-receiver.ts), which turns it into
 * per-call metrics and the dashboard's history. No call passes through Node.
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

/**
 * A value Envoy formatted from metadata or headers: a string, else as text. Some are the client's
 * choice (a tool name sent as a number or an object): such a value is left out (nil), never the whole
 * record, which also gives back the call's concurrency slots.
 */
const text = z.union([z.string(), z.number(), z.boolean()]).transform(String).nullish().catch(null);
/** `text` cut to `max` characters: a value of the call script's record that a client or a token chose (Envoy sends it whole). */
const textUpTo = (max: number) => text.transform((value) => (value == null ? value : value.slice(0, max)));
const count = z.number().nullish();

/**
 * The call script's record of the call (its dynamic metadata, control-plane/xds/lua/call-lane.lua),
 * which Envoy sends whole as one value; the keys read here, each cut to the bound the script's
 * values had when Envoy formatted them one by one. Its other keys (the call's id, quota scopes, …)
 * are dropped here.
 */
const scriptRecordSchema = z.object({
  route: text,
  backend: text,
  tool: textUpTo(TOOL_NAME_MAX),
  method: textUpTo(64),
  outcome: text,
  answered: z.boolean().nullish().catch(null),
  fallback: textUpTo(64),
  // The audit's: the arguments (raw JSON, recorded only with an audit: its hash is written), what was decided, by whom.
  arguments: text,
  reason: textUpTo(256),
  rule: textUpTo(256),
  credential: textUpTo(32),
  caller: z.object({ iss: textUpTo(256), sub: textUpTo(256), client: textUpTo(256) }).partial().nullish().catch(null),
  approval: textUpTo(32),
  approval_id: textUpTo(128),
  approver_iss: textUpTo(256),
  approver_sub: textUpTo(256),
});

/**
 * One call-log record as the listener's fluentd logger formats it (control-plane/xds/translate/listener.ts
 * CALL_LOG_RECORD names the format string of each key): the call script's record as one map
 * (`script`, nil on requests the script did not see), Envoy's own keys flat, an absent value nil. The
 * audit's keys of Envoy's are in the record only when the control plane writes an audit. Read into
 * one flat entry (LogEntry) for the consumers.
 */
export const callLogWireSchema = z.object({
  script: scriptRecordSchema.nullish().catch(null),
  // The mcp filter's parse of the request: the JSON-RPC method, either lane.
  rpc_method: text,
  // The session check's concurrency lease (docs/adr/0016-quotas.md).
  lease: text,
  // Envoy's own: start in ms since the epoch (a formatted time, so a string), duration, answer, failure.
  start_ms: z.union([z.number(), z.string().regex(/^\d+$/).transform(Number)]).nullish(),
  duration_ms: count,
  status: count,
  details: text,
  /** Envoy's response flags by their long names, sent comma-separated (`-` for none): read once, as a set. */
  flags: text.transform((value) => new Set((value ?? '').split(',').filter((flag) => flag !== '' && flag !== '-'))),
  attempts: count,
  /** Envoy's route: `<key>/call/<backend>` (call lane), `<key>/gateway` (what the gateway answers itself), … */
  envoy_route: text,
  upstream: text,
  upstream_tls_failure: text,
  /** The limit a refusal names (x-mcpgw-limit), and the shared limits' x-ratelimit-limit. */
  limit: text,
  ratelimit_limit: text,
  // The audit's (only with an audit): the tool as called, the request, and for requests the gateway
  // answered itself jwt_authn's claim headers (the call script records the caller on calls).
  rpc_tool: text,
  request_id: text,
  path: text,
  claim_iss: text,
  claim_sub: text,
  claim_client_id: text,
  claim_azp: text,
});

export const callLogEntrySchema = callLogWireSchema.transform(({ script, ...envoy }) => {
  const { caller, ...recorded } = script ?? {};
  return {
    route: null,
    backend: null,
    tool: null,
    method: null,
    outcome: null,
    answered: null,
    fallback: null,
    arguments: null,
    reason: null,
    rule: null,
    credential: null,
    approval: null,
    approval_id: null,
    approver_iss: null,
    approver_sub: null,
    ...recorded,
    caller_iss: caller?.iss ?? null,
    caller_sub: caller?.sub ?? null,
    caller_client: caller?.client ?? null,
    ...envoy,
  };
});
export type LogEntry = z.output<typeof callLogEntrySchema>;
/** The record as Envoy sends it: one key per format string of the listener's CALL_LOG_RECORD. */
export type CallLogWireRecord = z.input<typeof callLogWireSchema>;

/** The record's keys only an audit reads: left out of the record without one. */
export const AUDIT_ONLY_KEYS = ['rpc_tool', 'request_id', 'path', 'claim_iss', 'claim_sub', 'claim_client_id', 'claim_azp'] as const satisfies readonly (keyof CallLogWireRecord)[];

/** What consumes Envoy's call-log entries: the calls (CallLog), the audit (control-plane/audit/) and the slot releases. */
export interface CallLogConsumer {
  add(entry: LogEntry): void;
}


/**
 * The call script records the outcome when it knows it (denied, or the answer's final message). A
 * call it or the session check refused as the client's mistake is `invalid`: the script's own error
 * replies carry no outcome, and a session the check does not know is a 404 (the answer's `_meta` says
 * `failed` there, but nothing failed). A call Envoy itself answered (backend down, timed out, reset)
 * has only Envoy's failure flags: degraded when a fallback was served, failed otherwise.
 */
export function outcomeOf(entry: LogEntry): CallOutcome {
  const sessionUnknown = entry.details === 'ext_authz_denied' && entry.status === 404;
  if (sessionUnknown) return 'invalid';
  if (refusedByLimit(entry)) return 'limited';
  const recorded = entry.outcome;
  if (recorded && (CALL_OUTCOMES as readonly string[]).includes(recorded)) return recorded as CallOutcome;
  if (entry.answered === true) return 'invalid';
  if (entry.flags.size > 0) return entry.fallback != null ? 'degraded' : 'failed';
  return 'ok';
}

/**
 * A limit refused the request (docs/quotas.md): a rate limit (429, Envoy's RL flag, or the call script's
 * outcome for a leased shared limit), a shared limit
 * whose service could not answer and that refuses then (RLSE), or a Tool Service's calls in flight at
 * their limit (its circuit breaker, answered 429), or a caller's (the session check, answered 429).
 */
function refusedByLimit(entry: LogEntry): boolean {
  const { flags } = entry;
  // The call script's refusals of leased shared limits (docs/adr/0016-quotas.md) carry no Envoy flag.
  return entry.outcome === 'limited' || flags.has('RateLimited') || flags.has('RateLimitServiceError') || ((flags.has('UpstreamOverflow') || flags.has('UnauthorizedExternalService')) && entry.status === 429);
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
  const [route, kind] = (entry.envoy_route ?? '').split('/');
  if (!route || (kind !== 'call' && kind !== 'gateway')) return undefined;
  const named = entry.limit ?? sharedLimitNames(entry.ratelimit_limit ?? '').join(' | ');
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
  const { flags } = entry;
  const details = entry.details ?? '';
  const status = entry.status ?? 0;
  const where = entry.upstream ? ` (${entry.upstream})` : '';
  if (/connection.?refused/i.test(details)) return `connection refused${where}`;
  const tls = entry.upstream_tls_failure || (/TLS.?error/i.test(details) ? details : '');
  if (tls) return `TLS error: ${detailWords(tls).replace(/^.*?TLS error:?\s*/i, '').slice(0, 200)}`;
  if (flags.has('UpstreamRequestTimeout')) return `timed out after ${Math.round(entry.duration_ms ?? 0)} ms`;
  if (flags.has('NoHealthyUpstream')) return 'no healthy upstream (Envoy\'s health checks or outlier detection took every endpoint out)';
  if (flags.has('UpstreamConnectionFailure')) return `connection failed${where}: ${detailWords(details)}`;
  if (flags.has('UpstreamConnectionTermination') || flags.has('UpstreamRemoteReset')) return `connection reset by the Tool Service${where}`;
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
    const { route, backend } = entry;
    if (!route || !backend) return undefined;
    const tool = (entry.tool ?? '').slice(0, TOOL_NAME_MAX);
    const seconds = (entry.duration_ms ?? 0) / 1000;
    const started = entry.start_ms ?? 0;
    return {
      endedAt: started > 0 ? started + seconds * 1000 : this.now(),
      route,
      backend,
      tool,
      toolLabel: this.toolLabels.label(route, backend, tool),
      outcome: outcomeOf(entry),
      seconds,
      attempts: entry.attempts ?? 0,
      detail: entry.details ?? '',
    };
  }

  add(entry: LogEntry): void {
    // A refusal by a limit, on either lane: the gateway lane's carry no backend.
    const limited = limitedRecordOf(entry);
    if (limited) for (const observer of this.limitObservers) observer.record(limited);
    const { route, backend } = entry;
    if (!route || !backend) return;
    const failure = entry.answered === true ? undefined : backendFailureOf(entry);
    if (failure) for (const observer of this.failureObservers) observer.backendFailed(route, backend, failure);
    // The forwarded methods of prompts and resources run on the same script; only calls are counted as calls.
    if (entry.method != null && entry.method !== 'tools/call') return;
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

/**
 * Each record of Envoy's call log (call-log-receiver.ts), checked against the record's schema, given to
 * every consumer; a record that does not fit is left out with a log line, at most every 10 s.
 */
export function callLogDelivery(consumers: CallLogConsumer[], log: Logger): (records: Record<string, unknown>[]) => void {
  let lastWarningAt = -Infinity;
  return (records) => {
    for (const record of records) {
      const parsed = callLogEntrySchema.safeParse(record);
      if (!parsed.success) {
        if (performance.now() - lastWarningAt < 10_000) continue;
        lastWarningAt = performance.now();
        log.warn('a call-log record does not fit its schema: left out', { problem: parsed.error.issues[0]?.path.join('.') + ': ' + parsed.error.issues[0]?.message });
        continue;
      }
      for (const consumer of consumers) consumer.add(parsed.data);
    }
  };
}
