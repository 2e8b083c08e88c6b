-- Jobs due more than 15 minutes ahead get no message until they are due within 15 minutes.
--
-- SQS delays a message by at most 900 s, and the queue-age alarm counts a message's age from its
-- sending. A job enqueued for tonight used to get a message at once, which the worker received
-- and replaced every 15 minutes until the job was due: a receive, a claim attempt, a send and a
-- delete per job per quarter-hour (100,000 jobs enqueued for tomorrow: 110 rounds a second all
-- day). Such a job's publish intent waits here instead, with the time it is to be published
-- (run_after - 900 s). The outbox relay moves due rows back to jobs.outbox (from_deferred), which
-- publishes them with the remaining delay; a row whose job has become due later is deferred again.
--
-- One row per job: a second deferral of the same job (a re-publish, an early message from
-- before this migration) updates the time. The reconciler counts these rows as messages owed,
-- like the outbox's, so a deferred job is not a deficit.
CREATE TABLE jobs.outbox_deferred (
  job_id         uuid PRIMARY KEY,
  publish_after  timestamptz NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);
-- The relay's pass, every second in every process: the rows whose time has come, oldest first.
CREATE INDEX outbox_deferred_due ON jobs.outbox_deferred (publish_after);

-- A row the relay brought back from here: published at its next pass whatever its age, and not a
-- publish that had gone missing (the relay logs those).
ALTER TABLE jobs.outbox ADD COLUMN from_deferred boolean NOT NULL DEFAULT false;
