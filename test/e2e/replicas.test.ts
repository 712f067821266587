import { waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';
import { runRedisFailover } from '../../bench/scenarios/redis-failover';
import { MCP_POST_HEADERS, envoyStat, startGateway } from '../support/gateway-fixture';
import { RedisSessionStore } from '../../control-plane/sidecar/sessions/session-store';
import { ReplicatedRedis, startReplicatedRedis } from '../support/redis-sentinel';

/**
 * Replicas of every part on one machine, with real processes (docs/adr/0010-deployment.md): N sidecars
 * behind one Envoy, two control planes serving the same Envoy, and Redis behind Sentinel through a
 * primary failover. Each kill is a SIGKILL, as a crashed host would be.
 */

const registry = (b: { weather: string; jobs: string }) => ({
  routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }, { name: 'jobs', url: b.jobs }] }],
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A raw JSON-RPC POST that reports failures as a short reason instead of throwing. */
async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ ok: boolean; reason: string; sessionId?: string }> {
  try {
    const response = await fetch(url, { method: 'POST', headers: { ...MCP_POST_HEADERS, ...headers }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
    const text = await response.text();
    if (response.status !== 200) return { ok: false, reason: `HTTP ${response.status}` };
    const error = /"error":\{"code":(-?\d+)/.exec(text);
    return error ? { ok: false, reason: `JSON-RPC ${error[1]}` } : { ok: true, reason: 'ok', sessionId: response.headers.get('mcp-session-id') ?? undefined };
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
}

async function openSession(url: string): Promise<Record<string, string>> {
  const answer = await post(url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'replicas-test', version: '1' } } });
  if (!answer.ok || !answer.sessionId) throw new Error(`initialize failed: ${answer.reason}`);
  const headers = { 'mcp-session-id': answer.sessionId, 'mcp-protocol-version': '2025-06-18' };
  await post(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers);
  return headers;
}

describe('two sidecars behind one Envoy', () => {
  let stack: GatewayStack;

  beforeAll(async () => {
    ({ stack } = await startGateway('replicas-sidecars', registry, { sidecars: 2 }));
  });
  afterAll(async () => stack?.stop());

  it('share the traffic, and when one is killed the other answers: only requests it held fail', async () => {
    const url = stack.gatewayUrl('demo');
    await waitFor('the catalog on both sidecars', async () => ((await post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' })).ok ? true : undefined));
    const sessions = await Promise.all(Array.from({ length: 4 }, () => openSession(url)));

    const CLIENTS = 8;
    const outcomes: { at: number; endAt: number; ok: boolean; reason: string; kind: string }[] = [];
    let killedAt = Number.POSITIVE_INFINITY;
    const startedAt = performance.now();
    const deadline = startedAt + 5000;
    const client = async (index: number) => {
      for (let n = 0; performance.now() < deadline; n++) {
        const sentAt = performance.now();
        // Half the clients list tools (the gateway lane), half call in a session (the session check).
        const kind = index % 2 === 0 ? 'tools/list' : 'tools/call';
        const answer =
          kind === 'tools/list'
            ? await post(url, { jsonrpc: '2.0', id: n, method: 'tools/list' })
            : await post(url, { jsonrpc: '2.0', id: n, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: `${index}-${n}` } } }, sessions[index % sessions.length]);
        outcomes.push({ at: sentAt, endAt: performance.now(), kind, ...answer });
      }
    };
    const killer = (async () => {
      await sleep(1500);
      killedAt = performance.now();
      stack.processes.get('sidecar-2')!.child.kill('SIGKILL');
    })();
    await Promise.all([...Array.from({ length: CLIENTS }, (_, index) => client(index)), killer]);

    const failed = outcomes.filter((outcome) => !outcome.ok);
    const before = outcomes.filter((outcome) => outcome.endAt < killedAt);
    const after = outcomes.filter((outcome) => outcome.at >= killedAt);
    process.stdout.write(`${JSON.stringify({ requests: outcomes.length, failed: failed.map(({ kind, reason, at }) => ({ kind, reason, msAfterKill: Math.round(at - killedAt) })) })}\n`);
    // Both replicas answered before the kill, the survivor everything after it.
    expect(before.length).toBeGreaterThan(50);
    expect(after.length).toBeGreaterThan(100);
    expect(before.every((outcome) => outcome.ok)).toBe(true);
    // At most the requests the killed sidecar held at that moment (one per client) fail: a request it
    // never received is retried on the other (connect-failure, previous_hosts), the dead one is ejected.
    expect(failed.length).toBeLessThanOrEqual(CLIENTS);
    expect(after.filter((outcome) => outcome.at > killedAt + 100).every((outcome) => outcome.ok)).toBe(true);
    expect(await envoyStat(stack, 'cluster.mcp_sidecar_check.outlier_detection.ejections_active')).toBeLessThanOrEqual(1);
  });
});

describe('two control planes serving the same Envoy', () => {
  let stack: GatewayStack;

  beforeAll(async () => {
    ({ stack } = await startGateway('replicas-control-planes', registry, { controlPlanes: 2 }));
  });
  afterAll(async () => stack?.stop());

  const adminUrlOf = (replica: number) => `http://127.0.0.1:${stack.controlPlanePorts[replica].admin}`;
  const connectedTo = async (replica: number) => {
    const status = (await (await fetch(`${adminUrlOf(replica)}/status`)).json()) as { xds: { nodes: { node: { id: string }; acked: Record<string, string> }[] } };
    return status.xds.nodes.find((node) => node.node.id === stack.envoyNodeIds.get('envoy'));
  };
  /** The version of every resource Envoy holds, from its config_dump. */
  const envoyVersions = async () => {
    const dump = (await (await fetch(`${stack.envoyAdminUrl}/config_dump`)).json()) as { configs: Record<string, unknown>[] };
    const versions: string[] = [];
    for (const config of dump.configs) {
      for (const key of ['dynamic_listeners', 'dynamic_active_clusters', 'dynamic_route_configs']) {
        for (const entry of (config[key] as { name?: string; version_info?: string; active_state?: { version_info: string; listener: { name: string } }; cluster?: { name: string }; route_config?: { name: string } }[] | undefined) ?? []) {
          const name = entry.name ?? entry.cluster?.name ?? entry.route_config?.name ?? entry.active_state?.listener.name;
          versions.push(`${key}/${name}@${entry.version_info ?? entry.active_state?.version_info}`);
        }
      }
    }
    return versions.sort();
  };
  const churn = async () => ({
    listenersModified: await envoyStat(stack, 'listener_manager.listener_modified'),
    listenersAdded: await envoyStat(stack, 'listener_manager.listener_added'),
    listenersDraining: await envoyStat(stack, 'listener_manager.total_listeners_draining'),
    clustersModified: await envoyStat(stack, 'cluster_manager.cluster_modified'),
    clustersAdded: await envoyStat(stack, 'cluster_manager.cluster_added'),
    routesReloaded: await envoyStat(stack, 'http.mcp_gateway.rds.mcp_routes.config_reload'),
  });

  it('compute the same versions, and an Envoy whose control plane dies reconnects to the other with no change and no drain', async () => {
    // Both have listed the Tool Services and translated the same registry and catalog.
    const configOf = async (replica: number) => JSON.stringify(await (await fetch(`${adminUrlOf(replica)}/config/xds`)).json());
    await waitFor('both control planes to hold the same xDS', async () => ((await configOf(0)) === (await configOf(1)) && (await configOf(0)).includes('jobs__') ? true : undefined), {
      timeoutMs: 20_000,
    });
    const on = await waitFor('Envoy to ACK the routes of one control plane', async () => {
      for (const replica of [0, 1]) if ((await connectedTo(replica))?.acked[TYPE_URL.routeConfiguration]) return replica;
      return undefined;
    });
    const other = 1 - on;
    const versionsBefore = await envoyVersions();
    const churnBefore = await churn();
    expect(versionsBefore.length).toBeGreaterThan(4);
    // The counters are real: the start added the listener and the clusters, and RDS loaded the routes.
    expect(churnBefore.listenersAdded).toBeGreaterThan(0);
    expect(churnBefore.routesReloaded).toBeGreaterThan(0);

    stack.processes.get(GatewayStack.replicaName('control-plane', on))!.child.kill('SIGKILL');
    const reconnectedAfter = performance.now();
    await waitFor('Envoy to reconnect to the other control plane and ACK', async () => {
      const node = await connectedTo(other);
      return node && Object.keys(node.acked).length >= 3 ? true : undefined;
    }, { timeoutMs: 20_000 });
    const reconnectMs = performance.now() - reconnectedAfter;
    process.stdout.write(`${JSON.stringify({ reconnectMs: Math.round(reconnectMs), resources: versionsBefore.length, churn: churnBefore })}\n`);
    expect(await envoyStat(stack, 'control_plane.connected_state')).toBe(1);

    expect(await envoyVersions()).toEqual(versionsBefore);
    expect(await churn()).toEqual(churnBefore);
    const listed = await post(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(listed.ok).toBe(true);
    expect(reconnectMs).toBeLessThan(20_000);
  });
});

describe('Redis behind Sentinel, through a primary failover under load', () => {
  let stack: GatewayStack;
  let redis: ReplicatedRedis;

  beforeAll(async () => {
    const dir = `${process.cwd()}/.run/test/replicas-sentinel-redis`;
    redis = await startReplicatedRedis(dir);
    ({ stack } = await startGateway('replicas-sentinel', registry, { redisUrl: redis.address, sidecars: 2 }));
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    await redis?.stop();
  });

  it('keeps every session whose initialize was answered, with failures only inside the failover window', async () => {
    const url = stack.gatewayUrl('demo');
    await waitFor('the catalog', async () => ((await post(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' })).ok ? true : undefined));
    const primaryBefore = await redis.sentinel.primaryAddress();
    const report = await runRedisFailover({
      url,
      tool: { name: 'jobs__echo', arguments: { text: 'failover' } },
      rate: 40,
      durationMs: 8000,
      failAtMs: 2000,
      newSessionEvery: 5,
      failPrimary: () => redis.primary.kill(),
      untilFailedOver: async () => {
        await redis.untilFailedOver(primaryBefore, 20_000);
      },
      settleMs: 2000,
      verifyAfterMs: 6000,
    });
    // What happened, in the test's output, whether it passes or not.
    process.stdout.write(`${JSON.stringify(report)}\n`);
    expect(await redis.sentinel.primaryAddress()).toBe(`127.0.0.1:${redis.replica.port}`);
    expect(report.sessions.opened).toBeGreaterThan(30);
    expect(report.sessions.lost).toBe(0);
    expect(report.sessions.checkFailures).toBe(0);
    expect(report.failuresOutsideWindow).toBe(0);
    expect(report.answered).toBeGreaterThan(report.requests * 0.5);
  }, 90_000);
});

describe("the sidecar's session store on Sentinel", () => {
  it('follows the primary through a failover under load: both of its connections serve again, no session is lost', async () => {
    const redis = await startReplicatedRedis(`${process.cwd()}/.run/test/replicas-session-store`);
    const store = new RedisSessionStore({ url: redis.address, prefix: 'failover:', idleTtlSeconds: 60, waitReplicas: 1 });
    try {
      const sessions: string[] = [];
      let stop = false;
      // Session creations (the writer connection, with WAIT), reads and claims (the reader), every few ms.
      const load = (async () => {
        for (let n = 0; !stop; n++) {
          const work =
            n % 5 === 0
              ? store.create({ route: 'demo', protocolVersion: '2025-06-18', clientInfo: {}, clientCapabilities: {} }).then((session) => void sessions.push(session.id))
              : sessions.length > 0
                ? store.get(sessions[n % sessions.length]).then(() => store.claimBackend(sessions[n % sessions.length], 'jobs', `b-${n}`)).then(() => undefined)
                : Promise.resolve();
          void work.catch(() => undefined);
          await sleep(5);
        }
      })();
      await sleep(1000);
      const before = await redis.sentinel.primaryAddress();
      const createdBeforeKill = [...sessions];
      await redis.primary.kill();
      await redis.untilFailedOver(before, 20_000);
      await sleep(3000);
      stop = true;
      await load;
      // Both connections answer again: a new session (writer) and every session made before the kill (reader).
      const fresh = await store.create({ route: 'demo', protocolVersion: '2025-06-18', clientInfo: {}, clientCapabilities: {} });
      expect(await store.get(fresh.id)).toBeDefined();
      const found = await Promise.all(createdBeforeKill.map((id) => store.get(id)));
      expect(found.filter((session) => session === undefined)).toHaveLength(0);
      expect(createdBeforeKill.length).toBeGreaterThan(10);
    } finally {
      await store.close();
      await redis.stop();
    }
  }, 60_000);
});
