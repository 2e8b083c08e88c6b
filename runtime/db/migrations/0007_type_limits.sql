-- Limits per job type (issue 14): a type may declare the most of its jobs running at once across
-- the fleet (`defineJob({ maxRunning: 4 })`: inventory.cost at most 4, however many worker tasks
-- autoscaling adds). Enforced like a concurrency key (0006), in the claim, under a lock per type:
-- a job of a limited type starts only while fewer jobs of its type than the limit hold a *type
-- slot*. The claim sets type_slot; the trigger below clears it when the job stops running, so
-- every path that ends a job frees its slot (the operators' and the rescuer's included), and a
-- dead worker's job keeps its slot until it is reclaimed or rescued, like a key. A job turned
-- away waits blocked, without its message, and the oldest blocked jobs of the type are published
-- when a slot frees.

-- The limits in force, written by each worker at start from its job definitions
-- (JobStore.syncTypeLimits): the last worker started decides, so during a rolling deploy that
-- changes a limit, the new value holds once the new tasks are up.
CREATE TABLE jobs.type_limit (
  type        text PRIMARY KEY,
  max_running integer NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
  set_at      timestamptz NOT NULL DEFAULT now(),
  set_by      text NOT NULL
);

-- Last in the row (0001 on column order). It changes on the claim and the end of a limited
-- type's jobs only; a heartbeat never touches it, so heartbeats stay HOT updates.
ALTER TABLE jobs.job ADD COLUMN type_slot boolean NOT NULL DEFAULT false;

-- The jobs holding a slot of a type: at most its limit, so counting them is cheap whatever the
-- type's backlog. The one index that mentions a column a claim changes (0001's rule): only the
-- claims and ends of limited types' jobs pay for it, and those are the long, heavy jobs.
CREATE INDEX job_type_slot ON jobs.job (type) WHERE type_slot;

-- The blocked jobs of a type, oldest first (jobs.wake_type). blocked_since changes only when a
-- job is blocked or woken.
CREATE INDEX job_blocked_type ON jobs.job (type, id) WHERE blocked_since IS NOT NULL;

-- The lock of every decision about one type's slots. The order of all the claim's locks, the
-- same everywhere: candidate rows (id order), then keys (key order), then types (type order).
CREATE FUNCTION jobs.lock_type(t text) RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended('jobs.type_limit:' || t, 0))
$$;

-- 0006's first statement of the keyed claim, now for the jobs of limited types too.
CREATE OR REPLACE FUNCTION jobs.lock_keyed_claim(ids uuid[]) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k text;
BEGIN
  PERFORM 1 FROM jobs.job j
    WHERE j.id = ANY(ids)
      AND (j.concurrency_key IS NOT NULL OR EXISTS (SELECT 1 FROM jobs.type_limit t WHERE t.type = j.type))
    ORDER BY j.id FOR UPDATE;
  FOR k IN SELECT DISTINCT concurrency_key FROM jobs.job WHERE id = ANY(ids) AND concurrency_key IS NOT NULL ORDER BY 1 LOOP
    PERFORM jobs.lock_key(k);
  END LOOP;
  FOR k IN SELECT DISTINCT j.type FROM jobs.job j JOIN jobs.type_limit t ON t.type = j.type WHERE j.id = ANY(ids) ORDER BY 1 LOOP
    PERFORM jobs.lock_type(k);
  END LOOP;
END $$;

-- Publish the oldest blocked jobs of type `t`, as many as it has free slots (all of them when the
-- type is no longer limited). A blocked job whose own key is full now is left for its key's wake.
-- A woken job that finds the slots taken when its message arrives waits again: that costs a
-- receive, never an attempt. Returns how many it published.
CREATE FUNCTION jobs.wake_type(t text) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  room integer;
  woken integer;
BEGIN
  PERFORM jobs.lock_type(t);
  SELECT l.max_running - (SELECT count(*) FROM jobs.job s WHERE s.type = t AND s.type_slot)
    INTO room
    FROM jobs.type_limit l WHERE l.type = t;
  room := coalesce(room, 2147483647);
  IF room <= 0 THEN
    RETURN 0;
  END IF;
  WITH next AS (
    SELECT b.id FROM jobs.job b
     WHERE b.type = t AND b.blocked_since IS NOT NULL AND b.state = 'pending'
       AND (b.concurrency_key IS NULL
         OR (SELECT count(*) FROM jobs.job o
              WHERE o.concurrency_key = b.concurrency_key AND o.finished_at IS NULL AND o.state = 'running') < b.concurrency_limit)
     ORDER BY b.id
     LIMIT room
       FOR UPDATE SKIP LOCKED
  ), unblocked AS (
    UPDATE jobs.job j SET blocked_since = NULL FROM next WHERE j.id = next.id RETURNING j.id
  )
  INSERT INTO jobs.outbox (job_id, relay_now) SELECT id, true FROM unblocked;
  GET DIAGNOSTICS woken = ROW_COUNT;
  RETURN woken;
END $$;

-- What a transaction freed, woken at its COMMIT (0006): keys, and now types. Keys first, then
-- types, each in name order: the claim's lock order.
ALTER TABLE jobs.key_wake
  ADD COLUMN kind text NOT NULL DEFAULT 'key' CHECK (kind IN ('key', 'type')),
  ALTER COLUMN concurrency_limit DROP NOT NULL,
  DROP CONSTRAINT key_wake_pkey,
  ADD PRIMARY KEY (tx, kind, concurrency_key);

CREATE OR REPLACE FUNCTION jobs.key_wake_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT concurrency_key AS k, concurrency_limit AS l FROM jobs.key_wake
            WHERE tx = txid_current() AND kind = 'key' ORDER BY 1 LOOP
    PERFORM jobs.wake_key(r.k, r.l);
  END LOOP;
  FOR r IN SELECT concurrency_key AS k FROM jobs.key_wake WHERE tx = txid_current() AND kind = 'type' ORDER BY 1 LOOP
    PERFORM jobs.wake_type(r.k);
  END LOOP;
  DELETE FROM jobs.key_wake WHERE tx = txid_current();
  RETURN NULL;
END $$;

-- A job holding a slot stopped running (done, failed, released, rescued, cancelled, dead): the
-- slot is free, and at COMMIT the type's oldest blocked job is published. A reclaim (running to
-- running) keeps the slot.
CREATE FUNCTION jobs.job_left_type_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.type_slot := false;
  INSERT INTO jobs.key_wake (kind, concurrency_key) VALUES ('type', OLD.type) ON CONFLICT DO NOTHING;
  RETURN NEW;
END $$;

CREATE TRIGGER job_left_type_slot BEFORE UPDATE OF state ON jobs.job
  FOR EACH ROW
  WHEN (OLD.type_slot AND NEW.state <> 'running')
  EXECUTE FUNCTION jobs.job_left_type_slot();
