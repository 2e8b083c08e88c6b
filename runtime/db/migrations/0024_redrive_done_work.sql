-- A redrive must not do work a later job has done (review: on-call's redrive could post the same
-- books twice).
--
-- 1. Schedule work keys (0022). jobs.schedule_work names the one job a key is held by; a key
--    whose job was cancelled, or died and was discarded, is taken over by the next occurrence
--    or trigger, and a trigger with --again runs the work while the key stays where it is. Then
--    the row no longer says which work the earlier job was for, and a redrive of it (a discarded
--    job named by id, or a dead one by a filter) closed the month a second time. Here: every job
--    enqueued for a work key, with the key, written in the transaction that enqueues it (and by
--    the history backfill, runtime/store/schedule-work.ts). A redrive skips a dead job when a job
--    created after it, for the same work, is pending, running or succeeded; one it does redrive
--    takes its key back from a job that gave the work up. Rows go with their job (the pruner).
CREATE TABLE jobs.schedule_job_work (
  job_id     uuid PRIMARY KEY,
  work_key   text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedule_job_work_key ON jobs.schedule_job_work (work_key);

-- The keys held before this migration: their jobs are known.
INSERT INTO jobs.schedule_job_work (job_id, work_key)
SELECT job_id, work_key FROM jobs.schedule_work WHERE job_id IS NOT NULL
ON CONFLICT (job_id) DO NOTHING;

-- 2. Idempotency keys without a lasting window are free again once their job ends (0001): a dead
--    job's key may be enqueued again by the ERP, and that new job succeed. A redrive of the dead
--    one then did the work twice. It is skipped when a job created after it, with its type and
--    key, succeeded: finished keyed jobs by key. finished_at is already in job_active's
--    predicate, so a completion was not a HOT update anyway, and a claim still is (0001's index
--    rule); an unkeyed job has no entry. A plain build, as 0009's: writes to jobs.job wait for it
--    (a few seconds per million finished keyed jobs).
CREATE INDEX job_finished_idempotency_key ON jobs.job (type, idempotency_key)
  WHERE idempotency_key IS NOT NULL AND finished_at IS NOT NULL;
