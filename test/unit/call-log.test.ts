import * as fs from 'node:fs';
import * as path from 'node:path';
import * as client from 'prom-client';
import { CallHistory, HISTORY_DEFAULTS } from '../../control-plane/admin/call-history';
import { CallLog, CallMetrics, CallRecord, LogEntry, TOOL_LABELS_PER_BACKEND, backendFailureOf, callLogEntrySchema } from '../../control-plane/admin/call-log';
import { CallLogRecord, readCallLogStream } from '../../control-plane/admin/call-log-receiver';
import { callRecord } from './call-fixtures';

/**
 * Envoy's call-log records as its fluentd logger formats them (listener.ts CALL_LOG_RECORD; the
 * receiver's test reads bytes the real Envoy 1.40 sent), and what the control plane makes of them.
 */
type Fields = Record<string, string | number | boolean>;

function entry(options: { ours: Fields; flags?: string[]; code?: number; details?: string; ms?: number; attempts?: number; startMs?: number }): LogEntry {
  return callLogEntrySchema.parse({
    script: { route: 'demo', backend: 'jobs', method: 'tools/call', ...options.ours },
    start_ms: String(options.startMs ?? 1_800_000_000_000),
    duration_ms: options.ms ?? 12,
    attempts: options.attempts ?? 1,
    flags: options.flags?.join(',') ?? '-',
    status: options.code ?? 200,
    details: options.details ?? 'via_upstream',
  });
}

