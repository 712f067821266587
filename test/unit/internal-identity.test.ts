import { identitiesOf, identityDnsName, identityUri, roleSanPatterns, vouchesFor } from '../../control-plane/shared/internal-tls';
import { isLoopbackHost } from '../../control-plane/shared/loopback';
import { redisKeyspace } from '../../control-plane/shared/redis-keys';

describe('internal identities (docs/adr/0017-closed-inside.md)', () => {
  it('reads a role and a name from a URI or DNS SAN, and ignores every other name', () => {
    expect(identitiesOf('DNS:localhost, URI:spiffe://cluster.local/mcpgw/envoy/gw-envoy-7d9f, IP Address:127.0.0.1')).toEqual([{ role: 'envoy', name: 'gw-envoy-7d9f' }]);
    expect(identitiesOf('DNS:sidecar.sidecar.mcpgw.internal')).toEqual([{ role: 'sidecar', name: 'sidecar' }]);
    expect(identitiesOf('DNS:cp-0.control-plane.mcpgw.internal, URI:spiffe://td/mcpgw/control-plane/cp-0')).toEqual([
      { role: 'control-plane', name: 'cp-0' },
      { role: 'control-plane', name: 'cp-0' },
    ]);
    for (const other of [
      'URI:spiffe://td/ns/mcp/sa/envoy',
      'URI:spiffe://td/mcpgw/admin/x',
      'URI:https://td/mcpgw/envoy/x',
      'URI:spiffe://td/mcpgw/envoy/a/b',
      'DNS:x.envoy.mcpgw.internal.evil.com',
      'DNS:a.b.envoy.mcpgw.internal',
      'DNS:envoy.mcpgw.internal',
    ]) {
      expect([other, identitiesOf(other)]).toEqual([other, []]);
    }
    expect(identitiesOf(undefined)).toEqual([]);
  });

  it('writes identities the way it reads them', () => {
    const identity = { role: 'sidecar', name: 'sidecar-2' } as const;
    expect(identitiesOf(`URI:${identityUri(identity, 'example.org')}`)).toEqual([identity]);
    expect(identitiesOf(`DNS:${identityDnsName(identity)}`)).toEqual([identity]);
  });

  it("matches Envoy's SAN patterns exactly as it reads them", () => {
    const { URI, DNS } = roleSanPatterns('control-plane');
    expect(new RegExp(URI).test('spiffe://td/mcpgw/control-plane/cp-0')).toBe(true);
    expect(new RegExp(URI).test('spiffe://td/mcpgw/envoy/cp-0')).toBe(false);
    expect(new RegExp(DNS).test('cp-0.control-plane.mcpgw.internal')).toBe(true);
    expect(new RegExp(DNS).test('cp-0.control-planeXmcpgw.internal')).toBe(false);
    expect(new RegExp(DNS).test('cp-0.sidecar.mcpgw.internal')).toBe(false);
  });

  it('vouches for its own name and NAME/<instance>, in its own role only', () => {
    const shared = { role: 'envoy', name: 'envoy' } as const;
    expect(vouchesFor(shared, 'envoy', 'envoy')).toBe(true);
    expect(vouchesFor(shared, 'envoy', 'envoy/gw-envoy-7d9f')).toBe(true);
    expect(vouchesFor(shared, 'envoy', 'envoy-b')).toBe(false);
    expect(vouchesFor(shared, 'envoy', 'envoyx/1')).toBe(false);
    expect(vouchesFor(shared, 'sidecar', 'envoy')).toBe(false);
  });
});

describe('loopback binds', () => {
  it.each([
    ['127.0.0.1', true],
    ['127.8.9.10', true],
    ['localhost', true],
    ['::1', true],
    ['[::1]', true],
    ['0.0.0.0', false],
    ['10.77.0.1', false],
    ['::', false],
    ['cp.internal', false],
    ['128.0.0.1', false],
  ])('%s is loopback: %s', (host, loopback) => {
    expect(isLoopbackHost(host)).toBe(loopback);
  });
});

describe('Redis key schema', () => {
  it('puts every key and channel under the schema version', () => {
    expect(redisKeyspace('mcpgw:')).toBe('mcpgw:v1:');
    expect(redisKeyspace('tenant-a:', 2)).toBe('tenant-a:v2:');
  });
});
