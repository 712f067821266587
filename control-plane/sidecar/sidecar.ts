import * as http from 'node:http';
import * as tls from 'node:tls';
import { ApprovalCheck } from '../approval/approval-check';
import { approvalPages } from '../approval/approval-pages';
import { APPROVAL_STORE_DEFAULTS, ApprovalStore } from '../approval/approval-store';
import { ApproverSignIn, SignInSettings } from '../approval/approver-sign-in';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { closeServer, listenAt } from '../shared/http-listen';
import { Logger } from '../shared/log';
import { CatalogSubscriber } from './catalog-subscriber';
import { GatewayContext } from './decision';
import { GatewayServer, GatewayServerOptions } from './gateway-server';
import { REDIS_TIMEOUT_DEFAULTS, RedisAuth, RedisTimeouts, createRedisClient, describeRedisAddress } from '../shared/redis-client';
import { ListChangedStreams, changedLists } from './list-changed-streams';
import { BACKEND_STREAM_DEFAULTS, BackendStreamLimits, BackendStreams } from './backend-streams';
import { ListenStreams } from './subscriptions-listen';
import { redisKeyspace } from '../shared/redis-keys';
import { ConcurrencySlots } from '../quotas/concurrency-slots';
import { RouteCatalogView, buildRouteViews } from './route-catalog';
import { BackendCredentialsProvider } from '../credentials/backend-credentials';
import { IdpClient, IdpSettings } from '../credentials/idp-client';
import { TOKEN_CACHE_DEFAULTS, TokenCache, TokenCacheSettings } from '../credentials/token-cache';
import { egressFetch } from '../shared/egress-fetch';
import { BackendRequests } from './sessions/backend-sessions';
import { CachedSessionStore, SESSION_CACHE_DEFAULTS, redisSessionEndings } from './sessions/session-cache';
import { MemorySessionStore, RedisSessionStore, SessionChanges, SessionLimits, SessionStore } from './sessions/session-store';
import { SidecarMetrics, startSidecarAdmin } from './sidecar-metrics';
import { redisUpGauge } from '../shared/state-gauge';
import { InternalTls } from '../shared/internal-tls';
import { TokenFile } from '../shared/admin-access';
import { Tracing } from '../shared/tracing';
import { tracedBackendSessions } from './sidecar-tracing';

export interface SidecarOptions {
  /** host:port of the sidecar's HTTP port behind Envoy: the gateway lane and the call lane's session check. */
  address: string;
  /** host:port for GET /metrics and /healthz; none when absent. */
  adminAddress?: string;
  /** The bearer token the admin port asks for (required off loopback: docs/adr/0017-closed-inside.md). */
  adminTokenFile?: TokenFile;
  /** host:port of the control plane's gRPC server (catalog stream). */
  controlPlaneAddress: string;
  sidecarId: string;
  /**
   * Mutual TLS on the inside (docs/adr/0017-closed-inside.md): the sidecar's port serves only Envoys
   * with a certificate of the internal CA, and the catalog stream goes to a control plane's. Without it
   * both are plain (loopback only).
   */
  internalTls?: InternalTls;
  /**
   * Sessions shared by every replica and kept across restarts; without it, in this process's memory.
   * `waitReplicas`: Redis replicas that must hold a new session before initialize is answered.
   */
  redis?: { url: string; prefix: string; timeouts?: RedisTimeouts; waitReplicas?: number; auth?: RedisAuth };
  sessionIdleTtlSeconds: number;
  /** Bounds on what one client's initialize makes the gateway store (docs/hardening.md). */
  sessionLimits?: SessionLimits;
  /** Limit for opening (initialize) or ending (DELETE) a backend's session, and for relaying a client's message. */
  backendSessionTimeoutMs: number;
  /** host:port of Envoy's egress listener, which every request the sidecar makes to a backend goes through. */
  egressAddress: string;
  /** The gateway's identity provider, for token exchange; without it, backends with tokenExchange refuse calls (-32004). */
  idp?: IdpSettings;
  tokenCache?: TokenCacheSettings;
  /** Largest request body the gateway lane reads (Envoy's mcp filter has the same limit). */
  maxRequestBodyBytes: number;
  /** GET streams one session may hold at a time. */
  maxStreamsPerSession: number;
  /** Streams to backends held on clients' behalf, per gateway session and per replica (backend-streams.ts). */
  backendStreams?: BackendStreamLimits;
  /** On stop, how long requests in flight may take to finish. */
  drainTimeoutMs: number;
  /** Approval pages and the approval check (docs/approval-and-audit.md); they need Redis. */
  approvals?: ApprovalOptions;
  /** Spans of the session check and of the sidecar's requests to backends; off unless given. */
  tracing?: Tracing;
  log: Logger;
}

