import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import * as client from 'prom-client';
import { z } from 'zod';
import { LogEntry, callLogEntrySchema } from '../../control-plane/admin/call-log';
import { argumentsHash, canonicalJson } from '../../control-plane/audit/arguments-hash';
import { auditEventOf, auditEventSchema } from '../../control-plane/audit/audit-event';
import { AuditLog } from '../../control-plane/audit/audit-log';
import { projectPath } from '../../control-plane/shared/paths';
import { quietLogger } from '../support/quiet-logger';

interface EntryShape {
  status: number;
  ours?: Record<string, unknown>;
  mcp?: Record<string, unknown>;
  jwt?: Record<string, unknown>;
  routeName?: string;
  path?: string;
  attempts?: number;
  details?: string;
  /** Envoy's response flags by their long names. */
  flags?: string[];
  headers?: { 'x-mcpgw-limit'?: string; 'x-ratelimit-limit'?: string };
}

/** jwt_authn's claim headers (string claims only), as the record carries them. */
const claimsOf = (claims: Record<string, unknown> = {}) => {
  const claim = (name: string) => (typeof claims[name] === 'string' ? claims[name] : null);
  return { claim_iss: claim('iss'), claim_sub: claim('sub'), claim_client_id: claim('client_id'), claim_azp: claim('azp') };
};

/** A call-log record as Envoy's fluentd logger formats it with the audit on (listener.ts CALL_LOG_RECORD). */
function entry(shape: EntryShape): LogEntry {
  const params = (shape.mcp?.params ?? {}) as Record<string, unknown>;
  return callLogEntrySchema.parse({
    script: shape.ours ?? null,
    rpc_method: shape.mcp?.method ?? null,
    rpc_tool: params.name ?? null,
    start_ms: '1767225600250',
    duration_ms: 42,
    flags: shape.flags?.join(',') ?? '-',
    envoy_route: shape.routeName ?? null,
    attempts: shape.attempts ?? 0,
    path: shape.path ?? '/mcp/demo',
    request_id: 'req-1',
    ...claimsOf(shape.jwt),
    status: shape.status,
    details: shape.details ?? 'via_upstream',
    limit: shape.headers?.['x-mcpgw-limit'] ?? null,
    ratelimit_limit: shape.headers?.['x-ratelimit-limit'] ?? null,
  });
}

const ALICE = { iss: 'http://idp/realms/mcpgw', sub: 'a1', azp: 'agent-cli', scope: 'tools:call', groups: ['engineering'] };
const call = (extra: Partial<EntryShape> = {}): EntryShape => ({
  status: 200,
  routeName: 'demo/call/jobs',
  mcp: { method: 'tools/call', id: 3, params: { name: 'jobs__run_job' } },
  ours: { route: 'demo', backend: 'jobs', tool: 'run_job', outcome: 'ok', arguments: '{"steps": 2, "label":"x"}', credential: 'tokenExchange' },
  attempts: 1,
  ...extra,
});

describe('arguments hash: SHA-256 of RFC 8785 canonical JSON', () => {
  it('writes members sorted by UTF-16 code units, without whitespace, numbers as ECMAScript does', () => {
    // RFC 8785 §3.2.3's sorting example, and its number forms.
    expect(canonicalJson({ '\u20ac': 'Euro Sign', '\r': 'Carriage Return', '\ufb33': 'Hebrew Letter Dalet With Dagesh', '1': 'One', '\ud83d\ude00': 'Emoji: Grinning Face', '\u0080': 'Control', '\u00f6': 'Latin Small Letter O With Diaeresis' })).toBe(
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    );
    expect(canonicalJson(JSON.parse('[1E30, 4.50, 0.002, 1e-27, -0, 333333333.33333329]'))).toBe('[1e+30,4.5,0.002,1e-27,0,333333333.3333333]');
    expect(canonicalJson({ b: [true, null, { d: 1, c: 'é' }], a: '' })).toBe('{"a":"","b":[true,null,{"c":"é","d":1}]}');
  });

  it('names the same arguments alike however they were written, and different arguments differently', () => {
    const hash = argumentsHash('{"b": 1, "a": [1, 2]}');
    expect(hash).toBe(createHash('sha256').update('{"a":[1,2],"b":1}').digest('hex'));
    expect(argumentsHash('{"a":[1,2.0],"b":1}')).toBe(hash);
    expect(argumentsHash('{"a":[2,1],"b":1}')).not.toBe(hash);
    expect(argumentsHash(undefined)).toBe(argumentsHash('{}'));
    expect(argumentsHash('{"a":')).toBeUndefined();
  });
});

