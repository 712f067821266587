-- Table tests of the call lane script's pure functions, run on LuaJIT (Envoy's Lua) by call-lane-lua.test.ts.
-- Prints "ok <name>" or "not ok <name>: <why>" per case.
dofile(arg[1])
local M = mcpgw_call_lane

local function check(name, got, want)
  if got == want then print("ok " .. name)
  else print("not ok " .. name .. ": got " .. tostring(got) .. ", want " .. tostring(want)) end
end

local function strip(body, exposed, own)
  local first, last = M.tool_name_span(body)
  if not first or body:sub(first + 1, last - 1) ~= exposed then return nil end
  return body:sub(1, first) .. own .. body:sub(last)
end

-- params.name found structurally, not by text
check("strip simple", strip('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"w__get","arguments":{"x":1}}}', "w__get", "get"),
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get","arguments":{"x":1}}}')
check("strip when arguments hold the same text first",
  strip('{"params":{"arguments":{"name":"w__get","note":"\\"name\\":\\"w__get\\""},"name":"w__get"},"method":"tools/call"}', "w__get", "get"),
  '{"params":{"arguments":{"name":"w__get","note":"\\"name\\":\\"w__get\\""},"name":"get"},"method":"tools/call"}')
check("strip with whitespace", strip(' { "params" : { "name" : "w__get" } } ', "w__get", "get"), ' { "params" : { "name" : "get" } } ')
check("escaped name refused", strip('{"params":{"name":"w__g\\u0065t"}}', "w__get", "get"), nil)
check("name not a string refused", M.tool_name_span('{"params":{"name":5}}'), nil)
check("escaped key refused", M.tool_name_span('{"params":{"na\\u006de":"w__get"}}'), nil)
check("duplicate key refused", M.tool_name_span('{"params":{"name":"a","name":"b"}}'), nil)
check("truncated refused", M.tool_name_span('{"params":{"name":"w__get"'), nil)
check("nested arrays skipped", strip('{"params":{"arguments":[[1,{"a":"]"}],"}"],"name":"w__x"}}', "w__x", "x"), '{"params":{"arguments":[[1,{"a":"]"}],"}"],"name":"x"}}')

-- the stateless envelope for a modern backend
local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get","arguments":{}}}'
local _, _, inner, params = M.tool_name_span(body)
check("envelope added", M.with_modern_envelope(body, params, inner),
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-federation-gateway","version":"0.1.0"}},"name":"get","arguments":{}}}')
body = '{"params":{"name":"get","_meta":{"progressToken":3}}}'
_, _, inner, params = M.tool_name_span(body)
check("envelope merged into _meta", M.with_modern_envelope(body, params, inner),
  '{"params":{"name":"get","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-federation-gateway","version":"0.1.0"},"progressToken":3}}}')

-- trace context: the gateway's span, in the caller's trace, also named in params._meta
local span_ids = "0af7651916cd43dd8448eb211c80319c-c88cfa8db470da01"
check("gateway traceparent keeps the caller's sampled flag",
  M.gateway_traceparent(span_ids, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), "00-0af7651916cd43dd8448eb211c80319c-c88cfa8db470da01-01")
check("gateway traceparent of an unsampled caller",
  M.gateway_traceparent(span_ids, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"), "00-0af7651916cd43dd8448eb211c80319c-c88cfa8db470da01-00")
check("no gateway traceparent outside the caller's trace",
  M.gateway_traceparent(span_ids, "00-11111111111111111111111111111111-b7ad6b7169203331-01"), nil)
check("no gateway traceparent without a caller's", M.gateway_traceparent(span_ids, nil), nil)
check("no gateway traceparent for unreadable ids", M.gateway_traceparent("-", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), nil)
local function traceparent_in_meta(body)
  local _, _, inner = M.tool_name_span(body)
  local span = M.meta_traceparent_span(body, inner)
  return span and body:sub(span[1], span[2])
end
check("_meta traceparent found", traceparent_in_meta('{"params":{"name":"get","_meta":{"tracestate":"v=1","traceparent":"00-ab-cd-01"}}}'), '"00-ab-cd-01"')
check("a traceparent in the arguments is the tool's", traceparent_in_meta('{"params":{"name":"get","arguments":{"traceparent":"x"},"_meta":{"progressToken":1}}}'), nil)
check("no _meta, no traceparent", traceparent_in_meta('{"params":{"name":"get"}}'), nil)
check("a _meta traceparent that is not a string is left", traceparent_in_meta('{"params":{"name":"get","_meta":{"traceparent":5}}}'), nil)
check("edits in one pass", M.substitute("abcdefgh", { { 2, 3, "XY" }, { 6, 6, "" } }), "aXYdegh")
check("no edits", M.substitute("abc", {}), "abc")

-- flags
local flags = M.tool_flags("t=30000;r;f")
check("flag deadline", flags.deadline_ms, "30000")
check("flag retry", flags.retry, true)
check("flag fallback", flags.fallback, true)
check("no flags", M.tool_flags("").retry, nil)
check("flag quota", M.tool_flags("r;q=3").quota, "3")
check("flag quota alone", M.tool_flags("q=0").quota, "0")

-- a tool's limits, from the route's context into the request's metadata
local fake_context = { tool_service = "weather", ["quota:1:caller_local"] = "calls:5/minute", ["quota:1:total_allow"] = "tool:weather/get_*/calls" }
local set = {}
M.set_tool_quota({ get = function(_, key) return fake_context[key] end }, { set = function(_, ns, key, value) set[ns .. ":" .. key] = value end }, "1", "get_forecast")
check("quota scope", set["mcpgw:quota_tool_scope"], "weather/get_forecast")
check("quota local caller", set["mcpgw:quota_tool_caller_local"], "calls:5/minute")
check("quota shared total", set["mcpgw:quota_tool_total_allow"], "tool:weather/get_*/calls")
check("quota absent kinds", set["mcpgw:quota_tool_total_local"], nil)
-- per-caller concurrency limits, from the route's context to the session check
local function in_flight(context, flags)
  return M.in_flight_limits({ get = function(_, key) return context[key] end }, M.tool_flags(flags))
end
local limited = { concurrency = "4=route:demo/concurrency/per-caller;2=tool-service:jobs/concurrency/per-caller", concurrency_deadline_ms = 600000, ["concurrency:1"] = 1 }
check("in flight: none on the route", in_flight({}, "r"), nil)
check("in flight: the route's and the Tool Service's, the route's deadline", in_flight(limited, "r"), "600000;4=route:demo/concurrency/per-caller;2=tool-service:jobs/concurrency/per-caller")
check("in flight: the tool's own deadline", in_flight(limited, "t=30000;q=0"), "30000;4=route:demo/concurrency/per-caller;2=tool-service:jobs/concurrency/per-caller")
check("in flight: the tool's own limit", in_flight(limited, "q=1"), "600000;4=route:demo/concurrency/per-caller;2=tool-service:jobs/concurrency/per-caller;tool=1")
check("in flight: only a tool's limit", in_flight({ concurrency = "", concurrency_deadline_ms = 600000, ["concurrency:0"] = 3 }, "q=0"), "600000;tool=3")
check("in flight: a route with only another tool's limit", in_flight({ concurrency = "", concurrency_deadline_ms = 600000, ["concurrency:0"] = 3 }, "q=1"), nil)
check("flag approval", M.tool_flags("r;ap").approval, true)
check("flag approval is not access", M.tool_flags("a=2").approval, nil)

-- ids
check("id number", M.id_json(7), "7")
check("id string", M.id_json('a"b'), '"a\\"b"')
check("id null", M.id_json(nil), "null")

-- the answer
local call = { backend = "jobs", id = 7, outcome = function(last_error) return '{"outcome":"' .. (last_error and "failed" or "ok") .. '"' .. (last_error and (',"last_error":' .. last_error) or "") .. "}" end }
check("result annotated", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}', call),
  '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}},"content":[]}}')
check("result _meta kept", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"_meta":{"a":1},"content":[]}}', call),
  '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"},"a":1},"content":[]}}')
check("empty result", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{}}', call), '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}')
check("other id untouched", M.rewrite_message('{"jsonrpc":"2.0","id":8,"result":{}}', call), nil)
check("string id 7 is not number 7", M.rewrite_message('{"jsonrpc":"2.0","id":"7","result":{}}', call), nil)
check("backend error annotated", M.rewrite_message('{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"boom"}}', call),
  '{"jsonrpc":"2.0","id":7,"error":{"data":{"mcpgw/outcome":{"outcome":"failed","last_error":"boom"}},"code":-1,"message":"boom"}}')
