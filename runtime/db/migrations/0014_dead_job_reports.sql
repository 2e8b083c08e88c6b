-- A dead job's report reaches the DLQ even when the worker that killed the job cannot send it
-- (DESIGN 9: nothing disappears silently). The worker sends the report right after the job's
-- state change commits; until now nothing noticed when it did not: a worker killed (or its task
-- stopped) between the COMMIT and the send, or a DLQ that refused three sends in a row. The
-- job's message then came back, found the job terminal and was deleted, and on-call was never
-- paged for a job that had stopped.
--
-- jobs.dead_job (0003, kept by a trigger) now records whether the report went out:
--   reported_at      set once the DLQ accepted the report (the sender marks it)
--   report_tried_at  a sweeper's claim of an unreported death (so two workers' sweepers never
--                    send the same report at once)
-- The sweeper (runtime/maintenance/dead-reports.ts) sends what is still unreported a grace
-- period after the death. A new death (after a redrive) is unreported again.

ALTER TABLE jobs.dead_job ADD COLUMN reported_at timestamptz, ADD COLUMN report_tried_at timestamptz;

-- Deaths before this migration: reported or not, it is too late to know; never page for them now.
UPDATE jobs.dead_job SET reported_at = dead_at;

-- Only the few deaths whose report is not yet sent: the sweeper's reads stay this small.
CREATE INDEX dead_job_unreported ON jobs.dead_job (dead_at) WHERE reported_at IS NULL AND discarded_at IS NULL;

CREATE OR REPLACE FUNCTION jobs.job_track_dead() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'dead' THEN
    INSERT INTO jobs.dead_job (job_id, type, dead_at)
    VALUES (NEW.id, NEW.type, coalesce(NEW.finished_at, statement_timestamp()))
    ON CONFLICT (job_id) DO UPDATE
      SET dead_at = EXCLUDED.dead_at, discarded_at = NULL, discarded_by = NULL, discard_reason = NULL,
          reported_at = NULL, report_tried_at = NULL;
  ELSE
    DELETE FROM jobs.dead_job WHERE job_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
