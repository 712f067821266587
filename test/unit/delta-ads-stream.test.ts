import { XdsCallbacks } from '../../control-plane/xds/server/callbacks';
import { DeltaAdsStream, DeltaDiscoveryResponse } from '../../control-plane/xds/server/delta-ads-stream';
import { Snapshot, buildSnapshot } from '../../control-plane/xds/server/snapshot';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';

const cluster = (name: string, connectTimeout = '1s') => ({ '@type': TYPE_URL.cluster, name, connect_timeout: connectTimeout });
const routeConfig = (name: string, vhost = 'a') => ({ '@type': TYPE_URL.routeConfiguration, name, virtual_hosts: [{ name: vhost, domains: ['*'] }] });
/** Clusters by name with their connect timeout, so that one cluster can change alone. */
const snapshotOf = (clusters: Record<string, string>, routeVhost = 'a'): Snapshot =>
  buildSnapshot({
    [TYPE_URL.cluster]: Object.entries(clusters).map(([name, timeout]) => cluster(name, timeout)),
    [TYPE_URL.routeConfiguration]: [routeConfig('mcp_routes', routeVhost), routeConfig('other')],
  });

const request = (
  typeUrl: string,
  fields: Partial<{ nonce: string; subscribe: string[]; unsubscribe: string[]; versions: Record<string, string>; error: string }> = {},
) => ({
  node: { id: 'envoy-1', cluster: 'gw' },
  type_url: typeUrl,
  resource_names_subscribe: fields.subscribe ?? [],
  resource_names_unsubscribe: fields.unsubscribe ?? [],
  initial_resource_versions: fields.versions ?? {},
  response_nonce: fields.nonce ?? '',
  error_detail: fields.error ? { code: 3, message: fields.error } : null,
});

const shortType = (typeUrl: string) => typeUrl.split('.').pop();
/** A response as one line: type, sent names, removed names. */
const summary = (response: DeltaDiscoveryResponse) =>
  `${shortType(response.type_url)} +[${response.resources.map((resource) => resource.name)}] -[${response.removed_resources}]`;

function harness() {
  const sent: DeltaDiscoveryResponse[] = [];
  const events: string[] = [];
  const callbacks: XdsCallbacks = {
    onAck: (_node, typeUrl, version) => events.push(`ack ${shortType(typeUrl)} ${version}`),
    onNack: (_node, typeUrl, version, detail) => events.push(`nack ${shortType(typeUrl)} ${version} ${detail}`),
  };
  const stream = new DeltaAdsStream((response) => sent.push(response), callbacks);
  /** ACKs the last response, as Envoy does once it has applied it. */
  const ackLast = (snapshot: Snapshot) => {
    const last = sent[sent.length - 1];
    stream.onRequest(request(last.type_url, { nonce: last.nonce }), snapshot);
  };
  return { stream, sent, events, ackLast };
}

