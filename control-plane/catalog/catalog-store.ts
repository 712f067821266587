import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { Prompt, Resource, ResourceTemplate, ServerCapabilities, Tool } from '@modelcontextprotocol/sdk/types.js';
import { BackendCredentials, GatewayIR, ToolServiceIR } from '../ir/gateway-ir';
import { Risk, ToolRule } from '../registry/model';
import { Logger } from '../shared/log';
import { SavedBackendCatalog, SavedRoute } from '../state/last-good-store';
import { ExposedPromptMessage, ExposedResourceMessage, ItemFinding, exposeRoutePrompts, exposeRouteResources } from './surface-exposure';
import { ExposureSettings, ToolFinding, compareBackendNames, exposeRouteTools } from './tool-exposure';
import { policyDenial, ruleFor } from './tool-policy';
import { approvalOf } from '../approval/risk';

export type BackendState = 'ok' | 'stale' | 'missing';

/** One backend's listing, shared by every Tool Service id that lists the same way (backendListingOf). */
interface ToolServiceCatalog {
  /** Last-good tools: a failed refresh never replaces them. */
  tools: Tool[];
  /** The protocol revision the Tool Service answered its tools/list in; "" until it has answered. */
  protocolVersion: string;
  /** It handed out a session when it was listed; true until it has answered (the safe guess). */
  sessionful: boolean;
  /** Listed in a session-based revision, it answers the stateless one too. */
  alsoModern: boolean;
  /** Last-good prompts, resources and resource templates, the server's capabilities and what its tools and prompts need of clients. */
  surface: BackendSurface;
  lastSuccessAt?: Date;
  lastError?: string;
  /** First failure since the last success; stays put while the backend keeps failing. */
  failingSince?: Date;
}

export interface BackendCatalogMessage {
  name: string;
  /** The Tool Service behind the backend (`tool_service.<id>`): its catalog's key, and its last-good copy's in Redis. */
  tool_service: string;
  /** The Envoy cluster its calls go to, shared by every Tool Service with the same upstream. */
  cluster: string;
  /** The backend's last-good tools as it declared them; RouteCatalogMessage.tools says which are served. */
  tools_json: string[];
  state: BackendState;
  last_success_at: string;
  last_error: string;
  failing_since: string;
  /** Where the sidecar opens this backend's sessions. */
  url: string;
  /** Degraded answer for read-only tools when the backend cannot be reached; empty for none. */
  fallback_text: string;
  /** The backend's tools the route's policy keeps from agents, and the rule that does. */
  denied_tools: DeniedToolMessage[];
  /** The protocol revision the backend speaks (its tools/list's); "" before it has answered. */
  protocol_version: string;
  /** It hands out sessions: a stateless client's call needs one opened for it. */
  sessionful: boolean;
  /** Listed in a session-based revision, it answers the stateless one too: each client is spoken to in its own. */
  also_modern: boolean;
  /** What the sidecar authenticates to it with on a caller's behalf. */
  credentials: BackendCredentialsMessage;
  /** The backend's own last-good prompts, resources and resource templates, each as JSON; RouteCatalogMessage says which are served. */
  prompts_json: string[];
  resources_json: string[];
  resource_templates_json: string[];
  /** The server capabilities it declared when listed (JSON; "{}" before it has answered). */
  capabilities_json: string;
  /** What its tools and prompts need of a client (client-needs.ts), as JSON: `{"tool:<own name>": [...], "prompt:<own name>": [...]}`. */
  needs_json: string;
  /** Served tools whose calls wait for a person's approval (docs/approval-and-audit.md). */
  approval_tools: ApprovalToolMessage[];
}

export interface BackendCredentialsMessage {
  mode: BackendCredentials['mode'];
  audience: string;
  resource: string;
  scopes: string[];
}

/** The credentials as the catalog carries them to sidecars: no file paths (Envoy reads those). */
export function credentialsMessageOf(credentials: BackendCredentials): BackendCredentialsMessage {
  return {
    mode: credentials.mode,
    audience: 'audience' in credentials ? credentials.audience : '',
    resource: credentials.mode === 'tokenExchange' ? (credentials.resource ?? '') : '',
    scopes: credentials.mode === 'tokenExchange' ? (credentials.scopes ?? []) : [],
  };
}

export interface ApprovalToolMessage {
  /** The backend's own name for the tool. */
  tool: string;
  risk: Risk;
  /** The approvers' group; empty: the caller themself. */
  approvers: string;
}

