import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { envoyBinary } from '../control-plane/devstack/envoy';
import { waitFor } from '../control-plane/devstack/processes';
import { projectPath } from '../control-plane/shared/paths';
import { accessLog, callLogRecord, callLogs } from '../control-plane/xds/translate/listener';
import { mcpFilter } from '../control-plane/xds/translate/call-lane';
import { CALL_LOG_CLUSTER_NAME, CHECK_HEADERS, EXT_AUTHZ_METADATA_NAMESPACE, METADATA_NAMESPACE } from '../control-plane/xds/translate/settings';
import { TYPE_URL } from '../control-plane/xds/translate/type-urls';
import { callgrindEnvoy, runningInstructions, zeroInstructions } from './systems/callgrind';
import { RepeatedValue, pairedAddedMedian, spreadOf } from './load/stats';
import { allocatePort } from './systems/ports';
import { ProcessGroup } from './systems/process-group';
import { HOST } from './systems/topology';
import { balancedOrder } from './variant-cost';
import { writeBenchResults } from './report/results-file';

/**
 * What Envoy's access logs cost per tools/call, and what in the call log's record that cost follows
 * (issue 10; docs/adr/0008-data-path-lanes.md, "Session 9: a leaner call-log record"). One small
 * static Envoy per variant under Valgrind's callgrind, each the same but for its access logs: the
 * mcp filter parses a tools/call, a Lua filter records in dynamic metadata what the call script
 * records on an authed call with the audit on (route, backend, tool, caller, arguments, credential,
 * outcome, …), and the router sends it to a backend in this process; the call log goes to a TCP sink
 * here that counts its bytes. Nothing else of the gateway runs, so a block of calls counts the same
 * instructions round after round: the difference between variants is the loggers' alone.
 * Per variant and round: Envoy's instructions over CALLS calls, minus what the same Envoy runs idle for
 * as long, per call; rounds in a balanced order, each variant's difference to `no access log` paired by round.
 *   node dist/bench/call-log-record-instructions.js [--quick]
 * Writes bench/results/call-log-record-instructions.json and .md (--quick: …-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'call-log-record');
const PLAN = { full: { rounds: 6, calls: 400, warmupCalls: 100 }, quick: { rounds: 2, calls: 200, warmupCalls: 50 } };
const IN_FLIGHT = 4;
const ENVOY_START_TIMEOUT_MS = 600_000;

const log = (line: string) => process.stdout.write(`[bench call-log-record] ${line}\n`);

interface Variant {
  name: string;
  accessLog: unknown[];
}

/**
 * The call log's record as it was before session 9: the call script's values one formatter each, with
 * the cuts they had (the script's record as one value, `script`, replaced by them).
 */
function oneFormatterPerValue(record: Record<string, string>): Record<string, string> {
  const { script: _whole, ...envoys } = record;
  const value = (key: string, cut?: number) => `%DYNAMIC_METADATA(${METADATA_NAMESPACE}:${key})${cut ? `:${cut}` : ''}%`;
  return {
    ...Object.fromEntries(Object.entries(SCRIPT_VALUE_CUTS).map(([key, cut]) => [key, value(key, cut)])),
    caller_iss: value('caller:iss', 256),
    caller_sub: value('caller:sub', 256),
    caller_client: value('caller:client', 256),
    ...envoys,
  };
}

/** The call script's values in the record before session 9, with their cuts (0: none). */
const SCRIPT_VALUE_CUTS: Record<string, number> = {
  route: 0, backend: 0, tool: 128, method: 64, outcome: 0, answered: 0, fallback: 64, arguments: 0, reason: 256, rule: 256, credential: 32,
  approval: 32, approval_id: 128, approver_iss: 256, approver_sub: 256,
};

function variants(): Variant[] {
  const shipped = callLogRecord(true);
  return [
    { name: 'no access log', accessLog: [] },
    { name: 'stdout access log', accessLog: [accessLog] },
    { name: "call log: the call script's record as one value (session 9)", accessLog: callLogs(shipped) },
    { name: "call log: one formatter per value of the call script's record (before)", accessLog: callLogs(oneFormatterPerValue(shipped)) },
  ];
}

