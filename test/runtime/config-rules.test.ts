// DESIGN 5: a bad configuration is refused with the values and the rule, by the same pure
// function at worker start (environment) and at cdk synth (per-environment config).
import { describe, expect, it } from 'vitest';
import { databaseUrlFromEnv, jobTimingsFromEnv } from '../../runtime/config/env.ts';
import { assertJobTimings, checkJobTimings, ConfigError, DEFAULT_JOB_TIMINGS, type JobTimings } from '../../runtime/config/rules.ts';
import { backoffSeconds } from '../../runtime/domain/backoff.ts';

const t = (over: Partial<JobTimings>): JobTimings => ({ ...DEFAULT_JOB_TIMINGS, ...over });
const rules = (over: Partial<JobTimings>) => checkJobTimings(t(over)).map((v) => v.rule);
const message = (over: Partial<JobTimings>) =>
  checkJobTimings(t(over))
    .map((v) => v.message)
    .join('\n');

describe('configuration rules', () => {
  it('accepts the defaults', () => {
    expect(checkJobTimings(DEFAULT_JOB_TIMINGS)).toEqual([]);
  });

  it('heartbeat must fit three times into the lease, naming both values and the fix', () => {
    expect(rules({ leaseSeconds: 20, heartbeatSeconds: 10 })).toEqual(['heartbeat-within-lease']);
    expect(message({ leaseSeconds: 20, heartbeatSeconds: 10 })).toMatch(
      /heartbeatSeconds = 10 must be at most 1\/3 of leaseSeconds = 20.*lower the heartbeat to ≤ 6\.67 or raise the lease to ≥ 30/,
    );
    expect(rules({ leaseSeconds: 30, heartbeatSeconds: 10 })).toEqual([]);
  });

  it('heartbeat must fit three times into the visibility timeout', () => {
    expect(rules({ visibilityTimeoutSeconds: 25, heartbeatSeconds: 10 })).toEqual(['heartbeat-within-visibility']);
    expect(message({ visibilityTimeoutSeconds: 25, heartbeatSeconds: 10 })).toMatch(
      /visibilityTimeoutSeconds = 25.*raise the visibility timeout to ≥ 30/,
    );
  });

  it('maxReceiveCount must leave room above the attempt cap', () => {
    expect(rules({ maxAttempts: 8, maxReceiveCount: 10 })).toEqual(['receive-count-above-attempts']);
    expect(message({ maxAttempts: 8, maxReceiveCount: 10 })).toMatch(/maxReceiveCount = 10 must be at least maxAttempts \+ 3 = 11/);
    expect(rules({ maxAttempts: 7, maxReceiveCount: 10 })).toEqual([]);
  });

  it('backoff cap must not be below its base', () => {
    expect(rules({ backoffBaseSeconds: 60, backoffMaxSeconds: 30 })).toEqual(['backoff-cap-above-base']);
  });

  it.each([
    ['visibilityTimeoutSeconds', 43_201, /between 1 and 43200 \(SQS accepts whole seconds up to 12 h/],
    ['visibilityTimeoutSeconds', 30.5, /must be a whole number/],
    ['leaseSeconds', 0, /leaseSeconds = 0 must be between 2 and 43200/],
    ['leaseSeconds', -5, /between 2 and 43200/],
    ['heartbeatSeconds', 0, /between 0.2 and 43200/],
    ['maxAttempts', 0, /between 1 and 100/],
    ['maxReceiveCount', 1001, /between 1 and 1000 \(SQS accepts 1 to 1000\)/],
    ['concurrency', 0, /between 1 and 500/],
    ['drainSeconds', 115, /between 0 and 110 \(ECS kills a task 120 s after SIGTERM/],
    ['backoffMaxSeconds', 50_000, /fit one SQS visibility timeout/],
    ['leaseSeconds', Number.NaN, /is not a number/],
  ] as const)('bounds %s = %s', (key, value, msg) => {
    expect(message({ [key]: value })).toMatch(msg);
  });

  it('assertJobTimings throws one ConfigError listing every violation and where the values came from', () => {
    const err = (() => {
      try {
        assertJobTimings(t({ leaseSeconds: 5, heartbeatSeconds: 10, maxAttempts: 20, maxReceiveCount: 5 }), 'config for prod');
      } catch (e) {
        return e as ConfigError;
      }
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect(err!.violations.map((v) => v.rule)).toEqual(['heartbeat-within-lease', 'receive-count-above-attempts']);
    expect(err!.message).toMatch(/^config for prod: invalid job platform configuration:/);
  });
});

describe('configuration from the environment', () => {
  it('reads JOBS_* variables and names the variable in the error', () => {
    expect(jobTimingsFromEnv({ JOBS_LEASE_SECONDS: '120', JOBS_HEARTBEAT_SECONDS: '20' })).toMatchObject({
      leaseSeconds: 120,
      heartbeatSeconds: 20,
    });
    expect(() => jobTimingsFromEnv({ JOBS_LEASE_SECONDS: 'sixty' })).toThrow(/JOBS_LEASE_SECONDS = "sixty" is not a number/);
    expect(() => jobTimingsFromEnv({ JOBS_LEASE_SECONDS: '15', JOBS_HEARTBEAT_SECONDS: '10' })).toThrow(
      /JOBS_HEARTBEAT_SECONDS = 10 must be at most 1\/3 of JOBS_LEASE_SECONDS = 15/,
    );
  });

  it('builds the database URL from the RDS secret ECS injects, and refuses what it cannot use', () => {
    const url = databaseUrlFromEnv({
      DATABASE_SECRET: JSON.stringify({ host: 'db.internal', port: 5432, username: 'jobs', password: 'p@ss/word', dbname: 'jobs' }),
    });
    const u = new URL(url);
    expect(u.hostname).toBe('db.internal');
    expect(decodeURIComponent(u.password)).toBe('p@ss/word');
    expect(u.searchParams.get('sslmode')).toBeTruthy();
    expect(() => databaseUrlFromEnv({})).toThrow(/set DATABASE_URL .* or DATABASE_SECRET/);
    expect(() => databaseUrlFromEnv({ DATABASE_SECRET: '{' })).toThrow(/DATABASE_SECRET is not valid JSON/);
    expect(() => databaseUrlFromEnv({ DATABASE_SECRET: '{"host":"h"}' })).toThrow(/lacks username, password/);
    expect(() => databaseUrlFromEnv({ DATABASE_URL: 'mysql://u:secret@h/db' })).toThrow(/must start with postgres:\/\/.*u:\*\*\*@h/);
  });
});

describe('retry backoff', () => {
  const policy = { baseSeconds: 2, maxSeconds: 60 };
  it('doubles per attempt between half and all of the step, and never exceeds the cap', () => {
    for (const [attempt, step] of [
      [1, 2],
      [2, 4],
      [3, 8],
      [5, 32],
      [6, 60],
      [20, 60],
    ] as const) {
      expect(backoffSeconds(policy, attempt, () => 0)).toBe(step / 2);
      expect(backoffSeconds(policy, attempt, () => 0.999999)).toBeCloseTo(step, 3);
    }
    for (let i = 0; i < 1000; i++) {
      const s = backoffSeconds(policy, 1 + (i % 12));
      expect(s).toBeGreaterThanOrEqual(1);
      expect(s).toBeLessThanOrEqual(60);
    }
  });

  it('spreads jobs that failed together', () => {
    const delays = Array.from({ length: 200 }, () => backoffSeconds(policy, 4));
    expect(new Set(delays.map((d) => Math.round(d))).size).toBeGreaterThan(4);
  });
});
