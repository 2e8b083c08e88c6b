import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-pg.ts'],
    reporters: ['default', './test/setup/summary-reporter.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Two cores: two files at a time keeps PostgreSQL and the tests from starving each other.
    maxWorkers: 2,
    minWorkers: 1,
  },
});
