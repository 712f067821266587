import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { stringify } from 'yaml';
import { closeServer } from '../control-plane/shared/http-listen';
import { projectPath } from '../control-plane/shared/paths';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { RunResult, runClosedLoop, runFixedRate } from './load/load-runner';
import { McpHttpClient, echoOutcome, openSession } from './load/mcp-client';
import { LatencySummary, spreadOf, summarize } from './load/stats';
import { benchSettings } from './settings';
import { allocatePort } from './systems/ports';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { inRotation, startBackendProcess } from './systems/systems';
import { HOST } from './systems/topology';

/**
 * What caller identity costs a tools/call (issue 11, docs/adr/0011-caller-identity.md): one gateway,
 * one backend, two routes to it — `open` (no auth) and `authed` (Envoy's jwt_authn validating an RS256
 * token of a local issuer, and the call script applying the tool's access rule: a required scope and a
 * group) — measured in the same run, interleaved, at fixed rates (p50/p99) and at saturation.
 *   scripts/bench.sh auth [--quick]     (node dist/bench/auth-cost.js [--quick])
 * Writes bench/results/auth.json and .md (a --quick run: auth-quick.*).
 */

const LOG_DIR = projectPath('.run', 'bench', 'auth');
const RESULTS_DIR = projectPath('bench', 'results');
const TARGETS = { p50Ratio: 1.05, saturationRatio: 0.95 };
type Variant = 'open' | 'authed';
const VARIANTS: Variant[] = ['open', 'authed'];

const log = (line: string) => process.stdout.write(`[bench auth] ${line}\n`);

/** An OpenID Connect issuer in this process: discovery and JWKS for the control plane, RS256 tokens for the load. */
async function startIssuer() {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'bench-1', alg: 'RS256', use: 'sig' };
  let issuer = '';
  const server = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/.well-known/openid-configuration') res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
    else if (req.url === '/jwks') res.end(JSON.stringify({ keys: [jwk] }));
    else res.writeHead(404).end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  issuer = `http://${HOST}:${(server.address() as AddressInfo).port}`;
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  /** A token shaped like Keycloak's (about 1 KB): the claims jwt_authn parses and the rules read. */
  const token = (audience: string) => {
    const now = Math.floor(Date.now() / 1000);
    const header = b64({ alg: 'RS256', typ: 'JWT', kid: jwk.kid });
    const payload = b64({
      exp: now + 3600, iat: now, jti: randomUUID(), iss: issuer, aud: [audience, 'mcp-gateway'], sub: randomUUID(), typ: 'Bearer',
      azp: 'agent-cli', sid: randomUUID(), scope: 'openid profile email tools:read tools:call', email_verified: true,
      groups: ['bench', 'engineering'], preferred_username: 'bench-agent', name: 'Bench Agent', email: 'bench-agent@example.com',
      realm_access: { roles: ['tools-read', 'tools-call', 'offline_access', 'uma_authorization'] },
    });
    return `${header}.${payload}.${sign('sha256', Buffer.from(`${header}.${payload}`), privateKey).toString('base64url')}`;
  };
  return { issuer, token, stop: () => closeServer(server) };
}

interface Run {
  variant: Variant;
  load: string;
  repetition: number;
  latencyMs: LatencySummary;
  throughput: number;
  errors: number;
  /** CPU time per answered call (µs) of Envoy and of the sidecar: steadier than latency on a shared machine. */
  cpuUsPerCall: { envoy: number; sidecar: number };
}

/** A process's CPU time so far (user + system, all threads), in µs, from /proc. */
function cpuMicros(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command; clock ticks of 10 ms.
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

async function driver(url: string, token: string | undefined, sessions: number, timeoutMs: number) {
  const client = new McpHttpClient(64);
  const auth: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const opened: Record<string, string>[] = [];
  for (let index = 0; index < sessions; index++) opened.push(await openSession(client, url, timeoutMs, auth));
  let turn = 0;
  const issue = async () => {
    const id = client.newId();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `bench__${ECHO_TOOL}`, arguments: { text: 'bench' } } });
    const answer = await client.post(url, body, { headers: opened[turn++ % opened.length], timeoutMs });
    return echoOutcome(answer, id, 'bench');
  };
  return { issue, close: () => client.close() };
}