describe('the call log', () => {
  const log = new CallLog([]);

  it.each<[string, Parameters<typeof entry>[0], CallRecord['outcome']]>([
    ['an answer whose final message the script annotated', { ours: { tool: 'echo', outcome: 'ok' } }, 'ok'],
    ['a tool the policy denies', { ours: { tool: 'whoami', outcome: 'denied', answered: true }, details: 'lua_response', attempts: 0 }, 'denied'],
    ['an unknown tool (the script answers -32602 without an outcome)', { ours: { tool: 'nope', answered: true }, details: 'lua_response', attempts: 0 }, 'invalid'],
    [
      'a session the check does not know (404, whatever the answer carries)',
      { ours: { tool: 'echo', outcome: 'failed', check: true }, flags: ['UnauthorizedExternalService'], code: 404, details: 'ext_authz_denied', attempts: 0 },
      'invalid',
    ],
    [
      'a backend session the check could not open',
      { ours: { tool: 'echo', outcome: 'failed', check: true }, flags: ['UnauthorizedExternalService'], code: 424, details: 'ext_authz_denied', attempts: 0 },
      'failed',
    ],
    ['a backend that refused the connection, annotated by the script', { ours: { tool: 'echo', outcome: 'failed' }, flags: ['UpstreamConnectionFailure'], attempts: 3 }, 'failed'],
    ['a failure Envoy answered without the script seeing it', { ours: { tool: 'echo' }, flags: ['UpstreamRequestTimeout'] }, 'failed'],
    ['a failure with a fallback served', { ours: { tool: 'read', fallback: 'unavailable' }, flags: ['UpstreamConnectionFailure'] }, 'degraded'],
    ['an answer the script did not annotate', { ours: { tool: 'echo' } }, 'ok'],
  ])('counts %s', (_case, options, outcome) => {
    expect(log.recordOf(entry(options))?.outcome).toBe(outcome);
  });

  it.each<[string, Parameters<typeof entry>[0], string | undefined]>([
    [
      'a refused connection, with the upstream address',
      { ours: { tool: 'echo' }, flags: ['UpstreamConnectionFailure'], code: 503, details: 'upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}' },
      'connection refused (127.0.0.1:9)',
    ],
    [
      'a TLS failure',
      { ours: { tool: 'echo' }, flags: ['UpstreamConnectionFailure'], code: 503, details: 'upstream_reset_before_response_started{connection_failure|TLS_error:_268435581:SSL_routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED}' },
      'TLS error: 268435581:SSL routines:OPENSSL internal:CERTIFICATE VERIFY FAILED',
    ],
    ['a timeout', { ours: { tool: 'echo' }, flags: ['UpstreamRequestTimeout'], code: 504, details: 'upstream_response_timeout', ms: 5000 }, 'timed out after 5000 ms'],
    ['a reset', { ours: { tool: 'echo' }, flags: ['UpstreamRemoteReset'], code: 503, details: 'upstream_reset_before_response_started{remote_reset}' }, 'connection reset by the Tool Service (127.0.0.1:9)'],
    ['a 5xx of the backend', { ours: { tool: 'echo' }, code: 502 }, 'HTTP 502 from the Tool Service'],
    ['a JSON-RPC error in a 200', { ours: { tool: 'echo', outcome: 'failed' } }, undefined],
    ['a request the script refused', { ours: { tool: 'nope', answered: true }, details: 'lua_response', attempts: 0 }, undefined],
  ])('names the cause of %s', (_case, options, failure) => {
    const logged = entry(options);
    logged.upstream = '127.0.0.1:9';
    const reasons: string[] = [];
    new CallLog([], undefined, [{ backendFailed: (_route, _backend, reason) => reasons.push(reason) }]).add(logged);
    expect(reasons).toEqual(failure === undefined ? [] : [failure]);
    if (!(options.ours.answered === true)) expect(backendFailureOf(logged)).toBe(failure);
  });

  it('tells failure observers of every method, and counts only tools/call as calls', () => {
    const recorded: CallRecord[] = [];
    const failed: string[] = [];
    const log = new CallLog([{ record: (call) => recorded.push(call) }], undefined, [{ backendFailed: (_route, backend) => failed.push(backend) }]);
    log.add(entry({ ours: { method: 'resources/read', tool: 'file:///a' }, flags: ['UpstreamConnectionFailure'], code: 503, details: 'x{delayed_connect_error:_Connection_refused}' }));
    log.add(entry({ ours: { tool: 'echo' }, flags: ['UpstreamConnectionFailure'], code: 503, details: 'x{delayed_connect_error:_Connection_refused}' }));
    expect(failed).toEqual(['jobs', 'jobs']);
    expect(recorded.map((call) => call.tool)).toEqual(['echo']);
  });

  it('reads when the call ended, how long it took and its attempts', () => {
    const call = log.recordOf(entry({ ours: { tool: 'echo', outcome: 'ok' }, ms: 1500, attempts: 2, startMs: 1_800_000_000_250 }));
    expect(call).toMatchObject({ route: 'demo', backend: 'jobs', tool: 'echo', seconds: 1.5, attempts: 2, endedAt: 1_800_000_001_750, detail: 'via_upstream' });
  });

  it('skips entries of other lanes (no backend in the metadata)', () => {
    expect(log.recordOf(callLogEntrySchema.parse({ script: { route: 'demo' } }))).toBeUndefined();
    expect(log.recordOf(callLogEntrySchema.parse({ script: null }))).toBeUndefined();
    expect(log.recordOf(callLogEntrySchema.parse({}))).toBeUndefined();
  });

  it("keeps a record whose client-chosen values are not strings (a tool name sent as a number or an object)", () => {
    const record = callLogEntrySchema.parse({
      script: { route: 'demo', backend: 'jobs', tool: 42, method: 'tools/call', caller: { iss: ['not', 'a name'], sub: 'b2' } },
      rpc_tool: { not: 'a name' },
      status: 200,
      duration_ms: 3,
      flags: '-',
    });
    expect(record).toMatchObject({ tool: '42', rpc_tool: null, caller_iss: null, caller_sub: 'b2' });
    expect(log.recordOf(record)).toMatchObject({ route: 'demo', backend: 'jobs', tool: '42', outcome: 'ok' });
  });

  it("reads the call script's record, sent whole as one value: its values cut to their bounds, its other keys left out", () => {
    const record = callLogEntrySchema.parse({
      script: {
        route: 'demo',
        backend: 'jobs',
        method: 'tools/call',
        tool: 't'.repeat(300),
        outcome: 'denied',
        answered: true,
        reason: 'r'.repeat(300),
        rule: 'denyTools "w*"',
        credential: 'tokenExchange',
        caller: { iss: 'https://idp/realms/mcpgw', sub: 's'.repeat(300), client: 'agent-cli' },
        approval: 'granted',
        approval_id: 'ap1',
        approver_iss: 'https://idp/realms/mcpgw',
        approver_sub: 'c3',
        arguments: '{"steps":2}',
        rpc_id: 7,
        rpc_id_json: '7',
        quota_tool_scope: 'jobs/run',
        started_ms: 1_800_000_000_000,
      },
      status: 403,
      flags: '-',
    });
    expect(record).toMatchObject({
      route: 'demo',
      backend: 'jobs',
      method: 'tools/call',
      tool: 't'.repeat(128),
      outcome: 'denied',
      answered: true,
      reason: 'r'.repeat(256),
      rule: 'denyTools "w*"',
      credential: 'tokenExchange',
      caller_iss: 'https://idp/realms/mcpgw',
      caller_sub: 's'.repeat(256),
      caller_client: 'agent-cli',
      approval: 'granted',
      approval_id: 'ap1',
      approver_iss: 'https://idp/realms/mcpgw',
      approver_sub: 'c3',
      arguments: '{"steps":2}',
      fallback: null,
    });
    expect(Object.keys(record)).not.toEqual(expect.arrayContaining(['script']));
    expect(Object.keys(record).filter((key) => ['rpc_id', 'rpc_id_json', 'quota_tool_scope', 'started_ms'].includes(key))).toEqual([]);
  });

  it("reads the record Envoy 1.40 sent: the call script's record as a map of typed values", async () => {
    // Captured from Envoy 1.40 with the listener's record (audit on) and a Lua filter recording what the
    // call script records on an authed call (envoy-1.40-call-log-record-capture.json, the bench's
    // bench/call-log-record-instructions.ts bootstrap).
    const bytes = fs.readFileSync(path.join(__dirname, '../fixtures/call-log/envoy-1.40-call-log-record.bin'));
    const records: CallLogRecord[] = [];
    await readCallLogStream((async function* () { yield bytes; })(), (batch) => records.push(...batch), 1 << 20);
    expect(records).toHaveLength(1);
    expect(callLogEntrySchema.parse(records[0])).toMatchObject({
      route: 'authed',
      backend: 'jobs',
      tool: 'echo',
      method: 'tools/call',
      outcome: 'ok',
      credential: 'none',
      caller_iss: 'http://127.0.0.1:41234/realms/bench',
      caller_sub: '5f0c8a8e-6b8e-4c53-9d1e-2f9a0c1b7d44',
      caller_client: 'bench-agent',
      arguments: expect.stringMatching(/^\{"text":"x+"\}$/),
      rpc_method: 'tools/call',
      rpc_tool: 'jobs__echo',
      lease: '',
      status: 200,
      attempts: 1,
      details: 'via_upstream',
      envoy_route: 'authed/call/jobs',
      start_ms: expect.any(Number),
    });
    expect(new CallLog([]).recordOf(callLogEntrySchema.parse(records[0]))).toMatchObject({ route: 'authed', backend: 'jobs', tool: 'echo', outcome: 'ok' });
  });

  it('reads a record without the call script (a request the gateway answered itself) as one with nothing recorded', () => {
    const record = callLogEntrySchema.parse({ script: null, rpc_method: 'tools/list', status: 401, details: 'jwt_authn_access_denied', flags: '-' });
    expect(record).toMatchObject({ route: null, backend: null, tool: null, outcome: null, caller_iss: null, arguments: null, rpc_method: 'tools/list', status: 401 });
  });

  it(`labels at most ${TOOL_LABELS_PER_BACKEND} tools per backend, the rest "other", and keeps the name as sent`, () => {
    const capped = new CallLog([]);
    const labels = Array.from({ length: TOOL_LABELS_PER_BACKEND + 5 }, (_, index) => capped.recordOf(entry({ ours: { tool: `t${index}` } }))!);
    expect(new Set(labels.map((call) => call.toolLabel)).size).toBe(TOOL_LABELS_PER_BACKEND + 1);
    expect(labels.at(-1)).toMatchObject({ tool: `t${TOOL_LABELS_PER_BACKEND + 4}`, toolLabel: 'other' });
    expect(capped.recordOf(entry({ ours: { tool: 't0' } }))!.toolLabel).toBe('t0');
  });

  it('counts outcomes from 0 for every backend of the catalog, before its first call', async () => {
    const registry = new client.Registry();
    const metrics = new CallMetrics(registry);
    metrics.expect({
      version: '1',
      tool_name_separator: '__',
      tools_list_page_size: 0,
      routes: [{ route_key: 'demo', tools: [], prompts: [], resources: [], resource_templates: [], backends: [{ name: 'jobs' } as never], access_rules: [], groups_claim: [] }],
    });
    new CallLog([metrics]).add(entry({ ours: { tool: 'echo', outcome: 'failed' }, flags: ['UpstreamConnectionFailure'] }));
    const text = await registry.metrics();
    expect(text).toContain('mcpgw_tool_calls_total{route="demo",backend="jobs",outcome="ok"} 0');
    expect(text).toContain('mcpgw_tool_calls_total{route="demo",backend="jobs",outcome="invalid"} 0');
    expect(text).toContain('mcpgw_tool_calls_total{route="demo",backend="jobs",outcome="failed"} 1');
    expect(text).toContain('mcpgw_tool_call_duration_seconds_count{route="demo",backend="jobs",tool="echo",outcome="failed"} 1');
  });
});

