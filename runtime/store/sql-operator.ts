// The operators' writes to jobs.job and jobs.outbox, each named after the transition it performs,
// with the reason it is race-free beside it: cancel, republish, redrive and discard. They follow
// the conventions at the top of sql.ts (statement_timestamp(), READ COMMITTED, attempts used =
// attempt - releases); sql.ts merges them into SQL, so every job-table statement is still run by
// name through one table and each transition is named once.
//
// "Attempts used" is attempt - releases. A redrive gives a dead job a fresh attempt budget by
// setting releases = attempt, so the claim's `attempt - releases < max_attempts` holds again while
// `attempt`, the fencing token, keeps growing: a worker that still believed it held an old attempt
// is refused exactly as before.

import { DEAD, deadFilter, givenUp, JOB, JOB_COLUMNS } from './sql-fragments.ts';

export const OPERATOR_SQL = {
  /**
   * Cancel a pending or running job. A running owner learns at its next heartbeat (its renewal
   * matches zero rows) and its handler is aborted; its completion would be refused. A job due
   * beyond the publish horizon loses its deferred publish with it (migration 0018).
   */
  jobCancel: `
    WITH cancelled AS (
      UPDATE jobs.job
         SET state = 'cancelled', cancelled_by = $2, finished_at = statement_timestamp(),
             lease_owner = NULL, lease_expires_at = NULL, type_slot = false
       WHERE id = $1 AND state IN ('pending', 'running')
      RETURNING ${JOB_COLUMNS}
    ), undeferred AS (
      DELETE FROM jobs.outbox_deferred WHERE job_id IN (SELECT id FROM cancelled)
    )
    SELECT * FROM cancelled`,

  /**
   * An operator forces a fresh message for pending jobs (`jobs republish`): by id, by type, or
   * due before a time, at most $4, through the outbox, each recorded as an operator action in
   * the same statement. Only pending jobs: a running job's owner holds its message (and the
   * rescuer re-publishes it if the owner dies), a terminal job needs none. Rows locked in
   * (run_after, id) order; a concurrent claim waits or has won, and a claimed job is no longer
   * pending when this re-checks it. Sets republished_at so the reconciler does not pick the same
   * jobs again at once. A duplicate message is harmless by design.
   */
  jobRepublish: `
    WITH picked AS (
      SELECT id FROM jobs.job
       WHERE finished_at IS NULL AND state = 'pending'
         AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
         AND ($2::text IS NULL OR type = $2::text)
         AND ($3::timestamptz IS NULL OR run_after < $3::timestamptz)
       ORDER BY run_after, id
       LIMIT $4
       FOR UPDATE
    ), marked AS (
      UPDATE jobs.job j SET republished_at = statement_timestamp()
        FROM picked p WHERE j.id = p.id AND j.state = 'pending'
      RETURNING j.id, j.type, j.run_after, j.lane
    ), outboxed AS (
      INSERT INTO jobs.outbox (job_id) SELECT id FROM marked RETURNING id AS outbox_id, job_id
    ), recorded AS (
      INSERT INTO jobs.operator_action (action, by, job_id, reason, detail)
      SELECT 'job-republish', $5::text, id, $6::text, jsonb_build_object('runAfter', run_after) FROM marked
    )
    SELECT m.id, m.type, m.run_after, m.lane, o.outbox_id FROM marked m JOIN outboxed o ON o.job_id = m.id`,

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
   * Schedule work keys (migration 0024): a dead job is skipped when its work key is held by
   * another job that has not given the work up (a takeover of its discarded key: that job is
   * redriven or discarded instead; one the pruner removed after it succeeded still holds it), or
   * when another job for the same work (a trigger with --again) is pending or running, or
   * succeeded after the dead one was created — it would close the month twice. Of two dead jobs
   * of one work, the key's holder is the one redriven. A redriven job takes its key back from a
   * job that gave it up (the key's row written again if the pruner removed it), so the next
   * occurrence or trigger does not take the work over while it runs.
   *
   * $1–$4 the dead filter | $5 include discarded | $6, $7 cursor (dead_at text, id; ascending) |
   * $8 batch size | $9 by | $10 reason | $11 new max_attempts (null: the budget the job had before
   * any redrive overrode it, else its own: a probe's --max-attempts 1 does not stick) | $12 from scratch
   * (drop checkpoint and progress) | $13 dry run (judge, change nothing) | $14 lane.
   */
  deadJobRedrive: `
    WITH locked AS (
      SELECT j.id, j.type, j.idempotency_key, j.created_at, d.dead_at, d.dead_at::text AS dead_at_key, d.discarded_at, d.discarded_by, d.discard_reason,
             j.attempt - j.releases AS attempts_used,
             -- The budget the job had before any redrive overrode it (a probe's --max-attempts 1):
             -- what a plain redrive gives back. Null when no redrive ever overrode it.
             (SELECT (x.e->>'maxAttemptsBefore')::int
                FROM jsonb_array_elements(j.attempt_log) WITH ORDINALITY AS x(e, n)
               WHERE x.e->>'outcome' = 'redriven' AND x.e->>'maxAttemptsBefore' IS NOT NULL
               ORDER BY x.n LIMIT 1) AS budget_before_overrides
        FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
       WHERE ${deadFilter(14)}
         AND ($5::boolean OR d.discarded_at IS NULL)
         AND ($7::uuid IS NULL OR (d.dead_at, d.job_id) > ($6::timestamptz, $7::uuid))
       ORDER BY d.dead_at, d.job_id
       LIMIT $8
         -- Both rows: a discard committing while this waits is seen when PostgreSQL re-checks the
         -- row (it re-reads only the rows it locks), so a filtered redrive leaves the just-discarded
         -- job dead instead of undoing the discard. The job row first (the OF list's order), as the
         -- discard, the pruner and the dead-lettering lock them: in the other order a redrive and
         -- the pruner deleting the same discarded job deadlocked.
         FOR UPDATE OF j, d
    ), keyed AS (
      SELECT l.*,
             CASE
               WHEN l.idempotency_key IS NULL THEN NULL
               WHEN row_number() OVER (PARTITION BY l.type, l.idempotency_key ORDER BY l.dead_at DESC, l.id DESC) > 1
                 THEN 'a newer dead job with the same idempotency key is redriven instead'
               WHEN EXISTS (SELECT 1 FROM jobs.job a
                             WHERE a.type = l.type AND a.idempotency_key = l.idempotency_key AND a.state IN ('pending', 'running'))
                 THEN 'an active job holds its idempotency key'
             END AS key_skip_reason
        FROM locked l
    ), worked AS (
      SELECT k.*, m.work_key, coalesce(w.job_id = k.id, false) AS holds_key,
             -- Its key held by another job that did not give the work up (or that is gone: pruned after it succeeded).
             CASE WHEN w.job_id <> k.id AND NOT ${givenUp('w.job_id')} THEN w.job_id END AS holder,
             other.other_id, other.other_state
        FROM keyed k
        LEFT JOIN jobs.schedule_job_work m ON m.job_id = k.id
        LEFT JOIN jobs.schedule_work w ON w.work_key = m.work_key
        -- Another job of the same work running, or done since this one was asked for.
        LEFT JOIN LATERAL (
          SELECT o.id AS other_id, o.state AS other_state
            FROM jobs.schedule_job_work m2 JOIN jobs.job o ON o.id = m2.job_id
           WHERE m2.work_key = m.work_key AND m2.job_id <> k.id
             AND (o.state IN ('pending', 'running') OR (o.state = 'succeeded' AND o.finished_at > k.created_at))
           ORDER BY o.state = 'succeeded' DESC, o.created_at
           LIMIT 1) other ON true
    ), judged AS (
      SELECT x.*,
             coalesce(x.key_skip_reason,
               CASE WHEN x.holder IS NOT NULL THEN 'job ' || x.holder || ' holds its schedule work ' || x.work_key END,
               CASE WHEN x.other_id IS NOT NULL THEN 'job ' || x.other_id || CASE x.other_state WHEN 'succeeded' THEN ' did' ELSE ' does' END
                 || ' its schedule work ' || x.work_key END,
               -- Of this batch's dead jobs of one work, one: the key's holder, else the newest.
               CASE WHEN x.work_key IS NOT NULL AND row_number() OVER (
                      PARTITION BY x.work_key ORDER BY x.holds_key DESC, x.dead_at DESC, x.id DESC) > 1
                    THEN 'another dead job of its schedule work ' || x.work_key || ' is redriven instead' END) AS skip_reason
        FROM worked x
    ), redriven AS (
      UPDATE jobs.job j
         SET state = 'pending', run_after = statement_timestamp(), finished_at = NULL,
             releases = j.attempt,
             max_attempts = coalesce($11::int, judged.budget_before_overrides, j.max_attempts),
             checkpoint = CASE WHEN $12::boolean THEN NULL ELSE j.checkpoint END,
             progress = CASE WHEN $12::boolean THEN NULL ELSE j.progress END,
             attempt_log = j.attempt_log || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt, 'owner', NULL, 'at', statement_timestamp(), 'outcome', 'redriven', 'by', $9::text,
               'message', 'redriven by ' || $9::text || coalesce(': ' || $10::text, '') || ' (' || judged.attempts_used
                 || ' attempt(s) used; fresh budget of ' || coalesce($11::int, judged.budget_before_overrides, j.max_attempts)
                 || CASE WHEN $11::int IS NULL AND judged.budget_before_overrides IS NOT NULL
                         THEN ', the budget it had before a redrive overrode it' ELSE '' END
                 || CASE WHEN $12::boolean THEN ', from scratch' ELSE '' END || ')')
               || CASE WHEN $11::int IS NOT NULL THEN jsonb_build_object('maxAttemptsBefore', j.max_attempts) ELSE '{}'::jsonb END)
        FROM judged
       WHERE j.id = judged.id AND judged.skip_reason IS NULL AND j.state = 'dead' AND NOT $13::boolean
      RETURNING ${JOB('j')}
    ), rekeyed AS (
      -- Its schedule work key back from a job that gave the work up, or written again (0024).
      INSERT INTO jobs.schedule_work AS w (work_key, schedule, occurrence_at, manual, job_id)
      SELECT m.work_key, m.schedule, m.occurrence_at, m.manual, r.id
        FROM redriven r JOIN jobs.schedule_job_work m ON m.job_id = r.id
      ON CONFLICT (work_key) DO UPDATE SET job_id = EXCLUDED.job_id, created_at = statement_timestamp()
       WHERE w.job_id IS DISTINCT FROM EXCLUDED.job_id AND ${givenUp('w.job_id')}
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
           judged.discarded_at AS was_discarded_at, judged.discarded_by AS was_discarded_by, judged.discard_reason AS was_discard_reason,
           o.outbox_id, ${JOB('r')}
      FROM judged
      LEFT JOIN redriven r ON r.id = judged.id
      LEFT JOIN outboxed o ON o.job_id = judged.id
     ORDER BY judged.dead_at, judged.id`,

  /**
   * Discard: a dead job on-call decided not to re-run, with who and why. It stays dead (terminal,
   * no new state); the listing leaves it out by default and the DLQ reconciliation drops its dead
   * letters. Only dead jobs not yet discarded; locked, so two discards record one.
   * $1–$4 the dead filter | $5 by | $6 reason | $7 batch size | $8 lane.
   */
  deadJobDiscard: `
    WITH target AS (
      SELECT d.job_id FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id
       WHERE ${deadFilter(8)} AND d.discarded_at IS NULL
       ORDER BY d.dead_at, d.job_id
       LIMIT $7
         FOR UPDATE OF j, d
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
} as const;
