import { runFixedRate } from '../load/load-runner';
import { McpHttpClient, answerTo, openSession } from '../load/mcp-client';

/**
 * A Redis primary failover under load (issue 16): MCP traffic through the gateway at a fixed rate —
 * tools/call in sessions, and new sessions opened beside them — while the primary is killed and
 * Sentinel promotes its replica. Every failed request is timed; afterwards every session whose
 * initialize was answered is used once more, after the sidecars' session cache has had to read it
 * from Redis again, to find the sessions the failover lost.
 *
 * The failover window runs from the kill until Sentinel names the new primary plus `settleMs` (the
 * clients' reconnect: they ask Sentinel again within a second). Failures outside it, and sessions
 * lost, are what the gateway promises not to have (docs/operating.md).
 */
export interface RedisFailoverOptions {
  /** A route's URL through Envoy. */
  url: string;
  /** A tools/call the route serves, e.g. jobs__echo, and its arguments. */
  tool: { name: string; arguments: Record<string, unknown> };
  /** Requests per second (tools/call and session opens together). */
  rate: number;
  durationMs: number;
  /** When, from the start of the load, `failPrimary` is called. */
  failAtMs: number;
  /** Every n-th request opens a new session instead of calling a tool. */
  newSessionEvery: number;
  /** Kills the primary (SIGKILL). */
  failPrimary(): Promise<void>;
  /** Resolves once Sentinel names a new primary. */
  untilFailedOver(): Promise<void>;
  settleMs: number;
  /** How long to wait after the load before the sessions are checked: past the sidecars' session cache freshness. */
  verifyAfterMs: number;
}

export interface RedisFailoverReport {
  rate: number;
  durationMs: number;
  requests: number;
  answered: number;
  failed: number;
  /** Failures by request and reason (HTTP status or JSON-RPC error code). */
  failures: Record<string, number>;
  /** From the start of the load, in ms. */
  primaryKilledAtMs: number;
  newPrimaryAtMs: number;
  /** Sentinel's part: from the kill until it named the new primary. */
  sentinelFailoverMs: number;
  /** The span the failures were in: first to last, from the start of the load (none: null). */
  firstFailureAtMs: number | null;
  lastFailureAtMs: number | null;
  /** Failures outside [kill, new primary + settleMs]: target 0. */
  failuresOutsideWindow: number;
  sessions: {
    /** initialize answered, before and during the failover. */
    opened: number;
    openedBeforeKill: number;
    /** Of those, sessions the gateway no longer knew afterwards (404 / -32001): target 0. */
    lost: number;
    /** Any other failure of the check call (not a lost session). */
    checkFailures: number;
  };
}

interface Session {
  headers: Record<string, string>;
  openedAtMs: number;
}

const REQUEST_TIMEOUT_MS = 10_000;

export async function runRedisFailover(options: RedisFailoverOptions): Promise<RedisFailoverReport> {
  const client = new McpHttpClient(256);
  const sessions: Session[] = [];
  const failureTimes: number[] = [];
  const failures: Record<string, number> = {};
  const startMs = performance.now();
  const since = () => performance.now() - startMs;
  const fail = (reason: string) => {
    failures[reason] = (failures[reason] ?? 0) + 1;
    failureTimes.push(since());
  };
  let primaryKilledAtMs = Number.NaN;
  let newPrimaryAtMs = Number.NaN;

  const callTool = async (session: Session) => {
    const id = client.newId();
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: options.tool.name, arguments: options.tool.arguments } });
    return answerTo(await client.post(options.url, body, { headers: session.headers, timeoutMs: REQUEST_TIMEOUT_MS }), id);
  };

  try {
    // A few sessions to call in from the first request on.
    for (let index = 0; index < 10; index++) sessions.push({ headers: await openSession(client, options.url, REQUEST_TIMEOUT_MS), openedAtMs: since() });

    const failover = (async () => {
      await new Promise((resolve) => setTimeout(resolve, options.failAtMs));
      primaryKilledAtMs = since();
      await options.failPrimary();
      await options.untilFailedOver();
      newPrimaryAtMs = since();
    })();

    let requestNumber = 0;
    const load = runFixedRate(
      async () => {
        const number = requestNumber++;
        const kind = number % options.newSessionEvery === 0 ? 'initialize' : 'tools/call';
        try {
          if (kind === 'initialize') {
            const openedAtMs = since();
            sessions.push({ headers: await openSession(client, options.url, REQUEST_TIMEOUT_MS), openedAtMs });
          } else {
            await callTool(sessions[number % sessions.length]);
          }
          return { endMs: performance.now() };
        } catch (error) {
          const reason = `${kind}: ${(error as Error).message}`;
          fail(reason);
          return { endMs: performance.now(), error: reason };
        }
      },
      { rate: options.rate, durationMs: options.durationMs, maxInFlight: 512 },
    );
    const [result] = await Promise.all([load, failover]);

    await new Promise((resolve) => setTimeout(resolve, options.verifyAfterMs));
    let lost = 0;
    let checkFailures = 0;
    for (const session of sessions) {
      try {
        await callTool(session);
      } catch (error) {
        if (/HTTP 404|-32001/.test((error as Error).message)) lost++;
        else checkFailures++;
      }
    }

    const windowEndMs = newPrimaryAtMs + options.settleMs;
    return {
      rate: options.rate,
      durationMs: Math.round(result.durationMs),
      requests: result.sent,
      answered: result.ok,
      failed: result.sent - result.ok,
      failures,
      primaryKilledAtMs: Math.round(primaryKilledAtMs),
      newPrimaryAtMs: Math.round(newPrimaryAtMs),
      sentinelFailoverMs: Math.round(newPrimaryAtMs - primaryKilledAtMs),
      firstFailureAtMs: failureTimes.length > 0 ? Math.round(Math.min(...failureTimes)) : null,
      lastFailureAtMs: failureTimes.length > 0 ? Math.round(Math.max(...failureTimes)) : null,
      failuresOutsideWindow: failureTimes.filter((at) => at < primaryKilledAtMs || at > windowEndMs).length,
      sessions: {
        opened: sessions.length,
        openedBeforeKill: sessions.filter((session) => session.openedAtMs < primaryKilledAtMs).length,
        lost,
        checkFailures,
      },
    };
  } finally {
    client.close();
  }
}