/** What the call script records on an authed call with the audit on, as values of the same sizes. */
const RECORDING_SCRIPT = `
function envoy_on_request(h)
  local m = h:streamInfo():dynamicMetadata()
  m:set("${METADATA_NAMESPACE}", "route", "authed")
  m:set("${METADATA_NAMESPACE}", "method", "tools/call")
  m:set("${METADATA_NAMESPACE}", "backend", "jobs")
  m:set("${METADATA_NAMESPACE}", "tool", "echo")
  m:set("${METADATA_NAMESPACE}", "rpc_id", 17)
  m:set("${METADATA_NAMESPACE}", "rpc_id_json", "17")
  m:set("${METADATA_NAMESPACE}", "digest", "3q2+7wABAgMEBQYHCAkKCw")
  m:set("${METADATA_NAMESPACE}", "caller", { iss = "http://127.0.0.1:41234/realms/bench", sub = "5f0c8a8e-6b8e-4c53-9d1e-2f9a0c1b7d44", client = "bench-agent" })
  m:set("${METADATA_NAMESPACE}", "session_present", true)
  m:set("${METADATA_NAMESPACE}", "arguments", '{"text":"${'x'.repeat(90)}"}')
  m:set("${METADATA_NAMESPACE}", "quota_tool_scope", "jobs/echo")
  m:set("${METADATA_NAMESPACE}", "started_ms", h:timestamp())
  m:set("${METADATA_NAMESPACE}", "credential", "none")
  m:set("${EXT_AUTHZ_METADATA_NAMESPACE}", "${CHECK_HEADERS.concurrencyLease}", "")
end
function envoy_on_response(h)
  h:streamInfo():dynamicMetadata():set("${METADATA_NAMESPACE}", "outcome", "ok")
end
`;

function bootstrap(variant: Variant, ports: { listener: number; admin: number; backend: number; sink: number }) {
  const cluster = (name: string, port: number) => ({
    name,
    type: 'STATIC',
    connect_timeout: '5s',
    load_assignment: { cluster_name: name, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: HOST, port_value: port } } } }] }] },
  });
  return {
    node: { id: `call-log-record-${ports.listener}`, cluster: 'bench' },
    admin: { address: { socket_address: { address: HOST, port_value: ports.admin } } },
    static_resources: {
      listeners: [
        {
          name: 'agents',
          address: { socket_address: { address: HOST, port_value: ports.listener } },
          filter_chains: [
            {
              filters: [
                {
                  name: 'envoy.filters.network.http_connection_manager',
                  typed_config: {
                    '@type': TYPE_URL.httpConnectionManager,
                    stat_prefix: 'mcp_gateway',
                    access_log: variant.accessLog,
                    route_config: {
                      virtual_hosts: [{ name: 'mcp', domains: ['*'], routes: [{ name: 'authed/call/jobs', match: { prefix: '/' }, route: { cluster: 'backend' } }] }],
                    },
                    http_filters: [
                      mcpFilter(1 << 20),
                      { name: 'envoy.filters.http.lua', typed_config: { '@type': TYPE_URL.lua, default_source_code: { inline_string: RECORDING_SCRIPT } } },
                      { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } },
                    ],
                  },
                },
              ],
            },
          ],
        },
      ],
      clusters: [cluster('backend', ports.backend), cluster(CALL_LOG_CLUSTER_NAME, ports.sink)],
    },
  };
}