describe("the dashboard's call history", () => {
  const START = 1_800_000_000_000;
  let clock = START;
  const now = () => clock;
  const call = (overrides: Partial<CallRecord>) => callRecord({ endedAt: clock, ...overrides });
  beforeEach(() => {
    clock = START;
  });

  it('keeps one point per step with calls, errors and latency quantiles, and the last five minutes as figures', () => {
    const history = new CallHistory(HISTORY_DEFAULTS, now);
    for (let index = 0; index < 98; index++) history.record(call({ seconds: 0.01 }));
    history.record(call({ outcome: 'failed', seconds: 2, detail: 'upstream_reset_before_response_started{remote_connection_failure}' }));
    history.record(call({ outcome: 'denied', seconds: 0.0004, attempts: 0 }));
    clock += 20_000;
    history.record(call({ seconds: 0.05 }));

    const [series] = history.view().series;
    expect(series).toMatchObject({ route: 'demo', backend: 'jobs', tool: 'echo' });
    expect(series.points).toHaveLength(2);
    const [first, second] = series.points;
    expect(second[0] - first[0]).toBe(2);
    expect(first.slice(1, 4)).toEqual([100, 99, 1]);
    // Quantiles are the upper bound of a bucket about 19 % wide; denials are not latency of a backend.
    expect(first[4]).toBeGreaterThanOrEqual(10);
    expect(first[4]).toBeLessThan(10 * 1.19);
    expect(first[5]).toBeGreaterThanOrEqual(10);
    expect(series.recent.calls).toBe(101);
    expect(series.recent.errorRatio).toBeCloseTo(1 / 100);
    expect(series.recent.callsPerSecond).toBeCloseTo(101 / 300);
    expect(series.recent.p99Ms).toBeGreaterThanOrEqual(50);
  });

  it('keeps the latest denials and fallbacks, newest first and bounded', () => {
    const history = new CallHistory({ ...HISTORY_DEFAULTS, notableCalls: 3 }, now);
    for (let index = 0; index < 5; index++) history.record(call({ outcome: index % 2 ? 'denied' : 'degraded', tool: `t${index}` }));
    history.record(call({ outcome: 'ok', tool: 'fine' }));
    history.record(call({ outcome: 'failed', tool: 'broken' }));
    expect(history.view().notable.map((notable) => `${notable.tool} ${notable.outcome}`)).toEqual(['t4 degraded', 't3 denied', 't2 degraded']);
  });

  it('tells since when the calls of a backend fail, until one succeeds', () => {
    const history = new CallHistory(HISTORY_DEFAULTS, now);
    history.record(call({ outcome: 'ok' }));
    clock += 1000;
    const firstFailure = new Date(clock).toISOString();
    history.record(call({ outcome: 'failed', detail: 'upstream_reset_before_response_started{connection_refused}' }));
    clock += 1000;
    history.record(call({ outcome: 'degraded', detail: 'upstream_reset_before_response_started{connection_refused}' }));
    history.record(call({ outcome: 'denied' }));
    expect(history.view().backends).toEqual([
      { route: 'demo', backend: 'jobs', lastCallAt: new Date(clock).toISOString(), failingSince: firstFailure, lastError: 'degraded: upstream_reset_before_response_started{connection_refused}' },
    ]);
    history.record(call({ outcome: 'ok' }));
    expect(history.view().backends[0].failingSince).toBeUndefined();
  });

  it('forgets what is older than the window, and drops a series without calls in it', () => {
    const history = new CallHistory({ ...HISTORY_DEFAULTS, stepMs: 1000, steps: 10 }, now);
    history.record(call({ tool: 'old', toolLabel: 'old' }));
    clock += 5000;
    history.record(call({}));
    clock += 6000;
    history.record(call({}));
    // A late entry for a step already out of the window is not counted.
    history.record(call({ endedAt: START }));
    const view = history.view();
    expect(view.series.map((series) => series.tool)).toEqual(['echo']);
    expect(view.series[0].points.map((point) => [point[0], point[1]])).toEqual([
      [5 - 2, 1],
      [9, 1],
    ]);
    expect(view.windowStart).toBe(START + 2000);
  });
});
