import * as grpc from '@grpc/grpc-js';
import { CatalogSnapshotMessage } from '../catalog/catalog-store';
import { grpcServices } from '../shared/grpc-packages';
import { Logger } from '../shared/log';

const RETRY_MIN_MS = 200;
export const CATALOG_MESSAGE_LIMIT_BYTES = 256 * 1024 * 1024;
const RETRY_MAX_MS = 5000;
const REPORT_DEADLINE_MS = 5000;

/**
 * Follows the control plane's catalog stream and reconnects with backoff when it breaks. The last
 * catalog stays in memory meanwhile: a control-plane outage never empties what the sidecar serves.
 */
export class CatalogSubscriber {
  private readonly client: grpc.Client & Record<string, Function>;
  private call?: grpc.ClientReadableStream<CatalogSnapshotMessage>;
  private retryMs = RETRY_MIN_MS;
  private retryTimer?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    address: string,
    private readonly sidecarId: string,
    private readonly onSnapshot: (snapshot: CatalogSnapshotMessage) => void,
    private readonly log: Logger,
  ) {
    const Service = grpcServices.catalogDiscovery();
    // A whole catalog is one message: 50 backends × 100 tools on a few routes is already past gRPC's 4 MiB default.
    this.client = new Service(address, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': CATALOG_MESSAGE_LIMIT_BYTES,
    }) as grpc.Client & Record<string, Function>;
  }

  start(): void {
    if (this.stopped) return;
    const call = this.client.WatchCatalog({ sidecar_id: this.sidecarId }) as grpc.ClientReadableStream<CatalogSnapshotMessage>;
    this.call = call;
    call.on('data', (snapshot: CatalogSnapshotMessage) => {
      this.retryMs = RETRY_MIN_MS;
      this.onSnapshot(snapshot);
    });
    // 'status' ends every call, failed or not; 'error' only needs a listener so it is not thrown.
    call.on('error', () => undefined);
    call.on('status', (status: grpc.StatusObject) => {
      if (this.stopped) return;
      this.log.warn('catalog stream ended; keeping the last catalog and retrying', { status: status.details, retryMs: this.retryMs });
      this.retryTimer = setTimeout(() => this.start(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
    });
  }

  /**
   * Tells the control plane what this sidecar heard from a Tool Service (a list change, or a stream
   * that failed); fire and forget: a report that is lost only leaves it to the next listing.
   */
  report(report: { toolService: string; route: string; failure?: string; listChanged?: boolean }): void {
    if (this.stopped) return;
    this.client.ReportToolService(
      { sidecar_id: this.sidecarId, tool_service: report.toolService, route: report.route, failure: report.failure ?? '', list_changed: report.listChanged ?? false },
      { deadline: Date.now() + REPORT_DEADLINE_MS },
      (error: grpc.ServiceError | null) => {
        if (error) this.log.warn('could not tell the control plane about a Tool Service', { toolService: report.toolService, error: error.details });
      },
    );
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.call?.cancel();
    this.client.close();
  }
}
