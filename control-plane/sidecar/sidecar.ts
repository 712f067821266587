import * as grpc from '@grpc/grpc-js';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { grpcServices } from '../shared/grpc-packages';
import { createLogger } from '../shared/log';
import { CatalogSubscriber } from './catalog-subscriber';
import { extProcServiceHandlers } from './ext-proc-server';
import { RouteCatalogView, buildRouteViews } from './route-catalog';

export interface SidecarOptions {
  /** host:port the ext_proc gRPC server listens on. */
  extProcAddress: string;
  /** host:port of the control plane's gRPC server (catalog stream). */
  controlPlaneAddress: string;
  sidecarId: string;
}

export interface RunningSidecar {
  port: number;
  stop(): Promise<void>;
}

export async function startSidecar(options: SidecarOptions): Promise<RunningSidecar> {
  const log = createLogger('sidecar');
  let routes = new Map<string, RouteCatalogView>();
  let version = '';
  const subscriber = new CatalogSubscriber(
    options.controlPlaneAddress,
    options.sidecarId,
    (snapshot: CatalogSnapshotMessage) => {
      if (snapshot.version === version) return;
      routes = buildRouteViews(snapshot);
      version = snapshot.version;
      log.info('catalog updated', { version, routes: [...routes.keys()] });
    },
    log,
  );

  const server = new grpc.Server();
  server.addService(grpcServices.externalProcessor().service, extProcServiceHandlers((key) => routes.get(key), log));
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(options.extProcAddress, grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  subscriber.start();
  log.info('sidecar listening', { extProc: options.extProcAddress, controlPlane: options.controlPlaneAddress });

  return {
    port,
    stop: async () => {
      subscriber.stop();
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
    },
  };
}
