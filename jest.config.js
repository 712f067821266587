/**
 * Unit tests run from TypeScript; end-to-end tests spawn the compiled processes from dist/.
 * Two projects: tests that need the run's shared Keycloak (test/e2e/auth-*.test.ts and
 * test/e2e/real-parts.test.ts) are the "keycloak" project, whose global setup starts Keycloak in the
 * background; jest runs a project's global setup only when the run includes one of its tests, so
 * `scripts/test.sh test/unit` never starts it. Its tests run last (keycloak-last-sequencer.js), so that
 * Keycloak starts while the others run.
 */
const KEYCLOAK_TESTS = '/test/e2e/(auth-[^/]*|real-parts)\\.test\\.ts$';

const shared = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json', diagnostics: false }] },
};

module.exports = {
  testTimeout: 60000,
  testSequencer: '<rootDir>/test/support/keycloak-last-sequencer.js',
  reporters: ['default', '<rootDir>/test/support/closing-line-reporter.js'],
  projects: [
    { ...shared, displayName: 'gateway', testMatch: ['**/*.test.ts'], testPathIgnorePatterns: ['/node_modules/', KEYCLOAK_TESTS] },
    {
      ...shared,
      displayName: 'keycloak',
      testRegex: KEYCLOAK_TESTS,
      globalSetup: '<rootDir>/test/support/keycloak-global-setup.ts',
      globalTeardown: '<rootDir>/test/support/keycloak-global-teardown.ts',
    },
  ],
};
