import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/setup/sequencer.ts';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global-pg.ts', 'test/setup/cdk-out.ts'],
    reporters: ['default', './test/setup/summary-reporter.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Two cores: two files at a time keeps PostgreSQL and the tests from starving each other.
    maxWorkers: 2,
    // The AWS SDK's notice that its 2027 releases need Node 22, printed by every process that
    // makes a client: known (the images run Node 22; these machines 20), and it buried the test
    // output. The SDK's own switch, so every other warning still shows; children inherit it.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    minWorkers: 1,
    // The slowest files first, so none runs alone at the end (test/setup/sequencer.ts).
    sequence: { sequencer: SlowFirstSequencer },
  },
});
