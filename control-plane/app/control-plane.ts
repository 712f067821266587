import * as http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { createAdminApp } from '../admin/admin-server';
import { CallLog, CallMetrics, LimitMetrics, callLogDelivery } from '../admin/call-log';
import { startCallLogReceiver } from '../admin/call-log-receiver';
import { CallHistory } from '../admin/call-history';
import { AuditLog, AuditTarget } from '../audit/audit-log';
import { closeServer, listen } from '../shared/http-listen';
import { ControlPlaneMetrics, RegistryUpdateStep } from '../admin/metrics';
import { XdsStatusTracker } from '../admin/xds-status';
import { registerStateMetrics } from '../admin/state-metrics';
import { CatalogPublication } from '../catalog/catalog-publication';
import { catalogServiceHandlers } from '../catalog/catalog-service';
import { CatalogSettings, CatalogSnapshotMessage, CatalogStore, RelistSettings } from '../catalog/catalog-store';
import { directCatalogAccess } from '../catalog/catalog-access';
import { ToolListLimits, fetchToolList } from '../catalog/tool-fetcher';
import { CatalogCredentials } from '../credentials/catalog-credentials';
import { IdpClient, IdpSettings } from '../credentials/idp-client';
import { TOKEN_CACHE_DEFAULTS, TokenCache } from '../credentials/token-cache';
import { TOOL_RULES, TOOL_RULE_ACTIONS } from '../catalog/tool-exposure';
import { GatewayIR, ToolServiceIR, buildGatewayIR } from '../ir/gateway-ir';
import { Registry } from '../registry/model';
import { RegistryController, RegistryPollResult } from '../registry/registry-controller';
import { RegistryMerge } from '../registry/registry-state';
import { RegistrySource } from '../registry/source';
import { RegistryPolicy } from '../registry/validate';
import { grpcServices } from '../shared/grpc-packages';
import { InternalTls } from '../shared/internal-tls';
import { TokenFile } from '../shared/admin-access';
import { CONTROL_PLANE_CALLERS, callerCheck } from './internal-callers';
import { REDIS_TIMEOUT_DEFAULTS, RedisAuth, RedisTimeouts, createRedisClient } from '../shared/redis-client';
import { ConcurrencySlots, LeaseReleases } from '../quotas/concurrency-slots';
import { redisKeyspace } from '../shared/redis-keys';
import { Logger } from '../shared/log';
import { SpanKind, Tracing } from '../shared/tracing';
import { ConcurrencyLimit } from '../shared/concurrency-limit';
import { oncePerTurn } from '../shared/once-per-turn';
import { LastGoodStore, SavedRoute } from '../state/last-good-store';
import { adsServiceHandlers } from '../xds/server/ads-server';
import { ENVOY_ANSWER_TIMEOUT_MS, XdsPublisher } from '../xds/server/publisher';
import { TYPE_URL } from '../xds/translate/type-urls';
import { SnapshotCache } from '../xds/server/snapshot-cache';
import { XdsResources, translate } from '../xds/translate';
import { EMPTY_CALL_LANE_CATALOG, callLaneCatalogOf } from '../xds/translate/call-lane';
import { GatewaySettings } from '../xds/translate/settings';
import { callLogMessageBytes } from '../xds/translate/listener';
import { hasSharedLimits, rateLimitServiceConfig, rateLimitServiceConfigText, writeRateLimitServiceConfig } from '../quotas/ratelimit-service-config';
import { SIGNING_KEY_DEFAULTS, SigningKeySettings, SigningKeyStore } from '../auth/signing-keys';

export interface ControlPlaneOptions {
  source: RegistrySource;
  gateway: GatewaySettings;
  /** host:port of the gRPC server: ADS for Envoy and the catalog stream for sidecars. */
  grpcAddress: string;
  /** Where Envoy's call log arrives (envoy/bootstrap.yaml's call-log cluster): a TCP port, mutual TLS with internalTls. */
  callLogAddress: { host: string; port: number };
  admin: { host: string; port: number };
  /** The bearer token the admin port asks for (required off loopback: docs/adr/0017-closed-inside.md). */
  adminTokenFile?: TokenFile;
  registryRefreshMs: number;
  catalogRefreshMs: number;
  /** Deadline and size bounds of one Tool Service's tools/list (docs/hardening.md). */
  toolList: ToolListLimits;
  /** How soon a failing Tool Service is listed again. */
  relist: RelistSettings;
  /** The gateway's identity provider: client-credentials tokens for listing Tool Services with per-caller credentials. */
  idp?: IdpSettings;
  /** What this gateway allows a registry to ask for (token passthrough). */
  registryPolicy?: RegistryPolicy;

