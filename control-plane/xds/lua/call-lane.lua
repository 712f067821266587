-- The call lane's script (docs/adr/0008-data-path-lanes.md): runs in Envoy on every tools/call route,
-- one route per (route key, backend). Its per-route filter_context says what the control plane decided
-- for that backend on that route:
--   backend, separator, route     the backend's prefix name, the tool-name separator, the route key
--   era                           "modern" (MCP 2026-07-28, stateless), "session" (2025-11-25 and before),
--                                 or "dual" (both: each client is spoken to in its own)
--   sessionful                    true when the backend hands out sessions (a stateless client's call needs one)
--   annotate                      true: the final message of the answer gets the call's outcome
--   fallback                      degraded answer text for read-only tools, if the Tool Service has one
--   per_caller_credentials        true when the backend's credentials come from the caller's token
--                                 (token exchange, passthrough): the sidecar makes them (credential_cluster,
--                                 credential_timeout_ms), this worker remembers them for as long as it says
--   credential_mode               the backend's credentials mode (none, serviceAccount, tokenExchange,
--                                 passthrough), for the audit
--   audit_arguments               true: the call's arguments (raw JSON) go to the access log's metadata,
--                                 from which the control plane hashes them for the audit event
--   ["tool:<own name>"]           a served tool: "" or flags "t=<deadline ms>;r;f;a=<n>;ap;q=<n>" (retry
--                                 safe, fallback, the access rule n that decides who may call it, approval,
--                                 the Tool Service's tool limit n that applies)
--   ["approval:<own name>"]       for a tool flagged "ap": its approval rule as JSON ({"risk", "approvers"})
--   approval_cluster              the sidecars' cluster that decides approvals (when a tool needs one)
--   tool_service, ["quota:<n>:<key>"]  the Tool Service's id and, per tool limit, the values of its
--                                 metadata keys quota_tool_<key> the quota filters read (docs/quotas.md)
--   concurrency, concurrency_deadline_ms, ["concurrency:<n>"]  per-caller concurrency limits: the route's
--                                 and the Tool Service's ("<in flight>=<name>;…", maybe ""), the call's
--                                 deadline without a tool's own, and tool limit n's in-flight count
--   ["deny:<own name>"]           a tool the route's policy denies, with the rule that does
--   ["access:<n>"]                an access rule (docs/auth.md): scopes = {required scope, ...},
--                                 subjects / groups / clients = {[allowed value] = true} (absent: no condition)
--   auth                          true when the route takes tokens (Envoy's jwt_authn validated this one)
--   auth_scopes                   {[scope] = true}: the route's scopes, kept in a scope challenge
--   resource_metadata             the route's protected-resource metadata URL (RFC 9728)
--   scheme                        the backend's name as its resources' URI scheme prefix ("_" written "-")
-- Routes of the backend's prompts and resources (docs/adr/0015-federated-resources-and-prompts.md)
-- run the same script for prompts/get, completion/complete, resources/read, resources/subscribe and
-- resources/unsubscribe, with the same keys (no tool flags) and:
--   ["prompt:<own name>"]         a prompt the route serves
-- The request side checks the tool, strips the backend prefix from params.name (and Mcp-Name), sets
-- Envoy's per-request deadline and retries, and leaves what local replies, the access log and the
-- session check read in dynamic metadata (namespace mcpgw). The response side scopes the ids of
-- requests the backend sends its client, puts the outcome into the final message, and turns a
-- backend's non-JSON failure or a lost backend session into a JSON-RPC error.
-- With tracing on (TRACING, set by the prelude with the gateway's tracer), it leaves the attributes of the
-- span in metadata and, where an x-mcpgw-span header names Envoy's span of the call, names that span in
-- params._meta.traceparent (docs/observability.md#traces).
--
-- No JSON or SSE library exists inside Envoy's Lua: the scanning below only finds the members of an
-- object and the end of an event; it never builds values. Requests reaching it were parsed and
-- checked (duplicate keys included) by the mcp filter before.

local find, byte, sub, format, gsub = string.find, string.byte, string.sub, string.format, string.gsub
local concat = table.concat

local M = {}

-- What every route shares: gateway constants and the defaults a route's filter_context leaves out
-- (call-lane.ts, ROUTE_CONTEXT_DEFAULTS), set once by the prelude the control plane puts on this
-- script's first line; empty when a test loads the script bare. A route's own value, false included, wins.
local route_defaults = ROUTE_CONTEXT_DEFAULTS or {}
-- A worker's memory of what `make` gives for a key, at most `max` keys: a full memory starts over (the
-- keys are few in practice: a route's contexts, its tools' flag strings).
local function bounded_memory(max, make)
  local entries, count = {}, 0
  return function(key)
    local value = entries[key]
    if value == nil then
      if count >= max then entries, count = {}, 0 end
      value = make(key)
      entries[key], count = value, count + 1
    end
    return value
  end
end

-- Each read of a route's filter_context converts Envoy's protobuf value into a new Lua value (an
-- access rule or the route's scopes into a new table), some twenty reads a call. A worker remembers
-- what it read of a route's context by the context's digest (call-lane.ts, contextDigest: a hash of the
-- whole context, so a context that changes in any value, an access rule included, has another digest
-- and is read anew; docs/adr/0008-data-path-lanes.md). Bounded; a full memory starts over. A context
-- without a digest (the session end's, a test's) is read every time.
local ABSENT = {}
local remembered_context_values = bounded_memory(2048, function() return {} end)
local RouteContext = {}
RouteContext.__index = RouteContext
function RouteContext:get(key)
  local values = self.values
  local value = values[key]
  if value == nil then
    value = self.own:get(key)
    if value == nil then value = route_defaults[key] end
    if value == nil then value = ABSENT end
    values[key] = value
  end
  if value == ABSENT then return nil end
  return value
end
function M.route_context(h)
  local own = h:filterContext()
  local digest = own:get("digest")
  local values = digest == nil and {} or remembered_context_values(digest)
  return setmetatable({ own = own, values = values }, RouteContext)
end

local MCP_NS = "envoy.filters.http.mcp"
local NS = "mcpgw"
-- The session check's memory key of a call (its session id among it): in a namespace of its own, since
-- the call log carries NS whole to the control plane (listener.ts CALL_LOG_RECORD), which needs no session id.
local SESSION_MEMORY_NS = "mcpgw.session_memory"
local OUTCOME_KEY = "mcpgw/outcome"
local MODERN_VERSION = "2026-07-28"
-- A stateless client's request to a session-era backend goes in the pooled backend session, opened in
-- the last revision without resumable streams: such a client cannot reconnect, so the backend must
-- not expect it to (SEP-1699 applies from 2025-11-25; docs/adr/0018-stream-relaying.md).
local POOLED_SESSION_VERSION = "2025-06-18"
local MODERN_PROTOCOL_META = '"io.modelcontextprotocol/protocolVersion"'
local GATEWAY_CLIENT_INFO = '{"name":"mcp-federation-gateway","version":"0.1.0"}'
-- Past this, an event (or a JSON answer) is sent on as it is, and so is the rest of the answer.
local MAX_HELD_BYTES = 16 * 1024 * 1024
-- A JSON answer is held whole (in the script's own memory, not an Envoy buffer) up to this.
local MAX_HELD_JSON_BYTES = 1024 * 1024
-- An error answer of a backend is held whole (to be replaced) only up to this: far below Envoy's
-- per-connection buffer limit, which a held body must fit in.
local MAX_HELD_ERROR_BYTES = 16 * 1024
-- JSON-RPC ids the gateway accepts (docs/adr/0009-edge-hardening.md): a string of at most this many
-- bytes, or an integer a JSON number keeps exactly.
local MAX_ID_BYTES = 256
local MAX_SAFE_INTEGER = 9007199254740991
local ID_RULE = "id must be a string of at most 256 bytes or an integer"
-- The SSE event ids the gateway gives a call's stream (the backend's own are dropped): a client that
-- loses the stream resumes with a GET carrying the call's one, and the sidecar answers the call with a
-- JSON-RPC error; after the final answer, the other one (the sidecar answers that GET with 405).
local RESUME_CALL_PREFIX = "mcpgw-call."
local RESUME_DONE = "mcpgw-done"
local SERVER_REQUEST_PATH = "/internal/server-request"
local AUTHZ_NS = "envoy.filters.http.ext_authz"
local CHECK_BACKEND_SESSION = "x-mcpgw-backend-session"
local CHECK_GATEWAY_SESSION = "x-mcpgw-gateway-session"
local CALLER_AUTHORIZATION = "x-mcpgw-caller-authorization"
local SPAN_IDS_HEADER = "x-mcpgw-span"
local POOLED_LANE_HEADER = "x-mcpgw-lane"

-- The caller's claims, as jwt_authn copied them from the token it validated (claim_to_headers).
local CLAIM_HEADER = {
  iss = "x-mcpgw-claim-iss", sub = "x-mcpgw-claim-sub", client_id = "x-mcpgw-claim-client-id", azp = "x-mcpgw-claim-azp",
  scope = "x-mcpgw-claim-scope", scp = "x-mcpgw-claim-scp", groups = "x-mcpgw-claim-groups", username = "x-mcpgw-claim-username",
}

local TOOL_DENIED = -32003
local INSUFFICIENT_SCOPE = -32031
local INVALID_PARAMS = -32602
local INVALID_REQUEST = -32600
local METHOD_NOT_FOUND = -32601
local BACKEND_UNAVAILABLE = -32004
-- The approval check answers from Redis: well inside this, or the call fails closed.
local APPROVAL_CHECK_TIMEOUT_MS = 5000
local APPROVAL_CONTINUATION_PATH = "/internal/approval-continuation"

---------------------------------------------------------------------------------------------------
-- JSON scanning: positions only

local function skip_ws(s, i)
  local _, e = find(s, "^[ \t\r\n]*", i)
  return e + 1
end

-- i at an opening quote; the index of the closing one, or nil. A quote closes the string when an even
-- number of backslashes stands before it. Plain finds (memchr) only: a character-class pattern walks
-- the string byte by byte in Lua, some 200 MB/s, and a resource's text can be megabytes.
local function string_end(s, i)
  local j = i + 1
  while true do
    local p = find(s, '"', j, true)
    if not p then return nil end
    local before = p - 1
    while byte(s, before) == 92 do before = before - 1 end
    if (p - 1 - before) % 2 == 0 then return p end
    j = p + 1
  end
end

local function container_end(s, i)
  local depth, j = 0, i
  while true do
    local p = find(s, '[%[%]{}"]', j)
    if not p then return nil end
    local c = byte(s, p)
    if c == 34 then
      local e = string_end(s, p)
      if not e then return nil end
      j = e + 1
    elseif c == 91 or c == 123 then
      depth = depth + 1
      j = p + 1
    else
      depth = depth - 1
      j = p + 1
      if depth == 0 then return p end
    end
  end
end

-- The last index of the JSON value starting at i, or nil.
local function value_end(s, i)
  local c = byte(s, i)
  if c == 34 then return string_end(s, i) end
  if c == 123 or c == 91 then return container_end(s, i) end
  local _, e = find(s, "^[^,}%]%s]+", i)
  return e
end
M.value_end = value_end

-- The last index of the JSON value the text starts with, once all of it has arrived; nil before.
function M.json_end(s)
  local start = skip_ws(s, 1)
  if start > #s then return nil end
  local c = byte(s, start)
  if c ~= 123 and c ~= 91 and c ~= 34 then
    -- a bare scalar is complete only at the end of the stream: treat it as not JSON to rewrite
    return #s
  end
  return value_end(s, start)
end

-- The members of the object at i: { [key] = {value start, value end} }, and the object's last index.
-- nil for anything that is not an object, or a key with escapes (no MCP member name has one).
local function members(s, i)
  if byte(s, i) ~= 123 then return nil end
  local found = {}
  i = skip_ws(s, i + 1)
  if byte(s, i) == 125 then return found, i end
  while true do
    if byte(s, i) ~= 34 then return nil end
    local key_end = string_end(s, i)
    if not key_end then return nil end
    local key = sub(s, i + 1, key_end - 1)
    if find(key, "\\", 1, true) then return nil end
    i = skip_ws(s, key_end + 1)
    if byte(s, i) ~= 58 then return nil end
    i = skip_ws(s, i + 1)
    local last = value_end(s, i)
    if not last then return nil end
    if found[key] then return nil end
    found[key] = { i, last }
    i = skip_ws(s, last + 1)
    local c = byte(s, i)
    if c == 125 then return found, i end
    if c ~= 44 then return nil end
    i = skip_ws(s, i + 1)
  end
end
M.members = members

local function text_of(s, span) return sub(s, span[1], span[2]) end

-- The elements of the array at i: a list of {value start, value end}; nil for anything else.
local function elements(s, i)
  if byte(s, i) ~= 91 then return nil end
  local found = {}
  i = skip_ws(s, i + 1)
  if byte(s, i) == 93 then return found end
  while true do
    local last = value_end(s, i)
    if not last then return nil end
    found[#found + 1] = { i, last }
    i = skip_ws(s, last + 1)
    local c = byte(s, i)
    if c == 93 then return found end
    if c ~= 44 then return nil end
    i = skip_ws(s, i + 1)
  end
end
M.elements = elements

-- s with each { first, last, text } of `edits` (in order, not overlapping) replacing s[first..last].
function M.substitute(s, edits)
  local out, position = {}, 1
  for _, edit in ipairs(edits) do
    out[#out + 1] = sub(s, position, edit[1] - 1)
    out[#out + 1] = edit[3]
    position = edit[2] + 1
  end
  out[#out + 1] = sub(s, position)
  return concat(out)
end

-- The same, or nil when there is nothing to edit.
local function apply_edits(s, edits)
  if #edits == 0 then return nil end
  return M.substitute(s, edits)
end

-- s with `insertion` (one or more members) put first into the object that starts at `open`.
local function insert_members(s, open, insertion)
  local after = skip_ws(s, open + 1)
  local separator = byte(s, after) == 125 and "" or ","
  return sub(s, 1, open) .. insertion .. separator .. sub(s, open + 1)
end
M.insert_members = insert_members

local function json_string(text)
  return '"' .. gsub(text, '[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return format("\\u%04x", byte(c))
  end) .. '"'
end
M.json_string = json_string

---------------------------------------------------------------------------------------------------
-- Resource URIs (docs/adr/0015-federated-resources-and-prompts.md): agents see <scheme>+<own URI>, or
-- ui://<scheme>+<rest> for ui://<rest>; the backend gets its own URI back.

-- The exposed URI's JSON string for the backend's own (a JSON string token), or nil when it is not an
-- absolute URI (nothing to name).
function M.exposed_uri_json(raw, scheme)
  if not find(raw, '^"[A-Za-z][A-Za-z0-9+.-]*:') then return nil end
  if sub(raw, 2, 6) == "ui://" then return '"ui://' .. scheme .. "+" .. sub(raw, 7) end
  return '"' .. scheme .. "+" .. sub(raw, 2)
end

-- The backend's own URI behind an exposed one of this backend, or nil when it is not one.
function M.own_uri(exposed, scheme)
  local prefix = scheme .. "+"
  if sub(exposed, 1, 5) == "ui://" and sub(exposed, 6, 5 + #prefix) == prefix then return "ui://" .. sub(exposed, 6 + #prefix) end
  if sub(exposed, 1, #prefix) == prefix then return sub(exposed, #prefix + 1) end
  return nil
end

local function uri_edit(s, span, scheme, edits)
  if not span or byte(s, span[1]) ~= 34 then return end
  local exposed = M.exposed_uri_json(text_of(s, span), scheme)
  if exposed then edits[#edits + 1] = { span[1], span[2], exposed } end
end

-- A content block's resource URI (an embedded resource's, or a resource link's).
local function content_uri_edits(s, block, scheme, edits)
  local fields = members(s, block[1])
  if not fields or not fields.type then return end
  local kind = text_of(s, fields.type)
  if kind == '"resource_link"' then
    uri_edit(s, fields.uri, scheme, edits)
  elseif kind == '"resource"' and fields.resource then
    local resource = members(s, fields.resource[1])
    if resource then uri_edit(s, resource.uri, scheme, edits) end
  end
end

-- The result of `method` (at `result`, an object) with the resource URIs it holds named for the
-- gateway: resources/read's contents, prompts/get's messages, tools/call's content. nil: none.
function M.expose_result_uris(s, result, method, scheme)
  local inner = members(s, result)
  if not inner then return nil end
  local edits = {}
  if method == "resources/read" and inner.contents then
    for _, item in ipairs(elements(s, inner.contents[1]) or {}) do
      local fields = members(s, item[1])
      if fields then uri_edit(s, fields.uri, scheme, edits) end
    end
  elseif method == "prompts/get" and inner.messages then
    for _, message in ipairs(elements(s, inner.messages[1]) or {}) do
      local fields = members(s, message[1])
      if fields and fields.content and byte(s, fields.content[1]) == 123 then content_uri_edits(s, fields.content, scheme, edits) end
    end
  elseif method == "tools/call" and inner.content then
    for _, block in ipairs(elements(s, inner.content[1]) or {}) do
      if byte(s, block[1]) == 123 then content_uri_edits(s, block, scheme, edits) end
    end
  end
  return apply_edits(s, edits)
end

-- A notification the backend sends in an answer's stream, named for the gateway: a log message
-- names its backend as its logger ("<backend>", or "<backend>/<its own logger>"), a resource update
-- carries the exposed URI. nil: nothing to change.
function M.rewrite_notification(s, top, call)
  if not top.params or byte(s, top.params[1]) ~= 123 then return nil end
  local method = text_of(s, top.method)
  local params = members(s, top.params[1])
  if not params then return nil end
  if method == '"notifications/message"' then
    local logger = params.logger
    if logger and byte(s, logger[1]) == 34 then
      return apply_edits(s, { { logger[1], logger[1], '"' .. call.backend .. "/" } })
    end
    return insert_members(s, top.params[1], '"logger":' .. json_string(call.backend))
  end
  if method == '"notifications/resources/updated"' and call.scheme then
    local edits = {}
    uri_edit(s, params.uri, call.scheme, edits)
    return apply_edits(s, edits)
  end
  return nil
end

---------------------------------------------------------------------------------------------------
-- Request side

-- The span of the string value of params.name, from the body's own bytes.
function M.tool_name_span(body)
  local top = members(body, skip_ws(body, 1))
  local params = top and top.params
  if not params then return nil end
  local inner = members(body, params[1])
  local name = inner and inner.name
  if not name or byte(body, name[1]) ~= 34 then return nil end
  return name[1], name[2], inner, params
end

-- A session-era client's call for a backend of the stateless revision: the request envelope it
-- needs (protocol version, client capabilities, client info) in params._meta. A client of the
-- stateless revision sent its own.
function M.with_modern_envelope(body, params, inner)
  if find(body, MODERN_PROTOCOL_META, 1, true) then return body end
  local envelope = MODERN_PROTOCOL_META .. ':"' .. MODERN_VERSION .. '",'
    .. '"io.modelcontextprotocol/clientCapabilities":{},'
    .. '"io.modelcontextprotocol/clientInfo":' .. GATEWAY_CLIENT_INFO
  if inner._meta and byte(body, inner._meta[1]) == 123 then return insert_members(body, inner._meta[1], envelope) end
  return insert_members(body, params[1], '"_meta":{' .. envelope .. "}")
end

local WHITESPACE = { [32] = true, [9] = true, [10] = true, [13] = true }

-- s without the member `key` of the object at `open`, and the comma that went with it; nil when the
-- object has no such member.
function M.without_member(s, open, key)
  local found = members(s, open)
  local value = found and found[key]
  if not value then return nil end
  -- The key's quotes: a key has no escapes (members), so its opening quote is the nearest before its closing one.
  local close = value[1] - 1
  while byte(s, close) ~= 34 do close = close - 1 end
  local first = close - 1
  while byte(s, first) ~= 34 do first = first - 1 end
  local after = skip_ws(s, value[2] + 1)
  if byte(s, after) == 44 then return sub(s, 1, first - 1) .. sub(s, skip_ws(s, after + 1)) end
  local before = first - 1
  while WHITESPACE[byte(s, before)] do before = before - 1 end
  if byte(s, before) == 44 then return sub(s, 1, before - 1) .. sub(s, value[2] + 1) end
  return sub(s, 1, first - 1) .. sub(s, value[2] + 1)
end

-- An approved retry (2026-07-28) answers the gateway's approval elicitation under its id: that answer
-- is the gateway's, not the backend's, which would take it for an answer to a question of its own.
-- The call without it (without inputResponses when nothing else was in them); nil when it had none.
function M.without_gateway_answer(s, params, elicitation_id)
  local inner = members(s, params[1])
  local responses = inner and inner.inputResponses
  local answers = responses and members(s, responses[1])
  if not answers or not answers[elicitation_id] then return nil end
  if next(answers, next(answers)) == nil then return M.without_member(s, params[1], "inputResponses") end
  return M.without_member(s, responses[1], elicitation_id)
end

-- Headers of the gateway's own namespace mean nothing from a client and must not reach a backend.
-- The caller's claims (x-mcpgw-claim-*) are jwt_authn's, never a client's (the listener removes a
-- client's copies first): kept for the session check, and removed by the route as the request leaves.
local function remove_owned_headers(headers)
  local owned = {}
  for name, _ in pairs(headers) do
    if sub(name, 1, 8) == "x-mcpgw-" and sub(name, 9, 14) ~= "claim-" then owned[#owned + 1] = name end
  end
  for _, name in ipairs(owned) do headers:remove(name) end
end

-- The gateway's endpoint takes no query string: the backend sees the path the registry names on
-- every request, as on the sidecar's own, and no parameter a client picked (docs/adr/0009).
local function strip_query(headers)
  local path = headers:get(":path")
  local query = path and find(path, "?", 1, true)
  if query then headers:replace(":path", sub(path, 1, query - 1)) end
end

-- A header value that is not plain printable ASCII travels as =?base64?…?= (MCP 2026-07-28).
local function mcp_header_value(h, value)
  if find(value, "^[\32-\126]*$") and sub(value, 1, 2) ~= "=?" then return value end
  return "=?base64?" .. h:base64Escape(value) .. "?="
end

-- The request in the revision the backend speaks: a backend of the stateless revision gets the
-- request envelope (when the client, of a session-based revision, sent none) and the routing headers
-- naming its own name or URI; a stateless client's request for a session-era backend goes in that
-- era's form. Returns the body to send.
local function adapt_to_era(h, headers, text, era, modern_client, method, own_name)
  if era == "modern" then
    if not modern_client then
      local top = members(text, skip_ws(text, 1))
      local params = top and top.params
      local inner = params and members(text, params[1])
      if inner then text = M.with_modern_envelope(text, params, inner) end
    end
    headers:replace("mcp-protocol-version", MODERN_VERSION)
    headers:replace("mcp-method", method)
    if own_name then headers:replace("mcp-name", mcp_header_value(h, own_name)) else headers:remove("mcp-name") end
  elseif modern_client then
    headers:replace("mcp-protocol-version", POOLED_SESSION_VERSION)
    headers:remove("mcp-method")
    headers:remove("mcp-name")
  end
  return text
end

-- The revision a request goes to its backend in, and whether it needs a backend session there: a
-- backend of both revisions ("dual") is spoken to in the client's own (docs/adr/0018-stream-relaying.md).
function M.era_for(era, sessionful, modern_client)
  if era ~= "dual" then return era, sessionful end
  if modern_client then return "modern", false end
  return "session", sessionful
end

-- The session check (ext_authz, enabled by this flag): a request in a session, or a stateless
-- client's request for a backend that needs one; a request in a session the check passed a moment
-- ago on this worker, for the same caller (`owner`, "" without a token), takes its answer from the
-- worker's memory instead.
-- caller_authorization: the caller's own token on a route whose backend's credentials are made from it;
-- the check may open a backend session on the caller's behalf, so it gets it under the gateway's own
-- name (which the route removes as the request leaves).
-- in_flight: the call's per-caller concurrency limits (M.in_flight_limits): the check takes the call's
-- slots, so such a call is always checked, never answered from the worker's memory.
local function ask_session_check(h, headers, route, backend, modern_client, sessionful, owner, caller_authorization, in_flight)
  local session_id = headers:get("mcp-session-id")
  if in_flight then h:streamInfo():dynamicMetadata():set(NS, "concurrency", in_flight) end
  if session_id ~= nil then
    local key = M.checked_key(session_id, owner, route, backend)
    local checked = not in_flight and M.checked_lookup(key, h:timestamp())
    if checked then
      headers:remove("mcp-session-id")
      return
    end
    h:streamInfo():dynamicMetadata():set(SESSION_MEMORY_NS, "checked_key", key)
  end
  if session_id ~= nil or (modern_client and sessionful) or in_flight then
    if caller_authorization then headers:replace(CALLER_AUTHORIZATION, caller_authorization) end
    h:streamInfo():dynamicMetadata():set(NS, "check", true)
  end
end

-- The traceparent of Envoy's span of this call: its ids ("<trace id>-<span id>", from SPAN_IDS_HEADER)
-- with the sampled flag of the caller's traceparent, whose trace it continues. nil when Envoy's span is
-- not in the caller's trace (no or an unreadable traceparent: Envoy started a trace of its own).
function M.gateway_traceparent(span_ids, callers)
  if not span_ids or not callers then return nil end
  local trace_id, span_id = string.match(span_ids, "^(%x+)%-(%x+)$")
  local callers_trace, flags = string.match(callers, "^%x%x%-(%x+)%-%x+%-(%x%x)")
  if not trace_id or #trace_id ~= 32 or #span_id ~= 16 or callers_trace ~= trace_id then return nil end
  return "00-" .. trace_id .. "-" .. span_id .. "-" .. flags
end

-- The span of the string params._meta.traceparent (trace context in the request itself, as the
-- 2026-07-28 revision carries it), from the members of params (tool_name_span's third value); nil when
-- there is none. Only _meta is scanned: params was, once, already.
function M.meta_traceparent_span(body, params_members)
  local meta = params_members and params_members._meta
  local fields = meta and byte(body, meta[1]) == 123 and members(body, meta[1])
  local value = fields and fields.traceparent
  if not value or byte(body, value[1]) ~= 34 then return nil end
  return value
end

-- "t=30000;r;f;a=2;q=0" → { deadline_ms = 30000, retry = true, fallback = true, access = "2", quota = "0" }
local function parse_tool_flags(flags)
  local parsed = {}
  for flag in string.gmatch(flags, "[^;]+") do
    local deadline = string.match(flag, "^t=(%d+)$")
    local access = string.match(flag, "^a=(%d+)$")
    local quota = string.match(flag, "^q=(%d+)$")
    if deadline then parsed.deadline_ms = deadline
    elseif access then parsed.access = access
    elseif quota then parsed.quota = quota
    elseif flag == "r" then parsed.retry = true
    elseif flag == "f" then parsed.fallback = true
    elseif flag == "ap" then parsed.approval = true end
  end
  return parsed
end
-- Parsed once per worker and flags (a route has a handful of distinct ones); the table is shared: read only.
M.tool_flags = bounded_memory(1024, parse_tool_flags)

local function id_json(id)
  if id == nil then return "null" end
  if type(id) == "string" then return json_string(id) end
  if id == math.floor(id) and math.abs(id) < 2^53 then return format("%d", id) end
  return format("%.17g", id)
end
M.id_json = id_json

-- Why the body's top-level id is not one the gateway accepts (a fraction, a number past 2^53 that JSON
-- cannot keep exactly, an over-long string), or nil. Its type was checked already (string or number);
-- the same rule as the sidecar's for the gateway lane (control-plane/sidecar/json-rpc.ts).
function M.id_problem(body)
  local top = members(body, skip_ws(body, 1))
  local span = top and top.id
  if not span then return nil end
  local raw = text_of(body, span)
  if byte(raw, 1) == 34 then
    return (#raw - 2 > MAX_ID_BYTES) and ID_RULE or nil
  end
  local value = tonumber(raw)
  if value and value == math.floor(value) and math.abs(value) <= MAX_SAFE_INTEGER then return nil end
  return ID_RULE
end

local function error_reply(h, id, code, message, data, status)
  -- Envoy's local-reply mappers leave an answer marked so as it is (it is JSON-RPC already).
  h:streamInfo():dynamicMetadata():set(NS, "answered", true)
  local body = '{"jsonrpc":"2.0","id":' .. id_json(id) .. ',"error":{"code":' .. code .. ',"message":' .. json_string(message)
    .. (data and (',"data":' .. data) or "") .. "}}"
  h:respond({ [":status"] = status or "200", ["content-type"] = "application/json" }, body)
end

---------------------------------------------------------------------------------------------------
-- Access rules (docs/auth.md; the sidecar decides the same for tools/list: control-plane/auth/access-rules.ts)

local function words_into(set, claim)
  if type(claim) == "string" then
    for word in string.gmatch(claim, "%S+") do set[word] = true end
  elseif type(claim) == "table" then
    for _, word in ipairs(claim) do
      if type(word) == "string" then set[word] = true end
    end
  end
end

-- Base64 (standard alphabet, padded, as Envoy encodes a list claim) to bytes; nil for anything else.
local BASE64_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local BASE64_VALUE = {}
for i = 1, #BASE64_DIGITS do BASE64_VALUE[byte(BASE64_DIGITS, i)] = i - 1 end
function M.base64_decode(text)
  if #text % 4 ~= 0 or not find(text, "^[A-Za-z0-9+/]+=?=?$") then return nil end
  local out = {}
  for i = 1, #text, 4 do
    local a, b, c, d = byte(text, i, i + 3)
    local n = BASE64_VALUE[a] * 262144 + BASE64_VALUE[b] * 4096 + (BASE64_VALUE[c] or 0) * 64 + (BASE64_VALUE[d] or 0)
    local first, second, third = math.floor(n / 65536), math.floor(n / 256) % 256, n % 256
    if d ~= 61 then out[#out + 1] = string.char(first, second, third)
    elseif c ~= 61 then out[#out + 1] = string.char(first, second)
    else out[#out + 1] = string.char(first) end
  end
  return concat(out)
end

-- A JSON string's text (s[i] its opening quote, s[e] its closing one): escapes resolved, \u to UTF-8.
local function json_string_text(s, i, e)
  local raw = sub(s, i + 1, e - 1)
  if not find(raw, "\\", 1, true) then return raw end
  return (gsub(raw, "\\(u?)(%x?%x?%x?%x?)(.?)", function(u, hex, rest)
    if u == "u" and #hex == 4 then
      local code = tonumber(hex, 16)
      if code < 128 then return string.char(code) .. rest end
      if code < 2048 then return string.char(192 + math.floor(code / 64), 128 + code % 64) .. rest end
      return string.char(224 + math.floor(code / 4096), 128 + math.floor(code / 64) % 64, 128 + code % 64) .. rest
    end
    local escaped = sub(hex .. rest, 1, 1)
    local plain = ({ b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" })[escaped] or escaped
    return plain .. sub(hex .. rest, 2)
  end))
end

-- A claim header's strings: jwt_authn copies a list claim as base64 of its JSON, a string as it is.
-- Decoded once per worker and value (agents resend the same token).
local CLAIM_LISTS_MAX = 1000
local claim_lists, claim_lists_count = {}, 0
function M.claim_strings(value)
  if value == nil or value == "" then return {} end
  local known = claim_lists[value]
  if known then return known end
  local list
  local json = M.base64_decode(value)
  local items = json and elements(json, skip_ws(json, 1))
  if items then
    list = {}
    for _, span in ipairs(items) do
      if byte(json, span[1]) == 34 then list[#list + 1] = json_string_text(json, span[1], span[2]) end
    end
  else
    list = { value }
  end
  if claim_lists_count >= CLAIM_LISTS_MAX then claim_lists, claim_lists_count = {}, 0 end
  claim_lists[value], claim_lists_count = list, claim_lists_count + 1
  return list
end

-- The caller as jwt_authn validated it, from the claim headers it set (control-plane/auth/caller-identity.ts;
-- a client's own copies are removed before jwt_authn runs). nil without an issuer and a subject.
function M.caller_of(headers)
  local iss, subject = headers:get(CLAIM_HEADER.iss), headers:get(CLAIM_HEADER.sub)
  if not iss or iss == "" or not subject or subject == "" then return nil end
  local scopes = {}
  for _, claim in ipairs({ CLAIM_HEADER.scope, CLAIM_HEADER.scp }) do
    for _, words in ipairs(M.claim_strings(headers:get(claim))) do words_into(scopes, words) end
  end
  local client = headers:get(CLAIM_HEADER.client_id)
  if not client or client == "" then client = headers:get(CLAIM_HEADER.azp) end
  return {
    owner = iss .. " " .. subject,
    issuer = iss,
    subject = subject,
    client = client ~= "" and client or nil,
    scopes = scopes,
    groups = M.claim_strings(headers:get(CLAIM_HEADER.groups)),
  }
end

-- The caller in the call's own metadata, for the access log and the audit: the route removes the claim
-- headers before the request leaves, so the logs no longer see them there. One value holding the
-- three (the logs read caller:iss, caller:sub, caller:client): each metadata:set merges into the
-- request's metadata on its own, and a set per field cost more than the three fields' bytes
-- (docs/adr/0011-caller-identity.md, Numbers).
local function log_caller(metadata, caller)
  if not caller then return end
  metadata:set(NS, "caller", { iss = caller.issuer, sub = caller.subject, client = caller.client })
end

-- "allow"; "denied" and the condition the caller fails (no other token of theirs would do); or
-- "insufficient_scope" and the scopes missing (a token with more scopes would do).
function M.access_decision(rule, caller)
  if not caller then return "denied", "a token" end
  if rule.subjects and not rule.subjects[caller.subject] then return "denied", "allowSubjects" end
  if rule.groups then
    local member = false
    for _, group in ipairs(caller.groups) do
      if rule.groups[group] then member = true break end
    end
    if not member then return "denied", "allowGroups" end
  end
  if rule.clients and not (caller.client and rule.clients[caller.client]) then return "denied", "allowClients" end
  local missing = {}
  for _, scope in ipairs(rule.scopes or {}) do
    if not caller.scopes[scope] then missing[#missing + 1] = scope end
  end
  if #missing > 0 then return "insufficient_scope", missing end
  return "allow"
end

-- The scopes a step-up should ask for (MCP 2025-11-25, scope challenge): the tool's own and those of
-- the route the caller already holds, so that a new token loses nothing the caller uses here.
function M.challenge_scopes(rule, caller, route_scopes)
  local seen, out = {}, {}
  local function add(scope)
    if not seen[scope] then seen[scope] = true out[#out + 1] = scope end
  end
  for _, scope in ipairs(rule.scopes or {}) do add(scope) end
  local held = {}
  for scope in pairs(caller.scopes) do
    if route_scopes and route_scopes[scope] then held[#held + 1] = scope end
  end
  table.sort(held)
  for _, scope in ipairs(held) do add(scope) end
  return concat(out, " ")
end

local function outcome_json(o)
  return '{"outcome":' .. json_string(o.outcome) .. ',"backend":' .. json_string(o.backend) .. ',"tool":' .. json_string(o.tool)
    .. ',"attempts":' .. o.attempts .. ',"elapsed_ms":' .. o.elapsed_ms .. ',"fallback_used":false'
    .. (o.rule and (',"rule":' .. json_string(o.rule)) or "")
    .. (o.reason and (',"reason":' .. json_string(o.reason)) or "")
    .. (o.last_error and (',"last_error":' .. o.last_error) or "") .. "}"
end
M.outcome_json = outcome_json

-- A tool's limits (docs/quotas.md): the quota filters after this script read the values for the
-- limit's bucket (or shared name) and the tool it counts, from this request's metadata.
local QUOTA_KEYS = { "caller_local", "total_local", "caller_allow", "total_allow", "caller_refuse", "total_refuse" }
function M.set_tool_quota(context, metadata, index, own)
  metadata:set(NS, "quota_tool_scope", context:get("tool_service") .. "/" .. own)
  for _, key in ipairs(QUOTA_KEYS) do
    local value = context:get("quota:" .. index .. ":" .. key)
    if value then metadata:set(NS, "quota_tool_" .. key, value) end
  end
end

-- A call's per-caller concurrency limits (docs/quotas.md), for the session check that takes its slots:
-- "<deadline ms>;<in flight>=<name>;…[;tool=<in flight>]" — the route's and the Tool Service's limits
-- as the control plane wrote them, the tool's own (its name is formed by the check), and the deadline
-- after which the slots lapse if Envoy never reports the call's end. nil: no such limit.
function M.in_flight_limits(context, tool)
  local limits = context:get("concurrency")
  if limits == nil then return nil end
  local parts = { tostring(tool.deadline_ms or context:get("concurrency_deadline_ms")) }
  if limits ~= "" then parts[#parts + 1] = limits end
  local own = tool.quota and context:get("concurrency:" .. tool.quota)
  if own then parts[#parts + 1] = "tool=" .. tostring(own) end
  if #parts == 1 then return nil end
  return concat(parts, ";")
end

---------------------------------------------------------------------------------------------------
-- Leased shared limits (docs/adr/0016-quotas.md, "Leased shared limits"). Where the gateway leases its
-- shared limits (--shared-limit-lease-workers), a call route's shared limits of tools/call are counted
-- here instead of by Envoy's ratelimit filter: each worker takes `lease` tokens of a limit at a time from
-- the ratelimit service (gRPC ShouldRateLimit over the service's own cluster, hits_addend = lease) and
-- spends them one per call until they are gone or the limit's window ends. The service counted every
-- token it handed out, so all Envoys together never let more calls through than the limit; a worker's
-- tokens still unspent when the window ends were counted and never used (the price: a limit may refuse
-- up to 1/20 of its calls early, control-plane/xds/translate/quotas.ts, leaseSize). A limit the service
-- said is over is refused here until its window ends, without asking again.

local floor, ceil, char = math.floor, math.ceil, string.char
local RATELIMIT_PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
local LIMIT_OK, LIMIT_OVER = 1, 2
local LIMIT_EXCEEDED = -32029
local GATEWAY_INTERNAL = -32603
-- As the local reply of Envoy's ratelimit filter says it (local-replies.ts, RLSE).
local SERVICE_DOWN = "rate limit service unavailable: a shared limit of this request refuses calls it cannot count (whenServiceDown: refuse); try again"
-- Per worker: (limit, scope, caller) → its lease. Bounded; a full memory starts over, and the tokens it
-- held are stranded (refused early, never let through).
local LEASE_MEMORY_MAX = 10000
-- A renewal whose answer never came (its stream reset while it waited) stops blocking others after this.
local RENEWAL_STALE_MS = 5000

-- Protocol buffers, the little the request and the answer need (envoy.service.ratelimit.v3).
local function varint(n)
  local out = {}
  repeat
    local low = n % 128
    n = (n - low) / 128
    out[#out + 1] = char(n > 0 and low + 128 or low)
  until n == 0
  return concat(out)
end
local function length_delimited(field, bytes) return char(field * 8 + 2) .. varint(#bytes) .. bytes end

-- A RateLimitRequest in a gRPC frame: descriptors = { { entries = { {key, value}, … }, hits = n }, … }
-- (each descriptor's own hits_addend, a UInt64Value).
function M.rate_limit_request(domain, descriptors)
  local parts = { length_delimited(1, domain) }
  for _, descriptor in ipairs(descriptors) do
    local fields = {}
    for _, entry in ipairs(descriptor.entries) do
      fields[#fields + 1] = length_delimited(1, length_delimited(1, entry[1]) .. length_delimited(2, entry[2]))
    end
    fields[#fields + 1] = length_delimited(3, char(8) .. varint(descriptor.hits))
    parts[#parts + 1] = length_delimited(2, concat(fields))
  end
  local message = concat(parts)
  local n = #message
  return char(0, floor(n / 16777216) % 256, floor(n / 65536) % 256, floor(n / 256) % 256, n % 256) .. message
end

local function read_varint(s, i)
  local value, scale = 0, 1
  while true do
    local b = byte(s, i)
    if not b or scale > 2 ^ 63 then return nil end
    value, i = value + (b % 128) * scale, i + 1
    if b < 128 then return value, i end
    scale = scale * 128
  end
end

-- The position after a field of wire type `wire` whose value starts at i.
local function past_field(s, i, wire)
  if wire == 0 then
    local _, after = read_varint(s, i)
    return after
  elseif wire == 2 then
    local n, after = read_varint(s, i)
    return n and after + n
  elseif wire == 1 then return i + 8
  elseif wire == 5 then return i + 4 end
  return nil
end

-- The code of each of a RateLimitResponse's statuses (one per descriptor, in order), from its gRPC
-- frame; nil for anything else (an error's empty body, a cut or compressed frame).
function M.rate_limit_codes(body)
  if not body or #body < 5 or byte(body, 1) ~= 0 then return nil end
  local last = 5 + ((byte(body, 2) * 256 + byte(body, 3)) * 256 + byte(body, 4)) * 256 + byte(body, 5)
  if #body < last then return nil end
  local codes, i = {}, 6
  while i <= last do
    local key
    key, i = read_varint(body, i)
    if not key then return nil end
    if key == 18 then -- statuses (field 2, length-delimited)
      local n
      n, i = read_varint(body, i)
      if not n then return nil end
      local stop, code, j = i + n, 0, i
      while j < stop do
        local inner
        inner, j = read_varint(body, j)
        if not inner then return nil end
        if inner == 8 then code, j = read_varint(body, j) else j = past_field(body, j, inner % 8) end
        if not j then return nil end
      end
      codes[#codes + 1] = code
      i = stop
    else
      i = past_field(body, i, key % 8)
      if not i then return nil end
    end
  end
  if i ~= last + 1 then return nil end
  return codes
end

-- When the window a limit counts in at `ms` ends: the service's windows are Unix time modulo the
-- limit's unit (its duration_until_reset is in whole seconds, too coarse for a per-second limit).
function M.window_end(ms, window_s)
  local window_ms = window_s * 1000
  return (floor(ms / window_ms) + 1) * window_ms
end

local remembered_leases = bounded_memory(LEASE_MEMORY_MAX, function() return { tokens = 0, ends_ms = 0, over_ms = 0, renewing_ms = -RENEWAL_STALE_MS } end)
M.remembered_leases = remembered_leases

-- What a call's lease allows at `now`: "over" (refused until over_ms), "spent" (a token taken), or
-- the hits to ask the service for: the lease, or one for this call alone while another call of this
-- worker already renews the lease (its tokens are on their way; asking for another lease would strand more).
function M.lease_take(state, lease, now)
  if state.over_ms > now then return "over" end
  if state.tokens > 0 and state.ends_ms > now then
    state.tokens = state.tokens - 1
    return "spent"
  end
  if now - state.renewing_ms < RENEWAL_STALE_MS then return 1 end
  state.renewing_ms = now
  return lease
end

-- The service's answer for a limit, asked at `asked` with `hits`: the tokens beyond this call's own
-- are the worker's until the window ends; over the limit, it is refused here until then.
function M.lease_granted(state, hits, lease, window_s, asked, code)
  local ends = M.window_end(asked, window_s)
  if hits == lease then state.renewing_ms = -RENEWAL_STALE_MS end
  if code == LIMIT_OVER then
    state.over_ms, state.tokens = ends, 0
    return false
  end
  if hits > 1 then
    -- Tokens of this window already held (another call's single hits came back meanwhile) are kept.
    state.tokens = (state.ends_ms == ends and state.tokens or 0) + hits - 1
    state.ends_ms = ends
  end
  return true
end

-- The client's address as Envoy's remote_address rate-limit action gives it: without the port.
function M.address_without_port(address)
  return string.match(address, "^%[(.*)%]:%d+$") or string.match(address, "^(.*):%d+$") or address
end

-- Who a per-caller shared limit counts, as the ratelimit filter's descriptors say it (quotas.ts,
-- callerAction): the validated subject jwt_authn copied on a route with auth, else the client's address.
local function lease_caller(h, auth)
  if auth then return "caller", h:headers():get(CLAIM_HEADER.sub) or "" end
  return "remote_address", M.address_without_port(h:streamInfo():downstreamRemoteAddress())
end

-- The leased limits a call counts against (its route's, its Tool Service's, its tool's), read from the
-- route's context before the body (reading it yields): each as (its context, its scope, its key in the
-- worker's memory). The caller is read only when a limit counts per caller; the descriptors are built
-- only when the service is asked.
function M.call_leases(h, context, tool, own)
  local shared = context:get("shared_leases")
  local of_tool = tool and tool.quota and context:get("quota:" .. tool.quota .. ":leases")
  if not shared and not of_tool then return nil end
  local leased = { timeout_ms = context:get("lease_timeout_ms"), cluster = context:get("ratelimit_cluster"), domain = context:get("ratelimit_domain") }
  local function add(limit, scope)
    -- The limit's part of the key, kept in the limit's context table (the worker remembers it by the
    -- route's digest): a per-call string of a route limit is only the caller's.
    local prefixes = limit.prefixes
    if not prefixes then prefixes = {}; limit.prefixes = prefixes end
    local key = prefixes[scope]
    if not key then key = limit.name .. "\n" .. scope; prefixes[scope] = key end
    if limit.caller then
      if not leased.caller_key then leased.caller_key, leased.caller_value = lease_caller(h, context:get("auth")) end
      key = key .. "\n" .. leased.caller_value
    end
    leased[#leased + 1] = { limit = limit, scope = scope, key = key }
  end
  for _, limit in ipairs(shared or {}) do add(limit, limit.scope) end
  if of_tool then
    local scope = context:get("tool_service") .. "/" .. own
    for _, limit in ipairs(of_tool) do add(limit, scope) end
  end
  return leased
end

-- A leased limit's descriptor, as the ratelimit filter's entries are (quotas.ts): limit, scope, caller.
local function lease_descriptor(leased, counted, hits)
  local entries = { { "limit", counted.limit.name }, { "scope", counted.scope } }
  if counted.limit.caller then entries[3] = { leased.caller_key, leased.caller_value } end
  return { entries = entries, hits = hits }
end



local function lease_refusal(h, call, status, headers, body)
  local metadata = h:streamInfo():dynamicMetadata()
  metadata:set(NS, "answered", true)
  metadata:set(NS, "outcome", "limited")
  headers[":status"], headers["content-type"] = status, "application/json"
  h:respond(headers, body)
end

-- A limit over: 429 naming it, as a refusal of Envoy's ratelimit filter reads (local-replies.ts).
local function refuse_over(h, call, name, wait_ms)
  local retry = tostring(math.max(1, ceil(wait_ms / 1000)))
  local body = '{"jsonrpc":"2.0","id":' .. id_json(call.id) .. ',"error":{"code":' .. LIMIT_EXCEEDED
    .. ',"message":' .. json_string("rate limit exceeded: " .. name .. "; retry after " .. retry .. " s")
    .. ',"data":{"outcome":"limited","limit":' .. json_string(name) .. ',"retry_after_s":"' .. retry
    .. '","details":"request_rate_limited","backend":' .. json_string(call.backend) .. ',"tool":' .. json_string(call.tool) .. "}}}"
  lease_refusal(h, call, "429", { ["retry-after"] = retry, ["x-mcpgw-limit"] = name }, body)
end

-- The service could not answer for a limit whose whenServiceDown is refuse: 503, as the refusing filter's.
local function refuse_unanswered(h, call, name)
  local body = '{"jsonrpc":"2.0","id":' .. id_json(call.id) .. ',"error":{"code":' .. GATEWAY_INTERNAL .. ',"message":' .. json_string(SERVICE_DOWN)
    .. ',"data":{"outcome":"limited","http_status":503,"details":"shared_limit_service_unavailable"}}}'
  lease_refusal(h, call, "503", { ["x-mcpgw-limit"] = name }, body)
end

-- Spends one token of each of the call's leased limits, renewing the leases that ran out in one request
-- to the service. Returns whether the call goes on (false: it was answered).
function M.spend_leases(h, leased, call)
  local now = h:timestamp()
  local asking, descriptors = {}, {}
  for _, counted in ipairs(leased) do
    local limit = counted.limit
    local state = remembered_leases(counted.key)
    local taken = M.lease_take(state, limit.lease, now)
    if taken == "over" then
      refuse_over(h, call, limit.name, state.over_ms - now)
      return false
    end
    if taken ~= "spent" then
      asking[#asking + 1] = { limit = limit, state = state, hits = taken }
      descriptors[#descriptors + 1] = lease_descriptor(leased, counted, taken)
    end
  end
  if #asking == 0 then return true end
  local ok, answer_headers, answer_body = pcall(h.httpCall, h, leased.cluster, {
    [":method"] = "POST", [":path"] = RATELIMIT_PATH, [":authority"] = leased.cluster,
    ["content-type"] = "application/grpc", ["te"] = "trailers",
  }, M.rate_limit_request(leased.domain, descriptors), leased.timeout_ms)
  local codes = ok and answer_headers and answer_headers[":status"] == "200" and M.rate_limit_codes(answer_body)
  if codes and #codes ~= #asking then codes = nil end
  local over, unanswered
  for index, ask in ipairs(asking) do
    local code = codes and codes[index]
    if code == LIMIT_OK or code == LIMIT_OVER then
      if not M.lease_granted(ask.state, ask.hits, ask.limit.lease, ask.limit.window_s, now, code) then over = over or ask end
    else
      if ask.hits == ask.limit.lease then ask.state.renewing_ms = -RENEWAL_STALE_MS end
      -- Not counted: the limit's whenServiceDown decides.
      if ask.limit.refuse then unanswered = unanswered or ask end
    end
  end
  if over then
    refuse_over(h, call, over.limit.name, over.state.over_ms - h:timestamp())
    return false
  end
  if unanswered then
    refuse_unanswered(h, call, unanswered.limit.name)
    return false
  end
  return true
end

-- Requests for one backend's prompt or resource, routed by the prefix of the name or URI they carry.
local FORWARDED = {
  ["prompts/get"] = true, ["completion/complete"] = true,
  ["resources/read"] = true, ["resources/subscribe"] = true, ["resources/unsubscribe"] = true,
}
-- Methods whose Mcp-Name header repeats the name or URI (MCP 2026-07-28).
local NAMED_IN_HEADER = { ["prompts/get"] = true, ["resources/read"] = true }

-- The span of the string a forwarded request names its target by: params.name (prompts/get),
-- params.uri (resources/*), params.ref.name or params.ref.uri (completion/complete).
function M.target_span(body, method, is_prompt)
  local top = members(body, skip_ws(body, 1))
  local params = top and top.params
  local inner = params and members(body, params[1])
  if not inner then return nil end
  local span
  if method == "prompts/get" then span = inner.name
  elseif method == "completion/complete" then
    local ref = inner.ref and members(body, inner.ref[1])
    span = ref and (is_prompt and ref.name or ref.uri)
  else span = inner.uri end
  if not span or byte(body, span[1]) ~= 34 then return nil end
  return span[1], span[2]
end

-- The caller's token never goes on. On a route whose backend's credentials are made from it (token
-- exchange, passthrough) it is taken out of the request, and the backend gets the Authorization the
-- sidecar made from it instead. Returns whether the request goes on (false: it was answered), and the
-- caller's token, with which the session check may open a backend session on the caller's behalf.
-- The request's headers must be fetched anew afterwards (asking the sidecar yields).
local function per_caller_credential(h, call)
  local headers = h:headers()
  call.caller_authorization = headers:get("authorization")
  headers:remove("authorization")
  local credential = M.backend_credential(h, call)
  if not credential then return false end
  h:headers():replace("authorization", credential)
  return true, call.caller_authorization
end

-- A prompts/get, completion/complete or resources/* request on its backend's route: the name or URI
-- checked and put back into the backend's own, then the same era, session and credential handling as a call.
local function forward_request(h, request, context)
  local backend, route, separator, scheme = context:get("backend"), context:get("route"), context:get("separator"), context:get("scheme")
  local era, sessionful = context:get("era"), context:get("sessionful")
  local per_caller, credential_mode = context:get("per_caller_credentials"), context:get("credential_mode")
  local credential_cluster, credential_timeout = context:get("credential_cluster"), context:get("credential_timeout_ms")
  local method, id = request.method, request.id
  if id ~= nil and type(id) ~= "string" and type(id) ~= "number" then
    return error_reply(h, nil, INVALID_REQUEST, ID_RULE, nil, "400")
  end
  local params = request.params or {}
  local ref = params.ref or {}
  local is_prompt = method == "prompts/get" or ref.type == "ref/prompt"
  local exposed
  if method == "prompts/get" then exposed = params.name
  elseif method == "completion/complete" then exposed = is_prompt and ref.name or ref.uri
  else exposed = params.uri end
  local own
  if is_prompt then own = sub(exposed, #backend + #separator + 1) else own = M.own_uri(exposed, scheme) end
  local modern_client = params._meta ~= nil and params._meta["io.modelcontextprotocol/protocolVersion"] ~= nil
  -- The caller (routes with auth), read before the body: the session check's memory is per caller.
  local caller = context:get("auth") and M.caller_of(h:headers()) or nil
  log_caller(h:streamInfo():dynamicMetadata(), caller)
  era, sessionful = M.era_for(era, sessionful, modern_client)
  if modern_client and (method == "resources/subscribe" or method == "resources/unsubscribe") then
    -- The stateless revision subscribes with subscriptions/listen; as the sidecar answers removed methods.
    return error_reply(h, id, METHOD_NOT_FOUND, 'method "' .. method .. '" is not served in protocol ' .. MODERN_VERSION .. ": use subscriptions/listen", nil, "404")
  end

  local metadata = h:streamInfo():dynamicMetadata()
  metadata:set(NS, "route", route)
  metadata:set(NS, "method", method)
  metadata:set(NS, "backend", backend)
  metadata:set(NS, "tool", own or exposed)
  if id ~= nil then metadata:set(NS, "rpc_id", id) end
  metadata:set(NS, "rpc_id_json", id_json(id))
  if is_prompt and context:get("prompt:" .. own) == nil then
    return error_reply(h, id, INVALID_PARAMS, 'backend "' .. backend .. '" has no prompt "' .. own .. '" on route "' .. route .. '"')
  end
  if own == nil then
    return error_reply(h, id, INVALID_PARAMS, 'resource URI "' .. exposed .. '" is not one of backend "' .. backend .. '" on route "' .. route .. '"')
  end
  metadata:set(NS, "started_ms", h:timestamp())

  local body = h:body()
  local text = body:getBytes(0, body:length())
  local first, last = M.target_span(text, method, is_prompt)
  if not first or sub(text, first + 1, last - 1) ~= exposed then
    return error_reply(h, id, INVALID_REQUEST, method .. " must name its prompt or resource with a plain JSON string", nil, "400")
  end
  text = sub(text, 1, first) .. own .. sub(text, last)
  local headers = h:headers()
  remove_owned_headers(headers)
  strip_query(headers)
  text = adapt_to_era(h, headers, text, era, modern_client, method, NAMED_IN_HEADER[method] and own or nil)
  body:setBytes(text)
  -- None of these changes anything at the backend but its subscriptions, which are idempotent: safe to send again.
  headers:replace("x-envoy-retry-on", "5xx,reset,connect-failure,reset-before-request")
  headers:replace("x-envoy-max-retries", "2")
  h:streamInfo():dynamicMetadata():set(NS, "credential", credential_mode or "none")
  local caller_authorization
  if per_caller then
    local goes_on
    goes_on, caller_authorization = per_caller_credential(h, {
      cluster = credential_cluster, timeout_ms = credential_timeout, route = route, backend = backend, method = method, tool = own or exposed, id = id,
    })
    if not goes_on then return end
    headers = h:headers()
  end
  ask_session_check(h, headers, route, backend, modern_client, sessionful, caller and caller.owner or "", caller_authorization)
end

-- A tools/call whose token lacks a scope the tool's rule requires: the 403 scope challenge of the MCP
-- authorization spec (RFC 6750 §3.1), so that the client can ask for a token with those scopes.
-- Nothing is sent on.
function M.scope_challenge(h, id, exposed, missing, scopes, resource_metadata)
  local metadata = h:streamInfo():dynamicMetadata()
  metadata:set(NS, "answered", true)
  metadata:set(NS, "outcome", "denied")
  metadata:set(NS, "reason", "insufficient_scope")
  local description = "tools/call " .. exposed .. " needs scope " .. concat(missing, " ")
  local challenge = 'Bearer error="insufficient_scope", scope="' .. scopes .. '"'
    .. (resource_metadata and (', resource_metadata="' .. resource_metadata .. '"') or "")
    .. ', error_description="' .. description .. '"'
  local required = {}
  for index, scope in ipairs(missing) do required[index] = json_string(scope) end
  local body = '{"jsonrpc":"2.0","id":' .. id_json(id) .. ',"error":{"code":' .. INSUFFICIENT_SCOPE .. ',"message":' .. json_string(description)
    .. ',"data":{"missing_scopes":[' .. concat(required, ",") .. '],"scope":' .. json_string(scopes) .. "}}}"
  h:respond({ [":status"] = "403", ["content-type"] = "application/json", ["www-authenticate"] = challenge }, body)
end

-- Envoy's handle objects (headers, metadata, filter context) are valid only until the script
-- yields, and reading the body yields: everything needed from them is read first, and they are
-- fetched again afterwards.
function envoy_on_request(h)
  local context = M.route_context(h)
  if context:get("ends_sessions") then
    -- A DELETE on its way to the sidecar: this worker stops remembering checks of that session now.
    local ended = h:headers():get("mcp-session-id")
    if ended then M.checked_forget(ended .. "\n") end
    return
  end
  local request = h:streamInfo():dynamicMetadata():get(MCP_NS)
  if request and FORWARDED[request.method] then return forward_request(h, request, context) end
  if not request or request.method ~= "tools/call" then return end
  local id = request.id
  if id ~= nil and type(id) ~= "string" and type(id) ~= "number" then
    return error_reply(h, nil, INVALID_REQUEST, ID_RULE, nil, "400")
  end
  local backend, route, separator = context:get("backend"), context:get("route"), context:get("separator")
  local exposed = request.params and request.params.name
  local own = sub(exposed, #backend + #separator + 1)
  local flags = context:get("tool:" .. own)
  local rule = flags == nil and context:get("deny:" .. own) or nil
  local era, sessionful, fallback = context:get("era"), context:get("sessionful"), context:get("fallback")
  -- Only a Tool Service that opted in (transport.resumeCutPooledCalls) has a pooled-call route.
  local pooled_call_lane = context:get("pooled_call_lane")
  local per_caller, credential_mode = context:get("per_caller_credentials"), context:get("credential_mode")
  local credential_cluster, credential_timeout = context:get("credential_cluster"), context:get("credential_timeout_ms")
  local modern_client = request.params._meta ~= nil and request.params._meta["io.modelcontextprotocol/protocolVersion"] ~= nil
  era, sessionful = M.era_for(era, sessionful, modern_client)

  local audit_arguments = context:get("audit_arguments")
  local approval_rule, approval_cluster = context:get("approval:" .. own), context:get("approval_cluster")

  local metadata = h:streamInfo():dynamicMetadata()
  metadata:set(NS, "route", route)
  metadata:set(NS, "method", "tools/call")
  metadata:set(NS, "backend", backend)
  metadata:set(NS, "tool", own)
  if id ~= nil then metadata:set(NS, "rpc_id", id) end
  metadata:set(NS, "rpc_id_json", id_json(id))
  local tool = flags and M.tool_flags(flags)

  -- A tool the route does not serve: refused before anything reaches the backend.
  local function refuse()
    if rule then
      local denied = h:streamInfo():dynamicMetadata()
      denied:set(NS, "outcome", "denied")
      denied:set(NS, "reason", "policy")
      denied:set(NS, "rule", rule)
      local outcome = outcome_json({ outcome = "denied", backend = backend, tool = own, attempts = 0, elapsed_ms = 0, rule = rule })
      return error_reply(h, id, TOOL_DENIED, 'tool "' .. exposed .. '" is denied on route "' .. route .. '" by policy (' .. rule .. ")", outcome)
    end
    return error_reply(h, id, INVALID_PARAMS, 'backend "' .. backend .. '" has no tool "' .. own .. '" on route "' .. route .. '"')
  end
  if flags == nil and not audit_arguments then return refuse() end
  if tool and tool.quota then M.set_tool_quota(context, metadata, tool.quota, own) end
  local leased = tool and M.call_leases(h, context, tool, own)
  -- Read here: the filter context cannot be read once the body was (reading it yields).
  local in_flight = tool and M.in_flight_limits(context, tool)
  -- What the access rule needs, read before the body (reading it yields, and handles end there).
  local caller = context:get("auth") and M.caller_of(h:headers()) or nil
  log_caller(metadata, caller)
  local access_rule = tool and tool.access and (context:get("access:" .. tool.access) or {})
  local auth_scopes, resource_metadata = context:get("auth_scopes"), context:get("resource_metadata")
  -- With tracing on, the span's attributes; and Envoy's span ids, which a filter before this script
  -- writes (over any client's value) for a request with a traceparent, the only ones whose _meta names
  -- the gateway's span. With tracing off the header is not read: a client's own could only make the
  -- script write into _meta a traceparent the client could have written there itself.
  local request_headers = h:headers()
  local gateway_traceparent
  if TRACING then
    metadata:set(NS, "session_present", request_headers:get("mcp-session-id") ~= nil)
    local span_ids = request_headers:get(SPAN_IDS_HEADER)
    gateway_traceparent = span_ids and M.gateway_traceparent(span_ids, request_headers:get("traceparent"))
  end

  -- The body was read whole by the mcp filter already: this only hands it over (and yields).
  local body = h:body()
  local text = body:getBytes(0, body:length())
  local id_problem = M.id_problem(text)
  if id_problem then return error_reply(h, nil, INVALID_REQUEST, id_problem, nil, "400") end
  local first, last, inner, params = M.tool_name_span(text)
  metadata = h:streamInfo():dynamicMetadata()
  if audit_arguments and inner then
    -- Raw JSON, for the control plane to hash (docs/approval-and-audit.md); never written anywhere.
    metadata:set(NS, "arguments", inner.arguments and text_of(text, inner.arguments) or "{}")
  end
  if flags == nil then return refuse() end
  if access_rule then
    local verdict, detail = M.access_decision(access_rule, caller)
    if verdict == "denied" then
      metadata:set(NS, "outcome", "denied")
      metadata:set(NS, "reason", "policy")
      metadata:set(NS, "rule", "the caller is not in " .. detail)
      local outcome = outcome_json({ outcome = "denied", backend = backend, tool = own, attempts = 0, elapsed_ms = 0, rule = detail, reason = "policy" })
      return error_reply(h, id, TOOL_DENIED, 'tool "' .. exposed .. '" is denied on route "' .. route .. '" by policy (the caller is not in ' .. detail .. ")", outcome)
    end
    if verdict == "insufficient_scope" then
      return M.scope_challenge(h, id, exposed, detail, M.challenge_scopes(access_rule, caller, auth_scopes), resource_metadata)
    end
  end
  if tool.fallback then metadata:set(NS, "fallback", fallback) end
  metadata:set(NS, "started_ms", h:timestamp())
  if not first or sub(text, first + 1, last - 1) ~= exposed then
    return error_reply(h, id, INVALID_REQUEST, "tools/call params.name must be a plain JSON string", nil, "400")
  end
  if tool.approval then
    local verdict = M.approval_request(h, {
      route = route, backend = backend, tool = own, exposed = exposed, id = id, rule = approval_rule,
      arguments = inner.arguments and text_of(text, inner.arguments) or "{}",
      modern = modern_client, capabilities = modern_client and M.modern_capabilities(text, inner) or nil,
      input_responses = modern_client and inner.inputResponses and text_of(text, inner.inputResponses) or nil,
      request_state = modern_client and inner.requestState and text_of(text, inner.requestState) or nil,
    })
    local answer_headers, answer_body = h:httpCall(approval_cluster, {
      [":method"] = "POST", [":path"] = "/internal/approval-check", [":authority"] = "mcpgw-sidecar",
      ["content-type"] = "application/json",
    }, verdict, APPROVAL_CHECK_TIMEOUT_MS)
    if M.approval_answered(h, id, answer_headers, answer_body) then return end
    local without = modern_client and M.without_gateway_answer(text, params, answer_headers["x-mcpgw-approval-id"] or "")
    if without then
      text = without
      first, last, inner, params = M.tool_name_span(text)
    end
    -- The check yielded: the body handle is taken anew.
    body = h:body()
  end
  if leased then
    if not M.spend_leases(h, leased, { id = id, backend = backend, tool = own }) then return end
    -- Asking the service yields: the body handle is taken anew.
    body = h:body()
  end
  -- One pass over the body: the prefix stripped from the name and, with tracing on, the gateway's span
  -- named in params._meta.traceparent, wherever each of them stands.
  local edits = { { first + 1, last - 1, own } }
  local traced_meta = gateway_traceparent and find(text, '"traceparent"', 1, true) and M.meta_traceparent_span(text, inner)
  if traced_meta then
    local edit = { traced_meta[1], traced_meta[2], json_string(gateway_traceparent) }
    if traced_meta[1] < first then table.insert(edits, 1, edit) else edits[2] = edit end
  end
  text = M.substitute(text, edits)
  local headers = h:headers()
  remove_owned_headers(headers)
  strip_query(headers)
  text = adapt_to_era(h, headers, text, era, modern_client, "tools/call", own)
  body:setBytes(text)
  h:streamInfo():dynamicMetadata():set(NS, "credential", credential_mode or "none")
  if tool.deadline_ms then headers:replace("x-envoy-upstream-rq-timeout-ms", tool.deadline_ms) end
  if tool.retry then
    -- Read-only and idempotent tools only: running a side-effecting tool twice is worse than failing once.
    headers:replace("x-envoy-retry-on", "5xx,reset,connect-failure,reset-before-request")
    headers:replace("x-envoy-max-retries", "2")
  end
  local caller_authorization
  if per_caller then
    local goes_on
    goes_on, caller_authorization = per_caller_credential(h, {
      cluster = credential_cluster, timeout_ms = credential_timeout, route = route, backend = backend, method = "tools/call", tool = own, id = id,
    })
    if not goes_on then return end
    headers = h:headers()
  end
  ask_session_check(h, headers, route, backend, modern_client, sessionful, caller and caller.owner or "", caller_authorization, in_flight)
  if pooled_call_lane and modern_client and sessionful and era == "session" then
    -- In the pooled session: the backend's pooled-call route (a sidecar that resumes the call's stream
    -- if the backend ends it before the answer; docs/adr/0018-stream-relaying.md). The edge drops a
    -- client's own header of this name, so only this line picks that route.
    headers:replace(POOLED_LANE_HEADER, "pooled")
    h:streamInfo():dynamicMetadata():set(NS, "pooled_lane", true)
    h:clearRouteCache()
  end
end

-- Per-caller backend credentials (token exchange, passthrough): the sidecar makes them from the
-- caller's token (its own cache answers most) and says how long they may be used; each Envoy worker
-- remembers them that long, by (route, backend, the caller's Authorization as presented), so a caller's
-- calls within the token's life cost no request to the sidecar. Bounded; a full memory starts over.
local CREDENTIAL_MEMORY_MAX = 4096
local remembered_credentials, credential_count = {}, 0
local CREDENTIAL_PATH = "/internal/backend-credential"
local CREDENTIAL_TTL_HEADER = "x-mcpgw-credential-ttl-ms"

function M.credential_lookup(key, now_ms)
  local entry = remembered_credentials[key]
  if entry and entry.until_ms > now_ms then return entry.authorization end
  return nil
end

function M.credential_remember(key, authorization, until_ms)
  if credential_count >= CREDENTIAL_MEMORY_MAX then
    remembered_credentials, credential_count = {}, 0
  end
  if not remembered_credentials[key] then credential_count = credential_count + 1 end
  remembered_credentials[key] = { authorization = authorization, until_ms = until_ms }
end

-- The Authorization for the backend, from this worker's memory or the sidecar; nil when the call was
-- answered instead (the caller may not, or the sidecar or the IdP could not be asked).
function M.backend_credential(h, call)
  local key = call.route .. "\n" .. call.backend .. "\n" .. (call.caller_authorization or "")
  local remembered = M.credential_lookup(key, h:timestamp())
  if remembered then return remembered end
  local ok, answer_headers, answer_body = pcall(h.httpCall, h, call.cluster, {
    [":method"] = "POST", [":path"] = CREDENTIAL_PATH, [":authority"] = "mcpgw-sidecar",
    ["x-mcpgw-route"] = call.route, ["x-mcpgw-backend"] = call.backend, ["x-mcpgw-method"] = call.method, ["x-mcpgw-tool"] = call.tool,
    ["x-mcpgw-rpc-id"] = id_json(call.id), [CALLER_AUTHORIZATION] = call.caller_authorization,
  }, "", call.timeout_ms)
  local status = ok and answer_headers and answer_headers[":status"]
  if status == "200" then
    local ttl = tonumber(answer_headers[CREDENTIAL_TTL_HEADER] or "0") or 0
    if ttl > 0 then M.credential_remember(key, answer_body, h:timestamp() + ttl) end
    return answer_body
  end
  local metadata = h:streamInfo():dynamicMetadata()
  if status == "403" or status == "424" then
    -- The sidecar's JSON-RPC error (denied: -32003; the IdP unavailable: -32004), as it wrote it.
    metadata:set(NS, "outcome", status == "403" and "denied" or "failed")
    metadata:set(NS, "answered", true)
    h:respond({ [":status"] = "200", ["content-type"] = "application/json" }, answer_body)
    return nil
  end
  metadata:set(NS, "outcome", "failed")
  error_reply(h, call.id, -32603, "gateway error: the sidecar could not be asked for backend " .. call.backend .. "'s credentials", nil, "503")
  return nil
end

-- A stateless (2026-07-28) client's capabilities, as it sent them in params._meta: raw JSON, or nil.
function M.modern_capabilities(text, inner)
  local meta = inner._meta and byte(text, inner._meta[1]) == 123 and members(text, inner._meta[1])
  local capabilities = meta and meta["io.modelcontextprotocol/clientCapabilities"]
  return capabilities and text_of(text, capabilities) or nil
end

local function optional_string(value)
  return type(value) == "string" and json_string(value) or "null"
end

-- The approval check's request (control-plane/approval/approval-check.ts): the call, its raw arguments,
-- the client's session or capabilities (and a 2026-07-28 retry's inputResponses and requestState), and the caller as
-- jwt_authn validated it.
function M.approval_request(h, call)
  local headers = h:headers()
  local claim = function(name)
    local value = headers:get(CLAIM_HEADER[name])
    return value ~= "" and value or nil
  end
  local caller = "null"
  if claim("iss") and claim("sub") then
    caller = '{"iss":' .. json_string(claim("iss")) .. ',"sub":' .. json_string(claim("sub"))
      .. ',"client_id":' .. optional_string(claim("client_id")) .. ',"azp":' .. optional_string(claim("azp"))
      .. ',"preferred_username":' .. optional_string(claim("username")) .. "}"
  end
  return '{"route":' .. json_string(call.route) .. ',"backend":' .. json_string(call.backend) .. ',"tool":' .. json_string(call.tool)
    .. ',"exposed":' .. json_string(call.exposed) .. ',"id":' .. id_json(call.id) .. ',"rule":' .. (call.rule or "null")
    .. ',"modern":' .. (call.modern and "true" or "false")
    .. ',"session":' .. optional_string(h:headers():get("mcp-session-id")) .. ',"caller":' .. caller
    .. ',"capabilities":' .. (call.capabilities or "null") .. ',"inputResponses":' .. (call.input_responses or "null")
    .. ',"requestState":' .. (call.request_state or "null")
    .. ',"arguments":' .. call.arguments .. "}"
end

-- The approval check's answer: 204 lets the call go (approved, the approval used up); an answer naming
-- its outcome (x-mcpgw-outcome) is the client's (an elicitation, or a refusal); anything else fails
-- closed. True when answered here.
function M.approval_answered(h, id, headers, body)
  local status = headers and headers[":status"]
  local metadata = h:streamInfo():dynamicMetadata()
  if status == "204" then
    metadata:set(NS, "approval", "granted")
    for key, name in pairs({ approval_id = "x-mcpgw-approval-id", approver_iss = "x-mcpgw-approver-iss", approver_sub = "x-mcpgw-approver-sub" }) do
      if headers[name] then metadata:set(NS, key, headers[name]) end
    end
    return false
  end
  metadata:set(NS, "answered", true)
  if headers and headers["x-mcpgw-outcome"] and body then
    metadata:set(NS, "approval", headers["x-mcpgw-approval"] or "required")
    metadata:set(NS, "outcome", headers["x-mcpgw-outcome"])
    if headers["x-mcpgw-reason"] then metadata:set(NS, "reason", headers["x-mcpgw-reason"]) end
    if headers["x-mcpgw-approval-id"] then metadata:set(NS, "approval_id", headers["x-mcpgw-approval-id"]) end
    h:respond({ [":status"] = status, ["content-type"] = "application/json" }, body)
    return true
  end
  metadata:set(NS, "approval", "required")
  metadata:set(NS, "outcome", "failed")
  metadata:set(NS, "reason", "approval check unavailable")
  h:respond({ [":status"] = "503", ["content-type"] = "application/json" },
    '{"jsonrpc":"2.0","id":' .. id_json(id) .. ',"error":{"code":-32603,"message":"gateway error: the approval check did not answer (' .. tostring(status) .. '); nothing was sent to the backend"}}')
  return true
end

-- Each Envoy worker remembers, for SESSION_CHECK_MEMORY_MS, that the session check let a session's
-- calls go to a backend that needs no session of its own (the call goes without the client's session
-- id). An ended session is forgotten on the worker that ends it at once (the end route) and on the
-- others within that time. Lua state is per worker, never shared: this is a cache, never the source
-- of truth.
local SESSION_CHECK_MEMORY_MS = 1000
local SESSION_CHECK_MEMORY_MAX = 10000
local checked_sessions, checked_count = {}, 0

-- The session's owner is part of the key: another caller presenting the same session id is checked
-- (and refused) by the sidecar, never let through from this memory.
function M.checked_key(session_id, owner, route, backend)
  return session_id .. "\n" .. owner .. "\n" .. route .. "\n" .. backend
end

function M.checked_lookup(key, now_ms)
  local entry = checked_sessions[key]
  if entry and entry.until_ms > now_ms then return entry end
  return nil
end

function M.checked_remember(key, now_ms)
  if checked_count >= SESSION_CHECK_MEMORY_MAX then
    checked_sessions, checked_count = {}, 0
  end
  if not checked_sessions[key] then checked_count = checked_count + 1 end
  checked_sessions[key] = { until_ms = now_ms + SESSION_CHECK_MEMORY_MS }
end

-- Forgets every remembered check of a session (it ended), or of one key (its backend lost it).
function M.checked_forget(prefix)
  for key in pairs(checked_sessions) do
    if sub(key, 1, #prefix) == prefix then
      checked_sessions[key] = nil
      checked_count = checked_count - 1
    end
  end
end

---------------------------------------------------------------------------------------------------
-- Response side

local function is_call_id(raw, id)
  if type(id) == "string" then return byte(raw, 1) == 34 and raw == json_string(id) end
  return tonumber(raw) == id
end

-- Members a client of the stateless revision needs in a result that a backend of a session-based
-- revision does not send: resultType, and a read's cache hints (nothing cached).
local function missing_modern_fields(call, inner)
  if not call.modern then return "" end
  local fields = {}
  if not inner.resultType then fields[#fields + 1] = '"resultType":"complete"' end
  if call.method == "resources/read" then
    if not inner.ttlMs then fields[#fields + 1] = '"ttlMs":0' end
    if not inner.cacheScope then fields[#fields + 1] = '"cacheScope":"private"' end
  end
  return concat(fields, ",")
end

-- The final result (at `result`, an object), annotated: the call's outcome in _meta (tools/call), and
-- what a stateless client needs. nil: nothing to add.
-- inner: the result's members, when the caller has them (a scan saved).
local function annotate_result(s, result, call, inner)
  inner = inner or members(s, result)
  if not inner then return nil end
  -- A stateless backend asking its client for input: the call is not over.
  if inner.resultType and text_of(s, inner.resultType) == '"input_required"' then return nil end
  local added = missing_modern_fields(call, inner)
  if not call.outcome then return added ~= "" and insert_members(s, result, added) or nil end
  local meta = inner._meta
  if meta and byte(s, meta[1]) == 123 then
    local meta_members = members(s, meta[1])
    if not meta_members or meta_members[OUTCOME_KEY] then return nil end
    local annotated = insert_members(s, meta[1], '"' .. OUTCOME_KEY .. '":' .. call.outcome(nil))
    return added == "" and annotated or insert_members(annotated, result, added)
  end
  return insert_members(s, result, (added ~= "" and (added .. ",") or "") .. '"_meta":{"' .. OUTCOME_KEY .. '":' .. call.outcome(nil) .. "}")
end

-- One JSON-RPC message of the answer: its rewritten text (nil to leave it as it is), and what it is:
-- "request" (a request the backend sends its client, with its own id as raw JSON), "final" (the
-- answer to the call) or "interim" (a stateless backend's answer asking its client for input first).
-- call: { backend, id, modern, method, scheme, outcome = function(last_error_json) -> outcome JSON (tools/call only) }
-- Only a tools/call's answer is "final": the answers of the other methods carry no resumption ids.
function M.rewrite_message(s, call)
  -- Only a message with an id (a request to the client, the call's answer), a log message or a
  -- resource update is ever changed. Any other (progress above all, the bulk of a streamed answer) is
  -- told by plain finds and left unparsed: a member named id always has these bytes (members refuses
  -- escaped keys), and the two methods are matched by their raw text below too.
  if not find(s, '"id"', 1, true) and not find(s, '"notifications/message"', 1, true)
    and not (call.scheme and find(s, '"notifications/resources/updated"', 1, true)) then
    return nil
  end
  local start = skip_ws(s, 1)
  local top = members(s, start)
  if not top then return nil end
  if top.method then
    -- A request the backend sends its client: an id the gateway can route the client's answer back by.
    local id = top.id
    if not id then return M.rewrite_notification(s, top, call) end
    local raw = text_of(s, id)
    local scoped = json_string("mcpgw:" .. call.backend .. ":" .. raw)
    return sub(s, 1, id[1] - 1) .. scoped .. sub(s, id[2] + 1), "request", raw
  end
  if not top.id or not is_call_id(text_of(s, top.id), call.id) then return nil end
  local final = (call.method or "tools/call") == "tools/call" and "final" or nil
  local result, error_ = top.result, top.error
  if result and byte(s, result[1]) == 123 then
    local inner = members(s, result[1])
    if not inner then return nil, final end
    -- A stateless backend asking its client for input: the call is not over, this request is answered.
    if inner.resultType and text_of(s, inner.resultType) == '"input_required"' then return nil, "interim" end
    -- Resource URIs in the result are named for the gateway first, then the result is annotated.
    local renamed = call.scheme and M.expose_result_uris(s, result[1], call.method or "tools/call", call.scheme)
    if renamed then
      s = renamed
      result = members(s, skip_ws(s, 1)).result
      inner = nil
    end
    return annotate_result(s, result[1], call, inner) or renamed, final
  end
  if error_ and byte(s, error_[1]) == 123 and call.outcome then
    local inner = members(s, error_[1])
    if not inner then return nil, final end
    local last_error = inner.message and text_of(s, inner.message) or '"error"'
    local data = inner.data
    if not data then
      return insert_members(s, error_[1], '"data":{"' .. OUTCOME_KEY .. '":' .. call.outcome(last_error) .. "}"), final
    end
    if byte(s, data[1]) ~= 123 then return nil, final end
    local data_members = members(s, data[1])
    -- Envoy's own failure replies carry their outcome at the top of data (docs/errors.md).
    if not data_members or data_members.outcome or data_members[OUTCOME_KEY] then return nil, final end
    return insert_members(s, data[1], '"' .. OUTCOME_KEY .. '":' .. call.outcome(last_error)), final
  end
  return nil, final
end

-- The outcome an answer already carries, and the HTTP status of a failure: Envoy's own failure replies
-- (docs/errors.md) put theirs at the top of error.data, a degraded (fallback) result in result._meta.
-- nil for any other message.
function M.carried_outcome(s)
  local top = members(s, skip_ws(s, 1))
  if not top then return nil end
  local holder
  if top.error and byte(s, top.error[1]) == 123 then
    local inner = members(s, top.error[1])
    holder = inner and inner.data
  elseif top.result and byte(s, top.result[1]) == 123 then
    local inner = members(s, top.result[1])
    local meta = inner and inner._meta and byte(s, inner._meta[1]) == 123 and members(s, inner._meta[1])
    holder = meta and meta[OUTCOME_KEY]
  end
  local fields = holder and byte(s, holder[1]) == 123 and members(s, holder[1])
  local outcome = fields and fields.outcome and text_of(s, fields.outcome)
  outcome = outcome and string.match(outcome, '^"([a-z_]+)"$')
  if not outcome then return nil end
  return outcome, fields.http_status and tonumber(text_of(s, fields.http_status)) or nil
end

-- A 400 of servers built on the MCP SDK's examples ("No valid session ID", "Server not initialized")
-- means, like a 404, that the backend does not know the session and ran nothing.
function M.says_session_unknown(s)
  local top = members(s, skip_ws(s, 1))
  local error_ = top and top.error
  local inner = error_ and byte(s, error_[1]) == 123 and members(s, error_[1])
  local message = inner and inner.message and text_of(s, inner.message)
  if not message then return false end
  local lower = string.lower(message)
  return find(lower, "session", 1, true) ~= nil or find(lower, "not initialized", 1, true) ~= nil
end

-- The event id the client gets for a backend's (docs/adr/0018-stream-relaying.md): the backend named
-- (for a call, by the call's resume token), so that a GET with this Last-Event-ID is resumed at that
-- backend, which keeps the events. nil: a client of the stateless revision, which gets no event ids
-- (nor retry hints) at all.
function M.client_event_id(value, call)
  if call.modern then return nil end
  -- A call's: its resume token too, so that the sidecar can still answer the call if the backend
  -- cannot resume (tool-call.ts resumeTargetOf). A token is base64: the first "." ends it.
  if call.resume_token then return RESUME_CALL_PREFIX .. call.resume_token .. "." .. value end
  return "mcpgw:" .. call.backend .. ":" .. value
end

-- The lines of one event (LF, CRLF or CR between them), found with plain finds: a data line can be
-- megabytes long, and a pattern walks it byte by byte.
local function event_lines(event)
  local lines, position, lf, cr = {}, 1, nil, nil
  while position <= #event do
    if lf ~= false and (lf == nil or lf < position) then lf = find(event, "\n", position, true) or false end
    if cr ~= false and (cr == nil or cr < position) then cr = find(event, "\r", position, true) or false end
    local stop = lf
    if cr and (not stop or cr < stop) then stop = cr end
    if not stop then
      lines[#lines + 1] = sub(event, position)
      break
    end
    lines[#lines + 1] = sub(event, position, stop - 1)
    position = (stop == cr and lf == stop + 1) and stop + 2 or stop + 1
  end
  return lines
end

-- An approved call's answer that is the backend's `input_required` (2026-07-28): the call is not over,
-- and its client's retry continues it. Notes on `call` what names that retry (the backend's
-- requestState as raw JSON, and the keys of its inputRequests), for the approval check.
function M.note_continuation(s, call)
  local top = members(s, skip_ws(s, 1))
  if not top or not top.id or not top.result or not is_call_id(text_of(s, top.id), call.id) then return end
  local inner = members(s, top.result[1])
  if not inner or not inner.resultType or text_of(s, inner.resultType) ~= '"input_required"' then return end
  local keys = {}
  for key in pairs(inner.inputRequests and members(s, inner.inputRequests[1]) or {}) do keys[#keys + 1] = json_string(key) end
  local state = inner.requestState and byte(s, inner.requestState[1]) == 34 and text_of(s, inner.requestState) or "null"
  call.continuation = '{"approvalId":' .. json_string(call.approval_id) .. ',"requestState":' .. state .. ',"inputRequestKeys":[' .. concat(keys, ",") .. "]}"
end

-- One SSE event (without its terminator) as the client gets it: its message rewritten, the backend's
-- own event id named for the gateway (client_event_id: a session client resumes there, at that
-- backend; a stateless client gets none, nor retry hints), and the final answer marked done; nil to
-- leave it as it is. Also what the message is, and a backend request's own id (rewrite_message).
function M.rewrite_event(event, call)
  local lines, data = event_lines(event), {}
  local first_data, has_id = nil, false
  for index, line in ipairs(lines) do
    if sub(line, 1, 5) == "data:" then
      first_data = first_data or index
      data[#data + 1] = sub(line, byte(line, 6) == 32 and 7 or 6)
    elseif sub(line, 1, 3) == "id:" or (call.modern and sub(line, 1, 6) == "retry:") then
      has_id = true
    end
  end
  local rewritten, role, request_id
  if first_data then
    local message = concat(data, "\n")
    if call.approval_id then M.note_continuation(message, call) end
    rewritten, role, request_id = M.rewrite_message(message, call)
  end
  if not rewritten and not has_id and role ~= "final" then return nil, role, request_id end
  -- Line breaks (only ever between JSON tokens) would end the data line; most messages have none.
  if rewritten and (find(rewritten, "\n", 1, true) or find(rewritten, "\r", 1, true)) then rewritten = gsub(rewritten, "[\r\n]", " ") end
  local out = {}
  -- MCP 2026-07-28 has no event ids: a stateless client is never handed one.
  local done = role == "final" and not call.modern
  if done then out[1] = "id: " .. RESUME_DONE end
  for index, line in ipairs(lines) do
    if index == first_data and rewritten then out[#out + 1] = "data: " .. rewritten
    elseif sub(line, 1, 3) == "id:" then
      -- The final answer's id is the gateway's own (done); any other names the backend's, to resume there.
      local id = not done and M.client_event_id(sub(line, byte(line, 4) == 32 and 5 or 4), call)
      if id then out[#out + 1] = "id: " .. id end
    elseif call.modern and sub(line, 1, 6) == "retry:" then
      -- no retry hint for a client that cannot resume
    elseif not (rewritten and sub(line, 1, 5) == "data:") then out[#out + 1] = line end
  end
  return concat(out, "\n"), role, request_id
end

-- The blank lines that end an SSE event (two line ends: LF, CRLF or CR), as plain texts.
local EVENT_ENDS = { "\n\n", "\r\n\n", "\n\r\n", "\r\n\r\n", "\r\r" }

-- Splits the complete events off `pending`: the text to send now (rewritten), what stays held, the
-- own ids of the requests the backend sent its client in these events, and whether the request's
-- answer (final or interim) was among them.
-- Each ending is looked for with a plain find, and where one is absent it is not looked for again
-- in this text, so many events cost one pass, not one pass each.
function M.take_events(pending, call)
  local out, position, requests, answered = {}, 1, {}, false
  local next_at = {}
  while true do
    local s, e
    for index, ending in ipairs(EVENT_ENDS) do
      local at = next_at[index]
      if at ~= false and (at == nil or at < position) then
        at = find(pending, ending, position, true) or false
        next_at[index] = at
      end
      -- The earliest ending (no two of them can start at one place).
      if at and (not s or at < s) then s, e = at, at + #ending - 1 end
    end
    if not s then break end
    local event = sub(pending, position, s - 1)
    local rewritten, role, request_id = M.rewrite_event(event, call)
    if role == "request" then requests[#requests + 1] = request_id end
    if role == "final" or role == "interim" then answered = true end
    out[#out + 1] = rewritten or event
    out[#out + 1] = sub(pending, s, e)
    position = e + 1
  end
  return concat(out), sub(pending, position), requests, answered
end

-- The event a call's stream starts with: no data, only the id a client resumes the call with when the
-- stream breaks before its answer (MCP's resumability: the SDK client sends it as Last-Event-ID).
function M.priming_event(token)
  return "id: " .. RESUME_CALL_PREFIX .. token .. "\ndata:\n\n"
end

-- What the sidecar needs to answer a resumed call in its place: the backend, the tool, the client's id;
-- and to give a resumed result the call's outcome as this script would (docs/adr/0018-stream-relaying.md):
-- the attempts it took and when it started (milliseconds since the epoch).
function M.resume_token_json(call)
  return '{"b":' .. json_string(call.backend) .. ',"t":' .. json_string(call.tool) .. ',"i":' .. call.id_json
    .. ',"a":' .. call.attempts .. ',"s":' .. format("%d", call.started) .. "}"
end

local NO_REQUESTS = {}

-- Reads an SSE answer chunk by chunk: push(bytes) gives the text to send now (the events completed,
-- rewritten), how many bytes stay held, the own ids of the backend's requests among those events and
-- whether the request's answer was among them;
-- release() gives what is held, as it came. A chunk that
-- ends no event is only kept (no pass over what is held, no copy of it), so a large event costs
-- about one pass however it was cut.
function M.event_reader(call)
  local pieces, held, tail = {}, 0, ""
  local function release()
    local text = concat(pieces)
    pieces, held, tail = {}, 0, ""
    return text
  end
  local function push(bytes)
    -- An ending may straddle the chunks: the last three bytes held are looked at with the new ones.
    local window = tail .. bytes
    local ends = false
    -- Most chunks of a large event hold no line end at all: two finds tell.
    if find(window, "\n", 1, true) or find(window, "\r", 1, true) then
      for _, ending in ipairs(EVENT_ENDS) do
        if find(window, ending, 1, true) then ends = true break end
      end
    end
    if not ends then
      pieces[#pieces + 1] = bytes
      held = held + #bytes
      tail = sub(window, -3)
      return "", held, NO_REQUESTS, false
    end
    pieces[#pieces + 1] = bytes
    local out, rest, requests, answered = M.take_events(concat(pieces), call)
    pieces, held, tail = { rest }, #rest, sub(rest, -3)
    return out, held, requests, answered
  end
  return push, release
end

-- What the response side needs of the call, read before the body (see envoy_on_request).
local function call_of(h)
  local metadata = h:streamInfo():dynamicMetadata()
  local ours = metadata:get(NS)
  if not ours or not ours.backend or ours.answered then return nil end
  local request = metadata:get(MCP_NS) or {}
  local authz = metadata:get(AUTHZ_NS) or {}
  local headers = h:headers()
  -- On the pooled-call lane Envoy's attempts are at sidecars (one that refused the connection never
  -- passed the call on), and the sidecar sends a call to its backend once.
  local attempts = ours.pooled_lane and 1 or tonumber(headers:get("x-envoy-attempt-count") or "1") or 1
  local started = tonumber(ours.started_ms) or h:timestamp()
  local meta = request.params and request.params._meta
  local context = M.route_context(h)
  local call = {
    backend = ours.backend,
    tool = ours.tool,
    route = ours.route,
    id = request.id,
    id_json = ours.rpc_id_json or "null",
    modern = meta ~= nil and meta["io.modelcontextprotocol/protocolVersion"] ~= nil,
    attempts = attempts,
    started = started,
    backend_session = authz[CHECK_BACKEND_SESSION],
    gateway_session = authz[CHECK_GATEWAY_SESSION] or "",
    status = tonumber(headers:get(":status") or "0") or 0,
    content_type = headers:get("content-type") or "",
    length = tonumber(headers:get("content-length") or ""),
    method = ours.method or "tools/call",
    scheme = context:get("scheme"),
    annotate = context:get("annotate"),
    sidecar = context:get("sidecar_cluster"),
    -- A call an approval let through: a 2026-07-28 backend may ask its client for input first.
    approval_id = ours.approval == "granted" and ours.approval_id or nil,
    approval_cluster = context:get("approval_cluster"),
  }
  -- What the answer is to, for the errors that name it.
  call.what = call.method .. " " .. (call.tool or "")
  if TRACING then metadata:set(NS, "attempts", attempts) end
  -- The check let this call go to a backend that needs no session of its own: remember that for the
  -- session's next calls on this worker. (A backend session is never remembered: the backend may lose
  -- it, and every worker must learn that at once.) From when the call was checked, not from its
  -- answer: a backend slow to answer must not stretch how long an ended session is honoured.
  local checked_key = (metadata:get(SESSION_MEMORY_NS) or {}).checked_key
  if checked_key and authz[CHECK_GATEWAY_SESSION] and not authz[CHECK_BACKEND_SESSION] then
    M.checked_remember(checked_key, started)
  end
  -- Only a call's answer is annotated; the answers of the other methods are rewritten (their resource
  -- URIs, their log messages) whether or not the route annotates calls.
  call.rewrites = call.annotate or call.method ~= "tools/call"
  if call.method ~= "tools/call" or not call.annotate then return call end
  -- The final message's outcome, once it has passed: for the access log.
  call.outcome = function(last_error)
    call.final = last_error and "failed" or "ok"
    return outcome_json({
      outcome = call.final, backend = call.backend, tool = call.tool, attempts = attempts,
      elapsed_ms = math.max(0, h:timestamp() - started), last_error = last_error,
    })
  end
  return call
end

-- The call's outcome, for the access log and the call's span; a failed call's span gets the HTTP status
-- the call failed with (Envoy's tracer marks a span failed only by a 5xx status, and the client's answer
-- is a 200): the backend's own 5xx, Envoy's failure reply's, or 502 for any other failure of the backend.
local function record_outcome(h, call, outcome, http_status)
  if not outcome then return end
  local metadata = h:streamInfo():dynamicMetadata()
  metadata:set(NS, "outcome", outcome)
  if TRACING and outcome == "failed" then
    metadata:set(NS, "failure_status", tostring(http_status and http_status >= 500 and http_status or 502))
  end
end

-- The JSON-RPC error (-32004) of a call that failed at its backend, its outcome in error.data (docs/errors.md).
function M.failure_json(call, message, http_status)
  local data = '{"outcome":"failed","backend":' .. json_string(call.backend) .. ',"tool":' .. json_string(call.tool)
    .. ',"attempts":' .. call.attempts .. ',"fallback_used":false,"http_status":' .. http_status .. "}"
  return '{"jsonrpc":"2.0","id":' .. call.id_json .. ',"error":{"code":' .. BACKEND_UNAVAILABLE .. ',"message":'
    .. json_string(message) .. ',"data":' .. data .. "}}"
end

-- The event that ends a stateless client's call stream its backend ended before the answer: such a
-- client cannot resume (its revision has no event ids), so it gets the call's error rather than wait
-- for its own timeout (docs/adr/0018-stream-relaying.md).
function M.ended_before_answer_event(call)
  return "event: message\ndata: " .. M.failure_json(call, "backend " .. call.backend .. " ended the stream of tools/call "
    .. (call.tool or "") .. " before its answer: the call may or may not have run", 502) .. "\n\n"
end

-- The whole answer replaced by one JSON-RPC error naming the backend (status 200: MCP clients read
-- the JSON-RPC error only from a 2xx answer). `buffered`: the answer was read whole (h:body()), so its
-- content-length follows the new body; a streamed one is framed anew. Handles are fetched here, as any
-- taken before a yield are gone.
local function replace_with_error(h, call, message, http_status, buffered)
  local headers = h:headers()
  headers:replace(":status", "200")
  headers:replace("content-type", "application/json")
  headers:remove("mcp-session-id")
  record_outcome(h, call, "failed", http_status)
  local body = M.failure_json(call, message, http_status)
  if buffered then
    h:body(true):setBytes(body)
    return
  end
  headers:remove("content-length")
  local sent = false
  for chunk in h:bodyChunks() do
    chunk:setBytes(sent and "" or body)
    sent = true
  end
end

-- A backend that no longer knows the session a call went in ran nothing: its answer must not reach
-- the client, whose own session with the gateway goes on. The sidecar forgets the backend session, so
-- the next call opens a new one — before the client hears of it (the answer waits for the sidecar),
-- or the client's next call could come in the lost session again.
local function backend_session_lost(h, call, buffered)
  h:httpCall(call.sidecar, {
    [":method"] = "POST", [":path"] = "/internal/backend-session-lost", [":authority"] = "mcpgw-sidecar",
    ["content-type"] = "application/json",
  }, '{"route":' .. json_string(call.route) .. ',"backend":' .. json_string(call.backend)
    .. ',"backendSessionId":' .. json_string(call.backend_session) .. ',"gatewaySessionId":' .. json_string(call.gateway_session) .. "}",
    2000)
  replace_with_error(h, call, "backend " .. call.backend .. " lost the session of this call and ran nothing: call again", call.status, buffered)
end

-- A request the backend sends its client in a gateway session: the sidecar records it, so that the
-- client's answer is taken only for a request that is outstanding (a forged "answer" gets 400).
-- Without a gateway session there is nowhere to answer to. The record is sent as the request goes to
-- the client, not before: a chunk cannot be changed once the script has waited for anything, so the
-- sidecar gives an answer that arrives first a moment for its record (ANSWER_RECORD_GRACE_MS).
local function expect_answer(h, call, request_id)
  if call.gateway_session == "" then return end
  h:httpCall(call.sidecar, {
    [":method"] = "POST", [":path"] = SERVER_REQUEST_PATH, [":authority"] = "mcpgw-sidecar",
    ["content-type"] = "application/json",
  }, '{"gatewaySessionId":' .. json_string(call.gateway_session) .. ',"backend":' .. json_string(call.backend)
    .. ',"requestId":' .. json_string(request_id) .. "}", 1000, true)
end

-- The backend asked the client of an approved call for input (M.note_continuation): the approval check
-- records that the client's retry continues this call, before the client can send it (the answer waits
-- for the check; a chunk is set before the script waits, as it cannot be changed after). A check that
-- does not answer leaves the retry to ask for an approval again.
local function report_continuation(h, call)
  local report = call.continuation
  call.continuation = nil
  h:httpCall(call.approval_cluster, {
    [":method"] = "POST", [":path"] = APPROVAL_CONTINUATION_PATH, [":authority"] = "mcpgw-sidecar",
    ["content-type"] = "application/json",
  }, report, APPROVAL_CHECK_TIMEOUT_MS)
end

-- A whole JSON answer (or the first MAX_HELD_JSON_BYTES of one) as the client gets it, its outcome
-- recorded; nil: sent as it came (not JSON, or nothing to change).
function M.rewrite_json_answer(h, call, held)
  local last = M.json_end(held)
  local message = last and sub(held, 1, last)
  if message and call.approval_id then M.note_continuation(message, call) end
  local rewritten = message and call.rewrites and M.rewrite_message(message, call)
  if call.final then record_outcome(h, call, call.final)
  elseif message and call.rewrites then record_outcome(h, call, M.carried_outcome(message)) end
  return rewritten and (rewritten .. sub(held, last + 1)) or nil
end

function envoy_on_response(h)
  local call = call_of(h)
  if not call then return end
  local is_sse = find(call.content_type, "^text/event%-stream") ~= nil
  local is_json = find(call.content_type, "^application/json") ~= nil
  -- A short error answer is held whole with its headers (h:body(true): even one without a body), so
  -- that it can still become another answer; a longer one is replaced as it streams.
  local short = call.length ~= nil and call.length <= MAX_HELD_ERROR_BYTES
  if call.backend_session and (call.status == 404 or (call.status == 400 and is_json and short)) then
    local body = short and h:body(true) or nil
    local text = body and body:getBytes(0, body:length()) or ""
    if call.status == 404 or M.says_session_unknown(text) then return backend_session_lost(h, call, short) end
    local rewritten = call.rewrites and M.rewrite_message(text, call)
    if rewritten then
      body:setBytes(rewritten)
      record_outcome(h, call, call.final)
    end
    return
  end
  if call.status >= 400 and not is_json and not is_sse then
    -- A backend's own error page (HTML, text, a stack trace) never reaches the agent: only its status.
    return replace_with_error(h, call, "backend " .. call.backend .. " answered HTTP " .. call.status .. ": " .. call.what .. " failed", call.status, short)
  end
  -- An event stream is always read: its event ids are the gateway's to give (docs/adr/0018-stream-relaying.md).
  if not is_sse and not (is_json and (call.rewrites or call.approval_id)) then return end
  if is_json and short then
    -- A short JSON answer (the common one) is read whole in one piece, far below the listener's
    -- buffer limit: one hand-over to Lua instead of one per chunk; its content-length follows the
    -- new body.
    local body = h:body(true)
    local text = body and body:getBytes(0, body:length()) or ""
    local rewritten = M.rewrite_json_answer(h, call, text)
    if rewritten then body:setBytes(rewritten) end
    if call.continuation then report_continuation(h, call) end
    return
  end
  h:headers():remove("content-length")
  if is_json then
    -- A JSON answer is one message: held until it is whole, then rewritten; past the limit, or not
    -- JSON at all, sent as it came.
    local held, done = "", false
    for chunk in h:bodyChunks() do
      if not done then
        held = held .. chunk:getBytes(0, chunk:length())
        local last = M.json_end(held)
        if last or #held > MAX_HELD_JSON_BYTES then
          done = true
          chunk:setBytes(M.rewrite_json_answer(h, call, held) or held)
          if call.continuation then report_continuation(h, call) end
        else
          chunk:setBytes("")
        end
      end
    end
    return
  end
  -- A call's stream opens with the id a client resumes the call with if it breaks (M.priming_event):
  -- an answer cannot follow a backend's reset, Envoy resets the client's stream too. The answers of
  -- the other methods get none (nothing would resume them), nor does a stateless client (its revision
  -- has no event ids).
  call.resume_token = call.method == "tools/call" and not call.modern and h:base64Escape(M.resume_token_json(call)) or nil
  local priming = call.resume_token and M.priming_event(call.resume_token) or ""
  local push, release = M.event_reader(call)
  local passing, answered = false, false
  -- Only a stateless client's call stream can end unanswered unnoticed: a session client resumes it.
  local watch_end = call.modern and call.method == "tools/call"
  for chunk in h:bodyChunks() do
    if not passing then
      local length = chunk:length()
      local bytes = chunk:getBytes(0, length)
      local out, held, requests, answer_passed = push(bytes)
      answered = answered or answer_passed
      if held > MAX_HELD_BYTES then
        -- What is held goes as it came, and the rest of the answer too.
        out, passing = out .. release(), true
      end
      out, priming = priming .. out, ""
      for _, request_id in ipairs(requests) do expect_answer(h, call, request_id) end
      -- An empty chunk is how Envoy ends an HTTP/1.1 answer (its last chunk): the stream ended here.
      if watch_end and length == 0 and not answered then
        out, answered = out .. M.ended_before_answer_event(call), true
        record_outcome(h, call, "failed", 502)
      end
      -- Most chunks of a long stream pass as they came (strings are interned: this compares pointers),
      -- and a buffer left alone is not drained and refilled.
      if out ~= bytes then chunk:setBytes(out) end
      record_outcome(h, call, call.final)
      call.final = nil
      if call.continuation then report_continuation(h, call) end
    end
  end
end

mcpgw_call_lane = M
