import * as client from 'prom-client';
import { collectProcessMetrics } from '../shared/process-metrics';
import type { TokenCacheObserver } from '../credentials/token-cache';

/** The control plane's Prometheus metrics, on a registry of its own (GET /metrics). */
/**
 * The steps from a registry source's answer to the xDS push it causes, in order (docs/observability.md):
 * reading and parsing the answer, validating and merging it, the IR, the issuers' signing keys, the
 * catalog, recording the routes (metrics, Redis last-good), translating to xDS, encoding the snapshot,
 * and writing it to the Envoys' streams.
 */
export const REGISTRY_UPDATE_STEPS = ['read', 'validate', 'merge', 'ir', 'signing_keys', 'catalog', 'record', 'translate', 'encode', 'push'] as const;
export type RegistryUpdateStep = (typeof REGISTRY_UPDATE_STEPS)[number];

export class ControlPlaneMetrics {
  readonly registry = new client.Registry();
  private readonly prefix = 'mcpgw_';

  readonly registryPolls = new client.Counter({
    name: `${this.prefix}registry_polls_total`,
    help: 'Registry source polls by outcome (changed, unchanged, failed, rejected)',
    labelNames: ['source', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly registryDocumentRejections = new client.Counter({
    name: `${this.prefix}registry_document_rejections_total`,
    help: 'Registry documents refused as a whole, keeping the last good registry, by reason (syntax, empty, not-a-registry)',
    labelNames: ['source', 'reason'] as const,
    registers: [this.registry],
  });
  readonly registryPollSeconds = new client.Histogram({
    name: `${this.prefix}registry_poll_duration_seconds`,
    help: 'Registry poll latency, including any long-poll wait',
    labelNames: ['source', 'outcome'] as const,
    buckets: [0.005, 0.025, 0.1, 0.5, 1, 5, 15, 30, 60],
    registers: [this.registry],
  });
  readonly routes = new client.Gauge({ name: `${this.prefix}routes`, help: 'Routes served', registers: [this.registry] });
  readonly toolServices = new client.Gauge({
    name: `${this.prefix}tool_services`,
    help: 'Distinct Tool Services referenced by the routes',
    registers: [this.registry],
  });
  readonly toolServiceClusters = new client.Gauge({
    name: `${this.prefix}tool_service_cluster`,
    help: "1 for each Tool Service and the Envoy cluster its calls go to (clusters are shared by Tool Services with the same upstream): join Envoy's cluster stats on envoy_cluster_name",
    labelNames: ['tool_service', 'cluster'] as const,
    registers: [this.registry],
  });
  readonly catalogTokenLookups = new client.Counter({
    name: `${this.prefix}catalog_token_lookups_total`,
    help: "The gateway's own tokens (client credentials) for listing Tool Services with per-caller credentials: hit (cached) or miss (asked of the IdP)",
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  readonly catalogTokenRequests = new client.Histogram({
    name: `${this.prefix}catalog_token_request_seconds`,
    help: 'Client-credentials grants at the identity provider, by outcome: ok, refused or unavailable',
    labelNames: ['outcome'] as const,
    buckets: [0.005, 0.025, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  /** The catalog's token cache reports here. */
  readonly catalogTokens: TokenCacheObserver = {
    lookup: (result) => this.catalogTokenLookups.inc({ result }),
    issued: (outcome, seconds) => this.catalogTokenRequests.observe({ outcome }, seconds),
  };
  readonly xdsConnectedNodes = new client.Gauge({
    name: `${this.prefix}xds_connected_nodes`,
    help: 'Envoy nodes with an open ADS stream',
    registers: [this.registry],
  });
  readonly xdsPushes = new client.Counter({
    name: `${this.prefix}xds_pushes_total`,
    help: 'xDS responses sent, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly xdsAcks = new client.Counter({
    name: `${this.prefix}xds_acks_total`,
    help: 'xDS ACKs received, by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly xdsNacks = new client.Counter({
    name: `${this.prefix}xds_nacks_total`,
    help: 'xDS NACKs received (Envoy rejected a config), by type',
    labelNames: ['type'] as const,
    registers: [this.registry],
  });
  readonly xdsPushToAckSeconds = new client.Histogram({
    name: `${this.prefix}xds_push_to_ack_seconds`,
    help: 'Time from sending an xDS response to its ACK',
    labelNames: ['type'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly catalogRefreshes = new client.Counter({
    name: `${this.prefix}catalog_refreshes_total`,
    help: 'tools/list refreshes of Tool Services, by outcome (ok, failed)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly catalogBackends = new client.Gauge({
    name: `${this.prefix}catalog_backends`,
    help: 'Route backends by catalog state (ok, stale, missing)',
    labelNames: ['state'] as const,
    registers: [this.registry],
  });
  readonly catalogReportedTools = new client.Gauge({
    name: `${this.prefix}catalog_reported_tools`,
    help: 'Tools a catalog rule reported in the current snapshot, over all routes, by rule (mcp-tool-name, client-tool-name, duplicate-name, route-tool-cap) and action (dropped, kept); per route in /status',
    labelNames: ['rule', 'action'] as const,
    registers: [this.registry],
  });
  readonly signingKeyReads = new client.Counter({
    name: `${this.prefix}signing_key_reads_total`,
    help: "Reads of issuers' signing keys (JWKS), by outcome (ok, failed); a failed read keeps the last keys",
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly signingKeySources = new client.Gauge({
    name: `${this.prefix}signing_key_sources`,
    help: "Issuers' key sources by state (ok; stale: serving the last keys read; missing: never read, their routes answer 503)",
    labelNames: ['state'] as const,
    registers: [this.registry],
  });
  readonly snapshotBuildSeconds = new client.Histogram({
    name: `${this.prefix}xds_snapshot_build_seconds`,
    help: 'Time to translate a registry and encode its xDS snapshot',
    buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly registryUpdateStepSeconds = new client.Histogram({
    name: `${this.prefix}registry_update_step_seconds`,
    help: `Each step from a registry answer to the xDS push it causes, by step (${REGISTRY_UPDATE_STEPS.join(', ')})`,
    labelNames: ['step'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 5],
    registers: [this.registry],
  });

  constructor() {
    collectProcessMetrics(this.registry, `${this.prefix}control_plane_`);
    // Every series from the start, so a rate over them is defined before the first token request.
    for (const result of ['hit', 'miss'] as const) this.catalogTokenLookups.inc({ result }, 0);
    for (const outcome of ['ok', 'refused', 'unavailable'] as const) this.catalogTokenRequests.zero({ outcome });
  }
}

/** Last segment of a type URL: "Cluster", "Listener", "RouteConfiguration". */
export const shortType = (typeUrl: string) => typeUrl.slice(typeUrl.lastIndexOf('.') + 1);
