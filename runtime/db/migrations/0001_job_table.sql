-- The job table: the source of truth for every job's state, attempts, ownership and result.
-- SQS only delivers job ids; a worker decides what to do by reading and conditionally updating
-- this row. See runtime/store/sql.ts for every statement that touches it and why it is race-free.

CREATE SCHEMA IF NOT EXISTS jobs;

CREATE TYPE jobs.job_state AS ENUM ('pending', 'running', 'succeeded', 'dead', 'cancelled');

CREATE TABLE jobs.job (
  id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  type             text NOT NULL CHECK (type ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$' AND length(type) <= 100),
  payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
  state            jobs.job_state NOT NULL DEFAULT 'pending',
  idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 200),
  -- The fencing token: every claim increments it, and every later write by the owner carries
  -- (id, attempt) in its WHERE clause.
  attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  -- Claims handed back by a graceful stop (release). They keep the fencing token monotonic
  -- but do not count against max_attempts: attempts used = attempt - releases.
  releases         integer NOT NULL DEFAULT 0 CHECK (releases >= 0 AND releases <= attempt),
  max_attempts     integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
  lease_owner      text,
  lease_expires_at timestamptz,
  run_after        timestamptz NOT NULL DEFAULT now(),
  progress         jsonb,
  checkpoint       jsonb,
  last_error       jsonb,
  -- One entry per attempt that did not succeed: {attempt, owner, outcome, error, at}. Written
  -- only on the failure paths, so a job that succeeds first time pays nothing for it.
  attempt_log      jsonb NOT NULL DEFAULT '[]'::jsonb,
  result           jsonb,
  -- Who asked for a cancel, and when (the job ends `cancelled`).
  cancelled_by     text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz,
  finished_at      timestamptz,
  CHECK ((state = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- DESIGN 6: one active job per (type, idempotency key). Terminal jobs leave the index, so the
-- same key may be used again once its job has ended.
CREATE UNIQUE INDEX job_active_idempotency_key
  ON jobs.job (type, idempotency_key)
  WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'running');

-- The rescuer's scan: running jobs ordered by lease expiry. Small (running jobs only).
CREATE INDEX job_running_lease ON jobs.job (lease_expires_at) WHERE state = 'running';

-- Listing for people and the API: newest first within a state.
CREATE INDEX job_state_created ON jobs.job (state, created_at DESC, id DESC);

-- DESIGN 7, the transactional outbox: a row is inserted in the same transaction as the job (or
-- the transition) that needs a message. The enqueuer publishes and deletes it right after
-- COMMIT; the relay publishes whatever a dead process left behind. A rolled-back transaction
-- leaves no row, so no message.
CREATE TABLE jobs.outbox (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id       uuid NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_created ON jobs.outbox (created_at);