describe('an audit event from a call-log entry', () => {
  it('a call: caller, route, backend, tool, hash, outcome, attempts, time, credential', () => {
    const event = auditEventOf(entry(call({ jwt: ALICE })));
    expect(event).toEqual({
      audit_version: 1,
      time: '2026-01-01T00:00:00.250Z',
      request_id: 'req-1',
      kind: 'tools/call',
      method: 'tools/call',
      caller: { issuer: ALICE.iss, subject: 'a1', client_id: 'agent-cli' },
      route: 'demo',
      backend: 'jobs',
      tool: 'run_job',
      arguments_sha256: argumentsHash('{"label":"x","steps":2}'),
      outcome: 'ok',
      http_status: 200,
      attempts: 1,
      elapsed_ms: 42,
      approval: { decision: 'not_required' },
      credential_mode: 'tokenExchange',
    });
    expect(JSON.stringify(event)).not.toContain('"x"');
  });

  it('prefers the RFC 9068 client_id claim to azp', () => {
    expect(auditEventOf(entry(call({ jwt: { ...ALICE, client_id: 'agent-batch' } })))?.caller?.client_id).toBe('agent-batch');
  });

  it("takes the call script's record of the caller first (the call route removed the claim headers before the log)", () => {
    const recorded = { ...call().ours, caller: { iss: 'http://idp/realms/mcpgw', sub: 'b2', client: 'agent-batch' } };
    expect(auditEventOf(entry(call({ ours: recorded })))?.caller).toEqual({ issuer: 'http://idp/realms/mcpgw', subject: 'b2', client_id: 'agent-batch' });
  });

  it('no caller on an open route', () => {
    const event = auditEventOf(entry(call()));
    expect(event?.caller).toBeUndefined();
  });

  it('a call refused by policy: denied, nothing forwarded, no credential carried', () => {
    const event = auditEventOf(
      entry(call({ ours: { route: 'demo', backend: 'jobs', tool: 'wipe', outcome: 'denied', reason: 'policy', rule: 'denyTools "w*"', arguments: '{}' }, attempts: 0 })),
    );
    expect(event).toMatchObject({ outcome: 'denied', reason: 'policy', rule: 'denyTools "w*"', attempts: 0, credential_mode: 'none', tool: 'wipe' });
  });

  it('a call that needed an approval, and one that had it', () => {
    const required = auditEventOf(entry(call({ ours: { route: 'demo', backend: 'jobs', tool: 'wipe', outcome: 'approval_required', approval: 'required' }, attempts: 0 })));
    expect(required).toMatchObject({ outcome: 'approval_required', approval: { decision: 'required' } });
    const granted = auditEventOf(
      entry(call({ ours: { ...call().ours, approval: 'granted', approval_id: 'ap1', approver_iss: ALICE.iss, approver_sub: 'c3' } })),
    );
    expect(granted?.approval).toEqual({ decision: 'granted', id: 'ap1', approver: { issuer: ALICE.iss, subject: 'c3' } });
  });

  it('a call a limit refused: limited, the limit as the reason, the caller kept, nothing forwarded', () => {
    const event = auditEventOf(
      entry(
        call({
          jwt: ALICE,
          status: 429,
          flags: ['RateLimited'],
          headers: { 'x-mcpgw-limit': 'route:demo/calls/per-caller' },
          details: 'local_rate_limited',
          attempts: 0,
        }),
      ),
    );
    expect(event).toMatchObject({ kind: 'tools/call', outcome: 'limited', reason: 'route:demo/calls/per-caller', caller: { subject: 'a1' }, http_status: 429, attempts: 0 });
  });

  it('a failed call: Envoy flags without a recorded outcome', () => {
    const event = auditEventOf(entry(call({ status: 503, ours: { route: 'demo', backend: 'jobs', tool: 'run_job' }, flags: ['UpstreamConnectionFailure'], attempts: 3 })));
    expect(event).toMatchObject({ outcome: 'failed', attempts: 3, http_status: 503 });
  });

  it('a call no backend route took (answered by the gateway lane)', () => {
    const event = auditEventOf(entry({ status: 200, routeName: 'demo/gateway', mcp: { method: 'tools/call', id: 1, params: { name: 'nobody__x' } } }));
    expect(event).toMatchObject({ kind: 'tools/call', route: 'demo', tool: 'nobody__x', outcome: 'invalid' });
    expect(event?.backend).toBeUndefined();
  });

  it('a request refused before it was parsed (no token): a denied request, route from its path', () => {
    const event = auditEventOf(entry({ status: 401, path: '/mcp/demo', details: 'jwt_authn_access_denied{Jwt_is_missing}' }));
    expect(event).toMatchObject({ kind: 'denied_request', route: 'demo', outcome: 'denied', reason: 'jwt_authn_access_denied{Jwt_is_missing}', http_status: 401, attempts: 0 });
    expect(event?.method).toBeUndefined();
  });

  it('no event for other requests', () => {
    expect(auditEventOf(entry({ status: 200, routeName: 'demo/gateway', mcp: { method: 'tools/list', id: 1 } }))).toBeUndefined();
  });
});

