import { XdsCallbacks } from '../../control-plane/xds/server/callbacks';
import { AdsStream } from '../../control-plane/xds/server/ads-server';
import { Snapshot, buildSnapshot } from '../../control-plane/xds/server/snapshot';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';

const cluster = (name: string, connectTimeout = '1s') => ({ '@type': TYPE_URL.cluster, name, connect_timeout: connectTimeout });
const routeConfig = (name: string, vhost = 'a') => ({ '@type': TYPE_URL.routeConfiguration, name, virtual_hosts: [{ name: vhost, domains: ['*'] }] });
const snapshotOf = (clusters: string[], routeVhost = 'a', timeout = '1s'): Snapshot =>
  buildSnapshot({
    [TYPE_URL.cluster]: clusters.map((name) => cluster(name, timeout)),
    [TYPE_URL.routeConfiguration]: [routeConfig('mcp_routes', routeVhost), routeConfig('other')],
  });

const request = (typeUrl: string, fields: Partial<{ nonce: string; version: string; names: string[]; error: string }> = {}) => ({
  version_info: fields.version ?? '',
  node: { id: 'envoy-1', cluster: 'gw' },
  resource_names: fields.names ?? [],
  type_url: typeUrl,
  response_nonce: fields.nonce ?? '',
  error_detail: fields.error ? { code: 3, message: fields.error } : null,
});

function harness() {
  const sent: { type_url: string; version_info: string; nonce: string; resources: unknown[] }[] = [];
  const events: string[] = [];
  const callbacks: XdsCallbacks = {
    onAck: (_node, typeUrl, version) => events.push(`ack ${typeUrl.split('.').pop()} ${version}`),
    onNack: (_node, typeUrl, version, detail) => events.push(`nack ${typeUrl.split('.').pop()} ${version} ${detail}`),
  };
  return { stream: new AdsStream((response) => sent.push(response), callbacks), sent, events };
}

describe('ADS state-of-the-world stream', () => {
  it('answers a wildcard CDS subscription with every cluster, and RDS with the named configs only', () => {
    const { stream, sent } = harness();
    const snapshot = snapshotOf(['a', 'b']);
    stream.onRequest(request(TYPE_URL.cluster), snapshot);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { names: ['mcp_routes'] }), snapshot);
    expect(sent.map((response) => [response.type_url, response.resources.length])).toEqual([
      [TYPE_URL.cluster, 2],
      [TYPE_URL.routeConfiguration, 1],
    ]);
  });

  it('records an ACK and sends nothing more while the snapshot is unchanged', () => {
    const { stream, sent, events } = harness();
    const snapshot = snapshotOf(['a']);
    stream.onRequest(request(TYPE_URL.cluster), snapshot);
    stream.onRequest(request(TYPE_URL.cluster, { nonce: sent[0].nonce, version: sent[0].version_info }), snapshot);
    stream.onSnapshot(snapshot);
    expect(sent).toHaveLength(1);
    expect(events).toEqual([`ack Cluster ${sent[0].version_info}`]);
  });

  it('on NACK keeps quiet: the rejected version is not resent, a new version is', () => {
    const { stream, sent, events } = harness();
    const rejected = snapshotOf(['a']);
    stream.onRequest(request(TYPE_URL.cluster), rejected);
    stream.onRequest(request(TYPE_URL.cluster, { nonce: sent[0].nonce, error: 'bad cluster' }), rejected);
    stream.onSnapshot(rejected);
    expect(sent).toHaveLength(1);
    expect(events).toEqual([`nack Cluster ${sent[0].version_info} bad cluster`]);

    const fixed = snapshotOf(['a'], 'a', '2s');
    stream.onSnapshot(fixed);
    expect(sent).toHaveLength(2);
    expect(sent[1].version_info).not.toBe(sent[0].version_info);
  });

  it('ignores answers to a superseded nonce', () => {
    const { stream, sent, events } = harness();
    stream.onRequest(request(TYPE_URL.cluster), snapshotOf(['a']));
    stream.onSnapshot(snapshotOf(['a', 'b']));
    stream.onRequest(request(TYPE_URL.cluster, { nonce: sent[0].nonce, error: 'late NACK of the old push' }), snapshotOf(['a', 'b']));
    expect(events).toEqual([]);
    expect(sent).toHaveLength(2);
  });

  it('pushes clusters before the routes that use them', () => {
    const { stream, sent } = harness();
    const first = snapshotOf(['a']);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { names: ['mcp_routes'] }), first);
    stream.onRequest(request(TYPE_URL.cluster), first);
    sent.length = 0;
    stream.onSnapshot(snapshotOf(['a', 'b'], 'b'));
    expect(sent.map((response) => response.type_url)).toEqual([TYPE_URL.cluster, TYPE_URL.routeConfiguration]);
  });

  it('pushes again when the subscription names change', () => {
    const { stream, sent } = harness();
    const snapshot = snapshotOf(['a']);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { names: ['mcp_routes'] }), snapshot);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { nonce: sent[0].nonce, version: sent[0].version_info, names: ['mcp_routes', 'other'] }), snapshot);
    expect(sent.map((response) => response.resources.length)).toEqual([1, 2]);
  });
});
