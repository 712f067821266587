import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { GatewayIR } from '../ir/gateway-ir';
import { Logger } from '../shared/log';

export type BackendState = 'ok' | 'stale' | 'missing';

interface ToolServiceCatalog {
  /** Last-good tools: a failed refresh never replaces them. */
  tools: Tool[];
  lastSuccessAt?: Date;
  lastError?: string;
  /** First failure since the last success; stays put while the backend keeps failing. */
  failingSince?: Date;
}

export interface BackendCatalogMessage {
  name: string;
  cluster: string;
  tools_json: string[];
  state: BackendState;
  last_success_at: string;
  last_error: string;
  failing_since: string;
}

export interface CatalogSnapshotMessage {
  version: string;
  routes: { route_key: string; backends: BackendCatalogMessage[] }[];
}

export type ToolListFetcher = (url: string) => Promise<Tool[]>;

function stateOf(catalog: ToolServiceCatalog | undefined): BackendState {
  if (!catalog?.lastSuccessAt) return 'missing';
  if (catalog.failingSince) return 'stale';
  return 'ok';
}

/**
 * Per-Tool-Service tool lists with last-good semantics, and the per-route snapshot built from them.
 * Emits 'change' with a new snapshot whenever what a sidecar would serve changes.
 */
export class CatalogStore extends EventEmitter {
  private readonly byCluster = new Map<string, ToolServiceCatalog>();
  private ir: GatewayIR = { routes: [], toolServices: [] };
  private snapshot: CatalogSnapshotMessage = { version: '', routes: [] };

  constructor(
    private readonly fetchTools: ToolListFetcher,
    private readonly log: Logger,
  ) {
    super();
  }

  current(): CatalogSnapshotMessage {
    return this.snapshot;
  }

  /** Takes a new registry view; Tool Services no longer referenced are forgotten. */
  setGateway(ir: GatewayIR): void {
    this.ir = ir;
    const live = new Set(ir.toolServices.map((service) => service.clusterName));
    for (const cluster of this.byCluster.keys()) if (!live.has(cluster)) this.byCluster.delete(cluster);
    this.rebuild();
  }

  /** Refreshes every Tool Service concurrently; one slow or failing backend delays or affects no other. */
  async refreshAll(): Promise<void> {
    await Promise.all(
      this.ir.toolServices.map(async (service) => {
        const url = service.url;
        const catalog = this.byCluster.get(service.clusterName) ?? { tools: [] };
        try {
          catalog.tools = await this.fetchTools(url);
          catalog.lastSuccessAt = new Date();
          catalog.failingSince = undefined;
          catalog.lastError = undefined;
        } catch (error) {
          catalog.lastError = (error as Error).message;
          catalog.failingSince ??= new Date();
          this.log.warn('tools/list refresh failed; keeping last-good tools', {
            toolService: service.id,
            url,
            error: catalog.lastError,
          });
        }
        this.byCluster.set(service.clusterName, catalog);
      }),
    );
    this.rebuild();
  }

  private rebuild(): void {
    const routes = this.ir.routes.map((route) => ({
      route_key: route.key,
      backends: route.backends.map((backend) => {
        const catalog = this.byCluster.get(backend.clusterName);
        return {
          name: backend.name,
          cluster: backend.clusterName,
          tools_json: (catalog?.tools ?? []).map((tool) => JSON.stringify(tool)),
          state: stateOf(catalog),
          last_success_at: catalog?.lastSuccessAt?.toISOString() ?? '',
          last_error: catalog?.lastError ?? '',
          failing_since: catalog?.failingSince?.toISOString() ?? '',
        };
      }),
    }));
    // A repeated success is no change, or every refresh would push to every sidecar.
    const content = JSON.stringify(routes, (key, value) => (key === 'last_success_at' ? undefined : value));
    const version = createHash('sha256').update(content).digest('hex').slice(0, 16);
    if (version === this.snapshot.version) return;
    this.snapshot = { version, routes };
    this.emit('change', this.snapshot);
  }
}
