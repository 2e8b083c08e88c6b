-- On-call operations (issue 7): when the current attempt was claimed (stuck-job detection), the
-- dead jobs with their triage (discarded, by whom, why), the poison messages the worker could not
-- handle, and the trail of what operators did (redrive, discard, DLQ moves). The statements are
-- in runtime/ops/sql.ts.
--
-- The job table's index rule (0001) holds: nothing here indexes a column a claim or a heartbeat
-- changes, so claims and lease renewals stay HOT updates. What needs an index over dead jobs gets
-- it from jobs.dead_job, kept by a trigger, instead of a partial index on `state`.

-- claimed_at: when the current attempt's claim happened. started_at is the first claim ever, so
-- a job retried after a backoff would look as if it had been running all along. The claim
-- statement (jobClaim in runtime/store/sql.ts) stamps it: a BEFORE UPDATE trigger would lock
-- every updated row first and write a lock record to the WAL for each, on every claim and
-- completion. Last column of the row, beside the others a claim changes. Not indexed.
ALTER TABLE jobs.job ADD COLUMN claimed_at timestamptz;

-- Jobs running while this migration applies: the best lower bound of their claim there is.
UPDATE jobs.job SET claimed_at = greatest(started_at, run_after) WHERE state = 'running' AND claimed_at IS NULL;

-- The dead jobs, one row per job while it is dead: what the dead-job listing reads (newest death
-- first, by type and time) and where on-call's triage lives. A job is discarded when on-call
-- decides not to re-run it; it stays `dead` (no new job state), the listing leaves it out by
-- default and the DLQ reconciliation drops its dead letters. The trigger below keeps the rows in
-- step with jobs.job in the same transaction: a row appears when a job becomes dead (however it
-- got there: failure, lease lost on the final attempt, rescuer) and goes when it stops being dead
-- (redrive). Its WHEN clause is a plain expression: on every other state change it is evaluated
-- and nothing more happens.
CREATE TABLE jobs.dead_job (
  -- No foreign key: its trigger would run on every update of jobs.job, heartbeats included.
  -- Nothing deletes jobs; the listing joins jobs.job, so an orphan would never show.
  job_id         uuid PRIMARY KEY,
  type           text NOT NULL,
  dead_at        timestamptz NOT NULL,
  discarded_at   timestamptz,
  discarded_by   text CHECK (length(discarded_by) BETWEEN 1 AND 200),
  discard_reason text CHECK (length(discard_reason) BETWEEN 1 AND 1000),
  CHECK ((discarded_at IS NULL) = (discarded_by IS NULL) AND (discarded_at IS NULL) = (discard_reason IS NULL))
);
CREATE INDEX dead_job_dead_at ON jobs.dead_job (dead_at DESC, job_id DESC);

CREATE FUNCTION jobs.job_track_dead() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'dead' THEN
    INSERT INTO jobs.dead_job (job_id, type, dead_at)
    VALUES (NEW.id, NEW.type, coalesce(NEW.finished_at, statement_timestamp()))
    ON CONFLICT (job_id) DO UPDATE
      SET dead_at = EXCLUDED.dead_at, discarded_at = NULL, discarded_by = NULL, discard_reason = NULL;
  ELSE
    DELETE FROM jobs.dead_job WHERE job_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER job_track_dead AFTER UPDATE OF state ON jobs.job
  FOR EACH ROW WHEN ((NEW.state = 'dead') IS DISTINCT FROM (OLD.state = 'dead'))
  EXECUTE FUNCTION jobs.job_track_dead();

INSERT INTO jobs.dead_job (job_id, type, dead_at)
SELECT id, type, coalesce(finished_at, created_at) FROM jobs.job WHERE state = 'dead'
ON CONFLICT (job_id) DO NOTHING;

-- Messages the worker dead-lettered because it could not handle them at all: a body it cannot
-- parse, or a job id with no job. The DLQ holds them for its retention (14 days) and only a
-- receive can read them; this table keeps them, raw body included, for on-call to see what sent
-- them. One row per source message (a redelivered copy is the same message).
CREATE TABLE jobs.poison_message (
  id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  source_message_id text NOT NULL UNIQUE,
  reason            text NOT NULL CHECK (reason IN ('unparseable-body', 'unknown-job')),
  detail            text NOT NULL,
  body              text NOT NULL,
  attributes        jsonb NOT NULL DEFAULT '{}'::jsonb,
  job_id            uuid,
  worker_id         text,
  receive_count     integer,
  recorded_at       timestamptz NOT NULL DEFAULT now(),
  -- Set when on-call discards its dead letter (jobs dlq discard).
  resolved_at       timestamptz,
  resolved_by       text,
  resolution        text
);

-- Every operator action on dead jobs and dead letters: who, when, what, why. Written in the same
-- transaction as the change it records (job redrive and discard), or right after the SQS call
-- that made it (DLQ resend, drop, discard, move).
CREATE TABLE jobs.operator_action (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  action      text NOT NULL CHECK (action IN ('job-redrive', 'job-discard', 'dlq-resend', 'dlq-drop', 'dlq-discard', 'dlq-move')),
  by          text NOT NULL CHECK (length(by) BETWEEN 1 AND 200),
  job_id      uuid,
  message_id  text,
  reason      text,
  detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX operator_action_job ON jobs.operator_action (job_id, at) WHERE job_id IS NOT NULL;
CREATE INDEX operator_action_at ON jobs.operator_action (at DESC, id DESC);
