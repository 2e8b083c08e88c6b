// Stuck jobs: running longer than their type's expected maximum (JobDefinition.expectedMaxSeconds,
// or a default), pending and due for longer than a threshold without being picked up, or running
// with a lease that expired that long ago without a reclaim (no worker, or the rescuer is down).
// `jobs stuck` and GET /v1/stuck-jobs list them; every worker reports how many there are as the
// JobsStuck metric, which the stack alarms on (lib/monitoring/alarms.ts).
//
// The metric is a gauge: each worker counts the same jobs in the same database and publishes the
// count once a minute, and the alarm reads its Maximum, so two workers or ten give the same
// answer. The count is one query over the active jobs (the job_active index), once per interval.

import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import { CloudWatchClient, PutMetricDataCommand } from '@aws-sdk/client-cloudwatch';
import type pg from 'pg';
import { intFromEnv } from '../config/env.ts';
import {
  DEFAULT_STUCK_CHECK_SECONDS,
  DEFAULT_STUCK_THRESHOLDS,
  MAX_STUCK_SECONDS,
  STUCK_ENV,
  type StuckThresholds,
} from '../config/stuck-thresholds.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Logger } from '../observability/log.ts';
import { onActiveJobs } from '../store/active-jobs.ts';
import { formatDuration } from '../domain/reading.ts';
import { rowToOpsJob, runOps, type OpsJob } from './db.ts';

// The thresholds' shape, defaults and variable names live in config/stuck-thresholds.ts, which the
// CDK app reads too (without loading this module's AWS SDK client).
export {
  DEFAULT_STUCK_CHECK_SECONDS,
  DEFAULT_STUCK_THRESHOLDS,
  MAX_STUCK_SECONDS,
  STUCK_ENV,
  type StuckThresholds,
} from '../config/stuck-thresholds.ts';

type Env = Record<string, string | undefined>;

/** The thresholds from JOBS_STUCK_* (defaults for the unset ones); a bad value names its variable. */
export function stuckThresholdsFromEnv(env: Env): StuckThresholds {
  return {
    runningSeconds: intFromEnv(env, STUCK_ENV.runningSeconds, DEFAULT_STUCK_THRESHOLDS.runningSeconds, 1, MAX_STUCK_SECONDS),
    pendingSeconds: intFromEnv(env, STUCK_ENV.pendingSeconds, DEFAULT_STUCK_THRESHOLDS.pendingSeconds, 1, MAX_STUCK_SECONDS),
  };
}

/** True when the environment sets any JOBS_STUCK_* threshold. */
export function stuckThresholdsSet(env: Env): boolean {
  return [STUCK_ENV.runningSeconds, STUCK_ENV.pendingSeconds].some((k) => (env[k] ?? '').trim() !== '');
}

export type StuckReason = 'running-too-long' | 'pending-too-long' | 'lease-expired';

export interface StuckJob {
  job: OpsJob;
  reason: StuckReason;
  /** When the current attempt was claimed (running) or the job became due (pending). */
  since: Date;
  stuckForSeconds: number;
  /** The threshold it crossed: the type's expected maximum, the default, or the pending threshold. */
  limitSeconds: number;
  /** True when the limit is the type's own expectedMaxSeconds. */
  limitFromType: boolean;
  dbNow: Date;
}

function expectedByType(registry: JobRegistry): { types: string[]; seconds: number[] } {
  const types: string[] = [];
  const seconds: number[] = [];
  for (const t of registry.types()) {
    const s = registry.get(t)!.expectedMaxSeconds;
    if (s !== undefined && s > 0) {
      types.push(t);
      seconds.push(s);
    }
  }
  return { types, seconds };
}

/** Both read the active jobs through job_active, however many jobs have ever run (store/active-jobs.ts). */
export async function findStuckJobs(pool: pg.Pool, registry: JobRegistry, t: StuckThresholds, limit = 100): Promise<StuckJob[]> {
  const e = expectedByType(registry);
  const { rows } = await onActiveJobs(pool, (c) =>
    runOps(c, 'stuckJobList', [e.types, e.seconds, t.runningSeconds, t.pendingSeconds, limit]),
  );
  return rows.map((r) => ({
    job: rowToOpsJob(r),
    reason: r.reason as StuckReason,
    since: r.since as Date,
    stuckForSeconds: Math.round((r.stuck_for_seconds as number) * 10) / 10,
    limitSeconds: r.limit_seconds as number,
    limitFromType: r.reason === 'running-too-long' && e.types.includes(r.type as string),
    dbNow: r.db_now as Date,
  }));
}