  /** Most Tool Services whose tools/list is fetched at the same time. */
  catalogFetchConcurrency: number;
  /** Naming rules, cap and page size of the catalogs sidecars serve (docs/tools-list.md). */
  catalog: CatalogSettings;
  /**
   * Mutual TLS on the gRPC and call-log ports (docs/adr/0017-closed-inside.md): only Envoys (ADS, call log) and
   * sidecars (catalog stream) with certificates of the internal CA, each for what its role may do, an
   * Envoy only for the node id its certificate names. Without it the port is plain (loopback only).
   */
  internalTls?: InternalTls;
  /**
   * Where the ratelimit service reads its configuration: the control plane writes the registry's
   * shared limits there (docs/quotas.md).
   */
  rateLimitConfigFile?: string;
  /** How the issuers' signing keys are read (docs/auth.md). */
  signingKeys?: SigningKeySettings;
  /** Where audit events go (docs/approval-and-audit.md); none are built without it. */
  audit?: AuditTarget;
  /** Redis for last-good state; without it a cold start with the source down serves nothing. */
  redis?: { url: string; prefix: string; timeouts?: RedisTimeouts; auth?: RedisAuth };
  /** Spans of the control plane's own work (catalog fetches); off unless given. */
  tracing?: Tracing;
  log: Logger;
}

/** Names of the control plane's spans (docs/observability.md#traces). */
export const CONTROL_PLANE_SPANS = {
  /** One Tool Service's tools/list (every page, and its session if it opens one). */
  toolsList: 'mcp.catalog.tools_list',
} as const;

export interface RunningControlPlane {
  grpcPort: number;
  callLogPort: number;
  adminPort: number;
  stop(): Promise<void>;
}

/**
 * Wires the control plane: registry source → IR → xDS (ADS) for Envoy, and → catalog for sidecars.
 * Start-up order (docs/adr/0000-portal-registry-decisions.md §7): registry, then Redis warm start, then backend tools/list.
 */
