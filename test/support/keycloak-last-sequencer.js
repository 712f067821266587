/**
 * Jest's own order (failed first, then slowest first), except that the tests needing Keycloak run last:
 * the keycloak project's global setup starts Keycloak in the background, and one file at a time
 * (--runInBand) a first test waiting for it would leave the machine idle for Keycloak's start-up
 * (1–3 minutes, its first start builds its server), instead of running the other tests meanwhile.
 */
const Sequencer = require('@jest/test-sequencer').default;

class KeycloakLastSequencer extends Sequencer {
  sort(tests) {
    const ordered = super.sort(tests);
    const needsKeycloak = (test) => test.context.config.displayName?.name === 'keycloak';
    return [...ordered.filter((test) => !needsKeycloak(test)), ...ordered.filter(needsKeycloak)];
  }
}

module.exports = KeycloakLastSequencer;