export async function countStuckJobs(
  pool: pg.Pool,
  registry: JobRegistry,
  t: StuckThresholds,
): Promise<{ total: number; byReason: Record<StuckReason, number> }> {
  const e = expectedByType(registry);
  const { rows } = await onActiveJobs(pool, (c) => runOps(c, 'stuckJobCount', [e.types, e.seconds, t.runningSeconds, t.pendingSeconds]));
  const byReason: Record<StuckReason, number> = { 'running-too-long': 0, 'pending-too-long': 0, 'lease-expired': 0 };
  for (const r of rows) byReason[r.reason as StuckReason] = r.count as number;
  return { total: Object.values(byReason).reduce((a, b) => a + b, 0), byReason };
}

/** Publish one gauge value to CloudWatch (no dimensions, the environment's namespace). Never throws. */
export function cloudWatchGauge(
  namespace: string,
  log: Logger,
  client: CloudWatchClient = new CloudWatchClient({}),
): (value: number) => Promise<void> {
  return async (value) => {
    try {
      await client.send(
        new PutMetricDataCommand({
          Namespace: namespace,
          MetricData: [{ MetricName: METRIC.jobsStuck, Unit: 'Count', Value: value, Timestamp: new Date() }],
        }),
      );
    } catch (err) {
      log.warn({ err }, `PutMetricData ${METRIC.jobsStuck} failed; the next check publishes again`);
    }
  };
}

export interface StuckJobReporterOptions {
  pool: pg.Pool;
  registry: JobRegistry;
  thresholds: StuckThresholds;
  log: Logger;
  intervalMs?: number;
  /** Where the count goes (CloudWatch in the worker service); every check publishes, zero included. */
  publish?: (count: number) => Promise<void>;
}

/** The worker's loop: count stuck jobs, publish the gauge, and log each newly stuck job once. */
export class StuckJobReporter {
  private readonly loop: MaintenanceLoop<{ total: number; byReason: Record<StuckReason, number> }>;
  /** (id, attempt, reason) reported by the last check, so a job is logged when it becomes stuck, not every minute. */
  private reported = new Set<string>();

  constructor(private readonly opts: StuckJobReporterOptions) {
    const interval = opts.intervalMs ?? DEFAULT_STUCK_CHECK_SECONDS * 1000;
    this.loop = new MaintenanceLoop('stuck-job check', () => this.check(), opts.log, interval, Math.min(5000, interval));
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  runOnce(): Promise<{ total: number; byReason: Record<StuckReason, number> }> {
    return this.loop.runOnce();
  }

  private async check(): Promise<{ total: number; byReason: Record<StuckReason, number> }> {
    const { pool, registry, thresholds, log } = this.opts;
    const counts = await countStuckJobs(pool, registry, thresholds);
    await this.opts.publish?.(counts.total);
    if (counts.total === 0) {
      this.reported.clear();
      return counts;
    }
    const stuck = await findStuckJobs(pool, registry, thresholds, 50);
    const now = new Set<string>();
    for (const s of stuck) {
      const key = `${s.job.id}:${s.job.attempt}:${s.reason}`;
      now.add(key);
      if (this.reported.has(key)) continue;
      log.warn(
        {
          jobId: s.job.id,
          type: s.job.type,
          attempt: s.job.attempt,
          reason: s.reason,
          stuckForSeconds: s.stuckForSeconds,
          limitSeconds: s.limitSeconds,
          leaseOwner: s.job.leaseOwner,
          progress: s.job.progress,
        },
        `job stuck: ${describeStuck(s)}`,
      );
    }
    this.reported = now;
    return counts;
  }
}

/** One line a person reads: what is stuck and for how long, against which limit. */
export function describeStuck(s: StuckJob): string {
  const d = formatDuration(s.stuckForSeconds);
  const limit = formatDuration(s.limitSeconds);
  switch (s.reason) {
    case 'running-too-long':
      return `running attempt ${s.job.attempt} for ${d}, over the ${s.limitFromType ? `type's expected maximum of ${limit}` : `default limit of ${limit}`}`;
    case 'pending-too-long':
      return `pending and due for ${d} without a worker picking it up (limit ${limit})`;
    case 'lease-expired':
      return `running on a lease that expired ${formatDuration((s.dbNow.getTime() - (s.job.leaseExpiresAt?.getTime() ?? s.dbNow.getTime())) / 1000)} ago and nobody reclaimed it (limit ${limit})`;
  }
}
