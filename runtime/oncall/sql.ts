// Every SQL statement of the on-call tools (dead jobs, dead letters, poison messages, stuck
// jobs), named after what it does, with the reason it is safe beside it. The job store's own
// transitions are in runtime/store/sql.ts, the operators' writes to the job table (redrive,
// discard, republish, cancel) beside them in runtime/store/sql-operator.ts: this file only reads
// jobs, and records operator actions on dead letters.
//
// "Attempts used" is attempt - releases (runtime/store/sql-operator.ts). A redrive gives a dead job a
// fresh attempt budget by setting releases = attempt, so the claim's `attempt - releases <
// max_attempts` holds again while `attempt`, the fencing token, keeps growing: a worker that
// still believed it held an old attempt is refused exactly as before.

import { DEAD, deadFilter, JOB } from '../store/sql-fragments.ts';

/**
 * Stuck jobs, as one relation: running past the type's expected maximum ($1 types, $2 seconds;
 * $3 for types without one), pending and due for longer than $4 seconds, or running with a lease
 * that expired more than $4 seconds ago (nobody reclaimed it: no worker, or the rescuer is down).
 * A job blocked behind its concurrency key or its type's limit is waiting, not stuck, while
 * something holds them (an unblocked active job of its key, a job holding one of its type's
 * slots): a month end queues a company's postings behind each other for hours, and those holders
 * are judged themselves. Blocked with nothing holding either, it is stuck (a wake that never came).
 * Both branches read active jobs only (`finished_at IS NULL`, the job_active index), never the
 * finished ones that make up most of the table; the holders through job_key_unblocked and
 * job_type_slot.
 */
const STUCK = `
    WITH expected AS (
      SELECT * FROM unnest($1::text[], $2::float8[]) AS e(type, seconds)
    ), running AS (
      SELECT ${JOB('j')},
             -- The limit of the reason given: a lease expired for longer than the pending limit, else the running one.
             CASE WHEN j.lease_expires_at < statement_timestamp() - $4::float8 * interval '1 second' THEN $4::float8
                  ELSE coalesce(e.seconds, $3::float8) END AS limit_seconds,
             CASE WHEN j.lease_expires_at < statement_timestamp() - $4::float8 * interval '1 second' THEN 'lease-expired'
                  ELSE 'running-too-long' END AS reason,
             coalesce(j.claimed_at, j.started_at) AS since
        FROM jobs.job j LEFT JOIN expected e ON e.type = j.type
       WHERE j.finished_at IS NULL AND j.state = 'running'
         AND (coalesce(j.claimed_at, j.started_at) < statement_timestamp() - coalesce(e.seconds, $3::float8) * interval '1 second'
           OR j.lease_expires_at < statement_timestamp() - $4::float8 * interval '1 second')
    ), pending AS (
      SELECT ${JOB('j')}, $4::float8 AS limit_seconds, 'pending-too-long' AS reason, j.run_after AS since
        FROM jobs.job j
       WHERE j.finished_at IS NULL AND j.state = 'pending' AND j.run_after < statement_timestamp() - $4::float8 * interval '1 second'
         AND NOT (j.blocked_since IS NOT NULL AND (
               EXISTS (SELECT 1 FROM jobs.job o
                        WHERE o.concurrency_key = j.concurrency_key AND o.finished_at IS NULL AND o.blocked_since IS NULL)
            OR EXISTS (SELECT 1 FROM jobs.job o WHERE o.type = j.type AND o.type_slot)))
    ), stuck AS (
      SELECT * FROM running UNION ALL SELECT * FROM pending
    )`;

export const OPS_SQL = {
  /**
   * Dead jobs, newest death first, keyset-paged on (dead_at, job_id) over dead_job_dead_at. The
   * cursor carries dead_at as PostgreSQL's own text, which keeps the microseconds a JavaScript
   * Date drops. Discarded jobs only when $5. $6, $7 cursor | $8 page size | $9 lane.
   */
  deadJobList: `
    SELECT ${JOB('j')}, ${DEAD}, d.dead_at::text AS dead_at_key
      FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
     WHERE ${deadFilter(9)}
       AND ($5::boolean OR d.discarded_at IS NULL)
       AND ($7::uuid IS NULL OR (d.dead_at, d.job_id) < ($6::timestamptz, $7::uuid))
     ORDER BY d.dead_at DESC, d.job_id DESC
     LIMIT $8`,

  /** One job, its triage if it is dead, and the database's clock (for lease countdowns and ages). */
  jobGetWithNow: `
    SELECT ${JOB('j')}, ${DEAD}, statement_timestamp() AS db_now
      FROM jobs.job j LEFT JOIN jobs.dead_job d ON d.job_id = j.id
     WHERE j.id = $1`,

  /** The jobs named by dead letters, for reconciling the DLQ with the job table. */
  jobsForDeadLetters: `
    SELECT ${JOB('j')}, ${DEAD}, statement_timestamp() AS db_now
      FROM jobs.job j LEFT JOIN jobs.dead_job d ON d.job_id = j.id
     WHERE j.id = ANY($1::uuid[])`,

  /** Where the jobs named in a request stand (to say why one was not redriven or discarded). */
  jobStates: `
    SELECT j.id, j.type, j.state, j.idempotency_key, j.finished_at, j.cancelled_by, ${DEAD}
      FROM jobs.job j LEFT JOIN jobs.dead_job d ON d.job_id = j.id
     WHERE j.id = ANY($1::uuid[])`,

  /** Stuck jobs (see STUCK), the longest-stuck first. $5 limit. */
  stuckJobList: `${STUCK}
    SELECT *, statement_timestamp() AS db_now,
           extract(epoch FROM statement_timestamp() - since)::float8 AS stuck_for_seconds
      FROM stuck ORDER BY since LIMIT $5`,

  /** How many jobs are stuck, by reason: the JobsStuck metric. */
  stuckJobCount: `${STUCK}
    SELECT reason, count(*)::int AS count FROM stuck GROUP BY reason`,

  /** Record operator actions on dead letters (the job-level ones are recorded by their own statements). */
  operatorActionRecord: `
    INSERT INTO jobs.operator_action (action, by, job_id, message_id, reason, detail)
    SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::jsonb[])`,

  /** What operators did to one job, oldest first. */
  operatorActionsForJob: `
    SELECT id, at, action, by, job_id, message_id, reason, detail FROM jobs.operator_action WHERE job_id = $1 ORDER BY at, id`,
} as const;

export type OpsSqlName = keyof typeof OPS_SQL;
