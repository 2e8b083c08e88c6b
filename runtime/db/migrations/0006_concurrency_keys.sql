-- Concurrency keys (issue 14): work that must not overlap. A job may carry a concurrency key
-- (`ledger:company-7`) and a limit (default 1). The database enforces it in the claim itself:
-- at no moment do more jobs of one key run than the limit, and jobs of one key start in enqueue
-- order. No lock is held during the run: a dead worker's job keeps its place until it is
-- reclaimed (runtime/store/sql-keys.ts says how and why it is race-free).
--
-- A job the key turns away is *blocked*: its message is deleted (it would only be received over
-- and over, toward maxReceiveCount) and blocked_since is set. When a job of the key stops
-- running or waiting (success, failure, release, cancel, dead, rescue), the same transaction
-- publishes the next blocked jobs through the outbox at its COMMIT, as many as the key has room
-- for (jobs.wake_key below, called from triggers, so every path that ends a job does it, the
-- operators' included).
--
-- Columns last in the row (see 0001 on column order); none of them changes on a claim or a
-- heartbeat, so those stay HOT updates. concurrency_key and concurrency_limit never change.
ALTER TABLE jobs.job
  ADD COLUMN concurrency_key text CHECK (length(concurrency_key) BETWEEN 1 AND 200),
  ADD COLUMN concurrency_limit integer CHECK (concurrency_limit BETWEEN 1 AND 1000),
  ADD COLUMN blocked_since timestamptz,
  ADD CONSTRAINT job_concurrency_limit_with_key CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL));

-- A key's active jobs in enqueue order (ids are time-ordered). Mentions no column a claim or a
-- heartbeat changes (the index rule of 0001); entries leave when the job finishes.
CREATE INDEX job_active_concurrency_key ON jobs.job (concurrency_key, id)
  WHERE concurrency_key IS NOT NULL AND finished_at IS NULL;

-- Outbox rows that no enqueuing process will publish itself (a key's next job): the relay
-- publishes them on its next pass instead of waiting out the age that protects an enqueuer's
-- own publish.
ALTER TABLE jobs.outbox ADD COLUMN relay_now boolean NOT NULL DEFAULT false;

-- The lock every decision about one key takes, in the same order everywhere: claim (after its
-- candidate rows), block, wake.
CREATE FUNCTION jobs.lock_key(k text) RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended('jobs.concurrency_key:' || k, 0))
$$;

-- The keyed claim's first statement (runtime/store/sql-keys.ts): the candidate rows in id order,
-- then their keys in key order. A loop, so the order of the locks is the order written here.
CREATE FUNCTION jobs.lock_keyed_claim(ids uuid[]) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k text;
BEGIN
  PERFORM 1 FROM jobs.job WHERE id = ANY(ids) AND concurrency_key IS NOT NULL ORDER BY id FOR UPDATE;
  FOR k IN SELECT DISTINCT concurrency_key FROM jobs.job WHERE id = ANY(ids) AND concurrency_key IS NOT NULL ORDER BY 1 LOOP
    PERFORM jobs.lock_key(k);
  END LOOP;
END $$;

-- Publish the oldest blocked jobs of key `k`, as many as it has room for: the limit, less the
-- jobs running, less the jobs due with a message on its way (pending, not blocked). Blocked rows
-- another transaction holds are skipped (that transaction is claiming or blocking them under the
-- same key lock, and wakes the key itself when it blocks). Returns how many it published.
CREATE FUNCTION jobs.wake_key(k text, lim integer) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  room integer;
  woken integer;
BEGIN
  PERFORM jobs.lock_key(k);
  SELECT lim - count(*) FILTER (WHERE state = 'running')
             - count(*) FILTER (WHERE state = 'pending' AND blocked_since IS NULL AND run_after <= statement_timestamp())
    INTO room
    FROM jobs.job
   WHERE concurrency_key = k AND finished_at IS NULL;
  IF room <= 0 THEN
    RETURN 0;
  END IF;
  WITH next AS (
    SELECT id FROM jobs.job
     WHERE concurrency_key = k AND finished_at IS NULL AND state = 'pending' AND blocked_since IS NOT NULL
     ORDER BY id
     LIMIT room
       FOR UPDATE SKIP LOCKED
  ), unblocked AS (
    UPDATE jobs.job j SET blocked_since = NULL FROM next WHERE j.id = next.id RETURNING j.id
  )
  INSERT INTO jobs.outbox (job_id, relay_now) SELECT id, true FROM unblocked;
  GET DIAGNOSTICS woken = ROW_COUNT;
  RETURN woken;
END $$;

-- The keys a transaction freed, woken at its COMMIT (below), not at each row: a statement that
-- ends many jobs (a batched completion, a release) would otherwise take their keys' locks in row
-- order, and two such statements with keys in opposite orders would deadlock. At COMMIT one pass
-- takes every key of the transaction in key order, the order every other taker uses.
CREATE TABLE jobs.key_wake (
  tx                bigint NOT NULL DEFAULT txid_current(),
  concurrency_key   text NOT NULL,
  concurrency_limit integer NOT NULL,
  PRIMARY KEY (tx, concurrency_key)
);

-- A keyed job stopped running (done, failed, released, rescued) or stopped waiting (cancelled,
-- dead): its key may have room for a blocked job. A claim (pending → running) wakes nothing.
CREATE FUNCTION jobs.job_left_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO jobs.key_wake (concurrency_key, concurrency_limit)
  VALUES (OLD.concurrency_key, OLD.concurrency_limit)
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;

CREATE TRIGGER job_left_key AFTER UPDATE OF state ON jobs.job
  FOR EACH ROW
  WHEN (OLD.concurrency_key IS NOT NULL AND OLD.state IN ('pending', 'running') AND NEW.state NOT IN (OLD.state, 'running'))
  EXECUTE FUNCTION jobs.job_left_key();

-- At COMMIT: wake every key the transaction freed, in key order. The first firing does them all;
-- the others find nothing left.
CREATE FUNCTION jobs.key_wake_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT concurrency_key AS k, concurrency_limit AS l FROM jobs.key_wake WHERE tx = txid_current() ORDER BY 1 LOOP
    PERFORM jobs.wake_key(r.k, r.l);
  END LOOP;
  DELETE FROM jobs.key_wake WHERE tx = txid_current();
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER key_wake_at_commit AFTER INSERT ON jobs.key_wake
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION jobs.key_wake_at_commit();