function markdown(runs: Run[], context: { measuredAt: string; mode: string; cores: number; load: number[]; pinned: boolean }): string {
  const loads = [...new Set(runs.map((run) => run.load))];
  const median = (variant: Variant, load: string, pick: (run: Run) => number) => spreadOf(runs.filter((run) => run.variant === variant && run.load === load).map(pick)).median;
  const rows = loads.map((load) => {
    const open = { p50: median('open', load, (run) => run.latencyMs.p50), p99: median('open', load, (run) => run.latencyMs.p99), ok: median('open', load, (run) => run.throughput) };
    const authed = { p50: median('authed', load, (run) => run.latencyMs.p50), p99: median('authed', load, (run) => run.latencyMs.p99), ok: median('authed', load, (run) => run.throughput) };
    const label = load === 'saturation' ? 'saturation (16 clients, closed loop)' : `${load} req/s`;
    const cpu = (variant: Variant, name: 'envoy' | 'sidecar') => median(variant, load, (run) => run.cpuUsPerCall[name]);
    return (
      `| ${label} | ${open.p50.toFixed(2)} / ${authed.p50.toFixed(2)} (${(authed.p50 / open.p50).toFixed(3)}×) | ${open.p99.toFixed(2)} / ${authed.p99.toFixed(2)} (${(authed.p99 / open.p99).toFixed(3)}×) ` +
      `| ${open.ok.toFixed(0)} / ${authed.ok.toFixed(0)} (${(authed.ok / open.ok).toFixed(3)}×) | ${cpu('open', 'envoy').toFixed(0)} / ${cpu('authed', 'envoy').toFixed(0)} | ${cpu('open', 'sidecar').toFixed(0)} / ${cpu('authed', 'sidecar').toFixed(0)} |`
    );
  });
  const p50Ratios = loads.filter((load) => load !== 'saturation').map((load) => median('authed', load, (run) => run.latencyMs.p50) / median('open', load, (run) => run.latencyMs.p50));
  const saturationRatio = median('authed', 'saturation', (run) => run.throughput) / median('open', 'saturation', (run) => run.throughput);
  const errors = runs.reduce((sum, run) => sum + run.errors, 0);
  return [
    '# Caller identity: tools/call with and without JWT validation and per-tool authorization',
    '',
    `Measured ${context.measuredAt} (${context.mode} run) on ${context.cores} cores, load average ${context.load.map((value) => value.toFixed(2)).join(' / ')} (1 / 5 min)${context.pinned ? '; load generator on the last core, the gateway on the others' : ''}, by \`scripts/bench.sh auth\`.`,
    'One gateway (Envoy 1.40, control plane, sidecar, Redis), one stateless bench backend, two routes to it in the same run, measured in turn:',
    '`open` (no auth) and `authed` (jwt_authn validating a ~1 KB RS256 token of a local issuer, keys by ECDS; the call script applying the tool\'s rule: `requiredScopes: [tools:call]`, `allowGroups: [bench]`; sessions bound to the caller).',
    'tools/call `bench__echo` in 8 sessions; figures are medians over the repetitions; latency in ms, open / authed (ratio).',
    '',
    '| load | p50 | p99 | answers/s | Envoy CPU µs/call | sidecar CPU µs/call |',
    '| --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Targets: p50 ≤ ${TARGETS.p50Ratio}× of open at every fixed rate (measured ${p50Ratios.map((ratio) => ratio.toFixed(3)).join(', ')}: ${p50Ratios.every((ratio) => ratio <= TARGETS.p50Ratio) ? 'met' : 'NOT met'}); saturation ≥ ${TARGETS.saturationRatio}× (measured ${saturationRatio.toFixed(3)}: ${saturationRatio >= TARGETS.saturationRatio ? 'met' : 'NOT met'}). Wrong or failed answers: ${errors}.`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const quick = process.argv.includes('--quick');
  // Rates below saturation (p50 at 500 req/s measures a queue on a shared 2-core machine), and more
  // repetitions than the main bench: the two variants differ by little, the machine by much.
  const base = benchSettings(quick);
  const settings = { ...base, repetitions: quick ? 1 : 5, toolCall: { ...base.toolCall, ratesPerSecond: [100, 250] } };
  const cores = os.availableParallelism();
  const cpuPlan = claimCpus();
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  const group = new ProcessGroup(LOG_DIR, cpuPlan);
  const issuer = await startIssuer();
  const stopAll = async () => {
    await group.stopAll();
    await issuer.stop();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void stopAll().then(() => process.exit(130)));
  const runs: Run[] = [];
  const drivers = new Map<Variant, Awaited<ReturnType<typeof driver>>>();
  try {
    const backendPort = await allocatePort();
    await startBackendProcess(group, 'backend', [{ port: backendPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 }]);
    const backend = { name: 'bench', url: `http://${HOST}:${backendPort}/mcp` };
    const registryFile = path.join(LOG_DIR, 'registry.yaml');
    fs.writeFileSync(
      registryFile,
      stringify({
        routes: [
          { key: 'open', toolServices: [backend] },
          {
            key: 'authed',
            auth: { issuer: issuer.issuer },
            toolServices: [{ ...backend, policy: { rules: [{ tools: [ECHO_TOOL], requiredScopes: ['tools:call'], allowGroups: ['bench'] }] } }],
          },
        ],
      }),
    );
    const stack = await group.startGateway('gateway', { registryFile, logDir: LOG_DIR });
    const urls: Record<Variant, string> = { open: stack.gatewayUrl('open'), authed: stack.gatewayUrl('authed') };
    const token = issuer.token(urls.authed);
    for (const variant of VARIANTS) {
      const deadline = Date.now() + 60_000;
      for (;;) {
        try {
          const candidate = await driver(urls[variant], variant === 'authed' ? token : undefined, settings.toolCall.sessions, settings.requestTimeoutMs);
          const first = await candidate.issue();
          if (!first.error) {
            drivers.set(variant, candidate);
            break;
          }
          candidate.close();
          if (Date.now() > deadline) throw new Error(`${variant}: ${first.error}`);
        } catch (error) {
          if (Date.now() > deadline) throw error;
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      await runFixedRate(drivers.get(variant)!.issue, { ...settings.toolCall.initialWarmup, maxInFlight: settings.maxInFlight });
    }
    const pids = { envoy: stack.processes.get('envoy')!.child.pid!, sidecar: stack.processes.get('sidecar')!.child.pid! };
    const measured = async (run: () => Promise<RunResult>) => {
      const before = { envoy: cpuMicros(pids.envoy), sidecar: cpuMicros(pids.sidecar) };
      const result = await run();
      const perCall = (name: keyof typeof pids) => (cpuMicros(pids[name]) - before[name]) / Math.max(1, result.ok);
      return { result, cpuUsPerCall: { envoy: perCall('envoy'), sidecar: perCall('sidecar') } };
    };
    const record = (variant: Variant, load: string, repetition: number, { result, cpuUsPerCall }: Awaited<ReturnType<typeof measured>>) => {
      const latencyMs = summarize(result.latenciesMs);
      runs.push({ variant, load, repetition, latencyMs, throughput: result.throughput, errors: result.sent - result.ok, cpuUsPerCall });
      log(
        `${variant} ${load} #${repetition}: p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms, ${result.throughput.toFixed(0)} ok/s, ` +
          `CPU/call Envoy ${cpuUsPerCall.envoy.toFixed(0)} µs, sidecar ${cpuUsPerCall.sidecar.toFixed(0)} µs${result.sent - result.ok ? `, ${result.sent - result.ok} errors` : ''}`,
      );
    };
    for (let repetition = 1; repetition <= settings.repetitions; repetition++) {
      for (const rate of settings.toolCall.ratesPerSecond) {
        for (const variant of inRotation(VARIANTS, repetition)) {
          const { issue } = drivers.get(variant)!;
          await runFixedRate(issue, { rate, durationMs: settings.toolCall.warmupMs, maxInFlight: settings.maxInFlight });
          record(variant, String(rate), repetition, await measured(() => runFixedRate(issue, { rate, durationMs: settings.toolCall.measureMs, maxInFlight: settings.maxInFlight })));
        }
      }
      for (const variant of inRotation(VARIANTS, repetition)) {
        const { issue } = drivers.get(variant)!;
        const { concurrency, warmupMs, measureMs } = settings.toolCall.saturation;
        await runClosedLoop(issue, { concurrency, durationMs: warmupMs });
        record(variant, 'saturation', repetition, await measured(() => runClosedLoop(issue, { concurrency, durationMs: measureMs })));
      }
    }
  } finally {
    for (const open of drivers.values()) open.close();
    await stopAll();
  }
  const name = quick ? 'auth-quick' : 'auth';
  const context = { measuredAt: new Date().toISOString(), mode: settings.mode, cores, load: os.loadavg().slice(0, 2), pinned: cpuPlan.pinned };
  fs.writeFileSync(path.join(RESULTS_DIR, `${name}.json`), `${JSON.stringify({ ...context, settings: settings.toolCall, repetitions: settings.repetitions, runs }, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS_DIR, `${name}.md`), markdown(runs, context));
  log(`wrote bench/results/${name}.json and .md`);
  process.stdout.write(markdown(runs, context));
}

main().catch((error: unknown) => {
  process.stderr.write(`[bench auth] failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
