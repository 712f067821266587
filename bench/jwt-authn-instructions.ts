import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { stringify } from 'yaml';
import { envoyBinary } from '../control-plane/devstack/envoy';
import { buildGatewayIR } from '../control-plane/ir/gateway-ir';
import { validateRegistry } from '../control-plane/registry/validate';
import { projectPath } from '../control-plane/shared/paths';
import { TYPE_URL } from '../control-plane/xds/translate/type-urls';
import { jwtAuthnConfig } from '../control-plane/xds/translate/auth';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { startIssuer } from './systems/issuer';
import { McpHttpClient } from './load/mcp-client';
import { RepeatedValue, pairedAddedMedian, spreadOf } from './load/stats';
import { listener } from './systems/envoy-bootstraps';
import { ProcessGroup, claimCpus } from './systems/process-group';
import { startEnvoy } from './systems/systems';
import { callgrindEnvoy, runningInstructions, zeroInstructions } from './systems/callgrind';
import { HOST } from './systems/topology';
import { balancedOrder } from './variant-cost';

/**
 * Envoy's instructions per request spent by jwt_authn as the gateway configures it, and by each of
 * its knobs, counted under valgrind's callgrind (not timed: the machine's load does not move the
 * count). One static Envoy, one listener per variant: jwt_authn (the provider as the translator makes
 * it, selected per route by `requirement_name` as in the gateway) in front of a direct response, and
 * the same ~1 KB Keycloak-shaped token (bench/auth-setup.ts) on every request. Only jwt_authn differs
 * between listeners, so what a variant adds over `off` (the token sent, nothing validating it) is
 * jwt_authn's own cost, without the rest of the gateway's ±150 k per call (bench/auth-instructions.ts).
 *   scripts/bench.sh jwt-authn-instructions     (node dist/bench/jwt-authn-instructions.js; REQUESTS, ROUNDS in the environment)
 * Writes bench/results/jwt-authn-instructions.json and .md.
 */

const REQUESTS = Number(process.env.REQUESTS ?? 400);
const WARMUP = Number(process.env.WARMUP ?? 100);
const ROUNDS = Number(process.env.ROUNDS ?? 4);
const IN_FLIGHT = 4;
const AUDIENCE = 'https://gateway.example/mcp/bench';
const RESULTS_DIR = projectPath('bench', 'results');

const log = (line: string) => process.stdout.write(`[jwt-authn-instructions] ${line}\n`);

type Provider = Record<string, unknown> & { claim_to_headers: { header_name: string; claim_name: string }[] };

/** The providers the translator makes for a route without a rule and for the auth bench's rule (scope + group). */
function translatedProviders(issuer: string, jwks: string): { plain: Provider; ruled: Provider } {
  const { registry, problems } = validateRegistry({
    routes: [
      { key: 'plain', auth: { issuer, audiences: [AUDIENCE] }, toolServices: [{ name: 'bench', url: 'http://127.0.0.1:1/mcp' }] },
      {
        key: 'ruled',
        auth: { issuer, audiences: [AUDIENCE] },
        toolServices: [{ name: 'bench', url: 'http://127.0.0.1:1/mcp', policy: { rules: [{ tools: [ECHO_TOOL], requiredScopes: ['tools:call'], allowGroups: ['bench'] }] } }],
      },
    ],
  });
  if (problems.length > 0) throw new Error(`bench registry: ${JSON.stringify(problems)}`);
  const ir = buildGatewayIR(registry);
  const config = jwtAuthnConfig(ir, new Map([[ir.routes[0].auth!.keys.name, jwks]])) as unknown as {
    typed_config: { providers: Record<string, Provider>; requirement_map: Record<string, { provider_and_audiences: { provider_name: string } }> };
  };
  const providerOf = (route: string) => config.typed_config.providers[config.typed_config.requirement_map[route].provider_and_audiences.provider_name];
  return { plain: providerOf('plain'), ruled: providerOf('ruled') };
}

/** A variant: what it is, its provider (none: jwt_authn absent), and settings of the filter itself. */
type JwtVariant = [name: string, provider: Provider | undefined, filterSettings?: Record<string, unknown>];

