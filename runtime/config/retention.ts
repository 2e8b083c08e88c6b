// How long the platform keeps what has ended (issue 15): finished jobs, discarded dead jobs,
// poison messages and the operators' trail. The workers' pruner (runtime/maintenance/pruner.ts)
// deletes what is past its time, in small batches. The variables, their defaults and their rules
// here; a bad value stops the start with the variable, its value and the rule, like every setting.

import { ConfigError, type RuleViolation } from './rules.ts';

export interface Retention {
  /**
   * Days a finished job is kept when its type declares no keepFinishedDays. Decided when the job
   * is enqueued (like its attempt cap), so the processes that enqueue (API, ERP clients, `jobs
   * enqueue`) read it; a job a lasting idempotency key still returns is kept as long as the key.
   */
  finishedDays: number;
  /** Days a dead job on-call discarded is kept after the discard (a redrive can still bring it back). Never before: an undiscarded dead job stays. */
  discardedDeadDays: number;
  /** Days a poison message's record is kept after it was recorded. */
  poisonDays: number;
  /** Days an operator action (redrive, discard, DLQ moves, republish) is kept in the trail. */
  operatorActionDays: number;
}

export const RETENTION_ENV = {
  finishedDays: 'JOBS_KEEP_FINISHED_DAYS',
  discardedDeadDays: 'JOBS_KEEP_DISCARDED_DEAD_DAYS',
  poisonDays: 'JOBS_KEEP_POISON_DAYS',
  operatorActionDays: 'JOBS_KEEP_OPERATOR_ACTIONS_DAYS',
} as const;

export const DEFAULT_RETENTION: Retention = { finishedDays: 30, discardedDeadDays: 90, poisonDays: 30, operatorActionDays: 730 };

/** The longest a setting may keep anything (100 years), as for a type's own retention (handlers/types.ts MAX_KEEP_DAYS). */
const MAX_DAYS = 36_500;
/** SQS keeps a message at most 14 days: a poison message's record must outlive its dead letter. */
export const SQS_MAX_RETENTION_DAYS = 14;

type Env = Record<string, string | undefined>;

/** The least each setting may keep, and why: one rule for the variables and for the CDK config (lib/config.ts jobRetention). */
const RULES: Record<keyof Retention, { min: number; why: string }> = {
  finishedDays: { min: 1, why: 'a finished job is kept at least a day' },
  discardedDeadDays: { min: 1, why: 'a discarded dead job is kept at least a day, so a mistaken discard can be redriven' },
  poisonDays: {
    min: SQS_MAX_RETENTION_DAYS,
    why: `the DLQ may hold a poison message up to ${SQS_MAX_RETENTION_DAYS} days, and on-call reads its record to act on it`,
  },
  operatorActionDays: {
    min: 30,
    why: 'the trail of who redrove or discarded what is kept at least a month, for the review of an incident',
  },
};

const KEYS = Object.keys(RULES) as (keyof Retention)[];

/** The retention settings from JOBS_KEEP_* (defaults for the unset ones); a bad value names its variable and the rule. */
export function retentionFromEnv(env: Env): Retention {
  return Object.fromEntries(KEYS.map((k) => [k, days(env, k)])) as unknown as Retention;
}

/** JOBS_KEEP_FINISHED_DAYS alone: what the processes that enqueue need (the API, ERP clients, `jobs enqueue`). */
export function keepFinishedDaysFromEnv(env: Env): number {
  return days(env, 'finishedDays');
}

/** What breaks the rules in `r`, each value named by `label(key)` (a config path, lib/config.ts). */
export function retentionViolations(r: Retention, label: (key: keyof Retention) => string): RuleViolation[] {
  return KEYS.flatMap((k) => check(k, r[k], `${label(k)} = ${r[k]}`) ?? []);
}

function check(key: keyof Retention, n: number, what: string): RuleViolation | null {
  const { min, why } = RULES[key];
  if (Number.isInteger(n) && n >= min && n <= MAX_DAYS) return null;
  return {
    rule: `${RETENTION_ENV[key].toLowerCase()}-range`,
    message: `${what} must be a whole number of days from ${min} to ${MAX_DAYS} (${why})`,
  };
}

/** The variables the services read for `r` (lib/services/container-config.ts). */
export function retentionEnv(r: Retention): Record<string, string> {
  return Object.fromEntries(KEYS.map((k) => [RETENTION_ENV[k], String(r[k])]));
}

function days(env: Env, key: keyof Retention): number {
  const name = RETENTION_ENV[key];
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return DEFAULT_RETENTION[key];
  const n = Number(raw);
  const bad = check(key, n, `${name} = "${raw}"`);
  if (bad) throw new ConfigError('environment', [bad]);
  return n;
}
