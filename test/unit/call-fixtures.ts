import { CallRecord } from '../../control-plane/admin/call-log';

/** A finished tools/call as the call log hands it to its observers: an ok echo of jobs on demo, unless told otherwise. */
export function callRecord(overrides: Partial<CallRecord> = {}): CallRecord {
  return {
    endedAt: Date.now(),
    route: 'demo',
    backend: 'jobs',
    tool: 'echo',
    toolLabel: 'echo',
    outcome: 'ok',
    seconds: 0.01,
    attempts: 1,
    detail: 'via_upstream',
    ...overrides,
  };
}
