// Every SQL statement of the on-call tools (dead jobs, dead letters, poison messages, stuck
// jobs), named after what it does, with the reason it is safe beside it. The job store's own
// transitions are in runtime/store/sql.ts and keep the same conventions: time is
// statement_timestamp(), all statements run under READ COMMITTED, and a row is re-checked under
// its lock. Nothing here touches a job a worker holds: every write is to a `dead` row.
//
// "Attempts used" is attempt - releases (runtime/store/sql.ts). A redrive gives a dead job a
// fresh attempt budget by setting releases = attempt, so the claim's `attempt - releases <
// max_attempts` holds again while `attempt`, the fencing token, keeps growing: a worker that
// still believed it held an old attempt is refused exactly as before.

/** The job columns, plus claimed_at (migration 0003). */
const JOB = (a: string) =>
  ['id', 'type', 'payload', 'state', 'idempotency_key', 'attempt', 'releases', 'max_attempts', 'lease_owner', 'lease_expires_at', 'run_after',
    'progress', 'checkpoint', 'last_error', 'attempt_log', 'result', 'cancelled_by', 'created_at', 'started_at', 'finished_at',
    'claimed_at']
    .map((c) => `${a}.${c}`)
    .join(', ');

/** Triage of a dead job, from jobs.dead_job (alias d). */
const DEAD = 'd.dead_at, d.discarded_at, d.discarded_by, d.discard_reason';

/**
 * The dead-job filter shared by list, redrive and discard, over jobs.dead_job d joined to
 * jobs.job j: $1 ids | $2 type | $3 since | $4 until (on the time of death). `j.state = 'dead'`
 * is re-checked under the row lock where a statement locks.
 */
const DEAD_FILTER = `j.state = 'dead'
       AND ($1::uuid[] IS NULL OR d.job_id = ANY($1::uuid[]))
       AND ($2::text IS NULL OR d.type = $2::text)
       AND ($3::timestamptz IS NULL OR d.dead_at >= $3::timestamptz)
       AND ($4::timestamptz IS NULL OR d.dead_at < $4::timestamptz)`;

/**
 * Stuck jobs, as one relation: running past the type's expected maximum ($1 types, $2 seconds;
 * $3 for types without one), pending and due for longer than $4 seconds, or running with a lease
 * that expired more than $4 seconds ago (nobody reclaimed it: no worker, or the rescuer is down).
 * Both branches read active jobs only (`finished_at IS NULL`, the job_active index), never the
 * finished ones that make up most of the table.
 */
const STUCK = `
    WITH expected AS (
      SELECT * FROM unnest($1::text[], $2::float8[]) AS e(type, seconds)
    ), running AS (
      SELECT ${JOB('j')}, coalesce(e.seconds, $3::float8) AS limit_seconds,
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
    ), stuck AS (
      SELECT * FROM running UNION ALL SELECT * FROM pending
    )`;

