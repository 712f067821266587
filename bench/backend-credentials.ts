import * as fs from 'node:fs';
import { threadsCpuNanosecondsOf } from './scenarios/cpu-time';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { waitFor } from '../control-plane/devstack/processes';
import { buildGatewayIR } from '../control-plane/ir/gateway-ir';
import { egressFetch } from '../control-plane/shared/egress-fetch';
import { InternalTls } from '../control-plane/shared/internal-tls';
import { projectPath } from '../control-plane/shared/paths';
import { launchKeycloakSupervisor } from '../test/support/keycloak-global-setup';
import { KEYCLOAK_RUN_ENV, REALM_FILE, keycloak } from '../test/support/keycloak';
import { metricValue } from '../test/support/gateway-fixture';
import { quietLogger } from '../test/support/quiet-logger';
import { ShortLivedCa } from '../test/support/short-lived-pki';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { IssueRequest, RunResult, runFixedRate } from './load/load-runner';
import { McpHttpClient, echoOutcome, openSession } from './load/mcp-client';
import { LatencySummary, summarize } from './load/stats';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { allocatePort } from './systems/ports';
import { startBackendProcess } from './systems/systems';

/**
 * What backend credentials cost a tools/call (issue 12, the seed's open question 3), in one run:
 * - none: no credentials (the baseline);
 * - cached exchange: RFC 8693 token exchange at a real Keycloak 26.7.3, the exchanged token from the
 *   sidecar's cache (one caller token throughout);
 * - cold exchange: every call with a caller token never seen before, so every call exchanges; with
 *   Keycloak's own share (the sidecar's exchange time, and the same exchange asked of Keycloak directly);
 * - mTLS: the gateway's client certificate to an https backend that requires one.
 * The same bench backend (one process, an http and an https port), the same gateway, rounds of the
 * modes interleaved. Writes bench/results/backend-credentials.json and .md (a --quick run: quick-backend-credentials.*).
 *   node dist/bench/backend-credentials.js [--quick]
 */

const LOG_DIR = projectPath('.run', 'bench', 'backend-credentials');
const log = (line: string) => process.stdout.write(`[credentials] ${line}\n`);
const TARGET_CACHED_RATIO = 1.05;

const SETTINGS = {
  full: { rate: 40, warmupMs: 3000, measureMs: 10_000, repetitions: 5, coldCalls: 150 },
  quick: { rate: 40, warmupMs: 1000, measureMs: 3000, repetitions: 1, coldCalls: 30 },
};

type Mode = 'none' | 'cachedExchange' | 'mtls';
const ROUTE_OF: Record<Mode, string> = { none: 'plain', cachedExchange: 'exchange', mtls: 'mtls' };

interface ModeResult {
  latencyMs: LatencySummary;
  /** p50 of each repetition, in order: the spread the pooled figure hides. */
  repetitionP50Ms: number[];
  /** CPU time per call (µs) of Envoy and of the sidecar, over the measured runs: steadier than latency on a shared machine. */
  cpuMicrosPerCall: { envoy: number; sidecar: number };
  /** Of the pooled repetitions; p50 and p99 as ratios of none's. */
  ratioP50: number;
  ratioP99: number;
  errors: Record<string, number>;
}

interface Report {
  measuredAt: string;
  cores: number;
  loadAverage1m: number;
  mode: 'full' | 'quick';
  settings: (typeof SETTINGS)['full'];
  results: Record<Mode | 'coldExchange', ModeResult>;
  keycloak: {
    /** The sidecar's exchange requests during the cold phase, as it timed them (mean, ms). */
    exchangeAsSidecarSawItMeanMs: number;
    /** The same exchange, asked of Keycloak directly by the bench (sequential). */
    exchangeDirect: LatencySummary;
    /** Share of a cold call that is the exchange at Keycloak: the sidecar's mean exchange time / the cold calls' mean latency. */
    shareOfColdCall: number;
  };
  cacheLookups: { hit: number; miss: number };
  /**
   * The sidecar's own requests (ADR-0013): the same initialize sent to the backend straight from Node,
   * and through Envoy's egress listener as the sidecar sends it.
   */
  egressHop: { direct: LatencySummary; throughEgress: LatencySummary; addedP50Ms: number };
  target: { cachedP50Ratio: number; limit: number; met: boolean };
}

