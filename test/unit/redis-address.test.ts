import { REDIS_ADDRESS_RULE, describeRedisAddress, parseRedisAddress } from '../../control-plane/shared/redis-client';

describe('a Redis address (--redis)', () => {
  it('is a redis:// or rediss:// URL for one Redis', () => {
    expect(parseRedisAddress('redis://redis:6379')).toEqual({ kind: 'url', url: 'redis://redis:6379' });
    expect(parseRedisAddress('rediss://:secret@redis.example:6380/2')).toEqual({ kind: 'url', url: 'rediss://:secret@redis.example:6380/2' });
  });

  it('is sentinel://HOSTS/PRIMARY for the Sentinels of a primary, with an optional password and database', () => {
    expect(parseRedisAddress('sentinel://10.0.0.1:26379,sentinel-b:26379/mcpgw')).toEqual({
      kind: 'sentinel',
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

  it.each(['http://redis:6379', 'redis:6379', 'sentinel://s1:26379', 'sentinel://s1:26379,s2/main', 'sentinel://s1:99999/main', 'redis://'])('%s is refused, saying what an address looks like', (value) => {
    expect(() => parseRedisAddress(value)).toThrow(/must be redis:\/\/HOST:PORT/);
  });

  it('is logged without its password', () => {
    expect(describeRedisAddress('redis://:secret@redis:6379')).toBe('redis://:***@redis:6379');
    expect(describeRedisAddress('sentinel://app:secret@s1:26379,s2:26379/main')).toBe('sentinel://app:***@s1:26379,s2:26379/main');
    expect(describeRedisAddress('redis://redis:6379')).toBe('redis://redis:6379');
    expect(REDIS_ADDRESS_RULE).toContain('sentinel://');
  });
});
