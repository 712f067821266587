import * as grpc from '@grpc/grpc-js';
import { Logger } from '../shared/log';
import { z } from 'zod';
import { CatalogFeed } from './catalog-publication';
import { CatalogSnapshotMessage, CatalogStore } from './catalog-store';

/** mcpgw.catalog.v1.ToolServiceReport, checked at the edge: either a failure or a list change. */
const toolServiceReportSchema = z
  .object({ sidecar_id: z.string(), tool_service: z.string().min(1), route: z.string(), failure: z.string().max(1000), list_changed: z.boolean() })
  .refine((report) => report.list_changed || report.failure !== '', 'a report names a failure or a list change');
type ToolServiceReport = z.input<typeof toolServiceReportSchema>;

/**
 * Serves mcpgw.catalog.v1.CatalogDiscovery: the feed's current catalog at once, then every change it
 * sends (catalog-publication.ts); reports go to the store.
 */
export function catalogServiceHandlers(store: CatalogStore, feed: CatalogFeed, log: Logger): grpc.UntypedServiceImplementation {
  return {
    WatchCatalog(call: grpc.ServerWritableStream<{ sidecar_id: string }, CatalogSnapshotMessage>) {
      const sidecarId = call.request.sidecar_id || call.getPeer();
      log.info('sidecar subscribed to the catalog', { sidecarId });
      const push = (snapshot: CatalogSnapshotMessage) => call.write(snapshot);
      push(feed.current());
      feed.on('change', push);
      call.on('cancelled', () => {
        feed.off('change', push);
        log.info('sidecar unsubscribed', { sidecarId });
      });
    },
    ReportToolService(call: grpc.ServerUnaryCall<ToolServiceReport, object>, callback: grpc.sendUnaryData<object>) {
      const parsed = toolServiceReportSchema.safeParse(call.request);
      if (!parsed.success) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: `ToolServiceReport: ${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}` });
        return;
      }
      const report = parsed.data;
      const known = report.failure
        ? store.markDegraded({ catalogKey: report.tool_service, reason: report.failure, route: report.route })
        : store.relistSoon(report.tool_service);
      if (!known) {
        callback({ code: grpc.status.NOT_FOUND, details: `no Tool Service ${report.tool_service} in the catalog` });
        return;
      }
      callback(null, {});
    },
  };
}
