-- A redrive must not do work a later job has done (review: on-call's redrive could close a month
-- twice).
--
-- jobs.schedule_work names the one job a schedule work key (0022) is held by; a key whose job was
-- cancelled, or died and was discarded, is taken over by the next occurrence or trigger, and a
-- trigger with --again runs the work while the key stays where it is. Then nothing said which
-- work the earlier job was for, and a redrive of it (a discarded job named by id, or a dead one by
-- a filter) did the work a second time. Here: every job enqueued for a work key, with the key and
-- where it came from, written in the transaction that enqueues it (and by the history backfill,
-- runtime/store/schedule-work.ts). A redrive skips a dead job when its key is held by another job
-- that has not given the work up (or whose row the pruner removed after it succeeded), or when
-- another job for the same work is pending or running, or succeeded after the dead one was
-- created; one it does redrive takes its key back (the key's row written again if it is gone).
-- Rows go with their job (the pruner).
CREATE TABLE jobs.schedule_job_work (
  job_id        uuid PRIMARY KEY,
  work_key      text NOT NULL,
  schedule      text NOT NULL,
  occurrence_at timestamptz NOT NULL,
  manual        boolean NOT NULL DEFAULT false,
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedule_job_work_key ON jobs.schedule_job_work (work_key);

-- The jobs of work keys recorded before this migration: the schedules' kept history (90 days of
-- occurrences, the operator triggers of jobs still kept) is read again by their next pass, which
-- records each past job with its key (the keys themselves stay as they are).
UPDATE jobs.schedule SET work_read_through = NULL, work_triggers_read_through = NULL;
INSERT INTO jobs.schedule_job_work (job_id, work_key, schedule, occurrence_at, manual)
SELECT job_id, work_key, schedule, occurrence_at, manual FROM jobs.schedule_work WHERE job_id IS NOT NULL
ON CONFLICT (job_id) DO NOTHING;
