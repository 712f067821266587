import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AccessRuleMessage } from '../../control-plane/catalog/catalog-store';
import { RouteAuthIR } from '../../control-plane/ir/gateway-ir';
import { CallLaneBackend, callRouteFilters, callScriptFilter } from '../../control-plane/xds/translate/call-lane';

/**
 * Each Envoy worker's call script remembers what it read of a route's context, by the context's digest
 * (docs/adr/0008-data-path-lanes.md, docs/adr/0011-caller-identity.md): a changed rule must be the rule
 * the next call is decided by. The call script runs on LuaJIT with a stand-in for Envoy's handle that
 * gives it the route's context as the translator wrote it; one Lua state is one worker.
 */

const AUTH = { scopesSupported: ['tools:call'], metadataUrl: 'http://gateway.test/.well-known/oauth-protected-resource/mcp/demo' } as RouteAuthIR;
const spy: CallLaneBackend = {
  era: 'session',
  sessionful: false,
  tools: new Map([['admin_reset', 'a=1']]),
  denied: new Map(),
  approvals: new Map(),
  prompts: new Set(),
  serves: { prompts: false, resources: false, subscriptions: false, completions: false },
  fallbackText: '',
};
const rule = (groups: string[]): AccessRuleMessage => ({ required_scopes: [], allow_subjects: [], allow_groups: groups, allow_clients: [] });

/** The filter_context of the demo route's spy calls, whose tool admin_reset only callers in `groups` may call. */
const contextAllowing = (groups: string[]) =>
  (
    callRouteFilters('demo', 'spy', '__', { backends: new Map([['spy', spy]]), accessRules: [rule(groups)] }, AUTH, {
      annotate: true,
      auditArguments: false,
      credentials: 'none',
      pooledCallLane: false,
    })['envoy.filters.http.lua'] as unknown as { filter_context: Record<string, unknown> }
  ).filter_context;

/** A JSON value as a Lua table constructor. */
const lua = (value: unknown): string => {
  if (Array.isArray(value)) return `{ ${value.map(lua).join(', ')} }`;
  if (typeof value === 'object' && value !== null) return `{ ${Object.entries(value).map(([key, inner]) => `[${JSON.stringify(key)}] = ${lua(inner)}`).join(', ')} }`;
  return JSON.stringify(value);
};

/**
 * Calls spy__admin_reset as a caller in group "engineering", once per context in turn, in one Lua
 * state: per call "forwarded", or the JSON-RPC error code it was answered with.
 */
function callsIn(contexts: Record<string, unknown>[]): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'route-memory-'));
  try {
    const source = (callScriptFilter(false) as unknown as { typed_config: { value: { default_source_code: { inline_string: string } } } }).typed_config.value
      .default_source_code.inline_string;
    const script = path.join(dir, 'call-lane.lua');
    fs.writeFileSync(script, source);
    const probe = `dofile(${JSON.stringify(script)})
local contexts = ${lua(contexts)}
local function handle(context)
  local header_methods = {
    get = function(self, name) return rawget(self, name) end,
    replace = function(self, name, value) rawset(self, name, value) end,
    remove = function(self, name) rawset(self, name, nil) end,
  }
  local headers = setmetatable({ [":path"] = "/mcp/demo", ["x-mcpgw-claim-iss"] = "https://idp.test", ["x-mcpgw-claim-sub"] = "alice",
    ["x-mcpgw-claim-groups"] = "engineering" }, { __index = header_methods })
  local request = { method = "tools/call", id = 7, params = { name = "spy__admin_reset", arguments = {} } }
  local metadata = { get = function(_, ns) if ns == "envoy.filters.http.mcp" then return request end return nil end, set = function() end }
  local text = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"spy__admin_reset","arguments":{}}}'
  local body = { getBytes = function() return text end, length = function() return #text end, setBytes = function(_, bytes) text = bytes end }
  local h = { answer = "forwarded" }
  function h:filterContext() return { get = function(_, key) return context[key] end } end
  function h:streamInfo() return { dynamicMetadata = function() return metadata end } end
  function h:headers() return headers end
  function h:body() return body end
  function h:timestamp() return 0 end
  function h:respond(_, answer) self.answer = string.match(answer, '"code":(-?%d+)') end
  return h
end
for _, context in ipairs(contexts) do
  local h = handle(context)
  envoy_on_request(h)
  print(h.answer)
end`;
    const run = spawnSync('luajit', ['-e', probe], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    return run.stdout.trim().split('\n');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe("the call script's memory of a route's context", () => {
  const approversOnly = contextAllowing(['approvers']);
  const engineering = contextAllowing(['engineering']);

  it('is keyed by a digest that changes when an access rule does', () => {
    expect(approversOnly.digest).toEqual(expect.any(String));
    expect(engineering.digest).not.toBe(approversOnly.digest);
    expect(contextAllowing(['approvers']).digest).toBe(approversOnly.digest);
  });

  it("decides each call by the route's current access rule, however often the worker read the route before", () => {
    expect(callsIn([approversOnly, approversOnly, engineering, engineering, approversOnly])).toEqual(['-32003', '-32003', 'forwarded', 'forwarded', '-32003']);
  });

  it('reads a context without a digest every time', () => {
    const { digest: _a, ...plainApprovers } = approversOnly;
    const { digest: _b, ...plainEngineering } = engineering;
    expect(callsIn([plainApprovers, plainEngineering, plainApprovers])).toEqual(['-32003', 'forwarded', '-32003']);
  });
});
