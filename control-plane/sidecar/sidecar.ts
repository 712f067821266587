import * as grpc from '@grpc/grpc-js';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { grpcServices } from '../shared/grpc-packages';
import { closeServer } from '../shared/http-listen';
import { Logger } from '../shared/log';
import { CatalogSubscriber } from './catalog-subscriber';
import { extProcServiceHandlers } from './ext-proc-server';
import { GatewayContext } from './decision';
import { RouteCatalogView, buildRouteViews } from './route-catalog';
import { closeBackendSession, notifyBackend, openBackendSession, resendToBackend } from './sessions/backend-sessions';
import { MemorySessionStore, RedisSessionStore, SessionLimits, SessionStore } from './sessions/session-store';
import { RedisTimeouts } from '../shared/redis-client';
import { ListChangedStreams, servedNames } from './list-changed-streams';
import { SidecarMetrics, startSidecarAdmin } from './sidecar-metrics';

export interface SidecarOptions {
  /** host:port for clients' GET streams (tools/list_changed), steered here by Envoy; none: GET is answered 405. */
  streamsAddress?: string;
  /** host:port for GET /metrics and /healthz; none when absent. */
  adminAddress?: string;
  /** host:port the ext_proc gRPC server listens on. */
  extProcAddress: string;
  /** host:port of the control plane's gRPC server (catalog stream). */
  controlPlaneAddress: string;
  sidecarId: string;
  /** Sessions shared by every replica and kept across restarts; without it, in this process's memory. */
  redis?: { url: string; prefix: string; timeouts?: RedisTimeouts };
  sessionIdleTtlSeconds: number;
  /** Bounds on what one client's initialize makes the gateway store (docs/hardening.md). */
  sessionLimits?: SessionLimits;
  /** Limit for opening (initialize) or ending (DELETE) a backend's session. */
  backendSessionTimeoutMs: number;
  /** On stop, how long calls in flight may keep the sidecar on their response path. */
  drainTimeoutMs: number;
  log: Logger;
}

const REDIS_CONNECT_WAIT_MS = 5000;

export interface RunningSidecar {
  port: number;
  stop(): Promise<void>;
}

export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const { log } = options;
  let routes = new Map<string, RouteCatalogView>();
  let version = '';
  let streams: ListChangedStreams | undefined;
  const subscriber = new CatalogSubscriber(
    options.controlPlaneAddress,
    options.sidecarId,
    (snapshot: CatalogSnapshotMessage) => {
      if (snapshot.version === version) return;
      const previous = routes;
      routes = buildRouteViews(snapshot);
      version = snapshot.version;
      log.info('catalog updated', { version, routes: [...routes.keys()] });
      if (!streams) return;
      const changed = [...routes].filter(([key, view]) => previous.has(key) && servedNames(previous.get(key)!) !== servedNames(view));
      streams.toolsChanged(changed.map(([key]) => key));
    },
    log,
  );

  let sessions: SessionStore;
  if (options.redis) {
    const redisSessions = new RedisSessionStore({
      url: options.redis.url,
      prefix: options.redis.prefix,
      idleTtlSeconds: options.sessionIdleTtlSeconds,
      ...options.redis.timeouts,
      ...options.sessionLimits,
    });
    // Session requests fail at once while Redis is unreachable: serve only once it is (or was given its chance).
    if (!(await redisSessions.connected(REDIS_CONNECT_WAIT_MS))) {
      log.warn('Redis is not reachable yet: requests that need a session fail until it is', { redis: options.redis.url });
    }
    sessions = redisSessions;
  } else {
    sessions = new MemorySessionStore(options.sessionIdleTtlSeconds, options.sessionLimits);
    log.warn('no --redis: sessions live in this process only (lost on restart, not shared with other replicas)');
  }
  if (options.streamsAddress) {
    streams = new ListChangedStreams(sessions, log);
    await streams.listen(options.streamsAddress);
  }
  const context: GatewayContext = {
    lookup: (key) => routes.get(key),
    streams: streams !== undefined,
    sessions,
    backendSessions: {
      open: (backend, session, clientHeaders) => openBackendSession(backend, session, clientHeaders, options.backendSessionTimeoutMs),
      close: (backend, onBehalf) => closeBackendSession(backend, onBehalf, options.backendSessionTimeoutMs),
      notify: (backend, onBehalf, notification) => notifyBackend(backend, onBehalf, notification, options.backendSessionTimeoutMs),
      resend: resendToBackend,
    },
    log,
  };

  const metrics = new SidecarMetrics();
  const admin = options.adminAddress ? await startSidecarAdmin(options.adminAddress, metrics, () => version) : undefined;
  const server = new grpc.Server();
  server.addService(grpcServices.externalProcessor().service, extProcServiceHandlers(context, metrics));
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(options.extProcAddress, grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  subscriber.start();
  log.info('sidecar listening', { extProc: options.extProcAddress, admin: options.adminAddress, controlPlane: options.controlPlaneAddress });

  return {
    port,
    stop: async () => {
      subscriber.stop();
      if (admin) await closeServer(admin);
      await streams?.close();
      // Calls in flight may stream for minutes: they get drainTimeoutMs, then the sidecar lets go of
      // them, and Envoy (failing open) carries their remaining frames unannotated.
      await new Promise<void>((resolve) => {
        const deadline = setTimeout(() => {
          log.warn('drain timeout: leaving the calls still in flight to Envoy', { drainTimeoutMs: options.drainTimeoutMs });
          server.forceShutdown();
          resolve();
        }, options.drainTimeoutMs);
        server.tryShutdown(() => {
          clearTimeout(deadline);
          resolve();
        });
      });
      await sessions.close();
    },
  };
}