export interface DeniedToolMessage {
  /** The backend's own name for the tool. */
  tool: string;
  rule: string;
}

export interface ExposedToolMessage {
  /** What agents see and call: `<backend><separator><tool>`. */
  name: string;
  backend: string;
  /** Position of the tool in its backend's tools_json. */
  tool_index: number;
  /** 1 + its rule's index in RouteCatalogMessage.access_rules; 0: no rule. */
  access_rule: number;
}

/** A rule the caller's token must meet to call a tool (registry policy.rules); an empty list is no condition. */
export interface AccessRuleMessage {
  required_scopes: string[];
  allow_subjects: string[];
  allow_groups: string[];
  allow_clients: string[];
}

export interface RouteCatalogMessage {
  route_key: string;
  backends: BackendCatalogMessage[];
  /** What tools/list serves, in order, after the naming rules, de-duplication and the cap. */
  tools: ExposedToolMessage[];
  /** What prompts/list, resources/list and resources/templates/list serve, in order (surface-exposure.ts). */
  prompts: ExposedPromptMessage[];
  resources: ExposedResourceMessage[];
  resource_templates: ExposedResourceMessage[];
  /** The rules of every backend of the route, in order (empty without auth). */
  access_rules: AccessRuleMessage[];
  /** Where a caller's groups are in the route's tokens; empty without auth. */
  groups_claim: string[];
}

export interface CatalogSnapshotMessage {
  version: string;
  routes: RouteCatalogMessage[];
  tool_name_separator: string;
  /** Most tools in one tools/list answer; 0 means all of them. */
  tools_list_page_size: number;
}

export interface CatalogSettings extends ExposureSettings {
  toolsListPageSize: number;
}

/**
 * Defaults of the control plane's catalog flags (docs/tools-list.md says why):
 * - separator `__` (docs/adr/0000-federation-decisions.md §2);
 * - policy drop: a client that meets one name outside ^[a-zA-Z0-9_-]{1,64}$ may refuse the whole
 *   server, so one backend's odd name would cost the whole route every tool;
 * - cap 5000: the largest route the gateway is sized and benchmarked for (50 backends x 100 tools);
 * - every tool in one tools/list answer (page size 0): an answer is the catalog's pre-serialized tools
 *   joined, cheap at any size, and a client that never follows nextCursor still sees every tool.
 */
export const CATALOG_DEFAULTS: CatalogSettings = {
  toolNameSeparator: '__',
  toolNamePolicy: 'drop',
  maxToolsPerRoute: 5000,
  toolsListPageSize: 0,
};

/**
 * A Tool Service's whole tools/list, the protocol revision it answered in, and whether it handed out a
 * session; with its prompts, resources and templates where it serves them (absent: none).
 */
export interface ToolList extends Partial<BackendSurface> {
  tools: Tool[];
  protocolVersion: string;
  sessionful: boolean;
  /** Listed in a session-based revision, it answers the stateless one too (docs/adr/0018-stream-relaying.md). */
  alsoModern?: boolean;
}

/** What a Tool Service serves besides tools, and what its tools and prompts need of clients. */
export interface BackendSurface {
  prompts: Prompt[];
  resources: Resource[];
  resourceTemplates: ResourceTemplate[];
  capabilities: ServerCapabilities;
  /** By own name: the client capabilities a tool or prompt needs (client-needs.ts); absent: none. */
  toolNeeds: Record<string, string[]>;
  promptNeeds: Record<string, string[]>;
}

const NO_SURFACE: BackendSurface = { prompts: [], resources: [], resourceTemplates: [], capabilities: {}, toolNeeds: {}, promptNeeds: {} };

const surfaceOf = (list: ToolList): BackendSurface => ({
  prompts: list.prompts ?? [],
  resources: list.resources ?? [],
  resourceTemplates: list.resourceTemplates ?? [],
  capabilities: list.capabilities ?? {},
  toolNeeds: list.toolNeeds ?? {},
  promptNeeds: list.promptNeeds ?? {},
});

export type ToolListFetcher = (service: ToolServiceIR) => Promise<ToolList>;

const toolsJson = new WeakMap<Tool[], string[]>();
/**
 * A listing's tools as JSON, written once per listing and shared by every route backend served from it
 * (thousands of Tool Service ids on a few backends). A refresh replaces a listing's array, never
 * changes it, so the array is the key; the result is shared: read it, never change it.
 */
