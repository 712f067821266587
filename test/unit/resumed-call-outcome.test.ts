import { answerOfResumedCall } from '../../control-plane/sidecar/backend-streams';
import { BackendView } from '../../control-plane/sidecar/route-catalog';
import { ResumedCall, resumeTargetOf, resumedCallOutcome } from '../../control-plane/sidecar/tool-call';

/**
 * A call's answer that reaches its client on a resumed stream carries the call's outcome as a direct
 * one does (docs/adr/0018-stream-relaying.md): the attempts and start the call script put in the
 * stream's resume token.
 */
describe('the outcome of a resumed call', () => {
  const backend = { name: 'jobs', schemeName: 'jobs' } as unknown as BackendView;
  const startedAt = Date.now() - 1500;
  const call: ResumedCall = { b: 'jobs', t: 'run', i: 7, a: 2, s: startedAt };
  const resumption = { outcomeOf: (lastError?: string) => resumedCallOutcome(call, lastError) };

  it('reads the attempts and the start from the token the call script gives', () => {
    const token = Buffer.from(JSON.stringify(call)).toString('base64');
    expect(resumeTargetOf(`mcpgw-call.${token}.17`)).toEqual({ kind: 'call', token, call, backendEventId: '17' });
  });

  it('gives a result the outcome ok, counted from the call’s start', () => {
    const answer = answerOfResumedCall({ jsonrpc: '2.0', id: 7, result: { content: [], _meta: { mine: 1 } } }, backend, resumption);
    const meta = (answer.result as { _meta: Record<string, { elapsed_ms: number }> })._meta;
    expect(meta.mine).toBe(1);
    expect(meta['mcpgw/outcome']).toMatchObject({ outcome: 'ok', backend: 'jobs', tool: 'run', attempts: 2, fallback_used: false });
    expect(meta['mcpgw/outcome'].elapsed_ms).toBeGreaterThanOrEqual(1500);
  });

  it('gives a backend’s error the outcome failed, with its message', () => {
    const answer = answerOfResumedCall({ jsonrpc: '2.0', id: 7, error: { code: -32000, message: 'boom' } }, backend, resumption);
    expect(answer.error).toMatchObject({ code: -32000, message: 'boom', data: { 'mcpgw/outcome': { outcome: 'failed', attempts: 2, last_error: 'boom' } } });
  });

  it('leaves an answer that names its outcome already, and error data that is not an object', () => {
    const carried = { jsonrpc: '2.0', id: 7, result: { content: [], _meta: { 'mcpgw/outcome': { outcome: 'degraded' } } } };
    expect(answerOfResumedCall(carried, backend, resumption)).toEqual(carried);
    const scalar = { jsonrpc: '2.0', id: 7, error: { code: -32000, message: 'boom', data: 'why' } };
    expect(answerOfResumedCall(scalar, backend, resumption)).toEqual(scalar);
  });

  it('adds none for a token of an older call script, nor to another method’s stream', () => {
    const older: ResumedCall = { b: 'jobs', t: 'run', i: 7 };
    expect(resumedCallOutcome(older)).toBeUndefined();
    const answer = { jsonrpc: '2.0', id: 7, result: { content: [] } };
    expect(answerOfResumedCall(answer, backend, {})).toEqual(answer);
  });
});