export const OPS_SQL = {
  /**
   * Dead jobs, newest death first, keyset-paged on (dead_at, job_id) over dead_job_dead_at. The
   * cursor carries dead_at as PostgreSQL's own text, which keeps the microseconds a JavaScript
   * Date drops. Discarded jobs only when $5. $6, $7 cursor | $8 page size.
   */
  deadJobList: `
    SELECT ${JOB('j')}, ${DEAD}, d.dead_at::text AS dead_at_key
      FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
     WHERE ${DEAD_FILTER}
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

  /**
   * Redrive: dead → pending, due now, with a fresh attempt budget (releases = attempt), an outbox
   * row in the same transaction (published after COMMIT; the relay publishes it if we die first),
   * an attempt-log entry and an operator_action row saying who asked, when and why. The
   * job_track_dead trigger removes the job's dead_job row in the same transaction.
   *
   * Race-free: the job rows are locked (FOR UPDATE, in (dead_at, id) order, so two redrives
   * cannot deadlock); a concurrent redrive of the same job waits for the lock and then re-checks
   * `j.state = 'dead'` against the new row version, so a job is redriven once. Workers never
   * write a dead row. Only dead rows qualify: a succeeded, running, pending or cancelled job is
   * never touched, whatever the caller asked.
   *
   * Idempotency keys: a pending job enters the partial unique index on (type, key). A dead job
   * whose key an active job now holds is skipped with the reason; of two dead jobs with one key
   * in a batch, only the newest is redriven. (An enqueue racing this statement with the same key
   * can still win: the caller sees a unique violation and runs the batch again.)
   *
   * $1–$4 the dead filter | $5 include discarded | $6, $7 cursor (dead_at text, id; ascending) |
   * $8 batch size | $9 by | $10 reason | $11 new max_attempts (null: keep) | $12 from scratch
   * (drop checkpoint and progress) | $13 dry run (judge, change nothing).
   */
  deadJobRedrive: `
    WITH locked AS (
      SELECT j.id, j.type, j.idempotency_key, d.dead_at, d.dead_at::text AS dead_at_key, d.discarded_at,
             j.attempt - j.releases AS attempts_used
        FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
       WHERE ${DEAD_FILTER}
         AND ($5::boolean OR d.discarded_at IS NULL)
         AND ($7::uuid IS NULL OR (d.dead_at, d.job_id) > ($6::timestamptz, $7::uuid))
       ORDER BY d.dead_at, d.job_id
       LIMIT $8
         FOR UPDATE OF j
    ), judged AS (
      SELECT l.*,
             CASE
               WHEN l.idempotency_key IS NULL THEN NULL
               WHEN row_number() OVER (PARTITION BY l.type, l.idempotency_key ORDER BY l.dead_at DESC, l.id DESC) > 1
                 THEN 'a newer dead job with the same idempotency key is redriven instead'
               WHEN EXISTS (SELECT 1 FROM jobs.job a
                             WHERE a.type = l.type AND a.idempotency_key = l.idempotency_key AND a.state IN ('pending', 'running'))
                 THEN 'an active job holds its idempotency key'
             END AS skip_reason
        FROM locked l
    ), redriven AS (
      UPDATE jobs.job j
         SET state = 'pending', run_after = statement_timestamp(), finished_at = NULL,
             releases = j.attempt,
             max_attempts = coalesce($11::int, j.max_attempts),
             checkpoint = CASE WHEN $12::boolean THEN NULL ELSE j.checkpoint END,
             progress = CASE WHEN $12::boolean THEN NULL ELSE j.progress END,
             attempt_log = j.attempt_log || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'owner', NULL, 'at', statement_timestamp(), 'outcome', 'redriven', 'by', $9::text,
               'message', 'redriven by ' || $9::text || coalesce(': ' || $10::text, '') || ' (' || judged.attempts_used
                 || ' attempt(s) used; fresh budget of ' || coalesce($11::int, j.max_attempts)
                 || CASE WHEN $12::boolean THEN ', from scratch' ELSE '' END || ')'))
        FROM judged
       WHERE j.id = judged.id AND judged.skip_reason IS NULL AND j.state = 'dead' AND NOT $13::boolean
      RETURNING ${JOB('j')}
    ), outboxed AS (
      INSERT INTO jobs.outbox (job_id) SELECT id FROM redriven RETURNING id AS outbox_id, job_id
    ), recorded AS (
      INSERT INTO jobs.operator_action (action, by, job_id, reason, detail)
      SELECT 'job-redrive', $9::text, r.id, $10::text,
             jsonb_build_object('attempt', r.attempt, 'attemptsUsedBefore', judged.attempts_used, 'maxAttempts', r.max_attempts,
                                'fromScratch', $12::boolean, 'wasDiscarded', judged.discarded_at IS NOT NULL)
        FROM redriven r JOIN judged ON judged.id = r.id
    )
    SELECT judged.id AS target_id, judged.type AS target_type, judged.dead_at_key, judged.skip_reason, judged.attempts_used,
           o.outbox_id, ${JOB('r')}
      FROM judged
      LEFT JOIN redriven r ON r.id = judged.id
      LEFT JOIN outboxed o ON o.job_id = judged.id
     ORDER BY judged.dead_at, judged.id`,

  /**
   * Discard: a dead job on-call decided not to re-run, with who and why. It stays dead (terminal,
   * no new state); the listing leaves it out by default and the DLQ reconciliation drops its dead
   * letters. Only dead jobs not yet discarded; locked, so two discards record one.
   * $1–$4 the dead filter | $5 by | $6 reason | $7 batch size.
   */
  deadJobDiscard: `
    WITH target AS (
      SELECT d.job_id FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
       WHERE ${DEAD_FILTER} AND d.discarded_at IS NULL
       ORDER BY d.dead_at, d.job_id
       LIMIT $7
         FOR UPDATE OF d, j
    ), marked AS (
      UPDATE jobs.dead_job d
         SET discarded_at = statement_timestamp(), discarded_by = $5::text, discard_reason = $6::text
        FROM target t
       WHERE d.job_id = t.job_id AND d.discarded_at IS NULL
      RETURNING ${DEAD}, d.job_id
    ), logged AS (
      UPDATE jobs.job j
         SET attempt_log = j.attempt_log || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'owner', NULL, 'at', statement_timestamp(), 'outcome', 'discarded', 'by', $5::text,
               'message', 'discarded by ' || $5::text || ': ' || $6::text))
        FROM marked m
       WHERE j.id = m.job_id
      RETURNING ${JOB('j')}
    ), recorded AS (
      INSERT INTO jobs.operator_action (action, by, job_id, reason) SELECT 'job-discard', $5::text, job_id, $6::text FROM marked
    )
    SELECT l.*, m.dead_at, m.discarded_at, m.discarded_by, m.discard_reason FROM logged l JOIN marked m ON m.job_id = l.id`,

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