function toolsJsonOf(tools: Tool[]): string[] {
  let json = toolsJson.get(tools);
  if (!json) toolsJson.set(tools, (json = tools.map((tool) => JSON.stringify(tool))));
  return json;
}

const sameJson = (a: unknown, b: unknown) => a === b || JSON.stringify(a) === JSON.stringify(b);

/** A route's catalog message as last made, and what it was made of (routeInputs). */
interface MadeRoute {
  inputs: unknown[];
  message: RouteCatalogMessage;
  /** The message as the snapshot's version hashes it (without last_success_at). */
  hashed: string;
  findings: ToolFinding[];
  itemFindings: ItemFinding[];
}

/**
 * A route as the snapshot's version hashes it: without when each backend was last listed, as a repeated
 * success is no change, or every refresh would push to every sidecar. (Left out by copying the
 * backends: with a replacer function, stringifying 1,000 routes × 5 took 1.4× the CPU.)
 */
const hashedJson = (route: RouteCatalogMessage) =>
  JSON.stringify({ ...route, backends: route.backends.map(({ last_success_at: _at, ...backend }) => backend) });

/**
 * What makes two Tool Service ids one listing: the URL, the TLS the listing verifies and presents, and
 * what it authenticates with. The client capabilities a listing declares are the same for every
 * listing (tool-fetcher.ts), and the listing bounds are the control plane's. Ids with the same
 * identity share one fetch, one re-listing schedule and one degraded state; naming, policy and caps
 * stay per route (docs/tools-list.md). Thousands of ids on a handful of backends are a handful of
 * listings, as they are a handful of Envoy clusters.
 */
export const backendListingOf = (service: Pick<ToolServiceIR, 'url' | 'endpoint' | 'credentials'>): string =>
  JSON.stringify([service.url, service.endpoint.tls ?? null, service.credentials]);

/** How soon a Tool Service whose listing failed, or that a sidecar reported, is listed again (docs/tools-list.md). */
export interface RelistSettings {
  /** First retry after a failure; each further failure doubles the wait. */
  retryMinMs: number;
  /** Longest wait between retries; well below the catalog refresh interval, so a backend that is back is seen within seconds. */
  retryMaxMs: number;
}

export const RELIST_DEFAULTS: RelistSettings = { retryMinMs: 1000, retryMaxMs: 10_000 };

/** How long reports that a Tool Service's list changed are gathered into one listing. */
const RELIST_SOON_MS = 250;

/** A failing Tool Service's next listing. */
interface Relisting {
  timer: NodeJS.Timeout;
  /** Failures in a row: the next wait is retryMinMs * 2^failures, capped. */
  failures: number;
}

function stateOf(catalog: ToolServiceCatalog | undefined): BackendState {
  if (!catalog?.lastSuccessAt) return 'missing';
  if (catalog.failingSince) return 'stale';
  return 'ok';
}

/** A Redis copy is only checked to be JSON: a tool or prompt without a string name gets the empty name, which no rule lets through. */
const nameOf = (item: { name: string }) => (typeof item.name === 'string' ? item.name : '');
/** Likewise a resource without a string URI: the empty URI, which is not absolute and never served. */
const uriOf = (resource: Resource) => (typeof resource.uri === 'string' ? resource.uri : '');
const uriTemplateOf = (template: ResourceTemplate) => (typeof template.uriTemplate === 'string' ? template.uriTemplate : '');

/** The catalog message's form of a backend's surface. */
function surfaceMessage(surface: BackendSurface) {
  const needs = {
    ...Object.fromEntries(Object.entries(surface.toolNeeds).map(([name, value]) => [`tool:${name}`, value])),
    ...Object.fromEntries(Object.entries(surface.promptNeeds).map(([name, value]) => [`prompt:${name}`, value])),
  };
  return {
    prompts_json: surface.prompts.map((prompt) => JSON.stringify(prompt)),
    resources_json: surface.resources.map((resource) => JSON.stringify(resource)),
    resource_templates_json: surface.resourceTemplates.map((template) => JSON.stringify(template)),
    capabilities_json: JSON.stringify(surface.capabilities),
    needs_json: JSON.stringify(needs),
  };
}

