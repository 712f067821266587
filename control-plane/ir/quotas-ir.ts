import { patternMatches } from '../registry/tool-pattern';
import { RATE_PATTERN, RateLimitSetting, RateLimits, RateUnit, RouteQuotas, ToolServiceQuotas } from '../registry/model';

/**
 * The registry's limits (docs/quotas.md) as the translator and the ratelimit service's configuration
 * need them: every limit resolved to a rate, whether it counts per caller, where it is counted, and a
 * name that says where it is set and what it counts. The name is what a refused client, the metrics
 * and the ratelimit service's configuration call the limit.
 */

export interface Rate {
  requests: number;
  unit: RateUnit;
}

/** What a shared limit does when the ratelimit service cannot answer for a call (docs/quotas.md). */
export type WhenServiceDown = 'allow' | 'refuse';

export interface LimitIR {
  /** e.g. `route:demo/calls/per-caller`, `tool-service:weather/calls`, `tool:weather/get_*\/calls/per-caller`. */
  name: string;
  rate: Rate;
  /** Each caller counted on its own (the token's subject; the client's address on a route without auth). */
  perCaller: boolean;
  /** Counted across every Envoy by the ratelimit service; absent: each Envoy counts on its own. */
  shared?: {
    whenServiceDown: WhenServiceDown;
    /** Asked of the service for every call even where the gateway leases shared limits (docs/quotas.md). */
    exact?: true;
  };
}

export interface RouteQuotasIR {
  /** tools/call on the route. */
  calls: LimitIR[];
  /** What the gateway answers itself on the route (initialize, tools/list, …). */
  discovery: LimitIR[];
  /** Each caller's tools/call in flight on the route at once. */
  concurrencyPerCaller?: InFlightLimitIR;
}

/** A limit of each caller's calls in flight at once, counted across every Envoy (docs/quotas.md). */
export interface InFlightLimitIR {
  /** e.g. `route:demo/concurrency/per-caller`. */
  name: string;
  inFlight: number;
}

/** Limits of the tools some patterns match, each tool counted on its own. */
export interface ToolQuotaIR {
  /** Its place among the Tool Service's tool limits: the first whose patterns match a tool applies. */
  index: number;
  patterns: string[];
  calls: LimitIR[];
  /** Each caller's calls of each matching tool in flight at once (named per tool: toolConcurrencyName). */
  concurrencyPerCaller?: number;
}

export interface ToolServiceQuotasIR {
  calls: LimitIR[];
  tools: ToolQuotaIR[];
  /** tools/call in flight to the Tool Service at once (its cluster's circuit breaker). */
  concurrency?: number;
  /** Each caller's tools/call in flight to the Tool Service at once, from every route. */
  concurrencyPerCaller?: InFlightLimitIR;
}

export const NO_ROUTE_QUOTAS: RouteQuotasIR = { calls: [], discovery: [] };
export const NO_TOOL_SERVICE_QUOTAS: ToolServiceQuotasIR = { calls: [], tools: [] };

export function parseRate(text: string): Rate {
  const match = RATE_PATTERN.exec(text);
  if (!match) throw new Error(`not a rate: ${text}`);
  return { requests: Number(match[1]), unit: match[2] as RateUnit };
}

export const rateText = (rate: Rate) => `${rate.requests}/${rate.unit}`;

function limitOf(setting: RateLimitSetting | undefined, name: string, perCaller: boolean): LimitIR[] {
  if (setting === undefined || setting === 'unlimited') return [];
  if (typeof setting === 'string') return [{ name, rate: parseRate(setting), perCaller }];
  return [
    {
      name,
      rate: parseRate(setting.rate),
      perCaller,
      ...(setting.shared && { shared: { whenServiceDown: setting.whenServiceDown ?? 'allow', ...(setting.exact && { exact: true as const }) } }),
    },
  ];
}

/** A group's limits, named `<scope>/<what>/per-caller` and `<scope>/<what>`. */
function limitsOf(limits: RateLimits | undefined, scope: string): LimitIR[] {
  return [...limitOf(limits?.perCaller, `${scope}/per-caller`, true), ...limitOf(limits?.total, scope, false)];
}

export function routeQuotasIR(routeKey: string, quotas: RouteQuotas | undefined): RouteQuotasIR {
  if (!quotas) return NO_ROUTE_QUOTAS;
  return {
    calls: limitsOf(quotas.calls, `route:${routeKey}/calls`),
    discovery: limitsOf(quotas.discovery, `route:${routeKey}/discovery`),
    ...(typeof quotas.concurrency?.perCaller === 'number' && {
      concurrencyPerCaller: { name: `route:${routeKey}/concurrency/per-caller`, inFlight: quotas.concurrency.perCaller },
    }),
  };
}

export function toolServiceQuotasIR(serviceId: string, quotas: ToolServiceQuotas | undefined): ToolServiceQuotasIR {
  if (!quotas) return NO_TOOL_SERVICE_QUOTAS;
  return {
    calls: limitsOf(quotas.calls, `tool-service:${serviceId}/calls`),
    tools: (quotas.tools ?? []).map((tool, index) => ({
      index,
      patterns: tool.tools,
      calls: limitsOf(tool.calls, `tool:${serviceId}/${tool.tools.join(',')}/calls`),
      ...(tool.concurrency && { concurrencyPerCaller: tool.concurrency.perCaller }),
    })),
    ...(quotas.concurrency?.total && { concurrency: quotas.concurrency.total }),
    ...(quotas.concurrency?.perCaller && {
      concurrencyPerCaller: { name: `${concurrencyLimitName(serviceId)}/per-caller`, inFlight: quotas.concurrency.perCaller },
    }),
  };
}

/** The name of a Tool Service's concurrency limit (its calls in flight at once). */
export const concurrencyLimitName = (serviceId: string) => `tool-service:${serviceId}/concurrency`;

/** The name of a tool's per-caller concurrency limit: each tool a pattern matches is counted on its own. */
export const toolConcurrencyName = (serviceId: string, tool: string) => `tool:${serviceId}/${tool}/concurrency/per-caller`;

/** The tool limits that apply to a tool: the first entry whose patterns match it. */
export function toolQuotaOf(tools: ToolQuotaIR[], tool: string): ToolQuotaIR | undefined {
  return tools.find((entry) => entry.patterns.some((pattern) => patternMatches(pattern, tool)));
}
