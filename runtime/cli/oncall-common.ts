// What the on-call commands of `jobs` share: their flags' parsing (times, whole numbers, job ids,
// who asked), the on-call services for one command (withOps: a small pool, the publisher and the
// queues from the environment, closed when the command ends) and the lines for skipped jobs.

import { userInfo } from 'node:os';
import { databaseUrlFromEnv, ENV, intFromEnv } from '../config/env.ts';
import { DEFAULT_JOB_TIMINGS } from '../config/rules.ts';
import { sqsFromEnvIfSet } from '../config/sqs.ts';
import { createPool } from '../db/pool.ts';
import { isJobId, parseIsoTime } from '../domain/ids.ts';
import { isLane, LANES, type Lane } from '../domain/lanes.ts';
import { defaultRegistry } from '../handlers/index.ts';
import { defaultSchedules } from '../handlers/schedules.ts';
import { silentLogger } from '../observability/log.ts';
import type { Skipped } from '../oncall/dead-jobs.ts';
import { createOpsServices, type OpsServices } from '../oncall/services.ts';
import { stuckThresholdsFromEnv } from '../oncall/stuck.ts';
import { Publisher } from '../store/outbox.ts';
import { UsageError } from './format.ts';
import { cliQueue } from './queue.ts';

export type Env = Record<string, string | undefined>;
export type Out = (s: string) => void;

/** An ISO 8601 time with an offset, or an age ago (90s, 30m, 6h, 2d). */
export function parseTime(flag: string, raw: string | undefined, now = Date.now()): Date | undefined {
  if (raw === undefined) return undefined;
  const age = /^(\d+)(s|m|h|d)$/.exec(raw.trim());
  if (age) return new Date(now - Number(age[1]) * { s: 1, m: 60, h: 3600, d: 86_400 }[age[2] as 's' | 'm' | 'h' | 'd'] * 1000);
  const d = parseIsoTime(raw.trim());
  if (!d) {
    throw new UsageError(
      `${flag} must be an ISO 8601 time with an offset (2026-10-31T06:00:00Z) or an age such as 30m, 6h, 2d (got ${raw})`,
    );
  }
  return d;
}

/** A whole-number flag within [min, max], or undefined when it was not given. */
export function intFlag(flag: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be a whole number from ${min} to ${max} (got ${raw})`);
  return n;
}

/** Job ids from the positional arguments, each checked to be a UUID, in lower case. */
export function ids(positionals: string[], what: string): string[] {
  for (const id of positionals) if (!isJobId(id)) throw new UsageError(`${what}: ${id} is not a job id (a UUID)`);
  return positionals.map((id) => id.toLowerCase());
}

/** Who asked, as the operator actions record it: --by, else the login name (USER, else the OS account's), marked as the CLI. */
export const whoAsked = (by: string | undefined) => `${by ?? (process.env.USER || loginName()) ?? 'unknown'} (cli)`;

function loginName(): string | undefined {
  try {
    return userInfo().username || undefined;
  } catch {
    return undefined;
  }
}

/** Pool, publisher and queues from the environment, for one command. */
export async function withOps<T>(env: Env, fn: (ops: OpsServices) => Promise<T>): Promise<T> {
  const sqs = sqsFromEnvIfSet(env);
  const pool = createPool({ url: databaseUrlFromEnv(env), max: 3, applicationName: 'jobs-cli ops' });
  try {
    const queue = cliQueue(sqs);
    const publisher = new Publisher(pool, queue, silentLogger);
    const ops = createOpsServices({
      pool,
      registry: defaultRegistry(),
      publisher,
      queue,
      log: silentLogger,
      ...(sqs ? { queueUrl: sqs.queueUrl, region: sqs.region } : {}),
      ...(sqs?.dlqUrl ? { dlqUrl: sqs.dlqUrl } : {}),
      ...(sqs?.urgentQueueUrl ? { urgentQueueUrl: sqs.urgentQueueUrl } : {}),
      ...(sqs?.urgentDlqUrl ? { urgentDlqUrl: sqs.urgentDlqUrl } : {}),
      ...(sqs?.endpoint ? { endpoint: sqs.endpoint } : {}),
      stuck: stuckThresholdsFromEnv(env),
      // jobs schedules: the schedules the services run with this environment (the local stack's demo included).
      schedules: defaultSchedules(env),
      defaultMaxAttempts: intFromEnv(env, ENV.maxAttempts, DEFAULT_JOB_TIMINGS.maxAttempts, 1, 100),
    });
    const result = await fn(ops);
    await publisher.drain();
    return result;
  } finally {
    await pool.end();
  }
}

/** --lane: one lane, or undefined for every lane (`every` says what leaving it out covers). */
export function laneFlag(v: string | undefined, every: string): Lane | undefined {
  if (v === undefined) return undefined;
  if (!isLane(v)) throw new UsageError(`--lane must be one of ${LANES.join(', ')} (got ${v}); leave it out for ${every}`);
  return v;
}

/** The jobs a command skipped, one line each with the reason. */
export function skippedLines(skipped: Skipped[]): string[] {
  return skipped.map((s) => `  skipped ${s.id}${s.type ? ` (${s.type})` : ''}: ${s.reason}`);
}
