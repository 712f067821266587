import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { callPolicy } from '../../control-plane/sidecar/call-policy';
import { BackendView } from '../../control-plane/sidecar/route-catalog';

const backend = (fallbackText = ''): BackendView => ({
  name: 'jobs',
  cluster: 'tool_service.jobs',
  state: 'ok',
  toolNames: new Set(),
  lastSuccessAt: '',
  lastError: '',
  failingSince: '',
  url: 'http://127.0.0.1:9/mcp',
  fallbackText,
  deniedTools: new Map(),
  protocolVersion: '2025-11-25',
});
const tool = (extra: Partial<Tool> = {}): Tool => ({ name: 't', inputSchema: { type: 'object' }, ...extra });
const RETRY = { 'x-envoy-retry-on': '5xx,reset,connect-failure,reset-before-request', 'x-envoy-max-retries': '2' };

describe('call policy', () => {
  it.each<[string, Partial<Tool>, Record<string, string>]>([
    ['a tool without annotations: no widened retries', {}, {}],
    ['a destructive tool', { annotations: { destructiveHint: true } }, {}],
    ['a read-only tool', { annotations: { readOnlyHint: true } }, RETRY],
    ['an idempotent tool', { annotations: { readOnlyHint: false, idempotentHint: true } }, RETRY],
    ['a tool with its own timeout', { _meta: { 'mcpgw/timeoutMs': 1500 } }, { 'x-envoy-upstream-rq-timeout-ms': '1500' }],
    ['a tool with a malformed timeout', { _meta: { 'mcpgw/timeoutMs': '1500' } }, {}],
    ['a tool with a negative timeout', { _meta: { 'mcpgw/timeoutMs': -1 } }, {}],
  ])('%s', (_case, extra, headers) => {
    expect(callPolicy(tool(extra), backend()).headers).toEqual(headers);
  });

  it('offers the Tool Service fallback for read-only tools only', () => {
    expect(callPolicy(tool({ annotations: { readOnlyHint: true } }), backend('cached answer')).fallback).toBe('cached answer');
    expect(callPolicy(tool({ annotations: { idempotentHint: true } }), backend('cached answer')).fallback).toBeUndefined();
    expect(callPolicy(tool({ annotations: { readOnlyHint: true } }), backend()).fallback).toBeUndefined();
  });
});
