import { isDeepStrictEqual } from 'node:util';
import { TypedJson } from './protobuf/proto-json';
import { XdsResources } from './translate';
import { TYPE_URL } from './translate/type-urls';
import { CALL_LOG_CLUSTER_NAME } from './translate/settings';

/**
 * What an SRE reviews: the xDS a registry produces, as a static Envoy bootstrap that
 * `envoy --mode validate` checks, and the difference between two registries' xDS.
 */

const SHORT_TYPE_NAMES: Record<string, string> = {
  [TYPE_URL.cluster]: 'clusters',
  [TYPE_URL.listener]: 'listeners',
  [TYPE_URL.routeConfiguration]: 'route_configurations',
  [TYPE_URL.typedExtensionConfig]: 'extension_configs',
};

function withoutType({ '@type': _type, ...rest }: TypedJson): Record<string, unknown> {
  return rest;
}

/**
 * The bootstrap's call-log cluster (envoy/bootstrap.yaml), which the listener's call log names: here
 * towards a control plane on loopback at the default --call-log port (--grpc's default + 2).
 */
const STATIC_CALL_LOG_CLUSTER = {
  name: CALL_LOG_CLUSTER_NAME,
  type: 'STATIC',
  connect_timeout: '1s',
  load_assignment: { cluster_name: CALL_LOG_CLUSTER_NAME, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: 18002 } } } }] }] },
};

/**
 * The same resources as one static bootstrap: the RDS reference of the listener is replaced by the
 * route configuration it names, and a filter whose configuration comes by ECDS by that
 * configuration, since a static bootstrap has no ADS to ask; with the call log's cluster of the bootstrap.
 */
export function asStaticBootstrap(resources: XdsResources): Record<string, unknown> {
  const routeConfigs = new Map(resources[TYPE_URL.routeConfiguration].map((config) => [config.name as string, withoutType(config)]));
  const filterConfigs = new Map((resources[TYPE_URL.typedExtensionConfig] ?? []).map((config) => [config.name as string, config.typed_config]));
  const inlineRoutes = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(inlineRoutes);
    if (typeof value !== 'object' || value === null) return value;
    const object = value as Record<string, unknown>;
    if (object['@type'] === TYPE_URL.httpConnectionManager && object.rds) {
      const { rds, ...rest } = object;
      return inlineRoutes({ ...rest, route_config: routeConfigs.get((rds as { route_config_name: string }).route_config_name) });
    }
    if (object.config_discovery && typeof object.name === 'string') {
      const { config_discovery: _discovery, ...rest } = object;
      return { ...rest, typed_config: filterConfigs.get(object.name) };
    }
    return Object.fromEntries(Object.entries(object).map(([key, inner]) => [key, inlineRoutes(inner)]));
  };
  return {
    node: { id: 'mcpgw-render', cluster: 'mcp-gateway' },
    static_resources: {
      listeners: resources[TYPE_URL.listener].map((listener) => inlineRoutes(withoutType(listener))),
      clusters: [...resources[TYPE_URL.cluster].map(withoutType), STATIC_CALL_LOG_CLUSTER],
    },
  };
}

export interface XdsDifference {
  type: string;
  name: string;
  change: 'added' | 'removed' | 'changed';
  /** For changed resources: each differing field as `path: old → new`. */
  fields?: string[];
}

const isNamedList = (value: unknown): value is { name: string }[] =>
  Array.isArray(value) && value.every((item) => typeof (item as { name?: unknown } | null)?.name === 'string');

/** Lists of named things (routes, virtual hosts, filters) compare by name, so an insertion reads as one. */
function keyedByName(value: unknown): unknown {
  return isNamedList(value) ? Object.fromEntries(value.map((item) => [`[${item.name}]`, item])) : value;
}

function fieldDifferences(rawBefore: unknown, rawAfter: unknown, path: string, out: string[]): void {
  if (isDeepStrictEqual(rawBefore, rawAfter)) return;
  const byName = isNamedList(rawBefore) && isNamedList(rawAfter);
  const before = byName ? keyedByName(rawBefore) : rawBefore;
  const after = byName ? keyedByName(rawAfter) : rawAfter;
  const bothObjects = typeof before === 'object' && before !== null && typeof after === 'object' && after !== null;
  if (bothObjects && Array.isArray(before) === Array.isArray(after)) {
    const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
    for (const key of keys) {
      const child = Array.isArray(before) || key.startsWith('[') ? `${path}[${key.replace(/^\[|\]$/g, '')}]` : `${path}.${key}`;
      fieldDifferences((before as Record<string, unknown>)[key], (after as Record<string, unknown>)[key], child, out);
    }
    return;
  }
  out.push(`${path}: ${JSON.stringify(before) ?? '(absent)'} → ${JSON.stringify(after) ?? '(absent)'}`);
}

export function diffXds(before: XdsResources, after: XdsResources): XdsDifference[] {
  const differences: XdsDifference[] = [];
  for (const typeUrl of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const type = SHORT_TYPE_NAMES[typeUrl] ?? typeUrl;
    const byName = (list: TypedJson[] = []) => new Map(list.map((resource) => [resource.name as string, resource]));
    const old = byName(before[typeUrl]);
    const next = byName(after[typeUrl]);
    for (const [name, resource] of next) {
      const previous = old.get(name);
      if (!previous) differences.push({ type, name, change: 'added' });
      else if (!isDeepStrictEqual(previous, resource)) {
        const fields: string[] = [];
        fieldDifferences(previous, resource, '', fields);
        differences.push({ type, name, change: 'changed', fields });
      }
    }
    for (const name of old.keys()) if (!next.has(name)) differences.push({ type, name, change: 'removed' });
  }
  return differences;
}

export function formatDifferences(differences: XdsDifference[]): string {
  if (differences.length === 0) return 'no differences\n';
  return differences
    .map(({ type, name, change, fields }) =>
      [`${change === 'added' ? '+' : change === 'removed' ? '-' : '~'} ${type}/${name}`, ...(fields ?? []).map((field) => `    ${field}`)].join('\n'),
    )
    .join('\n')
    .concat('\n');
}
