-- Schedule work keys (0022), two follow-ups:
--
-- A work key's job, looked up when the pruner deletes a job that gave its work up (cancelled, or
-- dead and discarded): the key goes with it, so the next occurrence or trigger takes the work
-- over (its row would otherwise hold the key as done by a job that is gone, for 400 days).
-- jobs.schedule_work is small (a row per keyed occurrence): the build takes a moment.
CREATE INDEX schedule_work_job ON jobs.schedule_work (job_id) WHERE job_id IS NOT NULL;

-- How far a keyed schedule's history has been read for work done with no key recorded (before
-- the key was declared, or by the previous image during a rollout or after a rollback:
-- runtime/store/schedule-work.ts): its occurrences, and its operator triggers. Moved in the
-- transaction that records the keys, so a pass that rolls back reads the same history again.
ALTER TABLE jobs.schedule
  ADD COLUMN work_read_through timestamptz,
  ADD COLUMN work_triggers_read_through timestamptz;