/** A surface kept in Redis (absent in copies saved before the gateway served prompts and resources). */
function restoredSurface(saved: SavedBackendCatalog): BackendSurface {
  const parse = <T>(json: string | undefined, fallback: T): T => (json ? (JSON.parse(json) as T) : fallback);
  const needs = parse<Record<string, string[]>>(saved.needs_json, {});
  const needsOf = (kind: string) => Object.fromEntries(Object.entries(needs).flatMap(([key, value]) => (key.startsWith(`${kind}:`) ? [[key.slice(kind.length + 1), value]] : [])));
  return {
    prompts: (saved.prompts_json ?? []).map((json) => JSON.parse(json) as Prompt),
    resources: (saved.resources_json ?? []).map((json) => JSON.parse(json) as Resource),
    resourceTemplates: (saved.resource_templates_json ?? []).map((json) => JSON.parse(json) as ResourceTemplate),
    capabilities: parse<ServerCapabilities>(saved.capabilities_json, {}),
    toolNeeds: needsOf('tool'),
    promptNeeds: needsOf('prompt'),
  };
}

/**
 * The rules of a route's backends as one list, and for each backend's tool the 1-based index of the
 * rule that decides on it (the first whose pattern matches; 0 for none).
 */
export function accessRulesOf(backends: { backend: string; rules?: ToolRule[]; tools: Tool[] }[]) {
  const rules: AccessRuleMessage[] = [];
  const byTool = new Map<string, number>();
  for (const { backend, rules: backendRules, tools } of backends) {
    if (!backendRules) continue;
    const offset = rules.length;
    rules.push(
      ...backendRules.map((rule) => ({
        required_scopes: rule.requiredScopes ?? [],
        allow_subjects: rule.allowSubjects ?? [],
        allow_groups: rule.allowGroups ?? [],
        allow_clients: rule.allowClients ?? [],
      })),
    );
    tools.forEach((tool, index) => {
      const rule = ruleFor(backendRules, nameOf(tool));
      if (rule) byTool.set(`${backend}\n${index}`, offset + backendRules.indexOf(rule) + 1);
    });
  }
  return { rules, ruleOf: (backend: string, toolIndex: number) => byTool.get(`${backend}\n${toolIndex}`) ?? 0 };
}

/**
 * Per-Tool-Service tool lists with last-good semantics, and the per-route snapshot built from them.
 * Emits 'change' (snapshot) whenever what a sidecar would serve changes, and 'refresh'
 * ('ok' | 'failed') after each backend fetch.
 */
