import * as grpc from '@grpc/grpc-js';
import { Logger } from '../shared/log';
import { CatalogSnapshotMessage, CatalogStore } from './catalog-store';

/** Serves mcpgw.catalog.v1.CatalogDiscovery: the current catalog at once, then every change. */
export function catalogServiceHandlers(store: CatalogStore, log: Logger): grpc.UntypedServiceImplementation {
  return {
    WatchCatalog(call: grpc.ServerWritableStream<{ sidecar_id: string }, CatalogSnapshotMessage>) {
      const sidecarId = call.request.sidecar_id || call.getPeer();
      log.info('sidecar subscribed to the catalog', { sidecarId });
      const push = (snapshot: CatalogSnapshotMessage) => call.write(snapshot);
      push(store.current());
      store.on('change', push);
      call.on('cancelled', () => {
        store.off('change', push);
        log.info('sidecar unsubscribed', { sidecarId });
      });
    },
  };
}
