import * as http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { createAdminApp, listen } from '../admin/admin-server';
import { catalogServiceHandlers } from '../catalog/catalog-service';
import { CatalogStore } from '../catalog/catalog-store';
import { fetchToolList } from '../catalog/tool-fetcher';
import { buildGatewayIR } from '../ir/gateway-ir';
import { Registry } from '../registry/model';
import { grpcServices } from '../shared/grpc-packages';
import { createLogger } from '../shared/log';
import { XdsNodeRef } from '../xds/server/callbacks';
import { adsServiceHandlers } from '../xds/server/ads-server';
import { buildSnapshot } from '../xds/server/snapshot';
import { SnapshotCache } from '../xds/server/snapshot-cache';
import { XdsResources, translate } from '../xds/translate';
import { GatewaySettings } from '../xds/translate/settings';

export interface ControlPlaneOptions {
  registry: Registry;
  gateway: GatewaySettings;
  /** host:port of the gRPC server: ADS for Envoy and the catalog stream for sidecars. */
  grpcAddress: string;
  admin: { host: string; port: number };
  catalogRefreshMs: number;
  toolListTimeoutMs: number;
}

export interface RunningControlPlane {
  grpcPort: number;
  adminPort: number;
  stop(): Promise<void>;
}

interface NodeStatus {
  node: XdsNodeRef;
  acked: Record<string, string>;
  lastNack?: { typeUrl: string; version: string; detail: string; at: string };
}

export async function startControlPlane(options: ControlPlaneOptions): Promise<RunningControlPlane> {
  const log = createLogger('control-plane');
  const ir = buildGatewayIR(options.registry);
  const resources: XdsResources = translate(ir, options.gateway);
  const cache = new SnapshotCache();
  cache.set(buildSnapshot(resources));

  const nodes = new Map<string, NodeStatus>();
  const statusOf = (node: XdsNodeRef) => {
    const status = nodes.get(node.id) ?? { node, acked: {} };
    nodes.set(node.id, status);
    return status;
  };
  const callbacks = {
    onAck: (node: XdsNodeRef, typeUrl: string, version: string, pushToAckMs: number) => {
      statusOf(node).acked[typeUrl] = version;
      log.info('xds ack', { node: node.id, typeUrl, version, pushToAckMs });
    },
    onNack: (node: XdsNodeRef, typeUrl: string, version: string, detail: string) => {
      statusOf(node).lastNack = { typeUrl, version, detail, at: new Date().toISOString() };
      log.error('xds nack: Envoy rejected the config; it keeps serving the last accepted version', {
        node: node.id,
        typeUrl,
        version,
        error_detail: detail,
      });
    },
    onStreamClosed: (_streamId: number, node?: XdsNodeRef) => {
      if (node) nodes.delete(node.id);
    },
  };

  const catalog = new CatalogStore((url) => fetchToolList(url, options.toolListTimeoutMs), log);
  catalog.setGateway(ir);

  const server = new grpc.Server();
  server.addService(grpcServices.aggregatedDiscovery().service, adsServiceHandlers(cache, callbacks));
  server.addService(grpcServices.catalogDiscovery().service, catalogServiceHandlers(catalog, log));
  const grpcPort = await new Promise<number>((resolve, reject) =>
    server.bindAsync(options.grpcAddress, grpc.ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve(port),
    ),
  );

  const admin: http.Server = await listen(
    createAdminApp({
      catalog: () => catalog.current(),
      xdsResources: () => resources,
      nodes: () => [...nodes.values()],
    }),
    options.admin.host,
    options.admin.port,
  );
  const adminPort = (admin.address() as { port: number }).port;

  await catalog.refreshAll();
  const refreshTimer = setInterval(() => void catalog.refreshAll(), options.catalogRefreshMs);
  log.info('control plane ready', { grpcPort, adminPort, routes: ir.routes.map((route) => route.key) });

  return {
    grpcPort,
    adminPort,
    stop: async () => {
      clearInterval(refreshTimer);
      server.forceShutdown();
      await new Promise<void>((resolve) => admin.close(() => resolve()));
    },
  };
}
