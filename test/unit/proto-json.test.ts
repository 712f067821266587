import { envoyProtoRoot } from '../../control-plane/xds/protobuf/envoy-protos';
import { packAny } from '../../control-plane/xds/protobuf/proto-json';
import { TYPE_URL } from '../../control-plane/xds/translate/type-urls';

function decode(packed: { type_url: string; value: Buffer }) {
  const type = envoyProtoRoot().lookupType(packed.type_url.split('/').pop()!);
  return type.toObject(type.decode(packed.value), { longs: Number, enums: String, defaults: false });
}

describe('packAny (proto3 JSON → google.protobuf.Any)', () => {
  it.each([
    ['whole seconds', '5s', { seconds: 5, nanos: 0 }],
    ['fractions', '1.25s', { seconds: 1, nanos: 250000000 }],
    ['nanoseconds', '0.000000001s', { seconds: 0, nanos: 1 }],
  ])('encodes durations: %s', (_name, duration, expected) => {
    const decoded = decode(packAny({ '@type': TYPE_URL.cluster, name: 'c', connect_timeout: duration }));
    expect(decoded.connect_timeout).toEqual(expected);
  });

  it('encodes enums by name, wrapper values bare and nested Anys by @type', () => {
    const decoded = decode(
      packAny({
        '@type': TYPE_URL.cluster,
        name: 'c',
        type: 'STRICT_DNS',
        per_connection_buffer_limit_bytes: 4096,
        typed_extension_protocol_options: {
          'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
            '@type': TYPE_URL.httpProtocolOptions,
            explicit_http_config: { http2_protocol_options: {} },
          },
        },
      }),
    );
    expect(decoded.type).toBe('STRICT_DNS');
    expect(decoded.per_connection_buffer_limit_bytes).toEqual({ value: 4096 });
    const nested = decoded.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    expect(nested.type_url).toBe(TYPE_URL.httpProtocolOptions);
    expect(decode(nested)).toEqual({ explicit_http_config: { http2_protocol_options: {} } });
  });

  it('encodes JSON into google.protobuf.Struct', () => {
    const decoded = decode(
      packAny({ '@type': TYPE_URL.cluster, name: 'c', metadata: { filter_metadata: { mcpgw: { route: 'demo', n: 2, ok: true, list: [null] } } } }),
    );
    expect(decoded.metadata.filter_metadata.mcpgw.fields).toEqual({
      route: { stringValue: 'demo' },
      n: { numberValue: 2 },
      ok: { boolValue: true },
      list: { listValue: { values: [{ nullValue: 'NULL_VALUE' }] } },
    });
  });

  it.each([
    ['an unknown field', { name: 'c', conect_timeout: '1s' }, /Cluster has no field "conect_timeout"/],
    ['an unknown enum value', { name: 'c', type: 'STATICC' }, /"STATICC" is not a value of .envoy.config.cluster.v3.Cluster.DiscoveryType/],
    ['a malformed duration', { name: 'c', connect_timeout: '5 seconds' }, /Cluster.connect_timeout: expected a duration/],
    ['a scalar where a message belongs', { name: 'c', load_assignment: 'x' }, /Cluster.load_assignment: expected an object/],
  ])('rejects %s, naming the field', (_name, json, error) => {
    expect(() => packAny({ '@type': TYPE_URL.cluster, ...json })).toThrow(error);
  });
});