function variantsOf(plain: Provider, ruled: Provider): JwtVariant[] {
  // Session 7's provider: every claim the gateway may read, on every route.
  const everyClaim: Provider = {
    ...plain,
    claim_to_headers: [
      ...plain.claim_to_headers,
      { header_name: 'x-mcpgw-claim-scope', claim_name: 'scope' },
      { header_name: 'x-mcpgw-claim-scp', claim_name: 'scp' },
      { header_name: 'x-mcpgw-claim-groups', claim_name: 'groups' },
      { header_name: 'x-mcpgw-claim-username', claim_name: 'preferred_username' },
    ],
  };
  const plus = (...claims: string[]): Provider => ({
    ...plain,
    claim_to_headers: [...plain.claim_to_headers, ...everyClaim.claim_to_headers.filter((copy) => claims.includes(copy.claim_name))],
  });
  return [
    ['off', undefined],
    ['every claim (session 7, every route)', everyClaim],
    ['no rule (translated now)', plain],
    ['scope + group rule (translated now)', ruled],
    ['no claim headers', { ...plain, claim_to_headers: [] }],
    ['no rule + groups (a list of two)', plus('groups')],
    ['no rule + scope, scp (a string, absent)', plus('scope', 'scp')],
    ['no rule + preferred_username', plus('preferred_username')],
    ['no rule, jwt_cache_size 100', { ...plain, jwt_cache_config: { jwt_cache_size: 100 } }],
    ['no rule, JWT cache off', { ...plain, jwt_cache_config: undefined }],
    ['no rule, forward: false', { ...plain, forward: false }],
    ['no rule, strip_failure_response', plain, { strip_failure_response: true }],
    ['no rule, clear_route_cache', { ...plain, clear_route_cache: true }],
    ['no rule, forward_payload_header', { ...plain, forward_payload_header: 'x-mcpgw-jwt-payload' }],
    ['no rule, payload_in_metadata', { ...plain, payload_in_metadata: 'jwt_payload' }],
    ['no rule, payload_in_metadata (normalized)', { ...plain, payload_in_metadata: 'jwt_payload', normalize_payload_in_metadata: { space_delimited_claims: ['scope'] } }],
  ];
}

function bootstrap(variants: JwtVariant[], adminPort: number, ports: number[]) {
  return {
    admin: { address: { socket_address: { address: HOST, port_value: adminPort } } },
    static_resources: {
      listeners: variants.map(([_name, provider, filterSettings], index) => {
        const route = {
          match: { prefix: '/' },
          direct_response: { status: 200, body: { inline_string: '{"jsonrpc":"2.0","id":1,"result":{}}' } },
          ...(provider && { typed_per_filter_config: { 'envoy.filters.http.jwt_authn': { '@type': TYPE_URL.jwtAuthnPerRoute, requirement_name: 'bench' } } }),
        };
        const jwtAuthn = provider && {
          name: 'envoy.filters.http.jwt_authn',
          typed_config: {
            '@type': TYPE_URL.jwtAuthn,
            providers: { bench: Object.fromEntries(Object.entries(provider).filter(([, value]) => value !== undefined)) },
            requirement_map: { bench: { provider_and_audiences: { provider_name: 'bench', audiences: [AUDIENCE] } } },
            bypass_cors_preflight: true,
            ...filterSettings,
          },
        };
        return listener(`variant${index}`, ports[index], [route], [...(jwtAuthn ? [jwtAuthn] : []), { name: 'envoy.filters.http.router', typed_config: { '@type': TYPE_URL.router } }]);
      }),
    },
  };
}

