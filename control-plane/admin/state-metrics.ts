import * as client from 'prom-client';
import { BackendState, CatalogSnapshotMessage } from '../catalog/catalog-store';
import { toolServiceIdOf } from '../ir/gateway-ir';
import { RegistryStatus } from '../registry/registry-controller';
import { rejectedRouteCount } from '../registry/validate';
import { redisUpGauge, stateGauge } from '../shared/state-gauge';
import { XdsStatusTracker } from './xds-status';

/** What the control plane's scrape-time gauges read. */
export interface ObservedState {
  registry(): RegistryStatus;
  catalog(): CatalogSnapshotMessage;
  xds: Pick<XdsStatusTracker, 'nodesRejecting'>;
  /** Whether the last-good store's Redis answers; absent without --redis. */
  redisAnswers?: () => Promise<boolean>;
}

/** The state gauges of the control plane: read from /status's own sources at every scrape. */
export function registerStateMetrics(registry: client.Registry, state: ObservedState): void {
  stateGauge(
    registry,
    { name: 'mcpgw_registry_rejected_routes', help: 'Routes the current registry document declares that validation rejects (each keeps its previous good state, if it had one); the problems are in /status' },
    () => [{ labels: {}, value: rejectedRouteCount(state.registry().rejectedRoutes) }],
  );
  stateGauge(
    registry,
    {
      name: 'mcpgw_xds_nodes_rejecting',
      help: 'Connected Envoys whose latest answer for a resource type is a NACK: they keep serving an older config (the error_detail is in /status)',
      labelNames: ['type'] as const,
    },
    () => [...state.xds.nodesRejecting()].map(([type, nodes]) => ({ labels: { type }, value: nodes })),
  );
  stateGauge(
    registry,
    {
      name: 'mcpgw_tool_service_state',
      help: "1 for each Tool Service's catalog state: ok (its last tools/list answered), stale (listing fails; its last good tools are served), missing (never listed: no tools)",
      labelNames: ['tool_service', 'state'] as const,
    },
    () => {
      const states = new Map<string, BackendState>();
      for (const route of state.catalog().routes) for (const backend of route.backends) states.set(toolServiceIdOf(backend.tool_service), backend.state);
      return [...states].map(([toolService, backendState]) => ({ labels: { tool_service: toolService, state: backendState }, value: 1 }));
    },
  );
  if (state.redisAnswers) redisUpGauge(registry, state.redisAnswers, 'the last-good store');
}