export async function startControlPlane(options: ControlPlaneOptions): Promise<RunningControlPlane> {
  const { log } = options;
  const metrics = new ControlPlaneMetrics();
  const xdsStatus = new XdsStatusTracker(metrics, log);
  const cache = new SnapshotCache();
  const publisher = new XdsPublisher(cache, xdsStatus);
  const lastGood = options.redis ? new LastGoodStore(options.redis.url, redisKeyspace(options.redis.prefix), log, options.redis.timeouts, options.redis.auth) : undefined;
  // Thousands of backends must not be listed at once: the event loop also serves xDS and the catalog
  // stream. (Tool Service ids that share a backend share one listing: the catalog store's own rule.)
  const catalogFetches = new ConcurrencyLimit(options.catalogFetchConcurrency);
  const catalogAccess = directCatalogAccess(new CatalogCredentials(options.idp && new IdpClient(options.idp), new TokenCache(TOKEN_CACHE_DEFAULTS, metrics.catalogTokens)));
  const tracing = options.tracing ?? Tracing.off;
  const listTools = (service: ToolServiceIR) =>
    tracing.inSpan(CONTROL_PLANE_SPANS.toolsList, { kind: SpanKind.CLIENT, attributes: { 'mcp.gateway.tool_service': service.id, 'url.full': service.url } }, async (span) => {
      const list = await fetchToolList(service, catalogAccess, options.toolList, tracing.headersFor({}));
      span.setAttribute('mcp.gateway.tools', list.tools.length);
      return list;
    });
  const fetchTools = (service: ToolServiceIR) => catalogFetches.run(() => listTools(service));
  const catalog = new CatalogStore(fetchTools, options.catalog, log, options.relist);
  const signingKeys = new SigningKeyStore(options.signingKeys ?? SIGNING_KEY_DEFAULTS, log, lastGood);
  const callMetrics = new CallMetrics(metrics.registry);
  const limitMetrics = new LimitMetrics(metrics.registry);
  const callHistory = new CallHistory();
  const registry = new RegistryController(options.source, { refreshIntervalMs: options.registryRefreshMs, policy: options.registryPolicy }, log);
  let resources: XdsResources = {};
  let ir: GatewayIR = { routes: [], toolServices: [], clusters: [] };
  let callLane = EMPTY_CALL_LANE_CATALOG;
  const observeStep = (step: RegistryUpdateStep, ms: number) => metrics.registryUpdateStepSeconds.observe({ step }, ms / 1000);
  const translateAndPublish = () => {
    const started = performance.now();
    resources = translate(ir, callLane, options.gateway, signingKeys.keys());
    const translatedMs = performance.now() - started;
    observeStep('translate', translatedMs);
    return publisher.publish(resources, ({ encodeMs, pushMs }) => {
      metrics.snapshotBuildSeconds.observe((translatedMs + encodeMs) / 1000);
      observeStep('encode', encodeMs);
      observeStep('push', pushMs);
    });
  };
  /**
   * Registry (IR) and catalog (the call lane's per-backend rules) both shape Envoy's config; either change
   * republishes it. Changes in one turn of the event loop share one translation: a registry update
   * changes the catalog, whose change asks for a publication, then asks for its own; translating twice
   * (a third of a second at 1,000 routes × 5 Tool Services) would only find the same content again.
   */
  const publishXds = oncePerTurn(translateAndPublish);
  // The sidecars get a catalog version once Envoy can call what it lists (docs/xds.md).
  const routesAnswered = () => {
    const routes = cache.current().get(TYPE_URL.routeConfiguration);
    return routes ? xdsStatus.waitForAnswers(TYPE_URL.routeConfiguration, routes.version, ENVOY_ANSWER_TIMEOUT_MS) : Promise.resolve();
  };
  const sidecarCatalog = new CatalogPublication(catalog.current(), routesAnswered);
  let savedAtStart: SavedRoute[] | undefined;

  /** The ratelimit service's configuration follows the registry's shared limits; they count nothing without a service. */
  let warnedNoService = false;
  const writeSharedLimits = (current: GatewayIR) => {
    const file = options.rateLimitConfigFile;
    if (file) {
      try {
        if (writeRateLimitServiceConfig(file, rateLimitServiceConfig(current))) log.info('ratelimit service configuration written', { file });
      } catch (error) {
        log.error('could not write the ratelimit service configuration: shared limits keep their previous configuration', { file, error: (error as Error).message });
      }
    }
    if (!warnedNoService && hasSharedLimits(current) && !options.gateway.quotas.rateLimitService) {
      warnedNoService = true;
      log.warn('the registry has shared limits but no ratelimit service is configured (--ratelimit): each applies its whenServiceDown to every call', {});
    }
  };

  const sourceLabel = { source: options.source.description.split(' ')[0] };
  registry.on('poll', (result: RegistryPollResult) => {
    metrics.registryPolls.inc({ ...sourceLabel, outcome: result.outcome });
    metrics.registryPollSeconds.observe({ ...sourceLabel, outcome: result.outcome }, result.durationMs / 1000);
    if (result.rejection) metrics.registryDocumentRejections.inc({ ...sourceLabel, reason: result.rejection });
    for (const [step, ms] of Object.entries(result.stepsMs ?? {})) observeStep(step as RegistryUpdateStep, ms);
  });
  catalog.on('refresh', (outcome: string, toolServices: number) => metrics.catalogRefreshes.inc({ outcome }, toolServices));
  const countKeySources = () => {
    const states = signingKeys.status().map((source) => source.state);
    for (const state of ['ok', 'stale', 'missing']) metrics.signingKeySources.set({ state }, states.filter((s) => s === state).length);
  };
  // Every series from the start, also without any route of auth: a dashboard reads 0, not nothing.
  for (const outcome of ['ok', 'failed']) metrics.signingKeyReads.inc({ outcome }, 0);
  countKeySources();
  signingKeys.on('read', (outcome: string) => {
    metrics.signingKeyReads.inc({ outcome });
    countKeySources();
  });
  signingKeys.on('change', () => void publishXds().catch((error: Error) => log.error('publishing xDS after a signing key change failed', { error: error.stack })));

  const savedCatalogs = new Map<string, string>();
  catalog.on('change', (snapshot: CatalogSnapshotMessage) => {
    callLane = callLaneCatalogOf(snapshot);
    callMetrics.expect(snapshot);
    sidecarCatalog.offer(snapshot, publishXds());
    for (const state of ['ok', 'stale', 'missing']) {
      metrics.catalogBackends.set({ state }, snapshot.routes.flatMap((route) => route.backends).filter((b) => b.state === state).length);
    }
    const findings = snapshot.routes.flatMap((route) => catalog.toolFindings(route.route_key));
    for (const rule of TOOL_RULES) {
      for (const action of TOOL_RULE_ACTIONS) {
        metrics.catalogReportedTools.set({ rule, action }, findings.filter((f) => f.rule === rule && f.action === action).length);
      }
    }
    if (!lastGood) return;
    for (const route of snapshot.routes) {
      const known = route.backends.filter((backend) => backend.state !== 'missing');
      const saved = known.map((backend) => ({
        name: backend.name,
        tool_service: backend.tool_service,
        tools_json: backend.tools_json,
        last_success_at: backend.last_success_at,
        protocol_version: backend.protocol_version,
        sessionful: backend.sessionful,
        also_modern: backend.also_modern,
        prompts_json: backend.prompts_json,
        resources_json: backend.resources_json,
        resource_templates_json: backend.resource_templates_json,
        capabilities_json: backend.capabilities_json,
        needs_json: backend.needs_json,
      }));
      const fingerprint = JSON.stringify(saved.map(({ last_success_at: _at, ...rest }) => rest));
      if (known.length === 0 || savedCatalogs.get(route.route_key) === fingerprint) continue;
      savedCatalogs.set(route.route_key, fingerprint);
      lastGood.saveCatalog(route.route_key, saved);
    }
  });

  const onRegistryUpdate = async (current: Registry, merge: RegistryMerge) => {
    let lapStarted = performance.now();
    /** Milliseconds since the last lap. */
    const lap = () => {
      const now = performance.now();
      const ms = now - lapStarted;
      lapStarted = now;
      return ms;
    };
    ir = buildGatewayIR(current, { publicUrl: options.gateway.access.publicUrl });
    observeStep('ir', lap());
    writeSharedLimits(ir);
    limitMetrics.expect(ir);
    const recordMs = lap();
    // A new issuer's keys are read before the routes that need them are published (bounded by the
    // read's timeout): a new route with auth starts validating, not refusing with 503.
    const sources = new Map(ir.routes.flatMap((route) => (route.auth ? [[route.auth.keys.name, route.auth.keys] as const] : [])));
    await signingKeys.setSources([...sources.values()]);
    observeStep('signing_keys', lap());
    // The catalog first: routes whose backends are listed already (a new id on a known backend, a
    // changed route) get their call rules in the same push as the routes, so Envoy swaps its route
    // table once, not twice (the catalog's change and the publication below share one translation).
    const fetchNow = catalog.setGateway(ir);
    // Cold start (registry, then Redis warm start, then backends: see startControlPlane): serve what Redis
    // kept before the first backend answers.
    if (savedAtStart) {
      catalog.restore(savedAtStart);
      savedAtStart = undefined;
    }
    observeStep('catalog', lap());
    const published = publishXds();
    metrics.routes.set(ir.routes.length);
    metrics.toolServices.set(ir.toolServices.length);
    metrics.toolServiceClusters.reset();
    for (const service of ir.toolServices) metrics.toolServiceClusters.set({ tool_service: service.id, cluster: service.clusterName }, 1);
    if (lastGood) {
      // Queued, not awaited: a hung Redis must not hold up this update or the next.
      const touched = new Set([...merge.added, ...merge.changed]);
      for (const route of current.routes) if (touched.has(route.key)) lastGood.saveMapping(route);
      for (const key of merge.removed) {
        savedCatalogs.delete(key);
        lastGood.removeRoute(key);
      }
    }
    observeStep('record', recordMs + lap());
    await Promise.all([published, catalog.refresh(fetchNow)]);
  };
  let updates = Promise.resolve();
  registry.on('update', (current: Registry, merge: RegistryMerge) => {
    updates = updates.then(() => onRegistryUpdate(current, merge)).catch((error: Error) =>
      log.error('applying a registry update failed', { error: error.stack }),
    );
  });

  registerStateMetrics(metrics.registry, {
    registry: () => registry.currentStatus(),
    catalog: () => catalog.current(),
    xds: xdsStatus,
    ...(lastGood && { redisAnswers: () => lastGood.answers() }),
  });

  const server = new grpc.Server({ interceptors: options.internalTls ? [callerCheck(CONTROL_PLANE_CALLERS, log)] : [] });
  server.addService(grpcServices.aggregatedDiscovery().service, adsServiceHandlers(cache, xdsStatus.callbacks()));
  server.addService(grpcServices.catalogDiscovery().service, catalogServiceHandlers(catalog, sidecarCatalog, log));
  // A request a backend failed marks it degraded at once (docs/tools-list.md), whatever the method.
  const degradeOnFailure = {
    backendFailed: (route: string, backend: string, reason: string) => {
      const catalogKey = catalog.current().routes.find((candidate) => candidate.route_key === route)?.backends.find((candidate) => candidate.name === backend)?.tool_service;
      if (catalogKey) catalog.markDegraded({ catalogKey, reason, route });
    },
  };
  const audit = options.audit ? new AuditLog(options.audit, metrics.registry, log) : undefined;
  // Per-caller concurrency slots the call log gives back (docs/quotas.md): in the sidecars' Redis.
  const concurrencySlots = options.redis
    ? new ConcurrencySlots(createRedisClient(options.redis.url, { ...REDIS_TIMEOUT_DEFAULTS, ...options.redis.timeouts }, { auth: options.redis.auth }), redisKeyspace(options.redis.prefix))
    : undefined;
  const callLog = await startCallLogReceiver({
    address: options.callLogAddress,
    internalTls: options.internalTls,
    // A batch of Envoy's buffer, and one record past it: the call script's record holds what a request
    // body chose at most twice (arguments, tool name, and the id kept twice), the caller what its headers did.
    maxMessageBytes: callLogMessageBytes(options.gateway),
    deliver: callLogDelivery(
      [new CallLog([callMetrics, callHistory], undefined, [degradeOnFailure], [limitMetrics]), ...(audit ? [audit] : []), new LeaseReleases(concurrencySlots, log)],
      log,
    ),
    log,
  });
  const grpcPort = await new Promise<number>((resolve, reject) =>
    server.bindAsync(options.grpcAddress, options.internalTls?.serverCredentials() ?? grpc.ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve(port),
    ),
  );
  const admin: http.Server = await listen(
    createAdminApp({
      catalog: () => catalog.current(),
      catalogSettings: options.catalog,
      toolFindings: (routeKey) => catalog.toolFindings(routeKey),
      surfaceFindings: (routeKey) => catalog.surfaceFindings(routeKey),
      refreshCatalog: (routeKey) => catalog.refreshNow(routeKey),
      xdsResources: () => resources,
      rateLimitServiceConfig: () => rateLimitServiceConfigText(rateLimitServiceConfig(ir)),
      nodes: () => xdsStatus.list(),
      rejectingNodes: () => xdsStatus.rejectingNodeCount(),
      callHistory: () => callHistory.view(),
      registry: () => registry.currentStatus(),
      signingKeys: () => signingKeys.status(),
      metrics: metrics.registry,
    }, options.adminTokenFile),
    options.admin.host,
    options.admin.port,
  );
  const adminPort = (admin.address() as { port: number }).port;

  await lastGood?.connect();
  await signingKeys.restore();
  const saved = (await lastGood?.loadAll()) ?? [];
  savedAtStart = saved;
  const firstPoll = await registry.pollOnce();
  if (firstPoll === 'failed' || firstPoll === 'rejected') {
    registry.restore(saved.flatMap((route) => (route.mapping ? [route.mapping] : [])));
  }
  registry.start();
  void catalog.refresh();
  const catalogTimer = setInterval(() => void catalog.refresh(), options.catalogRefreshMs);
  log.info('control plane started', { grpcPort, callLogPort: callLog.port, adminPort, source: options.source.description, registry: registry.currentStatus().origin, audit: audit?.describe() ?? 'off' });

  return {
    grpcPort,
    callLogPort: callLog.port,
    adminPort,
    stop: async () => {
      clearInterval(catalogTimer);
      catalog.close();
      signingKeys.close();
      await registry.stop();
      server.forceShutdown();
      await callLog.close();
      options.internalTls?.close();
      await lastGood?.close();
      concurrencySlots?.close();
      await audit?.close();
      await closeServer(admin);
      await tracing.shutdown();
    },
  };
}