async function main() {
  const logDir = projectPath('.run', 'bench', 'jwt-authn-instructions');
  fs.rmSync(logDir, { recursive: true, force: true });
  fs.mkdirSync(logDir, { recursive: true });
  const plainEnvoy = envoyBinary();
  process.env.ENVOY_BIN = callgrindEnvoy(logDir);
  const group = new ProcessGroup(logDir, claimCpus());
  const issuer = await startIssuer();
  try {
    const jwks = await (await fetch(`${issuer.issuer}/jwks`)).text();
    const { plain, ruled } = translatedProviders(issuer.issuer, jwks);
    const variants = variantsOf(plain, ruled);
    // Away from the kernel's ephemeral range: Envoy takes minutes to bind under valgrind.
    const base = 57_000 + Math.floor(Math.random() * 3_000);
    const ports = variants.map((_, index) => base + 1 + index);
    const config = bootstrap(variants, base, ports);
    // Checked by the plain binary first: under valgrind a refused configuration takes minutes to show.
    const checked = path.join(logDir, 'checked.yaml');
    fs.writeFileSync(checked, stringify(config));
    execFileSync(plainEnvoy, ['--mode', 'validate', '-c', checked, '--log-level', 'error'], { stdio: ['ignore', 'ignore', 'inherit'] });
    const envoy = await startEnvoy(group, 'envoy', config, base, ports, { timeoutMs: 300_000 });
    const pid = envoy.child.pid!;
    const client = new McpHttpClient(IN_FLIGHT);
    const headers = { authorization: `Bearer ${issuer.token(AUDIENCE)}`, 'content-type': 'application/json' };
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: ECHO_TOOL, arguments: { text: 'x' } } });
    const send = async (index: number, count: number) => {
      let left = count;
      await Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (left-- > 0) {
            const answer = await client.post(`http://${HOST}:${ports[index]}/mcp/bench`, body, { headers, timeoutMs: 60_000 });
            if (answer.status !== 200) throw new Error(`${variants[index][0]}: answered ${answer.status}, not 200`);
          }
        }),
      );
    };
    for (let index = 0; index < variants.length; index++) await send(index, WARMUP);
    execFileSync('callgrind_control', ['--instr=on', String(pid)], { stdio: 'ignore' });
    for (let index = 0; index < variants.length; index++) await send(index, WARMUP);
    const counted = new Map<string, RepeatedValue[]>(variants.map(([name]) => [name, []]));
    for (let round = 1; round <= ROUNDS; round++) {
      for (const index of balancedOrder(variants.map((_, position) => position), round)) {
        zeroInstructions(pid);
        const started = Date.now();
        await send(index, REQUESTS);
        const busy = runningInstructions(pid);
        const wallMs = Date.now() - started;
        // What Envoy runs by itself in as long (timers, stats): subtracted.
        zeroInstructions(pid);
        await new Promise((resolve) => setTimeout(resolve, wallMs));
        const idle = runningInstructions(pid);
        counted.get(variants[index][0])!.push({ repetition: round, value: (busy - idle) / REQUESTS });
        log(`round ${round} ${variants[index][0]}: ${((busy - idle) / REQUESTS / 1000).toFixed(1)}k per request (idle ${(idle / REQUESTS / 1000).toFixed(1)}k, ${wallMs} ms)`);
      }
    }
    client.close();
    const context = { measuredAt: new Date().toISOString(), load: os.loadavg().slice(0, 2), requests: REQUESTS, rounds: ROUNDS, inFlight: IN_FLIGHT };
    const off = counted.get('off')!;
    const kilo = (value: number | undefined) => (value === undefined ? '' : `${value >= 0 ? '+' : ''}${(value / 1000).toFixed(1)}`);
    const rows = [...counted].map(([name, values]) => {
      const spread = spreadOf(values.map((entry) => entry.value));
      return `| ${name} | ${(spread.median / 1000).toFixed(1)} (${(spread.min / 1000).toFixed(1)}–${(spread.max / 1000).toFixed(1)}) | ${name === 'off' ? '' : kilo(pairedAddedMedian(off, values))} |`;
    });
    const markdown = [
      "# jwt_authn's own instructions per request, by setting",
      '',
      `Counted ${context.measuredAt} by valgrind callgrind (load average ${context.load.map((value) => value.toFixed(2)).join(' / ')}: the counts do not depend on it), by \`node dist/bench/jwt-authn-instructions.js\`.`,
      `One static Envoy 1.40, one listener per variant: jwt_authn (per-route \`requirement_name\`, as the gateway) in front of a direct response; the same ~1 KB RS256 Keycloak-shaped token (groups a list of two, scope a string) on every request, the JWT cache hit after the first.`,
      `${REQUESTS} requests per variant and round (${IN_FLIGHT} in flight), ${ROUNDS} rounds in a balanced order; Envoy's idle instructions over as long subtracted. Thousands of instructions per request: median (min–max), and added over \`off\` (the token sent, no jwt_authn), the median of the differences within each round.`,
      '',
      '| variant | k instructions per request | added over off (paired) |',
      '| --- | --- | --- |',
      ...rows,
      '',
    ].join('\n');
    fs.writeFileSync(path.join(RESULTS_DIR, 'jwt-authn-instructions.json'), `${JSON.stringify({ ...context, counted: Object.fromEntries(counted) }, null, 2)}\n`);
    fs.writeFileSync(path.join(RESULTS_DIR, 'jwt-authn-instructions.md'), markdown);
    process.stdout.write(markdown);
  } finally {
    await group.stopAll();
    await issuer.stop();
  }
}

main().catch((error: Error) => {
  process.stderr.write(`${error.stack}\n`);
  process.exit(1);
});
