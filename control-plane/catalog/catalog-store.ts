import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { Tool } from '@modelcontextprotocol/sdk/types.js';
import { GatewayIR, ToolServiceIR } from '../ir/gateway-ir';
import { Logger } from '../shared/log';
import { SavedRoute } from '../state/last-good-store';

export type BackendState = 'ok' | 'stale' | 'missing';

interface ToolServiceCatalog {
  /** The URL the tools came from: a new URL under the same id means a new fetch. */
  url: string;
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

export interface RouteCatalogMessage {
  route_key: string;
  backends: BackendCatalogMessage[];
}

export interface CatalogSnapshotMessage {
  version: string;
  routes: RouteCatalogMessage[];
}

export type ToolListFetcher = (url: string) => Promise<Tool[]>;

function stateOf(catalog: ToolServiceCatalog | undefined): BackendState {
  if (!catalog?.lastSuccessAt) return 'missing';
  if (catalog.failingSince) return 'stale';
  return 'ok';
}

/**
 * Per-Tool-Service tool lists with last-good semantics, and the per-route snapshot built from them.
 * Emits 'change' (snapshot) whenever what a sidecar would serve changes, and 'refresh'
 * ('ok' | 'failed') after each backend fetch.
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

  /**
   * Takes a new registry view. Tool Services no longer referenced are forgotten; returns the ones
   * that have no tools from their current URL yet, for the caller to fetch at once.
   */
  setGateway(ir: GatewayIR): ToolServiceIR[] {
    this.ir = ir;
    const live = new Map(ir.toolServices.map((service) => [service.clusterName, service]));
    for (const [cluster, catalog] of this.byCluster) {
      if (live.get(cluster)?.url !== catalog.url) this.byCluster.delete(cluster);
    }
    const unfetched = ir.toolServices.filter((service) => !this.byCluster.get(service.clusterName)?.lastSuccessAt);
    // A new route should appear with its tools, not first empty: when something is to be fetched,
    // the snapshot is rebuilt by refresh() once the fetch has answered or timed out.
    if (unfetched.length === 0) this.rebuild();
    return unfetched;
  }

  /**
   * Cold start: serves the tools Redis kept for backends that have none yet, marked stale until their
   * first refresh, so a restarted gateway lists tools before any backend answers.
   */
  restore(saved: SavedRoute[]): void {
    const restartedAt = new Date();
    for (const route of saved) {
      for (const backend of route.catalog ?? []) {
        const service = this.ir.toolServices.find((candidate) => candidate.clusterName === backend.cluster);
        if (!service || this.byCluster.has(backend.cluster)) continue;
        this.byCluster.set(backend.cluster, {
          url: service.url,
          tools: backend.tools_json.map((json) => JSON.parse(json) as Tool),
          lastSuccessAt: backend.last_success_at ? new Date(backend.last_success_at) : restartedAt,
          lastError: 'not refreshed since the gateway started: tools restored from Redis last-good',
          failingSince: restartedAt,
        });
      }
    }
    this.rebuild();
  }

  /** Refreshes Tool Services concurrently; one slow or failing backend delays or affects no other. */
  async refresh(services: ToolServiceIR[] = this.ir.toolServices): Promise<void> {
    await Promise.all(services.map((service) => this.refreshOne(service)));
    this.rebuild();
  }

  private async refreshOne(service: ToolServiceIR): Promise<void> {
    const existing = this.byCluster.get(service.clusterName);
    const catalog = existing?.url === service.url ? existing : { url: service.url, tools: [] };
    try {
      catalog.tools = await this.fetchTools(service.url);
      catalog.lastSuccessAt = new Date();
      catalog.failingSince = undefined;
      catalog.lastError = undefined;
      this.emit('refresh', 'ok');
    } catch (error) {
      catalog.lastError = (error as Error).message;
      catalog.failingSince ??= new Date();
      this.emit('refresh', 'failed');
      this.log.warn('tools/list refresh failed; keeping last-good tools', {
        toolService: service.id,
        url: service.url,
        error: catalog.lastError,
      });
    }
    // The registry may have moved on while the fetch ran: keep only what is still referenced.
    if (this.ir.toolServices.some((current) => current.clusterName === service.clusterName && current.url === service.url)) {
      this.byCluster.set(service.clusterName, catalog);
    }
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
