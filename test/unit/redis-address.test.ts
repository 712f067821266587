import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { REDIS_ADDRESS_RULE, connectionOptions, describeRedisAddress, parseRedisAddress } from '../../control-plane/shared/redis-client';

describe('a Redis address (--redis)', () => {
  it('is a redis:// or rediss:// URL for one Redis', () => {
    expect(parseRedisAddress('redis://redis:6379')).toEqual({ kind: 'url', url: 'redis://redis:6379' });
    expect(parseRedisAddress('rediss://:secret@redis.example:6380/2')).toEqual({ kind: 'url', url: 'rediss://:secret@redis.example:6380/2' });
  });

  it('is sentinel://HOSTS/PRIMARY for the Sentinels of a primary, with an optional password and database', () => {
    expect(parseRedisAddress('sentinel://10.0.0.1:26379,sentinel-b:26379/mcpgw')).toEqual({
      kind: 'sentinel',
      tls: false,
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: 'sentinel-b', port: 26379 },
      ],
      primaryName: 'mcpgw',
      db: 0,
    });
    expect(parseRedisAddress('sentinel://app:p%40ss@s1:26379/main/3')).toMatchObject({ username: 'app', password: 'p@ss', primaryName: 'main', db: 3 });
    expect(parseRedisAddress('sentinel://:secret@s1:26379/main')).toMatchObject({ password: 'secret' });
  });

  it('is sentinels://HOSTS/PRIMARY for Sentinels (and their Redis) that speak TLS only', () => {
    expect(parseRedisAddress('sentinels://:secret@s1:26379,s2:26379/main/1')).toMatchObject({ kind: 'sentinel', tls: true, primaryName: 'main', db: 1, password: 'secret' });
    expect(describeRedisAddress('sentinels://:secret@s1:26379/main')).toBe('sentinels://:***@s1:26379/main');
  });

  it.each(['http://redis:6379', 'sentinelss://s1:26379/main', 'redis:6379', 'sentinel://s1:26379', 'sentinel://s1:26379,s2/main', 'sentinel://s1:99999/main', 'redis://'])('%s is refused, saying what an address looks like', (value) => {
    expect(() => parseRedisAddress(value)).toThrow(/must be redis:\/\/HOST:PORT/);
  });

  it('is logged without its password', () => {
    expect(describeRedisAddress('redis://:secret@redis:6379')).toBe('redis://:***@redis:6379');
    expect(describeRedisAddress('sentinel://app:secret@s1:26379,s2:26379/main')).toBe('sentinel://app:***@s1:26379,s2:26379/main');
    expect(describeRedisAddress('redis://redis:6379')).toBe('redis://redis:6379');
    expect(REDIS_ADDRESS_RULE).toContain('sentinel://');
  });
});

describe('the ioredis options of a Sentinel address', () => {
  const caFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'redis-ca-')), 'ca.crt');
  beforeAll(() => fs.writeFileSync(caFile, 'THE CA'));
  afterAll(() => fs.rmSync(path.dirname(caFile), { recursive: true, force: true }));

  it('sentinels:// speaks TLS to the Sentinels and to the data nodes, both checked against --redis-ca', () => {
    const options = connectionOptions('sentinels://s1:26379/main', { password: 'pw', tlsCaFile: caFile });
    expect(options).toMatchObject({ name: 'main', enableTLSForSentinelMode: true, password: 'pw', sentinelPassword: 'pw' });
    expect(String(options.sentinelTLS?.ca)).toBe('THE CA');
    expect(String(options.tls?.ca)).toBe('THE CA');
  });

  it('sentinels:// without --redis-ca trusts the system CAs', () => {
    expect(connectionOptions('sentinels://s1:26379/main')).toMatchObject({ sentinelTLS: {}, tls: {}, enableTLSForSentinelMode: true });
  });

  it('sentinel:// stays plain, even with a CA given', () => {
    const options = connectionOptions('sentinel://s1:26379/main', { tlsCaFile: caFile });
    expect(options.sentinelTLS).toBeUndefined();
    expect(options.tls).toBeUndefined();
    expect(options.enableTLSForSentinelMode).toBeUndefined();
  });
});