const REDIS_CONNECT_WAIT_MS = 5000;

export interface ApprovalOptions {
  /** The gateway's public origin: approval links are <publicUrl>/approvals/<id>. */
  publicUrl: string;
  /** How long a person has to decide. */
  ttlMs: number;
  /** The key grants are signed with: the same on every replica, at least 32 bytes. */
  key: Buffer;
  signIn: SignInSettings;
}

export interface RunningSidecar {
  port: number;
  stop(): Promise<void>;
}

export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const { log } = options;
  let routes = new Map<string, RouteCatalogView>();
  let version = '';
  const subscriber = new CatalogSubscriber(
    options.controlPlaneAddress,
    options.sidecarId,
    (snapshot: CatalogSnapshotMessage) => {
      if (snapshot.version === version) return;
      const previous = routes;
      routes = buildRouteViews(snapshot);
      version = snapshot.version;
      log.info('catalog updated', { version, routes: [...routes.keys()] });
      for (const [key, view] of routes) {
        const before = previous.get(key);
        if (!before) continue;
        const lists = changedLists(before, view);
        streams.listsChanged(key, lists);
        listens.listsChanged(key, lists);
      }
    },
    log,
    options.internalTls?.channel('control-plane'),
  );

  const metrics = new SidecarMetrics();
  let sessions: SessionStore & SessionChanges;
  if (options.redis) {
    const keyspace = redisKeyspace(options.redis.prefix);
    const redisSessions = new RedisSessionStore({
      url: options.redis.url,
      auth: options.redis.auth,
      prefix: keyspace,
      idleTtlSeconds: options.sessionIdleTtlSeconds,
      ...options.redis.timeouts,
      ...options.sessionLimits,
      waitReplicas: options.redis.waitReplicas,
      onReplication: (acknowledged) => {
        const wanted = options.redis!.waitReplicas!;
        if (acknowledged < wanted) log.warn('new sessions are not acknowledged by enough Redis replicas: a primary failover now would lose them', { acknowledged, wanted });
        else log.info('new sessions are acknowledged by Redis replicas again', { acknowledged, wanted });
      },
    });
    // Session requests fail at once while Redis is unreachable: serve only once it is (or was given its chance).
    if (!(await redisSessions.connected(REDIS_CONNECT_WAIT_MS))) {
      log.warn('Redis is not reachable yet: requests that need a session fail until it is', { redis: describeRedisAddress(options.redis.url) });
    }
    const timeouts = { ...REDIS_TIMEOUT_DEFAULTS, ...options.redis.timeouts };
    const endings = redisSessionEndings(
      createRedisClient(options.redis.url, timeouts, { auth: options.redis.auth }),
      createRedisClient(options.redis.url, timeouts, { auth: options.redis.auth }),
      `${keyspace}session-ended`,
      log,
    );
    sessions = new CachedSessionStore(redisSessions, endings, SESSION_CACHE_DEFAULTS, log);
    redisUpGauge(metrics.registry, () => redisSessions.answers(), 'the session store');
  } else {
    sessions = new MemorySessionStore(options.sessionIdleTtlSeconds, options.sessionLimits);
    log.warn('no --redis: sessions live in this process only (lost on restart, not shared with other replicas)');
  }
  // Per-caller concurrency slots (docs/quotas.md): every replica counts in the same Redis.
  const concurrency = options.redis
    ? new ConcurrencySlots(createRedisClient(options.redis.url, { ...REDIS_TIMEOUT_DEFAULTS, ...options.redis.timeouts }, { auth: options.redis.auth, autoPipelining: true }), redisKeyspace(options.redis.prefix))
    : undefined;
  const tracing = options.tracing ?? Tracing.off;
  const credentials = new BackendCredentialsProvider(options.idp && new IdpClient(options.idp), new TokenCache(options.tokenCache ?? TOKEN_CACHE_DEFAULTS, metrics));
  const context: GatewayContext = {
    lookup: (key) => routes.get(key),
    sessions,
    backendSessions: tracedBackendSessions(
      new BackendRequests((backend) => egressFetch(options.egressAddress, backend.cluster, options.internalTls), credentials, options.backendSessionTimeoutMs),
      tracing,
    ),
    credentials,
    ...(concurrency && { concurrency }),
    log,
  };

  const backendStreams = new BackendStreams(
    context,
    options.backendStreams ?? BACKEND_STREAM_DEFAULTS,
    {
      listChanged: (backend, _list, route) => subscriber.report({ toolService: backend.toolService, route, listChanged: true }),
      failed: (backend, reason, route) => subscriber.report({ toolService: backend.toolService, route, failure: reason }),
    },
    sessions,
  );
  const streams = new ListChangedStreams(options.maxStreamsPerSession, log, backendStreams);
  const listens = new ListenStreams(context, backendStreams, log);

  let approvalStore: ApprovalStore | undefined;
  let approvals: GatewayServerOptions['approvals'];
  if (options.approvals) {
    if (!options.redis) throw new Error('approvals need --redis: every replica must find the approvals the others asked for and decided');
    const timeouts = { ...REDIS_TIMEOUT_DEFAULTS, ...options.redis.timeouts };
    const store = new ApprovalStore(createRedisClient(options.redis.url, timeouts, { auth: options.redis.auth }), { prefix: redisKeyspace(options.redis.prefix), key: options.approvals.key, ...APPROVAL_STORE_DEFAULTS });
    const settings = { publicUrl: options.approvals.publicUrl, ttlMs: options.approvals.ttlMs };
    approvalStore = store;
    approvals = {
      check: new ApprovalCheck(store, settings, context),
      pages: approvalPages({ store, signIn: new ApproverSignIn(options.approvals.signIn), publicUrl: settings.publicUrl, log }),
    };
  }

  const admin = options.adminAddress ? await startSidecarAdmin(options.adminAddress, metrics, () => version, options.adminTokenFile) : undefined;
  const gateway = new GatewayServer(context, streams, backendStreams, listens, { maxRequestBodyBytes: options.maxRequestBodyBytes, approvals }, metrics, tracing);
  const server: http.Server = await listenAt(gateway.handle, options.address, options.internalTls?.serverOptions());
  if (options.internalTls) options.internalTls.follow(server as unknown as tls.Server, 'envoy');
  // Envoy keeps its connections to the sidecar open between requests: longer than Envoy's own idle timeout (1 h by default) would be pointless.
  server.keepAliveTimeout = 300_000;
  subscriber.start();
  log.info('sidecar listening', { address: options.address, admin: options.adminAddress, controlPlane: options.controlPlaneAddress });

  return {
    port: (server.address() as { port: number }).port,
    stop: async () => {
      subscriber.stop();
      if (admin) await closeServer(admin);
      gateway.close();
      // Requests in flight are short (no call passes through the sidecar): they get drainTimeoutMs.
      server.closeIdleConnections();
      await Promise.race([
        new Promise<void>((resolve) => server.close(() => resolve())),
        new Promise<void>((resolve) => setTimeout(resolve, options.drainTimeoutMs).unref()),
      ]);
      server.closeAllConnections();
      options.internalTls?.close();
      await sessions.close();
      approvalStore?.close();
      concurrency?.close();
      await tracing.shutdown();
    },
  };
}
