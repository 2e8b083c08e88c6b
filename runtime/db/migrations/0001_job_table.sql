-- The job table: the source of truth for every job's state, attempts, ownership and result.
-- SQS only delivers job ids; a worker decides what to do by reading and conditionally updating
-- this row. See runtime/store/sql.ts for every statement that touches it and why it is race-free.

CREATE SCHEMA IF NOT EXISTS jobs;

CREATE TYPE jobs.job_state AS ENUM ('pending', 'running', 'succeeded', 'dead', 'cancelled');

-- Time-ordered ids (UUID version 7: 48 bits of Unix milliseconds, then random bits), so the
-- primary key also orders jobs by creation: listing newest first needs no index of its own, and
-- inserts land on the right-most index page instead of splitting pages all over the tree. The
-- runtime generates the same format (runtime/store/uuid7.ts); this is the default for SQL inserts.
CREATE FUNCTION jobs.uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid
$$;

-- Fill factor 50: a claim and a completion each write a new row version; with room on the page
-- they land beside the old one, so the claim is a HOT update (no index entries: no indexed
-- column changes on a claim, see below) and PostgreSQL logs only the changed bytes.
CREATE TABLE jobs.job (
  -- Column order is deliberate: what never changes first, then what the transitions change,
  -- grouped, so PostgreSQL's WAL record of an update (which omits the unchanged prefix and
  -- suffix of the row) carries a few dozen bytes instead of the whole row.
  id               uuid PRIMARY KEY DEFAULT jobs.uuid_v7(),
  created_at       timestamptz NOT NULL DEFAULT now(),
  max_attempts     integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
  type             text NOT NULL CHECK (type ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$' AND length(type) <= 100),
  idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 200),
  payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
  -- Who asked for a cancel (the job ends `cancelled`).
  cancelled_by     text,
  checkpoint       jsonb,
  -- One entry per attempt that did not succeed: {attempt, owner, outcome, error, at}. Written
  -- only on the failure paths, so a job that succeeds first time pays nothing for it.
  attempt_log      jsonb NOT NULL DEFAULT '[]'::jsonb,
  last_error       jsonb,
  run_after        timestamptz NOT NULL DEFAULT now(),
  -- Claims handed back by a graceful stop (release). They keep the fencing token monotonic
  -- but do not count against max_attempts: attempts used = attempt - releases.
  releases         integer NOT NULL DEFAULT 0 CHECK (releases >= 0 AND releases <= attempt),
  -- Changed on completion (with state and the lease).
  result           jsonb,
  finished_at      timestamptz,
  -- Changed by heartbeats.
  progress         jsonb,
  -- Changed by claims (all of the rest).
  started_at       timestamptz,
  state            jobs.job_state NOT NULL DEFAULT 'pending',
  -- The fencing token: every claim increments it, and every later write by the owner carries
  -- (id, attempt) in its WHERE clause.
  attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  lease_owner      text,
  lease_expires_at timestamptz,
  CHECK ((state = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
  -- finished_at marks the terminal states, so indexes can say "active" without naming `state`.
  CONSTRAINT job_finished_iff_terminal CHECK ((finished_at IS NULL) = (state IN ('pending', 'running')))
) WITH (fillfactor = 50);

-- Index rule: no index may mention a column a claim or a heartbeat changes (state, attempt,
-- lease_owner, lease_expires_at, started_at), in its key or its predicate. Then claims and lease
-- renewals are HOT updates: no index writes, a fraction of the WAL. "Active" is spelled
-- finished_at IS NULL (job_finished_iff_terminal keeps it equal to state IN (pending, running)).

-- DESIGN 6: one active job per (type, idempotency key). Terminal jobs leave the index, so the
-- same key may be used again once its job has ended.
CREATE UNIQUE INDEX job_active_idempotency_key
  ON jobs.job (type, idempotency_key)
  WHERE idempotency_key IS NOT NULL AND finished_at IS NULL;

-- Active jobs (pending and running): the rescuer's, the live view's and the stuck-job scans
-- read these and filter by state in the heap. Entries are added at enqueue only.
CREATE INDEX job_active ON jobs.job (id) WHERE finished_at IS NULL;

-- DESIGN 7, the transactional outbox: a row is inserted in the same transaction as the job (or
-- the transition) that needs a message. The enqueuer publishes and deletes it right after
-- COMMIT; the relay publishes whatever a dead process left behind. A rolled-back transaction
-- leaves no row, so no message.
CREATE TABLE jobs.outbox (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id       uuid NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);
-- No index on created_at: the relay reads the few rows in id order and filters by age.
