-- The work a schedule's occurrences do, once (a schedule's optional `key`, runtime/handlers/schedule.ts).
--
-- An occurrence is one job: (schedule, instant) is jobs.schedule_occurrence's primary key. But an
-- occurrence names a time, not the work: a month-end close moved from the 1st to the 2nd on a
-- deploy day, renamed, removed and declared again, or triggered twice by two on-call engineers
-- closed the same month twice, and inventory.cost adds a second set of cost rows for it. A
-- schedule that declares `key: (o) => 'close-S01-' + o.month(-1)` has each occurrence's key
-- inserted here, in the transaction that enqueues its job: an occurrence whose work key is here
-- already (from any schedule, any instant, a trigger) enqueues nothing and says which job did
-- the work. A trigger with --again does not ask, and records itself as the key's job. A key whose
-- job was cancelled, or died and was discarded, is taken over by the next claim. Rows go after
-- 400 days (scheduleSettle).
CREATE TABLE jobs.schedule_work (
  work_key       text PRIMARY KEY,
  schedule       text NOT NULL,
  occurrence_at  timestamptz NOT NULL,
  manual         boolean NOT NULL DEFAULT false,
  job_id         uuid,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedule_work_created ON jobs.schedule_work (created_at);

-- An occurrence not enqueued because its work was done: the work key, so `jobs schedules list`
-- says so (and by which job) instead of showing an occurrence whose job is gone.
ALTER TABLE jobs.schedule_occurrence ADD COLUMN skipped_work text;