function gatewayClientSecret(): string {
  const realm = JSON.parse(fs.readFileSync(REALM_FILE, 'utf8')) as { clients: { clientId: string; secret?: string }[] };
  return realm.clients.find((client) => client.clientId === 'mcp-gateway')!.secret!;
}

/**
 * tools/call echo on one route, in one session (opened with `opener`, the session's owner), with
 * `authorization()` as the caller's header of each call.
 */
async function caller(url: string, opener: string, authorization: () => string | undefined): Promise<{ issue: IssueRequest; close(): void }> {
  const client = new McpHttpClient(64);
  const session = await openSession(client, url, 10_000, { authorization: opener });
  const issue: IssueRequest = async () => {
    const id = client.newId();
    const token = authorization();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `svc__${ECHO_TOOL}`, arguments: { text: 'bench' } } });
    const answer = await client.post(url, body, { headers: { ...session, ...(token && { authorization: token }) }, timeoutMs: 10_000 });
    return echoOutcome(answer, id, 'bench');
  };
  return { issue, close: () => client.close() };
}

const round = (value: number) => Math.round(value * 1000) / 1000;
const ratio = (value: number, base: number) => Math.round((value / base) * 1000) / 1000;

function markdown(report: Report): string {
  const cpuCell = (result: ModeResult) =>
    Number.isFinite(result.cpuMicrosPerCall.envoy) ? `${Math.round(result.cpuMicrosPerCall.envoy)} / ${Math.round(result.cpuMicrosPerCall.sidecar)}` : '–';
  const row = (name: string, result: ModeResult) =>
    `| ${name} | ${result.latencyMs.n} | ${round(result.latencyMs.p50)} | ${round(result.latencyMs.p99)} | ${result.ratioP50} | ${result.ratioP99} | ${result.repetitionP50Ms.join(', ')} | ${cpuCell(result)} |`;
  const { results, keycloak: idp } = report;
  return [
    '# Backend credentials: what they cost a tools/call',
    '',
    `Measured ${report.measuredAt} (${report.mode} run) on ${report.cores} cores, load average ${report.loadAverage1m}, by \`node dist/bench/backend-credentials.js\`:`,
    `tools/call \`echo\` through the gateway (Envoy 1.40 with jwt_authn validating the caller's token on every route, sidecar, control plane, Redis) to one bench backend process, ${report.settings.rate} calls/s`,
    `in one MCP session per mode, ${report.settings.repetitions} × ${report.settings.measureMs / 1000} s per mode with the modes interleaved; Keycloak 26.7.3 with the test realm;`,
    `the cold exchange: ${report.settings.coldCalls} calls, one at a time, each with a caller token the gateway has not seen.`,
    '',
    '| mode | calls | p50 ms | p99 ms | p50 / none | p99 / none | p50 per repetition (ms) | CPU µs per call: Envoy / sidecar |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    row('none', results.none),
    row('token exchange, cached', results.cachedExchange),
    row('token exchange, cold (every call exchanges)', results.coldExchange),
    row('mTLS', results.mtls),
    '',
    `Keycloak's share of a cold call: an exchange asked of Keycloak directly takes p50 ${round(idp.exchangeDirect.p50)} ms (p99 ${round(idp.exchangeDirect.p99)} ms);`,
    `the sidecar saw its exchanges take ${round(idp.exchangeAsSidecarSawItMeanMs)} ms on average, ${Math.round(idp.shareOfColdCall * 100)} % of a cold call's mean (${round(results.coldExchange.latencyMs.mean)} ms).`,
    `Token cache during the run: ${report.cacheLookups.hit} hits, ${report.cacheLookups.miss} misses.`,
    '',
    `The sidecar's own requests to a backend (session open, notifications, DELETE) go through Envoy's egress listener: an \`initialize\``,
    `straight from Node takes p50 ${round(report.egressHop.direct.p50)} ms (p99 ${round(report.egressHop.direct.p99)} ms), through the egress listener (mutual TLS, connections kept open) p50`,
    `${round(report.egressHop.throughEgress.p50)} ms (p99 ${round(report.egressHop.throughEgress.p99)} ms): ${round(report.egressHop.addedP50Ms)} ms added at p50.`,
    '',
    `Target: cached exchange p50 ≤ ${report.target.limit} × none — measured ${report.target.cachedP50Ratio}: ${report.target.met ? 'met' : 'missed'}.`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false } } });
  const mode = values.quick ? 'quick' : 'full';
  const settings = SETTINGS[mode];
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const group = new ProcessGroup(path.join(LOG_DIR, 'systems'), claimCpus());
  const { run, supervisor } = await launchKeycloakSupervisor(LOG_DIR);
  const runFile = path.join(run.dataDir, 'run.json');
  fs.writeFileSync(runFile, JSON.stringify(run));
  process.env[KEYCLOAK_RUN_ENV] = runFile;
  try {
    log('waiting for Keycloak');
    const idp = await keycloak();
    const ca = ShortLivedCa.create(path.join(LOG_DIR, 'ca'));
    const files = (name: string, content: string) => {
      const file = path.join(LOG_DIR, name);
      fs.writeFileSync(file, content);
      return file;
    };
    const server = ca.issue('bench.tools.test', { usage: 'server', ttlMinutes: 60 });
    const client = ca.issue('mcp-gateway', { usage: 'client', ttlMinutes: 60 });
    const [httpPort, httpsPort] = [await allocatePort(), await allocatePort()];
    await startBackendProcess(group, 'backend', [
      { port: httpPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 },
      { port: httpsPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0, tls: { certFile: files('server.pem', server.cert), keyFile: files('server.key', server.key), clientCaFile: files('ca.pem', ca.caPem) } },
    ]);
    const secretFile = files('mcp-gateway.secret', gatewayClientSecret());
    const idpArgs = ['--idp-token-endpoint', idp.tokenEndpoint, '--idp-client-id', 'mcp-gateway', '--idp-client-secret-file', secretFile];
    const registryFile = files(
      'registry.yaml',
      stringify({
        // Every route validates the caller's token (jwt_authn), as per-caller credentials require: the
        // modes differ only in their credentials.
        auth: { issuer: idp.issuer, audiences: [idp.routeAudience] },
        routes: [
          { key: 'plain', toolServices: [{ id: 'plain', name: 'svc', url: `http://127.0.0.1:${httpPort}/mcp` }] },
          { key: 'exchange', toolServices: [{ id: 'exchange', name: 'svc', url: `http://127.0.0.1:${httpPort}/mcp`, credentials: { mode: 'tokenExchange', audience: 'tool-weather' } }] },
          {
            key: 'mtls',
            toolServices: [
              {
                id: 'mtls',
                name: 'svc',
                url: `https://127.0.0.1:${httpsPort}/mcp`,
                transport: { tls: { caFile: files('ca.crt', ca.caPem), sni: 'bench.tools.test', clientCertFile: files('client.pem', client.cert), clientKeyFile: files('client.key', client.key) } },
              },
            ],
          },
        ],
      }),
    );
    const stack = await group.startGateway('gateway', { registryFile, logDir: path.join(LOG_DIR, 'gateway'), controlPlaneArgs: idpArgs, extraArgs: { sidecar: idpArgs } });
    // Agent tokens by client credentials (agent-batch): cheap to make in numbers, and exchangeable (their audience names mcp-gateway).
    const callerToken = `Bearer ${await idp.tokenFor('agent-batch', { scopes: ['tools:call'] })}`;
    for (const route of Object.values(ROUTE_OF)) {
      await waitFor(`route ${route} in the catalog`, async () => {
        const answer = await fetch(stack.gatewayUrl(route), {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: callerToken },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        return (await answer.text()).includes(`svc__${ECHO_TOOL}`) ? true : undefined;
      }, { timeoutMs: 60_000 });
    }
    const callers: Record<Mode, { issue: IssueRequest; close(): void }> = {
      none: await caller(stack.gatewayUrl(ROUTE_OF.none), callerToken, () => callerToken),
      cachedExchange: await caller(stack.gatewayUrl(ROUTE_OF.cachedExchange), callerToken, () => callerToken),
      mtls: await caller(stack.gatewayUrl(ROUTE_OF.mtls), callerToken, () => callerToken),
    };
    const modes = Object.keys(callers) as Mode[];
    for (const each of modes) {
      await waitFor(`${each} to answer`, async () => ((await callers[each].issue()).error === undefined ? true : undefined), { timeoutMs: 60_000 });
    }

    log(`measuring ${modes.join(', ')}: ${settings.repetitions} × ${settings.measureMs} ms at ${settings.rate}/s, interleaved`);
    const pooled: Record<Mode, RunResult[]> = { none: [], cachedExchange: [], mtls: [] };
    const pids = { envoy: stack.processes.get('envoy')!.child.pid!, sidecar: stack.processes.get('sidecar')!.child.pid! };
    const cpu: Record<Mode, { envoy: number; sidecar: number }> = { none: { envoy: 0, sidecar: 0 }, cachedExchange: { envoy: 0, sidecar: 0 }, mtls: { envoy: 0, sidecar: 0 } };
    for (let repetition = 0; repetition < settings.repetitions; repetition++) {
      const order = [...modes.slice(repetition % modes.length), ...modes.slice(0, repetition % modes.length)];
      for (const each of order) {
        await runFixedRate(callers[each].issue, { rate: settings.rate, durationMs: settings.warmupMs, maxInFlight: 64 });
        const before = { envoy: threadsCpuNanosecondsOf(pids.envoy), sidecar: threadsCpuNanosecondsOf(pids.sidecar) };
        pooled[each].push(await runFixedRate(callers[each].issue, { rate: settings.rate, durationMs: settings.measureMs, maxInFlight: 64 }));
        cpu[each].envoy += threadsCpuNanosecondsOf(pids.envoy) - before.envoy;
        cpu[each].sidecar += threadsCpuNanosecondsOf(pids.sidecar) - before.sidecar;
      }
    }

    log(`cold exchanges: ${settings.coldCalls} calls, a new caller token each`);
    const coldTokens: string[] = [];
    for (let index = 0; index < settings.coldCalls + 5; index++) coldTokens.push(`Bearer ${await idp.tokenFor('agent-batch', { scopes: ['tools:call'] })}`);
    const exchangeSum = () => metricValue(stack, 'mcpgw_sidecar_token_exchange_seconds_sum', { outcome: 'ok' }, stack.sidecarAdminUrl);
    const exchangeCount = () => metricValue(stack, 'mcpgw_sidecar_token_exchange_seconds_count', { outcome: 'ok' }, stack.sidecarAdminUrl);
    const cold = await caller(stack.gatewayUrl(ROUTE_OF.cachedExchange), callerToken, () => coldTokens.pop());
    for (let index = 0; index < 5; index++) await cold.issue();
    const [sumBefore, countBefore] = [await exchangeSum(), await exchangeCount()];
    const coldRun = await runFixedRate(cold.issue, { rate: 5, durationMs: (settings.coldCalls / 5) * 1000, maxInFlight: 1 });
    const sidecarMeanMs = ((await exchangeSum()) - sumBefore) / ((await exchangeCount()) - countBefore) * 1000;
    cold.close();

    const directExchanges: number[] = [];
    for (let index = 0; index < 50; index++) {
      const subject = await idp.tokenFor('agent-batch', { scopes: ['tools:call'] });
      const started = performance.now();
      await idp.exchange(subject, { audience: 'tool-weather' });
      directExchanges.push(performance.now() - started);
    }
    for (const each of modes) callers[each].close();

    log('the egress hop: initialize straight to the backend, and through the egress listener');
    const backendUrl = `http://127.0.0.1:${httpPort}/mcp`;
    const initialize = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } });
    const post = (fetchVia: typeof fetch) => async () => {
      const started = performance.now();
      const answer = await fetchVia(backendUrl, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: initialize });
      await answer.text();
      if (!answer.ok) throw new Error(`initialize answered ${answer.status}`);
      return performance.now() - started;
    };
    const plainCluster = buildGatewayIR({ routes: [{ key: 'plain', toolServices: [{ id: 'plain', name: 'svc', url: backendUrl }] }] }).clusters[0].clusterName;
    const hops = { direct: [] as number[], throughEgress: [] as number[] };
    // As the sidecar sends them: over mutual TLS with its certificate (the stack's inside is closed).
    const sidecarTls = new InternalTls(stack.internalTlsDir({ role: 'sidecar', name: 'sidecar' }), 'sidecar', quietLogger);
    const viaEgress = post(egressFetch(`127.0.0.1:${stack.ports.egress}`, plainCluster, sidecarTls));
    const direct = post(fetch);
    for (let index = 0; index < 220; index++) {
      const [first, second] = [await direct(), await viaEgress()];
      // The first few of each warm the connections up.
      if (index >= 20) {
        hops.direct.push(first);
        hops.throughEgress.push(second);
      }
    }

    sidecarTls.close();

    const perCall = (mode: Mode | undefined, runs: RunResult[]) => {
      const calls = runs.reduce((sum, entry) => sum + entry.sent, 0);
      return mode ? { envoy: cpu[mode].envoy / calls / 1000, sidecar: cpu[mode].sidecar / calls / 1000 } : { envoy: Number.NaN, sidecar: Number.NaN };
    };
    const summaryOf = (runs: RunResult[], mode?: Mode) => ({
      latencyMs: summarize(runs.flatMap((entry) => entry.latenciesMs)),
      repetitionP50Ms: runs.map((entry) => round(summarize(entry.latenciesMs).p50)),
      cpuMicrosPerCall: perCall(mode, runs),
      errors: Object.assign({}, ...runs.map((entry) => entry.errors)),
    });
    const none = summaryOf(pooled.none, 'none');
    const withRatios = (summary: ReturnType<typeof summaryOf>): ModeResult => ({
      ...summary,
      ratioP50: ratio(summary.latencyMs.p50, none.latencyMs.p50),
      ratioP99: ratio(summary.latencyMs.p99, none.latencyMs.p99),
    });
    const results = {
      none: withRatios(none),
      cachedExchange: withRatios(summaryOf(pooled.cachedExchange, 'cachedExchange')),
      coldExchange: withRatios(summaryOf([coldRun])),
      mtls: withRatios(summaryOf(pooled.mtls, 'mtls')),
    };
    const exchangeDirect = summarize(directExchanges);
    const [hopDirect, hopEgress] = [summarize(hops.direct), summarize(hops.throughEgress)];
    const report: Report = {
      measuredAt: new Date().toISOString(),
      // Not availableParallelism(): the bench pins itself to one core.
      cores: os.cpus().length,
      loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100,
      mode,
      settings,
      results,
      keycloak: { exchangeAsSidecarSawItMeanMs: sidecarMeanMs, exchangeDirect, shareOfColdCall: sidecarMeanMs / results.coldExchange.latencyMs.mean },
      cacheLookups: {
        hit: await metricValue(stack, 'mcpgw_sidecar_token_cache_lookups_total', { result: 'hit' }, stack.sidecarAdminUrl),
        miss: await metricValue(stack, 'mcpgw_sidecar_token_cache_lookups_total', { result: 'miss' }, stack.sidecarAdminUrl),
      },
      egressHop: { direct: hopDirect, throughEgress: hopEgress, addedP50Ms: hopEgress.p50 - hopDirect.p50 },
      target: { cachedP50Ratio: results.cachedExchange.ratioP50, limit: TARGET_CACHED_RATIO, met: results.cachedExchange.ratioP50 <= TARGET_CACHED_RATIO },
    };
    // A quick run never replaces the numbers the repository carries (bench/results/quick* is ignored).
    const name = mode === 'full' ? 'backend-credentials' : 'quick-backend-credentials';
    fs.writeFileSync(projectPath('bench', 'results', `${name}.json`), `${JSON.stringify(report, null, 2)}\n`);
    fs.writeFileSync(projectPath('bench', 'results', `${name}.md`), markdown(report));
    log(`results: bench/results/${name}.md`);
    process.stdout.write(markdown(report));
  } finally {
    await group.stopAll();
    supervisor.stdin?.end();
    await new Promise((resolve) => supervisor.once('exit', resolve));
  }
}

main().catch((error: Error) => {
  process.stderr.write(`[credentials] failed: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
