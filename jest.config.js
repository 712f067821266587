/** Unit tests run from TypeScript; end-to-end tests spawn the compiled processes from dist/. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json', diagnostics: false }] },
  testTimeout: 60000,
  reporters: ['default', '<rootDir>/test/support/closing-line-reporter.js'],
};