describe('ADS delta stream', () => {
  const initial = snapshotOf({ a: '1s', b: '1s' });

  it.each([
    ['an initial CDS request naming nothing (legacy wildcard)', request(TYPE_URL.cluster), ['Cluster +[a,b] -[]']],
    ['an initial CDS request naming "*"', request(TYPE_URL.cluster, { subscribe: ['*'] }), ['Cluster +[a,b] -[]']],
    ['a CDS request naming one cluster', request(TYPE_URL.cluster, { subscribe: ['a'] }), ['Cluster +[a] -[]']],
    ['an RDS request naming one config', request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes'] }), ['RouteConfiguration +[mcp_routes] -[]']],
    ['an RDS request naming nothing (no wildcard for RDS)', request(TYPE_URL.routeConfiguration), []],
    [
      'a reconnect whose initial_resource_versions match the snapshot',
      request(TYPE_URL.routeConfiguration, {
        subscribe: ['mcp_routes'],
        versions: { mcp_routes: initial.get(TYPE_URL.routeConfiguration)!.resourceVersions.get('mcp_routes')! },
      }),
      [],
    ],
    [
      'a wildcard reconnect holding one current and one outdated cluster',
      request(TYPE_URL.cluster, { versions: { a: initial.get(TYPE_URL.cluster)!.resourceVersions.get('a')!, b: 'outdated' } }),
      ['Cluster +[b] -[]'],
    ],
    ['a wildcard reconnect holding a cluster that is gone', request(TYPE_URL.cluster, { versions: { gone: 'v' } }), ['Cluster +[a,b] -[gone]']],
  ])('answers %s', (_case, firstRequest, expected) => {
    const { stream, sent } = harness();
    stream.onRequest(firstRequest, initial);
    expect(sent.map(summary)).toEqual(expected);
  });

  it('sends each resource with its own version and the type snapshot version as system_version_info', () => {
    const { stream, sent } = harness();
    stream.onRequest(request(TYPE_URL.cluster), initial);
    const clusters = initial.get(TYPE_URL.cluster)!;
    expect(sent[0].system_version_info).toBe(clusters.version);
    expect(sent[0].resources).toEqual(
      ['a', 'b'].map((name) => ({ name, version: clusters.resourceVersions.get(name), resource: clusters.resources.get(name) })),
    );
  });

  it.each([
    ['the same snapshot', snapshotOf({ a: '1s', b: '1s' }), []],
    ['one changed cluster', snapshotOf({ a: '1s', b: '2s' }), ['Cluster +[b] -[]']],
    ['one added cluster', snapshotOf({ a: '1s', b: '1s', c: '1s' }), ['Cluster +[c] -[]']],
    ['one removed cluster', snapshotOf({ a: '1s' }), ['Cluster +[] -[b]']],
    ['a changed route config nobody subscribed to', snapshotOf({ a: '1s', b: '1s' }, 'b'), []],
  ])('after an ACKed wildcard CDS push, sends only the difference on %s', (_case, next, expected) => {
    const { stream, sent, events, ackLast } = harness();
    stream.onRequest(request(TYPE_URL.cluster), initial);
    ackLast(initial);
    sent.length = 0;
    stream.onSnapshot(next);
    expect(sent.map(summary)).toEqual(expected);
    expect(events).toEqual([`ack Cluster ${initial.get(TYPE_URL.cluster)!.version}`]);
  });

  it('stops sending an unsubscribed route config, and sends it again on a new subscription', () => {
    const { stream, sent, ackLast } = harness();
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes', 'other'] }), initial);
    ackLast(initial);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { unsubscribe: ['other'] }), initial);
    const bothChanged = buildSnapshot({ [TYPE_URL.routeConfiguration]: [routeConfig('mcp_routes', 'b'), routeConfig('other', 'b')] });
    stream.onSnapshot(bothChanged);
    ackLast(bothChanged);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['other'] }), bothChanged);
    expect(sent.map(summary)).toEqual([
      'RouteConfiguration +[mcp_routes,other] -[]',
      'RouteConfiguration +[mcp_routes] -[]',
      'RouteConfiguration +[other] -[]',
    ]);
  });

  it('resends a resource re-subscribed by name even when the client should hold it', () => {
    const { stream, sent, ackLast } = harness();
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes'] }), initial);
    ackLast(initial);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes'] }), initial);
    expect(sent.map(summary)).toEqual(['RouteConfiguration +[mcp_routes] -[]', 'RouteConfiguration +[mcp_routes] -[]']);
  });

  it('answers a cluster unsubscribed by name under a wildcard with its current state', () => {
    const { stream, sent, ackLast } = harness();
    stream.onRequest(request(TYPE_URL.cluster, { subscribe: ['*', 'a'] }), initial);
    ackLast(initial);
    stream.onRequest(request(TYPE_URL.cluster, { unsubscribe: ['a'] }), initial);
    expect(sent.map(summary)).toEqual(['Cluster +[a,b] -[]', 'Cluster +[a] -[]']);
  });

  it('on NACK records it and does not resend the rejected clusters; changed content is sent', () => {
    const { stream, sent, events } = harness();
    stream.onRequest(request(TYPE_URL.cluster), initial);
    stream.onRequest(request(TYPE_URL.cluster, { nonce: sent[0].nonce, error: 'bad cluster' }), initial);
    stream.onSnapshot(initial);
    expect(sent).toHaveLength(1);
    expect(events).toEqual([`nack Cluster ${sent[0].system_version_info} bad cluster`]);

    stream.onSnapshot(snapshotOf({ a: '1s', b: '2s' }));
    expect(sent.map(summary)).toEqual(['Cluster +[a,b] -[]', 'Cluster +[b] -[]']);
  });

  it('ignores the ACK or NACK of a superseded push, but applies its subscription change', () => {
    const { stream, sent, events } = harness();
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes'] }), initial);
    const changed = snapshotOf({ a: '1s', b: '1s' }, 'b');
    stream.onSnapshot(changed);
    stream.onRequest(request(TYPE_URL.routeConfiguration, { nonce: sent[0].nonce, error: 'late NACK', subscribe: ['other'] }), changed);
    expect(events).toEqual([]);
    expect(sent.map(summary)).toEqual([
      'RouteConfiguration +[mcp_routes] -[]',
      'RouteConfiguration +[mcp_routes] -[]',
      'RouteConfiguration +[other] -[]',
    ]);
  });

  it('pushes clusters before the routes that use them', () => {
    const { stream, sent } = harness();
    stream.onRequest(request(TYPE_URL.routeConfiguration, { subscribe: ['mcp_routes'] }), initial);
    stream.onRequest(request(TYPE_URL.cluster), initial);
    sent.length = 0;
    stream.onSnapshot(snapshotOf({ a: '1s', b: '1s', c: '1s' }, 'b'));
    expect(sent.map(summary)).toEqual(['Cluster +[c] -[]', 'RouteConfiguration +[mcp_routes] -[]']);
  });

  it('answers a wildcard request once even when there is nothing to send, so that Envoy can finish initializing', () => {
    const { stream, sent } = harness();
    const noClusters = snapshotOf({});
    stream.onRequest(request(TYPE_URL.cluster), noClusters);
    stream.onRequest(request(TYPE_URL.cluster, { nonce: sent[0].nonce }), noClusters);
    expect(sent.map(summary)).toEqual(['Cluster +[] -[]']);
  });
});
