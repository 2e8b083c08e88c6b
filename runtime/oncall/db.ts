// Running the on-call statements (sql.ts) by name, as prepared statements, and the rows they
// return mapped once. Prepared-statement names are prefixed so they never collide with the job
// store's own on a shared connection.

import { namedStatements, type Queryable } from '../store/job-store.ts';
import { rowToJob, type Job, type JobRow } from '../domain/job.ts';
import { OPS_SQL, type OpsSqlName } from './sql.ts';

export const runOps = namedStatements<OpsSqlName>('ops', OPS_SQL);

/** How on-call triaged a dead job (jobs.dead_job). */
export interface DeadTriage {
  deadAt: Date;
  discardedAt: Date | null;
  discardedBy: string | null;
  discardReason: string | null;
}

/** A job with what the on-call tools add: when its current attempt was claimed, and its triage while dead. */
export interface OpsJob extends Job {
  claimedAt: Date | null;
  dead: DeadTriage | null;
}

export function rowToOpsJob(r: JobRow): OpsJob {
  return {
    ...rowToJob(r),
    claimedAt: (r.claimed_at as Date | null) ?? null,
    dead: r.dead_at
      ? {
          deadAt: r.dead_at as Date,
          discardedAt: (r.discarded_at as Date | null) ?? null,
          discardedBy: (r.discarded_by as string | null) ?? null,
          discardReason: (r.discard_reason as string | null) ?? null,
        }
      : null,
  };
}

export interface OperatorAction {
  id: string;
  at: Date;
  action:
    | 'job-redrive'
    | 'job-discard'
    | 'job-republish'
    | 'dlq-resend'
    | 'dlq-drop'
    | 'dlq-discard'
    | 'dlq-move'
    | 'dlq-move-cancel'
    | 'schedule-pause'
    | 'schedule-resume'
    | 'schedule-trigger';
  by: string;
  jobId: string | null;
  messageId: string | null;
  reason: string | null;
  detail: Record<string, unknown>;
}

export function rowToAction(r: JobRow): OperatorAction {
  return {
    id: String(r.id),
    at: r.at as Date,
    action: r.action as OperatorAction['action'],
    by: r.by as string,
    jobId: (r.job_id as string | null) ?? null,
    messageId: (r.message_id as string | null) ?? null,
    reason: (r.reason as string | null) ?? null,
    detail: (r.detail as Record<string, unknown>) ?? {},
  };
}

export async function recordActions(
  db: Queryable,
  actions: {
    action: OperatorAction['action'];
    by: string;
    jobId?: string | null;
    messageId?: string | null;
    reason?: string | null;
    detail?: Record<string, unknown>;
  }[],
): Promise<void> {
  if (actions.length === 0) return;
  await runOps(db, 'operatorActionRecord', [
    actions.map((a) => a.action),
    actions.map((a) => a.by),
    actions.map((a) => a.jobId ?? null),
    actions.map((a) => a.messageId ?? null),
    actions.map((a) => a.reason ?? null),
    actions.map((a) => JSON.stringify(a.detail ?? {})),
  ]);
}

/** Who asked, as it is recorded: trimmed, 1–200 characters. */
export function operatorName(by: string): string {
  const s = by.trim().slice(0, 200);
  return s.length > 0 ? s : 'unknown';
}
