/**
 * The layout of the gateway's keys in Redis (sessions, their ending channel, each route's last-good
 * state), versioned: every key and channel lives under `<prefix>v<REDIS_SCHEMA_VERSION>:`. A release
 * that changes what a key holds raises the version, so that during a rolling upgrade old and new
 * replicas never read each other's keys, each seeing the other's as absent (docs/adr/0017-closed-inside.md):
 * a client whose session the other version wrote initializes again; a control plane starts without the
 * other version's last-good catalogs, which it relists from the Tool Services.
 */
export const REDIS_SCHEMA_VERSION = 1;

/** The prefix of every key and channel of this schema version under the operator's --redis-prefix. */
export const redisKeyspace = (prefix: string, version = REDIS_SCHEMA_VERSION) => `${prefix}v${version}:`;