check("envoy failure reply untouched", M.rewrite_message('{"jsonrpc":"2.0","id":7,"error":{"code":-32004,"message":"x","data":{"outcome":"failed"}}}', call), nil)
check("error data not an object untouched", M.rewrite_message('{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x","data":"text"}}', call), nil)
check("outcome already there", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{}}}}', call), nil)
check("input_required untouched", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required"}}', call), nil)
check("backend request scoped", M.rewrite_message('{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}}', call),
  '{"jsonrpc":"2.0","id":"mcpgw:jobs:0","method":"sampling/createMessage","params":{}}')
check("backend request string id scoped", M.rewrite_message('{"method":"elicitation/create","id":"a\\"b"}', call),
  '{"method":"elicitation/create","id":"mcpgw:jobs:\\"a\\\\\\"b\\""}')
check("notification untouched", M.rewrite_message('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}', call), nil)
check("not json untouched", M.rewrite_message('hello', call), nil)
-- Only a message with the bytes "id", a log message or a resource update is parsed: these still are.
check("notification with an id inside its params untouched", M.rewrite_message('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1,"message":{"id":3}}}', call), nil)
check("backend request with its id last scoped", M.rewrite_message('{"jsonrpc":"2.0","method":"roots/list","params":{"_meta":{}} , "id" : 4}', call),
  '{"jsonrpc":"2.0","method":"roots/list","params":{"_meta":{}} , "id" : "mcpgw:jobs:4"}')
local modern = { backend = "jobs", id = 7, modern = true, outcome = call.outcome }
check("modern result gets resultType", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}', modern),
  '{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","_meta":{"mcpgw/outcome":{"outcome":"ok"}},"content":[]}}')
