import * as fs from 'node:fs';
import * as os from 'node:os';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { GatewayStack } from '../control-plane/devstack/stack';
import { freePorts } from '../control-plane/devstack/processes';
import { projectPath } from '../control-plane/shared/paths';
import { startReplicatedRedis } from '../test/support/redis-sentinel';
import { RedisFailoverReport, runRedisFailover } from './scenarios/redis-failover';

/**
 * The Redis primary failover scenario (issue 16), on its own: the gateway (two sidecars, one Envoy)
 * on Redis behind Sentinel (Debian's redis-sentinel from scripts/test-tools.sh, one replica), MCP
 * traffic at --rate requests per second, the primary SIGKILLed --fail-at-ms into the load.
 *   node dist/bench/redis-failover.js [--rate 100] [--duration-ms 20000] [--fail-at-ms 5000]
 * Writes bench/results/redis-failover.json and .md.
 */

const LOG_DIR = projectPath('.run', 'bench', 'redis-failover');

function markdown(report: RedisFailoverReport, context: { measuredAt: string; loadAverage1m: number; downAfterMs: number }): string {
  const failures = Object.entries(report.failures).map(([reason, count]) => `${count} × ${reason}`).join('; ') || 'none';
  return [
    '# Redis primary failover under load',
    '',
    `Measured ${context.measuredAt} on ${os.availableParallelism()} cores (load average ${context.loadAverage1m}), by \`node dist/bench/redis-failover.js\`:`,
    `the gateway with two sidecars on Redis behind one Sentinel (down-after ${context.downAfterMs} ms) and one replica;`,
    `MCP traffic at ${report.rate} requests/s for ${report.durationMs} ms (every 5th request a new session, the rest tools/call in sessions);`,
    `the primary SIGKILLed at ${report.primaryKilledAtMs} ms.`,
    '',
    '| measure | value | target |',
    '| --- | --- | --- |',
    `| requests sent / answered | ${report.requests} / ${report.answered} | |`,
    `| requests failed | ${report.failed} (${failures}) | only inside the failover window |`,
    `| Sentinel: kill → new primary named | ${report.sentinelFailoverMs} ms | |`,
    `| failures from … to (ms into the load) | ${report.firstFailureAtMs ?? '–'} … ${report.lastFailureAtMs ?? '–'} | |`,
    `| failures outside the window (kill … new primary + 2 s) | ${report.failuresOutsideWindow} | 0 |`,
    `| sessions opened (before the kill) | ${report.sessions.opened} (${report.sessions.openedBeforeKill}) | |`,
    `| sessions lost | ${report.sessions.lost} | 0 |`,
    `| sessions failing their check call for another reason | ${report.sessions.checkFailures} | 0 |`,
    '',
    'What fails inside the window, and why (docs/operating.md): initialize (a new session must be',
    'written to the primary), and calls whose session check must read or write Redis — a session this',
    "sidecar replica has not read yet, or a backend session opened on a session's first call. Calls in",
    "sessions a sidecar read recently are served from its memory while Redis cannot be read.",
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { rate: { type: 'string', default: '100' }, 'duration-ms': { type: 'string', default: '20000' }, 'fail-at-ms': { type: 'string', default: '5000' } },
  });
  fs.rmSync(LOG_DIR, { recursive: true, force: true });
  fs.mkdirSync(LOG_DIR, { recursive: true });
  const redis = await startReplicatedRedis(LOG_DIR);
  let stack: GatewayStack | undefined;
  try {
    const [weather, jobs] = await freePorts(2);
    const registryFile = `${LOG_DIR}/registry.yaml`;
    fs.writeFileSync(
      registryFile,
      stringify({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: `http://127.0.0.1:${weather}/mcp` }, { name: 'jobs', url: `http://127.0.0.1:${jobs}/mcp` }] }] }),
    );
    stack = await GatewayStack.start({
      registryFile,
      logDir: LOG_DIR,
      samples: [
        { service: 'weather', port: weather },
        { service: 'jobs', port: jobs },
      ],
      redisUrl: redis.address,
      sidecars: 2,
    });
    const url = stack.gatewayUrl('demo');
    for (let attempt = 0; ; attempt++) {
      const answer = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      if ((await answer.text()).includes('jobs__echo')) break;
      if (attempt > 100) throw new Error('the gateway never listed jobs__echo');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const primaryBefore = await redis.sentinel.primaryAddress();
    const report = await runRedisFailover({
      url,
      tool: { name: 'jobs__echo', arguments: { text: 'failover' } },
      rate: Number(values.rate),
      durationMs: Number(values['duration-ms']),
      failAtMs: Number(values['fail-at-ms']),
      newSessionEvery: 5,
      failPrimary: () => redis.primary.kill(),
      untilFailedOver: async () => {
        await redis.untilFailedOver(primaryBefore, 30_000);
      },
      settleMs: 2000,
      verifyAfterMs: 6000,
    });
    const context = { measuredAt: new Date().toISOString(), loadAverage1m: Math.round(os.loadavg()[0] * 100) / 100, downAfterMs: 1000 };
    fs.writeFileSync(projectPath('bench', 'results', 'redis-failover.json'), `${JSON.stringify({ ...context, cores: os.availableParallelism(), ...report }, null, 2)}\n`);
    fs.writeFileSync(projectPath('bench', 'results', 'redis-failover.md'), markdown(report, context));
    process.stdout.write(`[redis-failover] ${JSON.stringify(report)}\n`);
  } finally {
    await stack?.stop();
    await redis.stop();
  }
}

void main();
