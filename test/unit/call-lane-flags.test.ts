import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { toolFlags } from '../../control-plane/xds/translate/call-lane';

const tool = (extra: Partial<Tool> = {}): Tool => ({ name: 't', inputSchema: { type: 'object' }, ...extra });

describe('how Envoy treats a call of each tool (the call script flags)', () => {
  it.each<[string, Partial<Tool>, boolean, string]>([
    ['a tool without annotations: no widened retries', {}, false, ''],
    ['a destructive tool', { annotations: { destructiveHint: true } }, false, ''],
    ['a read-only tool', { annotations: { readOnlyHint: true } }, false, 'r'],
    ['a read-only tool of a Tool Service with a fallback', { annotations: { readOnlyHint: true } }, true, 'r;f'],
    ['an idempotent tool: retries, but no fallback', { annotations: { readOnlyHint: false, idempotentHint: true } }, true, 'r'],
    ['a tool with its own timeout', { _meta: { 'mcpgw/timeoutMs': 1500 } }, false, 't=1500'],
    ['a tool with a malformed timeout', { _meta: { 'mcpgw/timeoutMs': '1500' } }, false, ''],
    ['a tool with a negative timeout', { _meta: { 'mcpgw/timeoutMs': -1 } }, false, ''],
    ['everything at once', { _meta: { 'mcpgw/timeoutMs': 20 }, annotations: { readOnlyHint: true } }, true, 't=20;r;f'],
  ])('%s', (_case, extra, hasFallback, flags) => {
    expect(toolFlags(tool(extra), hasFallback)).toBe(flags);
  });
});