const CALL_BODY = JSON.stringify({ jsonrpc: '2.0', id: 17, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x'.repeat(90) } } });
const ANSWER = JSON.stringify({ jsonrpc: '2.0', id: 17, result: { content: [{ type: 'text', text: 'x'.repeat(90) }] } });

/** `calls` tools/call to `port`, IN_FLIGHT at a time on kept-alive connections; the answers not 200 are counted. */
async function callBlock(agent: http.Agent, port: number, calls: number): Promise<number> {
  let left = calls;
  let wrong = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const request = http.request(
        { host: HOST, port, path: '/mcp/authed', method: 'POST', agent, headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' } },
        (response) => {
          if (response.statusCode !== 200) wrong++;
          response.resume().on('end', resolve);
        },
      );
      request.on('error', () => {
        wrong++;
        resolve();
      });
      request.end(CALL_BODY);
    });
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (left-- > 0) await one();
  }));
  return wrong;
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  const plan = quick ? PLAN.quick : PLAN.full;
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(path.join(LOG_DIR, 'callgrind'), { recursive: true });
  const group = new ProcessGroup(LOG_DIR, { pinned: false, loadGenerator: 'any', systemsUnderTest: 'any', niceness: 0 });
  const backend = http.createServer({ keepAlive: true }, (request, response) => {
    request.resume().on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end(ANSWER));
  });
  const backendPort = await allocatePort();
  await new Promise<void>((resolve) => backend.listen(backendPort, HOST, resolve));
  const sinks: net.Server[] = [];
  const counted: Record<string, RepeatedValue[]> = {};
  const bytes = new Map<string, number>();
  try {
    const wrapper = callgrindEnvoy(path.join(LOG_DIR, 'callgrind'), path.join(LOG_DIR, 'callgrind', 'callgrind.%p.out'));
    const envoys = await Promise.all(
      variants().map(async (variant, index) => {
        const ports = { listener: await allocatePort(), admin: await allocatePort(), backend: backendPort, sink: await allocatePort() };
        bytes.set(variant.name, 0);
        const sink = net.createServer((socket) => socket.on('data', (chunk) => bytes.set(variant.name, bytes.get(variant.name)! + chunk.length)));
        sinks.push(sink);
        await new Promise<void>((resolve) => sink.listen(ports.sink, HOST, resolve));
        const file = path.join(LOG_DIR, `envoy-${index}.yaml`);
        fs.writeFileSync(file, JSON.stringify(bootstrap(variant, ports), null, 1));
        execFileSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { stdio: 'pipe' });
        const envoy = group.spawn(`envoy-${index}`, wrapper, ['-c', file, '--use-dynamic-base-id', '--log-level', 'warn', '--concurrency', '2']);
        await waitFor(`envoy-${index} to be ready`, async () => ((await fetch(`http://${HOST}:${ports.admin}/ready`).catch(() => undefined))?.ok ? true : undefined), {
          timeoutMs: ENVOY_START_TIMEOUT_MS,
          intervalMs: 1000,
        });
        log(`${variant.name}: up (pid ${envoy.child.pid})`);
        return { name: variant.name, pid: envoy.child.pid!, port: ports.listener, agent: new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT }) };
      }),
    );
    const wrong = new Map<string, number>();
    for (const envoy of envoys) {
      await callBlock(envoy.agent, envoy.port, plan.warmupCalls);
      execFileSync('callgrind_control', ['--instr=on', String(envoy.pid)], { stdio: 'ignore' });
      await callBlock(envoy.agent, envoy.port, plan.warmupCalls);
      counted[envoy.name] = [];
    }
    const byName = new Map(envoys.map((envoy) => [envoy.name, envoy]));
    const bytesBefore = new Map(bytes);
    for (let round = 1; round <= plan.rounds; round++) {
      for (const name of balancedOrder([...byName.keys()], round)) {
        const envoy = byName.get(name)!;
        zeroInstructions(envoy.pid);
        const started = Date.now();
        wrong.set(name, (wrong.get(name) ?? 0) + (await callBlock(envoy.agent, envoy.port, plan.calls)));
        const busy = runningInstructions(envoy.pid);
        const wallMs = Date.now() - started;
        zeroInstructions(envoy.pid);
        await new Promise((resolve) => setTimeout(resolve, wallMs));
        const idle = runningInstructions(envoy.pid);
        const perCall = (busy - idle) / plan.calls;
        counted[name].push({ repetition: round, value: perCall });
        log(`round ${round} ${name}: ${(perCall / 1000).toFixed(1)}k per call (idle ${(idle / plan.calls / 1000).toFixed(1)}k, ${wallMs} ms)`);
      }
    }
    // The last batch of each logger leaves within its flush interval.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    for (const [name, total] of bytes) bytes.set(name, (total - bytesBefore.get(name)!) / (plan.rounds * plan.calls));
    for (const envoy of envoys) envoy.agent.destroy();
    log(`not answered 200: ${JSON.stringify(Object.fromEntries(wrong))}`);
  } finally {
    await group.stopAll();
    backend.close();
    for (const sink of sinks) sink.close();
  }
  const name = quick ? 'call-log-record-instructions-quick' : 'call-log-record-instructions';
  const context = { measuredAt: new Date().toISOString(), mode: quick ? 'quick' : 'full', load: os.loadavg().slice(0, 2), ...plan };
  const baseline = counted['no access log'];
  const rows = Object.entries(counted).map(([variant, values]) => {
    const spread = spreadOf(values.map((entry) => entry.value));
    const added = values === baseline ? undefined : pairedAddedMedian(baseline, values);
    const sent = bytes.get(variant) ?? 0;
    return `| ${variant} | ${(spread.median / 1000).toFixed(1)} (${(spread.min / 1000).toFixed(1)}–${(spread.max / 1000).toFixed(1)}) | ${added === undefined ? '' : `+${(added / 1000).toFixed(1)}`} | ${sent > 0 ? sent.toFixed(0) : ''} |`;
  });
  const markdown = [
    "# Envoy's instructions per tools/call, by access log and call-log record",
    '',
    `Counted ${context.measuredAt} (${context.mode} run) by valgrind callgrind (load average ${context.load.map((value) => value.toFixed(2)).join(' / ')}: the counts do not depend on it), by \`node dist/bench/call-log-record-instructions.js\`.`,
    `One static Envoy per variant (the mcp filter, a Lua filter recording what the call script records on an authed call with the audit on, the router to a backend in the bench process), differing only in its access logs. Per variant and round: ${plan.calls} tools/call, ${IN_FLIGHT} in flight, after ${plan.warmupCalls} uncounted; minus the same Envoy idle for as long; ${plan.rounds} rounds in a balanced order.`,
    '',
    '| variant | k instructions per call, median (min–max) | added over no access log (paired median, k) | call-log bytes per call sent |',
    '| --- | --- | --- | --- |',
    ...rows,
    '',
  ].join('\n');
  writeBenchResults(name, { context, counted, bytesPerCall: Object.fromEntries(bytes) }, markdown, log);
}

main().catch((error) => {
  process.stderr.write(`[bench call-log-record] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
