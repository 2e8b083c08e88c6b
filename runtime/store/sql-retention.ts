// The pruner's statements (runtime/maintenance/pruner.ts): what has ended leaves the tables once
// its retention is over (migration 0009). Each is one autocommit statement over a small batch, and
// locks its rows with SKIP LOCKED: a row someone else holds (a redrive, a discard) is left for the
// next pass, and nothing here waits for a worker or makes one wait. Workers never touch a finished
// job, so the job pass shares no row with a claim, a heartbeat or a completion.

export const RETENTION_SQL = {
  /**
   * Finished jobs whose time has come (prune_after, see 0009), judged under their row lock and
   * either deleted, with their lasting key, their dead_job row and a schedule's work key they gave
   * up (cancelled, or dead and discarded: the work is to be done again), or given the next moment to
   * look at them. A job stays:
   *  - kept forever (keep_days NULL: its key is kept forever);
   *  - less than keep_days after it finished (it ran long, waited for its run_at, or was redriven:
   *    prune_after was a lower bound);
   *  - while a lasting key names it and the key's window is open (keep_days already covers the
   *    window, set at enqueue; this re-check does not depend on it);
   *  - dead and not discarded by on-call (looked at again daily), or discarded less than $2 days ago.
   * The columns judged come from the locked rows (due): FOR UPDATE re-reads a row changed since the
   * statement began (a redrive makes it active, and it drops out). The key and dead_job rows are
   * read as of the statement's start; a change there since can only keep a job longer.
   * $1 batch size | $2 days a discarded dead job is kept after its discard.
   */
  jobPrune: `
    WITH due AS (
      SELECT id, type, idempotency_key, state, finished_at, keep_days FROM jobs.job
       WHERE finished_at IS NOT NULL AND prune_after < statement_timestamp()
       ORDER BY prune_after
       LIMIT $1
         FOR UPDATE SKIP LOCKED
    ), judged AS (
      SELECT due.id,
             CASE
               WHEN due.keep_days IS NULL THEN 'infinity'::timestamptz
               WHEN due.finished_at + due.keep_days * interval '1 day' > statement_timestamp()
                 THEN due.finished_at + due.keep_days * interval '1 day'
               WHEN k.job_id IS NOT NULL AND k.keep_days IS NULL THEN 'infinity'::timestamptz
               WHEN k.job_id IS NOT NULL AND due.finished_at + k.keep_days * interval '1 day' > statement_timestamp()
                 THEN due.finished_at + k.keep_days * interval '1 day'
               WHEN due.state = 'dead' AND d.discarded_at IS NULL THEN statement_timestamp() + interval '1 day'
               WHEN due.state = 'dead' AND d.discarded_at + $2::int * interval '1 day' > statement_timestamp()
                 THEN d.discarded_at + $2::int * interval '1 day'
             END AS next_look
        FROM due
        LEFT JOIN jobs.idempotency_key k ON k.type = due.type AND k.key = due.idempotency_key AND k.job_id = due.id
        LEFT JOIN jobs.dead_job d ON d.job_id = due.id
    ), postponed AS (
      UPDATE jobs.job j SET prune_after = judged.next_look
        FROM judged
       WHERE j.id = judged.id AND judged.next_look IS NOT NULL
      RETURNING j.id
    ), pruned AS (
      DELETE FROM jobs.job j USING judged
       WHERE j.id = judged.id AND judged.next_look IS NULL
      RETURNING j.id, j.type, j.idempotency_key, j.state
    ), work AS (
      -- A schedule's work key held by a job that gave the work up (migration 0023): freed with it.
      DELETE FROM jobs.schedule_work w USING pruned p
       WHERE w.job_id = p.id AND p.state IN ('cancelled', 'dead')
    ), work_jobs AS (
      DELETE FROM jobs.schedule_job_work m USING pruned p WHERE m.job_id = p.id
    ), keys AS (
      DELETE FROM jobs.idempotency_key k USING pruned p
       WHERE k.type = p.type AND k.key = p.idempotency_key AND k.job_id = p.id
      RETURNING k.job_id
    ), dead AS (
      DELETE FROM jobs.dead_job d USING pruned p WHERE d.job_id = p.id RETURNING d.job_id
    )
    SELECT (SELECT count(*) FROM pruned)::int AS pruned, (SELECT count(*) FROM postponed)::int AS postponed,
           (SELECT count(*) FROM keys)::int AS keys, (SELECT count(*) FROM dead)::int AS dead`,

  /** Poison messages recorded more than $1 days ago, the oldest first, $2 at most (index poison_message_recorded_at). */
  poisonPrune: `
    DELETE FROM jobs.poison_message p
     USING (SELECT id FROM jobs.poison_message
             WHERE recorded_at < statement_timestamp() - $1::int * interval '1 day'
             ORDER BY recorded_at
             LIMIT $2
               FOR UPDATE SKIP LOCKED) old
     WHERE p.id = old.id`,

  /** Operator actions older than $1 days, the oldest first, $2 at most (index operator_action_at, read backwards). */
  operatorActionPrune: `
    DELETE FROM jobs.operator_action a
     USING (SELECT id FROM jobs.operator_action
             WHERE at < statement_timestamp() - $1::int * interval '1 day'
             ORDER BY at, id
             LIMIT $2
               FOR UPDATE SKIP LOCKED) old
     WHERE a.id = old.id`,
} as const;