describe('docs/audit-event.schema.json', () => {
  const file = projectPath('docs', 'audit-event.schema.json');

  it('is generated from the event schema (UPDATE_GOLDEN=1 regenerates it)', () => {
    const schema = { ...z.toJSONSchema(auditEventSchema), title: 'MCP federation gateway audit event' };
    const rendered = `${JSON.stringify(schema, null, 2)}\n`;
    if (process.env.UPDATE_GOLDEN) fs.writeFileSync(file, rendered);
    expect(rendered).toBe(fs.readFileSync(file, 'utf8'));
  });

  it('accepts every event above and refuses one carrying argument values', () => {
    const ajv = new Ajv2020({ strict: true });
    addFormats(ajv);
    const validate = ajv.compile(JSON.parse(fs.readFileSync(file, 'utf8')));
    for (const shape of [call({ jwt: ALICE }), call(), { status: 401, path: '/mcp/demo' }]) {
      const event = auditEventOf(entry(shape));
      expect(validate(event)).toBe(true);
    }
    expect(validate({ ...auditEventOf(entry(call())), arguments: { steps: 2 } })).toBe(false);
  });
});

describe('the audit log file', () => {
  it('holds one JSON line per event, rotates by size into gzipped files, and counts events by outcome', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-audit-'));
    const registry = new client.Registry();
    const audit = new AuditLog({ kind: 'file', file: path.join(dir, 'audit.jsonl'), rotateSize: '2K', maxFiles: 3 }, registry, quietLogger);
    const events = 40;
    for (let index = 0; index < events; index += 1) {
      audit.add(entry(call({ jwt: ALICE })));
      // rotating-file-stream checks the size as writes complete
      await new Promise((resolve) => setImmediate(resolve));
    }
    audit.add(entry({ status: 401, path: '/mcp/demo' }));
    await audit.close();
    const files = fs.readdirSync(dir).sort();
    expect(files).toContain('audit.jsonl');
    expect(files).toContain('audit.jsonl.1.gz');
    expect(files.length).toBeLessThanOrEqual(4);
    const lines = files.flatMap((name) => {
      const bytes = fs.readFileSync(path.join(dir, name));
      return (name.endsWith('.gz') ? zlib.gunzipSync(bytes) : bytes).toString('utf8').split('\n').filter(Boolean);
    });
    for (const line of lines) expect(auditEventSchema.safeParse(JSON.parse(line)).success).toBe(true);
    const counted = (await registry.getSingleMetric('mcpgw_audit_events_total')!.get()).values;
    expect(counted.find((value) => value.labels.outcome === 'ok')?.value).toBe(events);
    expect(counted.find((value) => value.labels.kind === 'denied_request')?.value).toBe(1);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('writes the events of one call-log message in one write, not one per call', async () => {
    const writes = jest.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      const audit = new AuditLog({ kind: 'stdout' }, new client.Registry(), quietLogger);
      // One message of Envoy's call log: its entries reach the consumers in one go.
      for (let index = 0; index < 3; index += 1) audit.add(entry(call({ jwt: ALICE })));
      await Promise.resolve();
      expect(writes).toHaveBeenCalledTimes(1);
      expect(String(writes.mock.calls[0][0]).split('\n').filter(Boolean).map((line) => JSON.parse(line).outcome)).toEqual(['ok', 'ok', 'ok']);
    } finally {
      writes.mockRestore();
    }
  });
});
