// Whether a dead job's report reached the DLQ (migration 0014). The sender marks it once the DLQ
// accepted it; the sweeper (runtime/maintenance/dead-reports.ts) claims the deaths still unmarked
// a grace period later and reports them itself, so a worker killed between the job's death and
// its report, or a DLQ that refused every try, never leaves a dead job without a page.

import { rowToJob, type Job } from '../domain/job.ts';
import { namedStatements, type Queryable } from './job-store.ts';
import { JOB } from './sql-fragments.ts';

const DEAD_REPORT_SQL = {
  /**
   * The report of the death at $2 went out. Matched on the time of death within a millisecond (a
   * JavaScript Date has no microseconds): a report of an earlier death never marks a later one,
   * after a redrive, as sent.
   */
  deadJobReported: `
    UPDATE jobs.dead_job SET reported_at = statement_timestamp()
     WHERE job_id = $1::uuid AND reported_at IS NULL
       AND dead_at BETWEEN $2::timestamptz - interval '1 millisecond' AND $2::timestamptz + interval '1 millisecond'`,

  /**
   * Claim deaths that died more than $1 seconds ago with no report yet, not tried by a sweeper in
   * the last $2 seconds, oldest first, at most $3: each is marked tried (SKIP LOCKED: two sweepers
   * never claim the same one) and returned with its job row. Discarded jobs are left: on-call
   * already decided about them.
   */
  deadJobClaimUnreported: `
    WITH due AS (
      SELECT job_id FROM jobs.dead_job
       WHERE reported_at IS NULL AND discarded_at IS NULL
         AND dead_at < statement_timestamp() - $1::float8 * interval '1 second'
         AND (report_tried_at IS NULL OR report_tried_at < statement_timestamp() - $2::float8 * interval '1 second')
       ORDER BY dead_at
       LIMIT $3
       FOR UPDATE SKIP LOCKED
    ), claimed AS (
      UPDATE jobs.dead_job d SET report_tried_at = statement_timestamp() FROM due WHERE d.job_id = due.job_id
      RETURNING d.job_id, d.report_tried_at
    )
    SELECT ${JOB('j')}, c.report_tried_at::text AS claim FROM jobs.job j JOIN claimed c ON c.job_id = j.id WHERE j.state = 'dead'`,

  /**
   * Right before a sweeper sends a claimed report: the death at $2 of job $1 is still dead,
   * unreported and not discarded (a pass works through its claims one by one, and while the DLQ
   * hangs that takes long: meanwhile another sweeper may have reported it, on-call discarded or
   * redriven the job). Marks it tried as of $3 seconds ahead (the longest a send may take), so
   * that no other sweeper reclaims it while this one sends; returns the job row as it is now, or
   * nothing. Fenced by this sweeper's claim ($4, as the claim returned it): another sweeper that
   * reclaimed the death since (a hanging DLQ) sends it, this one does not.
   */
  deadJobStillUnreported: `
    WITH still AS (
      UPDATE jobs.dead_job d SET report_tried_at = statement_timestamp() + $3::float8 * interval '1 second'
       WHERE d.job_id = $1::uuid AND d.reported_at IS NULL AND d.discarded_at IS NULL AND d.report_tried_at = $4::timestamptz
         AND d.dead_at BETWEEN $2::timestamptz - interval '1 millisecond' AND $2::timestamptz + interval '1 millisecond'
      RETURNING d.job_id, d.report_tried_at
    )
    SELECT ${JOB('j')}, s.report_tried_at::text AS claim FROM jobs.job j JOIN still s ON s.job_id = j.id WHERE j.state = 'dead'`,

  /** A sweeper's send of the report of job $1 failed: tried again after the retry interval from now. */
  deadJobSendFailed: `
    UPDATE jobs.dead_job SET report_tried_at = statement_timestamp()
     WHERE job_id = $1::uuid AND reported_at IS NULL AND report_tried_at = $2::timestamptz`,

  /** Deaths whose report has not gone out (on-call's count; the chaos run waits for 0). */
  deadJobUnreportedCount: `
    SELECT count(*)::int AS n FROM jobs.dead_job WHERE reported_at IS NULL AND discarded_at IS NULL`,
} as const;

const runDeadReport = namedStatements('deadReport', DEAD_REPORT_SQL);

/** The DLQ accepted the report of `job`'s death (its finishedAt is the time of death). */
export async function markDeadJobReported(db: Queryable, job: Pick<Job, 'id' | 'finishedAt'>): Promise<boolean> {
  if (!job.finishedAt) return false;
  const { rowCount } = await runDeadReport(db, 'deadJobReported', [job.id, job.finishedAt]);
  return (rowCount ?? 0) > 0;
}

/** A death a sweeper claimed: the job, and the claim's mark (what fences this sweeper's later steps). */
export interface ClaimedDeath {
  job: Job;
  claim: string;
}

/** Claim up to `limit` deaths still unreported `graceSeconds` after, not tried in the last `retrySeconds`. */
export async function claimUnreportedDeaths(
  db: Queryable,
  graceSeconds: number,
  retrySeconds: number,
  limit: number,
): Promise<ClaimedDeath[]> {
  const { rows } = await runDeadReport(db, 'deadJobClaimUnreported', [graceSeconds, retrySeconds, limit]);
  return rows.map((r) => ({ job: rowToJob(r), claim: r.claim as string }));
}

/** A claimed death as it is now, if its report is still owed and still this claim's; null when reported, discarded, redriven or reclaimed since. */
export async function stillUnreported(db: Queryable, c: ClaimedDeath): Promise<ClaimedDeath | null> {
  if (!c.job.finishedAt) return null;
  const { rows } = await runDeadReport(db, 'deadJobStillUnreported', [c.job.id, c.job.finishedAt, SEND_BOUND_SECONDS, c.claim]);
  return rows[0] ? { job: rowToJob(rows[0]), claim: rows[0].claim as string } : null;
}

/** A sweeper's send failed: the death is tried again after the retry interval from now (not from the send bound), unless another sweeper took it since. */
export async function sendFailed(db: Queryable, c: ClaimedDeath): Promise<void> {
  await runDeadReport(db, 'deadJobSendFailed', [c.job.id, c.claim]);
}

/**
 * The longest a report's send may take: three tries, each a DLQ call that waits out the SDK's
 * retries (5 of 30 s) against a DLQ that hangs. Another sweeper leaves a death being sent alone
 * this long (review: it sent the same letter again while the first send still hung).
 */
export const SEND_BOUND_SECONDS = 600;

/** How many deaths have no report on the DLQ yet (discarded ones aside). */
export async function countUnreportedDeaths(db: Queryable): Promise<number> {
  const { rows } = await runDeadReport<{ n: number }>(db, 'deadJobUnreportedCount', []);
  return rows[0]!.n;
}