check("modern result with _meta gets resultType", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"_meta":{}}}', modern),
  '{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}')

-- SSE framing
local out, rest = M.take_events('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\nevent: message\ndata: {"jsonrpc":"2.0","id":7,"res', call)
check("complete event passes, partial held", out, 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n')
check("partial held", rest, 'event: message\ndata: {"jsonrpc":"2.0","id":7,"res')
out, rest = M.take_events(rest .. 'ult":{}}\n\n', call)
check("final event annotated and marked done", out, 'id: mcpgw-done\nevent: message\ndata: {"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}\n\n')
check("nothing held", rest, "")
out, rest = M.take_events('id: 5\r\ndata: {"jsonrpc":"2.0",\r\ndata: "id":7,"result":{}}\r\n\r\n', call)
check("multi-line data, CRLF, the backend's own event id replaced", out, 'id: mcpgw-done\ndata: {"jsonrpc":"2.0", "id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}\r\n\r\n')
out, rest = M.take_events(': keepalive\n\n', call)
check("comment passes", out, ': keepalive\n\n')
out, rest = M.take_events('data:{"jsonrpc":"2.0","id":7,"result":{}}\n\n', call)
check("data without space", out, 'id: mcpgw-done\ndata: {"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}\n\n')
-- MCP 2026-07-28 has no event ids: a stateless client's answer carries none, the backend's dropped too
out = M.take_events('id: 5\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\n', modern)
check("a stateless client's final event has no id", out, 'data: {"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}\n\n')
-- Whether the request's answer passed (a stateless client's stream that ends without one gets the call's error)
local _, _, _, answered = M.take_events('data: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n', modern)
check("no answer among progress", tostring(answered), "false")
_, _, _, answered = M.take_events('data: {"jsonrpc":"2.0","id":7,"result":{}}\n\n', modern)
check("the final answer passed", tostring(answered), "true")
_, _, _, answered = M.take_events('data: {"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{}}}\n\n', modern)
check("an input_required answer passed too", tostring(answered), "true")
check("the event ending a stream without its answer", M.ended_before_answer_event({ backend = "jobs", tool = "run", attempts = 1, id_json = "7" }),
  'event: message\ndata: {"jsonrpc":"2.0","id":7,"error":{"code":-32004,"message":"backend jobs ended the stream of tools/call run before its answer: the call may or may not have run","data":{"outcome":"failed","backend":"jobs","tool":"run","attempts":1,"fallback_used":false,"http_status":502}}}\n\n')
local modern_prompt = { backend = "b", id = 4, method = "prompts/get", scheme = "b" }
out = M.take_events('id: 9\ndata: {"jsonrpc":"2.0","id":4,"result":{"messages":[]}}\n\n', modern_prompt)
check("another method's answer is not marked done (its own id named, ADR-0018)", out, 'id: mcpgw:b:9\ndata: {"jsonrpc":"2.0","id":4,"result":{"messages":[]}}\n\n')

out = M.take_events('id: 41\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n', call)
check("a progress event's own id names its backend (ADR-0018)", out, 'id: mcpgw:jobs:41\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n')
local requests
out, rest, requests = M.take_events('data: {"jsonrpc":"2.0","id":3,"method":"elicitation/create"}\n\ndata: {"jsonrpc":"2.0","id":"x","method":"roots/list"}\n\n', call)
check("backend requests scoped in the stream", out, 'data: {"jsonrpc":"2.0","id":"mcpgw:jobs:3","method":"elicitation/create"}\n\ndata: {"jsonrpc":"2.0","id":"mcpgw:jobs:\\"x\\"","method":"roots/list"}\n\n')
check("backend requests' own ids reported", table.concat(requests, " "), '3 "x"')
out = M.take_events('data: {"jsonrpc":"2.0","id":7,"error":{"code":-32004,"message":"x","data":{"outcome":"failed"}}}\n\n', call)
check("a final answer left as it is is still marked done", out, 'id: mcpgw-done\ndata: {"jsonrpc":"2.0","id":7,"error":{"code":-32004,"message":"x","data":{"outcome":"failed"}}}\n\n')
check("priming event", M.priming_event("e30="), "id: mcpgw-call.e30=\ndata:\n\n")
check("resume token", M.resume_token_json({ backend = "jobs", tool = "run", id_json = '"a"', attempts = 2, started = 1764500000123 }),
  '{"b":"jobs","t":"run","i":"a","a":2,"s":1764500000123}')

-- ids the gateway accepts
local function id_problem(id) return M.id_problem('{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call"}') end
check("id integer", id_problem("12"), nil)
check("id negative", id_problem("-3"), nil)
check("id 2^53-1", id_problem("9007199254740991"), nil)
check("id string", id_problem('"abc"'), nil)
check("no id", M.id_problem('{"jsonrpc":"2.0","method":"tools/call"}'), nil)
local rule = "id must be a string of at most 256 bytes or an integer"
check("id 2^53 refused", id_problem("9007199254740992"), rule)
check("id fraction refused", id_problem("1.5"), rule)
check("id integer in exponent form", id_problem("1e3"), nil)
check("id fraction in exponent form refused", id_problem("1e-3"), rule)
check("id 5000 digits refused", id_problem(string.rep("9", 5000)), rule)
check("id long string refused", id_problem('"' .. string.rep("a", 257) .. '"'), rule)
check("id 256-byte string", id_problem('"' .. string.rep("a", 256) .. '"'), nil)

-- event ids (ADR-0018): a session client's name the backend; a stateless client gets none, nor retry hints
out = M.take_events('id: abc_1\nretry: 200\ndata: \n\n', call)
check("priming event id scoped", out, 'id: mcpgw:jobs:abc_1\nretry: 200\ndata: \n\n')
local out_without_space = M.take_events('id:abc_2\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n', call)
local in_call = { backend = "jobs", id = 7, resume_token = "e30=" }
out = M.take_events('id: abc_3\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n', in_call)
check("a call's event id carries the call's resume token", out, 'id: mcpgw-call.e30=.abc_3\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n')
check("event id without space scoped", out_without_space, 'id: mcpgw:jobs:abc_2\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n')
out = M.take_events('id: abc_1\nretry: 200\ndata: \n\nid: abc_2\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\n', modern)
check("stateless client: no id, no retry", out, 'data: \n\ndata: {"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","_meta":{"mcpgw/outcome":{"outcome":"ok"}}}}\n\n')

-- an event split anywhere between socket reads comes out whole, once, annotated
local stream = 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\nevent: message\ndata: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}\n\n'
local whole = M.take_events(stream, call)
local all_same = true
for split = 1, #stream - 1 do
  local a, held = M.take_events(stream:sub(1, split), call)
  local b, rest = M.take_events(held .. stream:sub(split + 1), call)
  if a .. b ~= whole or rest ~= "" then all_same = false; print("# split at " .. split .. " gave " .. a .. b) end