export class CatalogStore extends EventEmitter {
  /** Last-good listings by backend listing identity (backendListingOf). */
  private readonly byListing = new Map<string, ToolServiceCatalog>();
  /** Fetches under way, by listing: a refresh asked for meanwhile joins the running one. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private ir: GatewayIR = { routes: [], toolServices: [], clusters: [] };
  /** The IR's Tool Services by catalog key, for the lookups every fetch and rebuild makes. */
  private servicesByKey = new Map<string, ToolServiceIR>();
  /** Each catalog key's listing identity. */
  private listingOfKey = new Map<string, string>();
  /** The Tool Services of each listing, in catalog key order: the first is the one the fetch is made as. */
  private servicesByListing = new Map<string, ToolServiceIR[]>();
  private snapshot: CatalogSnapshotMessage;
  private findings = new Map<string, ToolFinding[]>();
  private itemFindings = new Map<string, ItemFinding[]>();
  /**
   * Each route's message as last made, by route key: a route none of whose inputs changed is not
   * made again. A failing backend's re-listing (every few seconds) and a refresh that brings what
   * the last one did then cost no route's exposure, rules and JSON (measured: on the full bench's
   * registry, 0.1–0.5 s of the control plane's CPU per rebuild, on the systems' core;
   * docs/adr/0018-stream-relaying.md, "The streaming tail").
   */
  private made = new Map<string, MadeRoute>();
  /** Listings made again soon, by listing identity, instead of at the next full refresh. */
  private readonly relistings = new Map<string, Relisting>();
  /** Listings of backends that said a list changed, made again when their pause ends (relistSoon). */
  private readonly soon = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly fetchTools: ToolListFetcher,
    private readonly settings: CatalogSettings,
    private readonly log: Logger,
    private readonly relist: RelistSettings = RELIST_DEFAULTS,
  ) {
    super();
    this.snapshot = this.snapshotOf([]);
  }

  current(): CatalogSnapshotMessage {
    return this.snapshot;
  }

  /** What the rules reported for a route's tools in the current snapshot. */
  toolFindings(routeKey: string): ToolFinding[] {
    return this.findings.get(routeKey) ?? [];
  }

  /** What the rules reported for a route's prompts, resources and resource templates in the current snapshot. */
  surfaceFindings(routeKey: string): ItemFinding[] {
    return this.itemFindings.get(routeKey) ?? [];
  }

  /**
   * Takes a new registry view. Tool Services no longer referenced are forgotten; returns the ones
   * that have no tools from their current URL yet, for the caller to fetch at once.
   */
  setGateway(ir: GatewayIR): ToolServiceIR[] {
    this.ir = ir;
    this.servicesByKey = new Map(ir.toolServices.map((service) => [service.catalogKey, service]));
    this.listingOfKey = new Map(ir.toolServices.map((service) => [service.catalogKey, backendListingOf(service)]));
    this.servicesByListing = new Map();
    for (const service of ir.toolServices) {
      const listing = this.listingOfKey.get(service.catalogKey)!;
      this.servicesByListing.set(listing, [...(this.servicesByListing.get(listing) ?? []), service]);
    }
    for (const listing of this.byListing.keys()) {
      if (!this.servicesByListing.has(listing)) this.byListing.delete(listing);
    }
    for (const listing of this.relistings.keys()) {
      if (!this.servicesByListing.has(listing)) this.stopRelisting(listing);
    }
    const unfetched = ir.toolServices.filter((service) => !this.catalogOf(service.catalogKey)?.lastSuccessAt);
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
        const listing = this.listingOfKey.get(backend.tool_service);
        if (listing === undefined || this.byListing.has(listing)) continue;
        this.byListing.set(listing, {
          tools: backend.tools_json.map((json) => JSON.parse(json) as Tool),
          protocolVersion: backend.protocol_version ?? '',
          sessionful: backend.sessionful ?? true,
          alsoModern: backend.also_modern ?? false,
          surface: restoredSurface(backend),
          lastSuccessAt: backend.last_success_at ? new Date(backend.last_success_at) : restartedAt,
          lastError: 'not refreshed since the gateway started: tools restored from Redis last-good',
          failingSince: restartedAt,
        });
      }
    }
    this.rebuild();
  }

  /** Refreshes Tool Services concurrently, each listing once; one slow or failing backend delays or affects no other. */
  async refresh(services: ToolServiceIR[] = this.ir.toolServices): Promise<void> {
    const listings = new Set(services.map((service) => backendListingOf(service)));
    // Nothing to list (a registry update whose Tool Services are all listed already, which setGateway
    // rebuilt the catalog for): a second rebuild of thousands of routes would only find the same catalog,
    // and it ran before the update's xDS was encoded.
    if (listings.size === 0) return;
    await Promise.all([...listings].map((listing) => this.refreshOne(listing)));
    this.rebuild();
  }

  /** The last-good listing a catalog key is served from. */
  private catalogOf(catalogKey: string): ToolServiceCatalog | undefined {
    const listing = this.listingOfKey.get(catalogKey);
    return listing === undefined ? undefined : this.byListing.get(listing);
  }

  /** Refreshes now: the Tool Services of one route, or all of them; false for an unknown route key. */
  async refreshNow(routeKey?: string): Promise<boolean> {
    if (routeKey === undefined) {
      await this.refresh();
      return true;
    }
    const route = this.ir.routes.find((candidate) => candidate.key === routeKey);
    if (!route) return false;
    const keys = new Set(route.backends.map((backend) => backend.catalogKey));
    await this.refresh(this.ir.toolServices.filter((service) => keys.has(service.catalogKey)));
    return true;
  }

  /**
   * One fetch per listing at a time: two overlapping fetches could finish out of order and let an
   * older failure overwrite a newer success. A listing no Tool Service makes any more is not fetched.
   */
  private refreshOne(listing: string): Promise<void> {
    const running = this.inFlight.get(listing);
    if (running) return running;
    const service = this.servicesByListing.get(listing)?.[0];
    if (!service) return Promise.resolve();
    const fetch = this.fetchOne(listing, service).finally(() => this.inFlight.delete(listing));
    this.inFlight.set(listing, fetch);
    return fetch;
  }

  /** Lists the backend as `service`, the first of the Tool Services that share the listing. */
  private async fetchOne(listing: string, service: ToolServiceIR): Promise<void> {
    const catalog = this.byListing.get(listing) ?? { tools: [], protocolVersion: '', sessionful: true, alsoModern: false, surface: NO_SURFACE };
    // The refresh counter counts Tool Services (docs/observability.md): this one listing refreshes each of them.
    const toolServices = this.servicesByListing.get(listing)?.length ?? 1;
    try {
      const listed = await this.fetchTools(service);
      // A listing that brought what the last one did keeps the same objects: the routes made of them
      // are then not made again (rebuild), which is most of a refresh's work on a large registry.
      if (!sameJson(listed.tools, catalog.tools)) catalog.tools = listed.tools;
      ({ protocolVersion: catalog.protocolVersion, sessionful: catalog.sessionful } = listed);
      catalog.alsoModern = listed.alsoModern ?? false;
      const surface = surfaceOf(listed);
      if (!sameJson(surface, catalog.surface)) catalog.surface = surface;
      catalog.lastSuccessAt = new Date();
      catalog.failingSince = undefined;
      catalog.lastError = undefined;
      this.stopRelisting(listing);
      this.emit('refresh', 'ok', toolServices);
      this.log.debug('tools/list refreshed', { toolService: service.id, sharedBy: toolServices, tools: catalog.tools.length, protocolVersion: catalog.protocolVersion });
    } catch (error) {
      catalog.lastError = (error as Error).message;
      catalog.failingSince ??= new Date();
      this.emit('refresh', 'failed', toolServices);
      this.log.warn('tools/list refresh failed; keeping last-good tools', {
        toolService: service.id,
        sharedBy: toolServices,
        url: service.url,
        error: catalog.lastError,
      });
      this.scheduleRelisting(listing);
    }
    // The registry may have moved on while the fetch ran: keep only what is still referenced.
    if (this.servicesByListing.has(listing)) this.byListing.set(listing, catalog);
  }

  /**
   * Lists a failing Tool Service again after a backoff (retryMinMs doubling up to retryMaxMs, with
   * jitter so that many backends that failed together do not retry together), so one that comes back
   * is served within seconds rather than at the next full refresh; the change reaches the sidecars
   * over the catalog stream like any other.
   */
  private scheduleRelisting(listing: string, failures = (this.relistings.get(listing)?.failures ?? -1) + 1): void {
    this.stopRelisting(listing);
    if (this.closed || !this.servicesByListing.has(listing)) return;
    const wait = Math.min(this.relist.retryMinMs * 2 ** failures, this.relist.retryMaxMs) * (0.8 + Math.random() * 0.4);
    const timer = setTimeout(() => void this.refreshOne(listing).then(() => this.rebuild()), wait);
    timer.unref();
    this.relistings.set(listing, { timer, failures });
  }

  private stopRelisting(listing: string): void {
    clearTimeout(this.relistings.get(listing)?.timer);
    this.relistings.delete(listing);
  }

  /**
   * A request to this Tool Service failed (Envoy's call log: connection refused, timed out, …; or a
   * sidecar's report of a stream to it that failed): it is served as stale (its last-good tools still listed, `reason` as its lastError) and listed again after
   * retryMinMs, which puts it back to ok if it answers. A Tool Service already failing only gets the
   * newer reason, so a burst of failed calls costs no more than one. Returns false for an unknown id.
   * `route` only names where the call was made, in the log: a Tool Service's state is the same in
   * every route, and the same for every Tool Service id that shares its listing.
   */
  markDegraded(report: ({ toolServiceId: string } | { catalogKey: string }) & { reason: string; route?: string }): boolean {
    const service = 'catalogKey' in report ? this.servicesByKey.get(report.catalogKey) : this.ir.toolServices.find((candidate) => candidate.id === report.toolServiceId);
    if (!service) return false;
    const listing = this.listingOfKey.get(service.catalogKey)!;
    const catalog = this.byListing.get(listing);
    if (catalog?.failingSince || !catalog?.lastSuccessAt) {
      if (catalog) catalog.lastError = report.reason;
      return true;
    }
    catalog.failingSince = new Date();
    catalog.lastError = report.reason;
    this.log.warn('a request to a Tool Service failed; serving it as stale and listing it again', {
      toolService: service.id,
      route: report.route,
      reason: report.reason,
    });
    this.scheduleRelisting(listing, 0);
    this.rebuild();
    return true;
  }

  /**
   * A Tool Service said one of its lists changed (a sidecar heard its list_changed notification): it is
   * listed again after a short pause, in which further reports (from every sidecar and client that
   * heard it, under any Tool Service id that shares its listing) join the same listing. False for a Tool Service the catalog does not know.
   */
  relistSoon(catalogKey: string): boolean {
    const listing = this.listingOfKey.get(catalogKey);
    if (listing === undefined) return false;
    if (this.soon.has(listing) || this.closed) return true;
    const timer = setTimeout(() => {
      this.soon.delete(listing);
      void this.refreshOne(listing).then(() => this.rebuild());
    }, RELIST_SOON_MS);
    timer.unref();
    this.soon.set(listing, timer);
    return true;
  }

  /** Stops the pending re-listings. */
  close(): void {
    this.closed = true;
    for (const key of [...this.relistings.keys()]) this.stopRelisting(key);
    for (const timer of this.soon.values()) clearTimeout(timer);
    this.soon.clear();
  }

  /**
   * What a route's message is made of, compared member by member by identity: the route (the IR is
   * new on every registry change), and per backend its Tool Service and every part of its catalog
   * that the message shows. When each backend was last listed is left out here: it is put in fresh
   * on every rebuild (madeRoute's caller), as the snapshot's version leaves it out.
   */
  private routeInputs(route: GatewayIR['routes'][number]): unknown[] {
    return [
      route,
      ...route.backends.flatMap((backend) => {
        const catalog = this.catalogOf(backend.catalogKey);
        return [
          this.servicesByKey.get(backend.catalogKey),
          catalog?.tools,
          catalog?.protocolVersion,
          catalog?.sessionful,
          catalog?.alsoModern,
          catalog?.surface,
          catalog?.lastError,
          catalog?.failingSince?.getTime(),
          catalog?.lastSuccessAt !== undefined,
        ];
      }),
    ];
  }

  private madeRoute(route: GatewayIR['routes'][number]): MadeRoute {
    const inputs = this.routeInputs(route);
    const last = this.made.get(route.key);
    if (last && last.inputs.length === inputs.length && last.inputs.every((input, index) => input === inputs[index])) return last;
    const services = this.servicesByKey;
    const backends = [...route.backends]
      .sort((a, b) => compareBackendNames(a.name, b.name))
      .map((backend) => {
        const catalog = this.catalogOf(backend.catalogKey);
        const denials = (catalog?.tools ?? []).map((tool) => policyDenial(backend.policy, tool));
        return { backend, catalog, denials };
      });
    const exposure = exposeRouteTools(
      backends.map(({ backend, catalog, denials }) => ({
        backend: backend.name,
        toolNames: (catalog?.tools ?? []).map(nameOf),
        denied: new Set(denials.flatMap((denial, index) => (denial === undefined ? [] : [index]))),
      })),
      this.settings,
    );
    const surfaces = backends.map(({ backend, catalog }) => ({ backend: backend.name, surface: catalog?.surface ?? NO_SURFACE }));
    const itemsOf = (pick: (surface: BackendSurface) => string[]) => surfaces.map(({ backend, surface }) => ({ backend, items: pick(surface) }));
    const prompts = exposeRoutePrompts(itemsOf((surface) => surface.prompts.map(nameOf)), this.settings.toolNameSeparator);
    const resources = exposeRouteResources(itemsOf((surface) => surface.resources.map(uriOf)), 'resource');
    const templates = exposeRouteResources(itemsOf((surface) => surface.resourceTemplates.map(uriTemplateOf)), 'resource-template');
    const access = accessRulesOf(backends.map(({ backend, catalog }) => ({ backend: backend.name, rules: backend.policy?.rules, tools: catalog?.tools ?? [] })));
    const message: RouteCatalogMessage = {
      route_key: route.key,
      backends: backends.map(({ backend, catalog, denials }) => ({
        name: backend.name,
        tool_service: backend.catalogKey,
        cluster: backend.clusterName,
        tools_json: toolsJsonOf(catalog?.tools ?? []),
        state: stateOf(catalog),
        last_success_at: catalog?.lastSuccessAt?.toISOString() ?? '',
        last_error: catalog?.lastError ?? '',
        failing_since: catalog?.failingSince?.toISOString() ?? '',
        url: services.get(backend.catalogKey)?.url ?? '',
        fallback_text: services.get(backend.catalogKey)?.fallbackText ?? '',
        denied_tools: denials.flatMap((rule, index) => (rule === undefined ? [] : [{ tool: catalog!.tools[index].name, rule }])),
        protocol_version: catalog?.protocolVersion ?? '',
        sessionful: catalog?.sessionful ?? true,
        also_modern: catalog?.alsoModern ?? false,
        credentials: credentialsMessageOf(services.get(backend.catalogKey)?.credentials ?? { mode: 'none' }),
        ...surfaceMessage(catalog?.surface ?? NO_SURFACE),
        approval_tools: (catalog?.tools ?? []).flatMap((tool, index) => {
          const approval = denials[index] === undefined ? approvalOf(backend.policy, tool) : undefined;
          return approval ? [{ tool: nameOf(tool), risk: approval.risk, approvers: approval.approvers ?? '' }] : [];
        }),
      })),
      tools: exposure.tools.map((exposed) => ({ ...exposed, access_rule: access.ruleOf(exposed.backend, exposed.tool_index) })),
      prompts: prompts.prompts,
      resources: resources.resources,
      resource_templates: templates.resources,
      access_rules: access.rules,
      groups_claim: route.auth?.groupsClaim ?? [],
    };
    return {
      inputs,
      message,
      hashed: hashedJson(message),
      findings: exposure.findings,
      itemFindings: [...prompts.findings, ...resources.findings, ...templates.findings],
    };
  }

  private rebuild(): void {
    const made = new Map(this.ir.routes.map((route) => [route.key, this.madeRoute(route)]));
    // Every route as it was: the snapshot's version would be the same, and nothing is published.
    if (made.size === this.made.size && [...made].every(([key, route]) => this.made.get(key) === route)) return;
    this.made = made;
    const findings = new Map([...made].map(([key, route]) => [key, route.findings]));
    const itemFindings = new Map([...made].map(([key, route]) => [key, route.itemFindings]));
    // When each backend was last listed, fresh (a route made before keeps its other members).
    const routes = [...made.values()].map(({ message }) => ({
      ...message,
      backends: message.backends.map((backend) => {
        const lastSuccessAt = this.catalogOf(backend.tool_service)?.lastSuccessAt?.toISOString() ?? '';
        return lastSuccessAt === backend.last_success_at ? backend : { ...backend, last_success_at: lastSuccessAt };
      }),
    }));
    for (const [route, routeFindings] of findings) {
      if (routeFindings.length === 0 || JSON.stringify(routeFindings) === JSON.stringify(this.findings.get(route) ?? [])) continue;
      const dropped = routeFindings.filter((finding) => finding.action === 'dropped').length;
      this.log.warn('catalog rules reported tools of a route (details in /status)', {
        route,
        dropped,
        keptWithWarning: routeFindings.length - dropped,
        rules: [...new Set(routeFindings.map((finding) => finding.rule))],
      });
    }
    this.findings = findings;
    for (const [route, routeFindings] of itemFindings) {
      if (routeFindings.length === 0 || JSON.stringify(routeFindings) === JSON.stringify(this.itemFindings.get(route) ?? [])) continue;
      this.log.warn('catalog rules left out prompts or resources of a route (details in /status)', { route, left_out: routeFindings.length, rules: [...new Set(routeFindings.map((finding) => finding.rule))] });
    }
    this.itemFindings = itemFindings;
    const snapshot = this.snapshotOf(routes, [...made.values()].map((route) => route.hashed));
    if (snapshot.version === this.snapshot.version) return;
    this.snapshot = snapshot;
    this.emit('change', this.snapshot);
  }

  /**
   * The snapshot of `routes`, its version a hash of all of it but when each backend was last listed;
   * `hashed`: each route as hashedJson gives it, already made (MadeRoute).
   */
  private snapshotOf(routes: RouteCatalogMessage[], hashed: string[] = routes.map(hashedJson)): CatalogSnapshotMessage {
    const settings = { tool_name_separator: this.settings.toolNameSeparator, tools_list_page_size: this.settings.toolsListPageSize };
    // The text of { routes, ...settings } with each route as hashedJson gives it, from the routes' texts made before.
    const text = `{"routes":[${hashed.join(',')}],${JSON.stringify(settings).slice(1)}`;
    return { version: createHash('sha256').update(text).digest('hex').slice(0, 16), routes, ...settings };
  }
}
