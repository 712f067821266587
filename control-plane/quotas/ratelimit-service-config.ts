import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify as toYaml } from 'yaml';
import { GatewayIR } from '../ir/gateway-ir';
import { LimitIR } from '../ir/quotas-ir';
import { DESCRIPTOR_KEYS, RATELIMIT_DOMAIN } from '../xds/translate/quotas';

/**
 * The ratelimit service's configuration (envoyproxy/ratelimit, its YAML file format) of the registry's
 * shared limits (docs/quotas.md). Envoy sends, for a shared limit, the descriptor
 * [limit=<name>, scope=<route key | Tool Service id | Tool Service id/tool>, caller=<subject> | remote_address=<address>];
 * the service counts every scope value and every caller apart (a key without a value), so this file
 * changes only when the registry's shared limits do.
 */

interface RateLimitEntry {
  unit: string;
  requests_per_unit: number;
  name: string;
}

interface Descriptor {
  key: string;
  value?: string;
  rate_limit?: RateLimitEntry;
  descriptors?: Descriptor[];
}

export interface RateLimitServiceConfig {
  domain: string;
  descriptors: Descriptor[];
}

function sharedLimits(ir: GatewayIR): LimitIR[] {
  const all = [
    ...ir.routes.flatMap((route) => [...route.quotas.calls, ...route.quotas.discovery]),
    ...ir.toolServices.flatMap((service) => [...service.quotas.calls, ...service.quotas.tools.flatMap((tool) => tool.calls)]),
  ];
  const byName = new Map(all.filter((limit) => limit.shared).map((limit) => [limit.name, limit]));
  return [...byName.values()].sort((a, b) => a.name.localeCompare(b.name));
}

function descriptorOf(limit: LimitIR): Descriptor {
  const rateLimit: RateLimitEntry = { unit: limit.rate.unit, requests_per_unit: limit.rate.requests, name: limit.name };
  const scope: Descriptor = limit.perCaller
    ? { key: DESCRIPTOR_KEYS.scope, descriptors: [DESCRIPTOR_KEYS.caller, DESCRIPTOR_KEYS.address].map((key) => ({ key, rate_limit: rateLimit })) }
    : { key: DESCRIPTOR_KEYS.scope, rate_limit: rateLimit };
  return { key: DESCRIPTOR_KEYS.limit, value: limit.name, descriptors: [scope] };
}

export function rateLimitServiceConfig(ir: GatewayIR): RateLimitServiceConfig {
  return { domain: RATELIMIT_DOMAIN, descriptors: sharedLimits(ir).map(descriptorOf) };
}

export const hasSharedLimits = (ir: GatewayIR) => sharedLimits(ir).length > 0;

/**
 * The service refuses to start without a configuration: where there is none yet (before a control
 * plane's first), one without limits. A file already there is left as it is.
 */
export function writeRateLimitServiceConfigIfMissing(file: string): void {
  if (!fs.existsSync(file)) writeRateLimitServiceConfig(file, { domain: RATELIMIT_DOMAIN, descriptors: [] });
}

/**
 * Writes the configuration where the ratelimit service reads it (its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/),
 * whole or not at all: written beside its directory and renamed into it, since the service reads every
 * file that appears there. Returns whether the file changed.
 */
export function writeRateLimitServiceConfig(file: string, config: RateLimitServiceConfig): boolean {
  return writeRateLimitServiceConfigText(file, rateLimitServiceConfigText(config));
}

/** The file's text: what the control plane writes and what its admin serves at GET /config/ratelimit. */
export function rateLimitServiceConfigText(config: RateLimitServiceConfig): string {
  return `# Written by the mcpgw control plane from the registry's shared limits (docs/quotas.md); do not edit.\n${toYaml(config)}`;
}

/** Writes a configuration's text (see writeRateLimitServiceConfig): renamed into place, only when it changed. */
export function writeRateLimitServiceConfigText(file: string, text: string): boolean {
  if (fs.existsSync(file) && fs.readFileSync(file, 'utf8') === text) return false;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const staging = path.join(path.dirname(path.dirname(file)), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(staging, text);
  fs.renameSync(staging, file);
  return true;
}
