import * as path from 'node:path';
import { Writable } from 'node:stream';
import * as client from 'prom-client';
import type { Options, RotatingFileStream } from 'rotating-file-stream' with { 'resolution-mode': 'import' };
import { CallLogConsumer, LogEntry } from '../admin/call-log';
import { Logger } from '../shared/log';
import { AUDIT_OUTCOMES, auditEventOf } from './audit-event';

/**
 * Where audit events go (docs/approval-and-audit.md): JSON lines, one event per line, to the control
 * plane's stdout (its own log is on stderr) or to a file that rotating-file-stream rotates by size
 * and, if set, by time, keeping `maxFiles` gzipped older files (`audit.jsonl.1.gz`, …).
 */
export type AuditTarget =
  | { kind: 'stdout' }
  | { kind: 'file'; file: string; rotateSize: string; rotateInterval?: string; maxFiles: number };

/**
 * rotating-file-stream ships a CommonJS build beside its ES module, but its types are declared for the
 * ES module only, which TypeScript refuses to import from CommonJS: the types come from there, the
 * code from its CommonJS build.
 */
const { createStream } = require('rotating-file-stream') as { createStream(filename: string, options: Options): RotatingFileStream };

export const AUDIT_DEFAULTS = { rotateSize: '100M', maxFiles: 10 } as const;

/** rotating-file-stream's size and interval forms, checked before it is handed them. */
export const ROTATE_SIZE_PATTERN = /^[1-9][0-9]*[BKMG]$/;
export const ROTATE_INTERVAL_PATTERN = /^[1-9][0-9]*[smhdM]$/;

function openTarget(target: AuditTarget, log: Logger): Writable {
  if (target.kind === 'stdout') return process.stdout;
  const stream = createStream(path.basename(target.file), {
    path: path.dirname(target.file),
    size: target.rotateSize,
    ...(target.rotateInterval ? { interval: target.rotateInterval } : {}),
    rotate: target.maxFiles,
    compress: 'gzip',
  });
  stream.on('warning', (error: Error) => log.warn('audit log rotation', { error: error.message }));
  return stream;
}

/** Builds the audit event of every call-log entry that has one, writes it and counts it. */
export class AuditLog implements CallLogConsumer {
  private readonly events: client.Counter<'kind' | 'outcome'>;
  private readonly writeErrors: client.Counter;
  private readonly out: Writable;
  /**
   * The events of the call-log message being read, written together once it is read: one write per
   * batch of Envoy's instead of one per call, which was most of the control plane's CPU per audited
   * call (docs/adr/0008-data-path-lanes.md, "The two access logs").
   */
  private pending: string[] = [];

  constructor(
    private readonly target: AuditTarget,
    registry: client.Registry,
    log: Logger,
  ) {
    this.events = new client.Counter({
      name: 'mcpgw_audit_events_total',
      help: `Audit events written, by kind (tools/call, denied_request) and outcome (${AUDIT_OUTCOMES.join(', ')})`,
      labelNames: ['kind', 'outcome'] as const,
      registers: [registry],
    });
    this.writeErrors = new client.Counter({
      name: 'mcpgw_audit_write_errors_total',
      help: 'Audit log write failures (the file could not be opened, written or rotated)',
      registers: [registry],
    });
    this.out = openTarget(target, log);
    this.out.on('error', (error: Error) => {
      this.writeErrors.inc();
      log.error('the audit log cannot be written', { error: error.message, target: this.describe() });
    });
  }

  describe(): string {
    return this.target.kind === 'stdout' ? 'stdout' : this.target.file;
  }

  add(entry: LogEntry): void {
    const event = auditEventOf(entry);
    if (!event) return;
    if (this.pending.push(`${JSON.stringify(event)}\n`) === 1) queueMicrotask(() => this.writePending());
    this.events.inc({ kind: event.kind, outcome: event.outcome });
  }

  private writePending(): void {
    if (this.pending.length === 0) return;
    const lines = this.pending.join('');
    this.pending = [];
    this.out.write(lines);
  }

  /** Flushes and closes a file (stdout stays open). */
  close(): Promise<void> {
    this.writePending();
    if (this.out === process.stdout) return Promise.resolve();
    return new Promise((resolve) => {
      this.out.end(() => resolve());
      this.out.once('error', () => resolve());
    });
  }
}
