-- Idempotency that outlives the job, and retention (issue 15).
--
-- 1. Lasting idempotency keys. A job type may keep its keys after the job ends, for a window or
--    forever (defineJob({ idempotency: { keep: 'forever' } | { keepDays } })): enqueuing the same
--    key again returns the original job, whatever its state, and never makes a second one. The
--    key lives in jobs.idempotency_key, written by the enqueue statement itself (jobInsertMany in
--    runtime/store/sql.ts) before the job row, so its primary key is what serializes two
--    concurrent enqueues of one key. Types without it keep the rule of 0001: one active job per
--    key (job_active_idempotency_key), the key free again once the job ends.
--
-- 2. Retention. Finished jobs are deleted by the workers' pruner (runtime/maintenance/pruner.ts)
--    keep_days after they finished, in small batches; a job a lasting key must still return is
--    kept as long as the key, and a dead job on-call has not discarded is never deleted.
--
-- The index rule of 0001 holds: nothing here indexes a column a claim or a heartbeat changes.

CREATE TABLE jobs.idempotency_key (
  type      text NOT NULL,
  key       text NOT NULL,
  -- The job this key returns. No foreign key (see jobs.dead_job in 0003: its trigger would run on
  -- every update of jobs.job); the pruner deletes the key with its job, and an enqueue that finds
  -- a key without a job (never committed together, see the store) takes the key.
  job_id    uuid NOT NULL,
  -- Days the key outlives its job's end; NULL: forever. Fixed at enqueue from the job type, like
  -- the job's own keep_days: a later change of the type's window applies to new keys.
  keep_days integer CHECK (keep_days >= 1),
  PRIMARY KEY (type, key)
);

-- keep_days: how many days the job stays after it finished, decided at enqueue (the type's
-- keepFinishedDays, else the enqueuer's JOBS_KEEP_FINISHED_DAYS, and at least its lasting key's
-- window); NULL: forever (its key is kept forever).
-- prune_after: when the pruner looks at the job next. Set at enqueue to created_at + keep_days, a
-- lower bound of finished_at + keep_days (a job finishes after it is created); when the pruner
-- finds a job it may not delete yet (it finished late, was redriven, is dead and not discarded)
-- it moves prune_after to the next moment that could change, so no row is looked at twice for
-- nothing. 'infinity' for a job kept forever. Rows from before this migration get 30 days from
-- now (the default: a constant and a stable default, so no table rewrite).
-- Last columns of the row (see 0001 on column order); neither changes on a claim or a heartbeat.
ALTER TABLE jobs.job
  ADD COLUMN keep_days integer DEFAULT 30 CHECK (keep_days >= 1),
  ADD COLUMN prune_after timestamptz NOT NULL DEFAULT statement_timestamp() + interval '30 days';

-- The pruner's index: finished jobs by when to look at them. A job enters it when it finishes
-- (the completion is not a HOT update anyway: finished_at is in job_active's predicate) and
-- leaves it if a redrive makes it pending again. Active jobs are not in it, so a pass reads only
-- jobs it can judge.
CREATE INDEX job_prune_after ON jobs.job (prune_after) WHERE finished_at IS NOT NULL;

-- Poison messages by age, for their retention (JOBS_KEEP_POISON_DAYS): a stray producer can fill
-- the table, and a pass must find the old rows without reading the young ones. Inserts are rare.
CREATE INDEX poison_message_recorded_at ON jobs.poison_message (recorded_at);
