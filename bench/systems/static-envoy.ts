import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { ProcessGroup } from './process-group';
import { HOST } from './topology';

/**
 * Static Envoys for probes that compare one filter mechanism against another (bench/rlqs-probe.ts,
 * bench/ratelimit-settings.ts): a listener answering POST /mcp, clusters by port or Unix socket,
 * started from a bootstrap file, with wrk driving tools/call POSTs of several callers by header.
 */

export const any = (type: string, value: object) => ({ '@type': `type.googleapis.com/${type}`, ...value });

export const ANSWER = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'echo' }] } });
export const REQUEST = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'bench__echo', arguments: { text: 'echo' } } });

const http2Options = {
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': any('envoy.extensions.upstreams.http.v3.HttpProtocolOptions', {
    explicit_http_config: { http2_protocol_options: {} },
  }),
};

/** A cluster of one endpoint: a loopback port, or a Unix domain socket's path. */
export function staticCluster(name: string, at: number | string, http2: boolean) {
  const address = typeof at === 'number' ? { socket_address: { address: HOST, port_value: at } } : { pipe: { path: at } };
  return {
    name,
    type: 'STATIC',
    connect_timeout: '1s',
    load_assignment: { cluster_name: name, endpoints: [{ lb_endpoints: [{ endpoint: { address } }] }] },
    ...(http2 && { typed_extension_protocol_options: http2Options }),
  };
}

export function listener(port: number, httpFilters: object[], route: object) {
  return {
    name: 'probe',
    address: { socket_address: { address: HOST, port_value: port } },
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: any('envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager', {
              stat_prefix: 'probe',
              route_config: { virtual_hosts: [{ name: 'all', domains: ['*'], routes: [{ match: { prefix: '/' }, ...route }] }] },
              http_filters: [...httpFilters, { name: 'envoy.filters.http.router', typed_config: any('envoy.extensions.filters.http.router.v3.Router', {}) }],
            }),
          },
        ],
      },
    ],
  };
}

export function bootstrap(adminPort: number, listenerSpec: object, clusters: object[]) {
  return {
    admin: { address: { socket_address: { address: HOST, port_value: adminPort } } },
    static_resources: { listeners: [listenerSpec], clusters },
  };
}

/** Starts Envoy (one worker) from `config`, natively or under callgrind (its dumps at `callgrindOut`.<pid>); its pid once ready. */
export async function startEnvoy(group: ProcessGroup, name: string, config: object, adminPort: number, callgrindOut?: string): Promise<number> {
  const file = path.join(group.logDir, `${name}.yaml`);
  fs.writeFileSync(file, stringify(config));
  const envoyArgs = ['-c', file, '--concurrency', '1', '--use-dynamic-base-id', '--log-level', 'warn'];
  const envoy = callgrindOut
    ? group.spawnUnpinned(name, 'valgrind', ['--tool=callgrind', `--callgrind-out-file=${callgrindOut}.%p`, envoyBinary(), ...envoyArgs])
    : group.spawn(name, envoyBinary(), envoyArgs);
  await envoy.untilReady(`${name} ready`, async () => ((await fetch(`http://${HOST}:${adminPort}/ready`).then((r) => r.ok).catch(() => false)) ? true : undefined), {
    timeoutMs: callgrindOut ? 600_000 : 20_000,
  });
  return envoy.child.pid!;
}

/** Requests the probe listener has completed so far. */
export async function requestsCompleted(adminPort: number): Promise<number> {
  const text = await (await fetch(`http://${HOST}:${adminPort}/stats?filter=^http\\.probe\\.downstream_rq_completed$`)).text();
  return Number(/: (\d+)/.exec(text)?.[1] ?? 'NaN');
}

/** A wrk script posting REQUEST as `callers` callers in turn (header x-caller: caller-1 …). */
export function writeWrkScript(file: string, callers: number): void {
  fs.writeFileSync(
    file,
    [
      'local n = 0',
      `local body = '${REQUEST}'`,
      'request = function()',
      `  n = n % ${callers} + 1`,
      '  return wrk.format("POST", nil, {["content-type"] = "application/json", ["x-caller"] = "caller-" .. n}, body)',
      'end',
      '',
    ].join('\n'),
  );
}

/**
 * `count` tools/call POSTs over `connections` keep-alive connections, `callers` callers in turn: a fixed
 * amount of work whatever the machine's load (for instruction counts). Returns how many were not 200.
 */
export async function sendToolCalls(port: number, count: number, connections: number, callers: number): Promise<number> {
  let next = 0;
  let failed = 0;
  const connection = async () => {
    while (next < count) {
      const caller = `caller-${(next++ % callers) + 1}`;
      const response = await fetch(`http://${HOST}:${port}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-caller': caller }, body: REQUEST });
      await response.arrayBuffer();
      if (response.status !== 200) failed += 1;
    }
  };
  await Promise.all(Array.from({ length: connections }, connection));
  return failed;
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}