end
check("any split gives the same events", all_same, true)

-- the reader the response loop uses: any two cuts of a stream (LF, CRLF and CR endings, an ending cut
-- through) give the same text as the whole, and nothing stays held
local mixed = 'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\r\n\r\n'
  .. ': keepalive\r\r' .. 'data: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}\n\r\n'
local mixed_whole = M.take_events(mixed, call)
local reader_same = true
for first = 1, #mixed - 2, 3 do
  for second = first + 1, #mixed - 1, 5 do
    local push = M.event_reader(call)
    local a = push(mixed:sub(1, first))
    local b = push(mixed:sub(first + 1, second))
    local c, held = push(mixed:sub(second + 1))
    if a .. b .. c ~= mixed_whole or held ~= 0 then reader_same = false; print("# cuts at " .. first .. ", " .. second .. " gave " .. a .. b .. c) end
  end
end
check("reader: any two cuts give the same events", reader_same, true)
local push, release = M.event_reader(call)
local sent, held = push('data: {"jsonrpc":"2.0",')
check("reader: an unended event is held", sent .. "|" .. held, "|" .. #'data: {"jsonrpc":"2.0",')
check("reader: release gives it as it came", release(), 'data: {"jsonrpc":"2.0",')
check("reader: nothing held after release", select(2, push("")), 0)

-- a string ends at a quote after an even number of backslashes
check("escaped backslash before the closing quote", M.members('{"a":"x\\\\","b":1}', 1).b[1], 16)
check("escaped quote inside", M.members('{"a":"x\\"y","b":2}', 1).b[1], 17)
check("three backslashes then a quote: escaped", M.members('{"a":"\\\\\\"","b":3}', 1).b[1], 17)
out = M.take_events('data: not json\n\n', call)
check("data that is not JSON untouched", out, 'data: not json\n\n')
check("session unknown 400", M.says_session_unknown('{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}'), true)
check("not initialized 400", M.says_session_unknown('{"jsonrpc":"2.0","error":{"code":-32000,"message":"Server not initialized"},"id":null}'), true)
check("other 400", M.says_session_unknown('{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":1}'), false)
check("400 not json", M.says_session_unknown('oops'), false)
check("json end: partial", M.json_end('{"jsonrpc":"2.0","result":{"a":"}'), nil)
check("json end: whole", M.json_end(' {"a":{"b":"}"}} \n'), 16)
check("json end: empty", M.json_end('  '), nil)
check("carried outcome of a failure reply", M.carried_outcome('{"jsonrpc":"2.0","id":1,"error":{"code":-32004,"message":"x","data":{"outcome":"failed","backend":"b"}}}'), "failed")
check("carried HTTP status of a failure reply",
  select(2, M.carried_outcome('{"jsonrpc":"2.0","id":1,"error":{"code":-32004,"message":"x","data":{"outcome":"failed","http_status":503}}}')), 503)
check("carried outcome of a degraded result", M.carried_outcome('{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"mcpgw/outcome":{"outcome":"degraded"}}}}'), "degraded")
check("no carried outcome", M.carried_outcome('{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'), nil)

-- the per-worker memory of session checks
local key = M.checked_key("s1", "", "demo", "jobs")
M.checked_remember(key, 1000)
check("remembered while fresh", M.checked_lookup(key, 1500) ~= nil, true)
check("forgotten once stale", M.checked_lookup(key, 2001), nil)
M.checked_remember(M.checked_key("s1", "", "demo", "weather"), 5000)
M.checked_remember(M.checked_key("s2", "", "demo", "jobs"), 5000)
M.checked_forget("s1\n")
check("an ended session is forgotten for every backend", M.checked_lookup(M.checked_key("s1", "", "demo", "weather"), 5001), nil)
check("other sessions are kept", M.checked_lookup(M.checked_key("s2", "", "demo", "jobs"), 5001) ~= nil, true)
M.checked_remember(M.checked_key("s3", "https://idp alice", "demo", "jobs"), 5000)
check("the owner's check is remembered", M.checked_lookup(M.checked_key("s3", "https://idp alice", "demo", "jobs"), 5001) ~= nil, true)
check("another caller's is not", M.checked_lookup(M.checked_key("s3", "https://idp bob", "demo", "jobs"), 5001), nil)
check("nor a caller without a token", M.checked_lookup(M.checked_key("s3", "", "demo", "jobs"), 5001), nil)
M.checked_forget("s3\n")
check("an ended session is forgotten for its owner too", M.checked_lookup(M.checked_key("s3", "https://idp alice", "demo", "jobs"), 5001), nil)

-- access rules (the claim headers Envoy's jwt_authn sets: a string as it is, a list as base64 of its JSON)
check("flag access rule", M.tool_flags("t=5;a=12;r").access, "12")
local function claims(values)
  local headers = {}
  for name, value in pairs(values) do headers["x-mcpgw-claim-" .. name] = value end
  return { get = function(_, name) return headers[name] end }
end
local alice = M.caller_of(claims({ iss = "https://idp", sub = "alice", azp = "agent-cli", scope = "WyJvcGVuaWQiLCJ0b29sczpyZWFkIl0=", groups = "WyJlbmdpbmVlcmluZyIsIm9uY2FsbCJd" }))
check("caller owner", alice.owner, "https://idp alice")
check("caller scope from list", alice.scopes["tools:read"], true)
check("caller client from azp", alice.client, "agent-cli")
check("caller groups", alice.groups[2], "oncall")
check("client_id wins over azp", M.caller_of(claims({ iss = "i", sub = "s", ["client-id"] = "c1", azp = "c2" })).client, "c1")
check("scope as a string and scp", M.caller_of(claims({ iss = "i", sub = "s", scope = "a b", scp = "WyJjIl0=" })).scopes.c, true)
check("scope string split", M.caller_of(claims({ iss = "i", sub = "s", scope = "a b" })).scopes.b, true)
check("groups list", M.caller_of(claims({ iss = "i", sub = "s", groups = "WyJhZG1pbiJd" })).groups[1], "admin")
check("single group string", M.caller_of(claims({ iss = "i", sub = "s", groups = "blue" })).groups[1], "blue")
check("a string that only looks like base64", M.caller_of(claims({ iss = "i", sub = "s", groups = "abcd" })).groups[1], "abcd")
check("groups claim missing", #M.caller_of(claims({ iss = "i", sub = "s" })).groups, 0)
check("escaped group strings", table.concat(M.claim_strings("WyJcdTAwZTlxdWlwZSIsImFcImIiXQ=="), "|"), "\195\169quipe|a\"b")
check("UTF-8 group strings", M.claim_strings("WyLDqXF1aXBlIl0=")[1], "\195\169quipe")
check("only the strings of a list", table.concat(M.claim_strings("WyJ4Iiw3LCJ5Il0="), "|"), "x|y")
check("no claims no caller", M.caller_of(claims({})), nil)
check("no sub no caller", M.caller_of(claims({ iss = "i" })), nil)

local function decide(rule, caller)
  local verdict, detail = M.access_decision(rule, caller)
  return verdict .. ":" .. (type(detail) == "table" and table.concat(detail, " ") or tostring(detail))
end
check("scope rule met", decide({ scopes = { "tools:read" } }, alice), "allow:nil")
check("scope missing", decide({ scopes = { "tools:read", "tools:call", "tools:admin" } }, alice), "insufficient_scope:tools:call tools:admin")
check("subject allowed", decide({ subjects = { alice = true } }, alice), "allow:nil")
check("subject not allowed", decide({ subjects = { bob = true } }, alice), "denied:allowSubjects")
check("group allowed", decide({ groups = { oncall = true } }, alice), "allow:nil")
check("group not allowed", decide({ groups = { support = true } }, alice), "denied:allowGroups")
check("client allowed", decide({ clients = { ["agent-cli"] = true } }, alice), "allow:nil")
check("client not allowed", decide({ clients = { ["agent-batch"] = true } }, alice), "denied:allowClients")
check("who before what: denied wins over a missing scope", decide({ groups = { support = true }, scopes = { "tools:admin" } }, alice), "denied:allowGroups")
check("no token denied", decide({ scopes = { "tools:read" } }, nil), "denied:a token")
check("challenge keeps the route's scopes the caller holds",
  M.challenge_scopes({ scopes = { "tools:call" } }, alice, { ["tools:read"] = true, ["tools:call"] = true }), "tools:call tools:read")
check("challenge leaves out scopes of other routes", M.challenge_scopes({ scopes = { "tools:call" } }, alice, { ["tools:call"] = true }), "tools:call")

-- resource URIs (docs/adr/0015-federated-resources-and-prompts.md)
check("uri exposed", M.exposed_uri_json('"file:///a/b?x=1#f"', "my-docs"), '"my-docs+file:///a/b?x=1#f"')
check("ui uri keeps its scheme", M.exposed_uri_json('"ui://dash/x.html"', "my-docs"), '"ui://my-docs+dash/x.html"')
check("opaque uri exposed", M.exposed_uri_json('"memo:insights"', "b"), '"b+memo:insights"')
check("relative uri not named", M.exposed_uri_json('"/a/b"', "b"), nil)
check("own uri", M.own_uri("my-docs+file:///a/b", "my-docs"), "file:///a/b")
check("own ui uri", M.own_uri("ui://my-docs+dash/x.html", "my-docs"), "ui://dash/x.html")
check("own uri of a scheme with +", M.own_uri("b+git+ssh://h/r", "b"), "git+ssh://h/r")
check("another backend's uri", M.own_uri("c+file:///a", "b"), nil)
check("a longer backend name is another backend", M.own_uri("bb+file:///a", "b"), nil)

local read = { backend = "my_docs", id = 3, method = "resources/read", scheme = "my-docs" }
check("read contents named", M.rewrite_message('{"jsonrpc":"2.0","id":3,"result":{"contents":[{"uri":"file:///a","text":"x"},{"uri":"file:///b","blob":"eA=="}]}}', read),
  '{"jsonrpc":"2.0","id":3,"result":{"contents":[{"uri":"my-docs+file:///a","text":"x"},{"uri":"my-docs+file:///b","blob":"eA=="}]}}')
local modern_read = { backend = "my_docs", id = 3, method = "resources/read", scheme = "my-docs", modern = true }
check("read for a stateless client gets its cache hints", M.rewrite_message('{"jsonrpc":"2.0","id":3,"result":{"contents":[]}}', modern_read),
  '{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"private","contents":[]}}')
local prompt = { backend = "b", id = 4, method = "prompts/get", scheme = "b" }
check("prompt's embedded resource and link named", M.rewrite_message(
  '{"jsonrpc":"2.0","id":4,"result":{"messages":[{"role":"user","content":{"type":"text","text":"uri"}},{"role":"user","content":{"type":"resource","resource":{"uri":"demo://r/2","text":"t"}}},{"role":"user","content":{"type":"resource_link","uri":"demo://r/3","name":"r"}}]}}', prompt),
  '{"jsonrpc":"2.0","id":4,"result":{"messages":[{"role":"user","content":{"type":"text","text":"uri"}},{"role":"user","content":{"type":"resource","resource":{"uri":"b+demo://r/2","text":"t"}}},{"role":"user","content":{"type":"resource_link","uri":"b+demo://r/3","name":"r"}}]}}')
check("prompt without resources untouched", M.rewrite_message('{"jsonrpc":"2.0","id":4,"result":{"messages":[]}}', prompt), nil)
local tool_call = { backend = "b", id = 7, method = "tools/call", scheme = "b", outcome = call.outcome }
check("a call's resource link named, then annotated", M.rewrite_message('{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"resource_link","uri":"file:///x","name":"x"}]}}', tool_call),
  '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}},"content":[{"type":"resource_link","uri":"b+file:///x","name":"x"}]}}')
check("an error of another method gets no outcome", M.rewrite_message('{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"not found"}}', read), nil)
check("log message names its backend", M.rewrite_message('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}', read),
  '{"jsonrpc":"2.0","method":"notifications/message","params":{"logger":"my_docs","level":"info","data":"x"}}')
check("log message keeps its own logger after the backend", M.rewrite_message('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"db","data":"x"}}', read),
  '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"my_docs/db","data":"x"}}')
check("resource update named", M.rewrite_message('{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}', read),
  '{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"my-docs+file:///a"}}')
check("elements of an array", #M.elements('[1, {"a":[2,3]} ,"x"]', 1), 3)
check("elements of a non-array", M.elements('{"a":1}', 1), nil)

-- the target of a forwarded request, found structurally
local function target(body, method, is_prompt)
  local first, last = M.target_span(body, method, is_prompt)
  return first and body:sub(first, last) or nil
end
check("prompts/get name", target('{"params":{"arguments":{"name":"x"},"name":"b__p"}}', "prompts/get", true), '"b__p"')
check("resources/read uri", target('{"params":{"uri":"b+file:///a"}}', "resources/read", false), '"b+file:///a"')
check("completion ref name", target('{"params":{"argument":{"name":"a","value":"v"},"ref":{"type":"ref/prompt","name":"b__p"}}}', "completion/complete", true), '"b__p"')
check("completion ref uri", target('{"params":{"ref":{"type":"ref/resource","uri":"b+file:///{x}"}}}', "completion/complete", false), '"b+file:///{x}"')
check("uri not a string", target('{"params":{"uri":3}}', "resources/read", false), nil)

-- a backend of both revisions is spoken to in the client's (ADR-0018)
local function era_of(era, sessionful, modern_client)
  local chosen, needs_session = M.era_for(era, sessionful, modern_client)
  return chosen .. "/" .. tostring(needs_session)
end
check("dual, stateless client", era_of("dual", true, true), "modern/false")
check("dual, session client", era_of("dual", true, false), "session/true")
check("session era unchanged", era_of("session", true, true), "session/true")
check("modern era unchanged", era_of("modern", false, false), "modern/false")
-- per-caller credentials remembered per worker for as long as the sidecar said
M.credential_remember("demo\nweather\nBearer alice", "Bearer exchanged-a", 2000)
check("a credential is served while it may be", M.credential_lookup("demo\nweather\nBearer alice", 1999), "Bearer exchanged-a")
check("and not once it may not", M.credential_lookup("demo\nweather\nBearer alice", 2000), nil)
check("another caller's token finds nothing", M.credential_lookup("demo\nweather\nBearer bob", 1000), nil)
for index = 1, 4096 do M.credential_remember("k" .. index, "v", 9000) end
check("a full memory starts over", M.credential_lookup("k1", 1000), nil)
check("with the newest kept", M.credential_lookup("k4096", 1000), "v")

-- an approved retry (2026-07-28): the client's answer to the gateway's approval page is not the backend's
local function without_answer(body, id)
  local _, _, _, params = M.tool_name_span(body)
  return M.without_gateway_answer(body, params, id)
end
check("gateway answer alone: inputResponses go",
  without_answer('{"params":{"name":"t","inputResponses":{"ap1":{"action":"accept"}},"arguments":{}}}', "ap1"), '{"params":{"name":"t","arguments":{}}}')
check("gateway answer last: inputResponses go with their comma",
  without_answer('{"params":{"name":"t" , "inputResponses" : {"ap1":{"action":"accept"}}}}', "ap1"), '{"params":{"name":"t" }}')
check("gateway answer beside the backend's: only it goes",
  without_answer('{"params":{"name":"t","inputResponses":{"ap1":{"action":"accept"},"confirm":{"action":"accept","content":{"ok":true}}}}}', "ap1"),
  '{"params":{"name":"t","inputResponses":{"confirm":{"action":"accept","content":{"ok":true}}}}}')
check("gateway answer after the backend's: only it goes",
  without_answer('{"params":{"name":"t","inputResponses":{"confirm":{"action":"accept"}, "ap1":{"action":"accept"}}}}', "ap1"),
  '{"params":{"name":"t","inputResponses":{"confirm":{"action":"accept"}}}}')
check("no gateway answer: nothing to take out", without_answer('{"params":{"name":"t","inputResponses":{"confirm":{"action":"accept"}}}}', "ap1"), nil)
check("no inputResponses: nothing to take out", without_answer('{"params":{"name":"t"}}', "ap1"), nil)
check("inputResponses not an object: left", without_answer('{"params":{"name":"t","inputResponses":["ap1"]}}', "ap1"), nil)

-- the backend of an approved call asks its client for input: what names the retry that continues it
local function continuation(message, id)
  local call = { id = id or 7, approval_id = "ap1" }
  M.note_continuation(message, call)
  return call.continuation
end
check("continuation with requestState",
  continuation('{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create"}},"requestState":"s\\"1"}}'),
  '{"approvalId":"ap1","requestState":"s\\"1","inputRequestKeys":["confirm"]}')
check("continuation without requestState",
  continuation('{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{"a":{}}}}'), '{"approvalId":"ap1","requestState":null,"inputRequestKeys":["a"]}')
check("a complete result continues nothing", continuation('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}'), nil)
check("another id's answer continues nothing", continuation('{"jsonrpc":"2.0","id":8,"result":{"resultType":"input_required","requestState":"s"}}'), nil)
check("an error continues nothing", continuation('{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"input_required"}}'), nil)

-- a whole JSON answer (buffered in one piece, or held chunk by chunk): rewritten, its outcome recorded
local function json_answer(held, annotated)
  local recorded = {}
  local h = { streamInfo = function() return { dynamicMetadata = function() return { set = function(_, _, key, value) recorded[key] = value end } end } end }
  local answer_call = { backend = "jobs", id = 7, method = "tools/call", rewrites = true }
  if annotated then
    answer_call.outcome = function(last_error)
      answer_call.final = last_error and "failed" or "ok"
      return '{"outcome":"' .. answer_call.final .. '"}'
    end
  end
  return M.rewrite_json_answer(h, answer_call, held), recorded.outcome
end
check("json answer annotated, what follows it kept", (json_answer('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}\n', true)),
  '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}},"content":[]}}\n')
check("json answer outcome recorded", select(2, json_answer('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}', true)), "ok")
check("json answer failed outcome recorded", select(2, json_answer('{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}', true)), "failed")
check("json answer not JSON sent as it came", (json_answer('<html>oops', true)), nil)
check("json answer not JSON records nothing", select(2, json_answer('<html>oops', true)), nil)
check("json answer unannotated route records a carried outcome",
  select(2, json_answer('{"jsonrpc":"2.0","id":7,"result":{"content":[],"_meta":{"mcpgw/outcome":{"outcome":"degraded"}}}}', false)), "degraded")
check("json answer annotated, \"result\" inside a string does not fool it",
  (json_answer('{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"\\"result\\":{}"}]}}', true)),
  '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"mcpgw/outcome":{"outcome":"ok"}},"content":[{"type":"text","text":"\\"result\\":{}"}]}}')

-- leased shared limits (docs/adr/0016-quotas.md, "Leased shared limits")
local function hex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end
local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
-- RateLimitRequest{domain "d", descriptors [{entries [limit=a, scope=b], hits_addend {value 300}}]} in a gRPC frame
check("lease request encoded", hex(M.rate_limit_request("d", { { entries = { { "limit", "a" }, { "scope", "b" } }, hits = 300 } })),
  "0000000022" .. "0a0164" .. "121d" .. "0a0a0a056c696d69741201" .. "61" .. "0a0a0a0573636f70651201" .. "62" .. "1a0308ac02")
-- RateLimitResponse{overall_code OVER_LIMIT, statuses [{OK, current_limit{…}, limit_remaining 5, duration_until_reset{1 s}},
-- {OVER_LIMIT}], response_headers_to_add [a header]}: a code per status, unknown fields skipped
local statuses = "0802" .. "120e" .. "0801" .. "1204" .. "08641001" .. "1805" .. "22020801" .. "1202" .. "0802" .. "1a06" .. "0a01781201" .. "79"
check("lease answer codes", table.concat(M.rate_limit_codes(unhex("00000000" .. string.format("%02x", #statuses / 2) .. statuses)) or {}, ","), "1,2")
check("lease answer: an empty body is no answer", M.rate_limit_codes(""), nil)
check("lease answer: a cut frame is no answer", M.rate_limit_codes(unhex("0000000010" .. "0802")), nil)
check("lease answer: a compressed frame is no answer", M.rate_limit_codes(unhex("0100000002" .. "0802")), nil)
check("lease answer: no statuses", #M.rate_limit_codes(unhex("0000000002" .. "0801")), 0)
check("lease window of a second", M.window_end(1700000000250, 1), 1700000001000)
check("lease window of a minute", M.window_end(1700000000250, 60), 1700000040000)
check("address without port", M.address_without_port("10.0.0.7:51234"), "10.0.0.7")
check("ipv6 address without port", M.address_without_port("[::1]:51234"), "::1")
local lease = { tokens = 0, ends_ms = 0, over_ms = 0, renewing_ms = -5000 }
check("lease: none held asks for a lease", M.lease_take(lease, 10, 1000), 10)
check("lease: while it is asked, another call asks for itself alone", M.lease_take(lease, 10, 1001), 1)
check("lease: the single hit keeps nothing", (M.lease_granted(lease, 1, 10, 1, 1001, 1) and lease.tokens), 0)
check("lease: granted, nine tokens held", (M.lease_granted(lease, 10, 10, 1, 1000, 1) and lease.tokens), 9)
check("lease: held until the window ends", lease.ends_ms, 2000)
check("lease: a token spent", M.lease_take(lease, 10, 1500), "spent")
check("lease: eight left", lease.tokens, 8)
check("lease: at the window's end the rest is gone and a lease asked again", M.lease_take(lease, 10, 2000), 10)
check("lease: over the limit", M.lease_granted(lease, 10, 10, 1, 2000, 2), false)
check("lease: refused here until the window ends", M.lease_take(lease, 10, 2999), "over")
check("lease: asked again in the next window", M.lease_take(lease, 10, 3000), 10)
local single = { tokens = 0, ends_ms = 0, over_ms = 0, renewing_ms = -5000 }
check("lease of one: asked per call", M.lease_take(single, 1, 1000), 1)
check("lease of one: nothing held", (M.lease_granted(single, 1, 1, 1, 1000, 1) and single.tokens), 0)
check("lease of one: asked again", M.lease_take(single, 1, 1001), 1)
local stale = { tokens = 0, ends_ms = 0, over_ms = 0, renewing_ms = 1000 }
check("lease: a renewal never answered stops blocking", M.lease_take(stale, 10, 6000), 10)
