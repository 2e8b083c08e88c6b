-- A key's backlog costs its claims what the key runs, not what waits on it. Until now the keyed
-- claim (runtime/store/sql-keys.ts), jobs.wake_key and jobs.wake_type counted a key's running
-- jobs by reading job_active_concurrency_key: every active job of the key. A key's backlog is
-- nearly all blocked jobs, so every claim and every end of a keyed job read the whole backlog,
-- and draining one key of N jobs cost on the order of N² row visits (16,000 waiting: about 20 ms
-- of claim and wake per job; bench/key-backlog.ts).
--
-- 1. A running job is never blocked: the keyed claim clears blocked_since, only due pending jobs
--    are blocked, and now the plain claim clears it too (CLAIM_SET in sql-fragments.ts: a job of
--    a type whose limit was removed while it waited, skipped by wake_type because another
--    transaction held its row, was claimed by the plain claim still blocked). The counts below rely on it, so a
--    constraint now says it. It is added NOT VALID here and validated in 0016, in a transaction
--    of its own, whose lock lets reads and writes go on during the scan.
-- 2. job_key_unblocked: a key's active jobs that are not blocked, i.e. those running and those
--    whose message is on its way. The running count reads it; the blocked backlog is not in it.
--    It mentions no column the other indexes do not already (the index rule of 0001): claims
--    and heartbeats stay HOT updates.
-- 3. wake_key's room and wake_type's per-key check read it (below). The claim's count also stops
--    at the key's limit (sql-keys.ts): the jobs ahead of a candidate are the oldest, read first.
--    The functions run with enable_seqscan off: the planner takes a key's rows and its unblocked
--    rows as independent, so on a small table whose rows are mostly one key's blocked backlog
--    it estimated hundreds of unblocked rows where there was one and read the whole table
--    (test/runtime/concurrency-keys.test.ts caught it). Every statement in them has an index.

-- A running job left blocked (the plain claim's case above) is running, so not blocked.
UPDATE jobs.job SET blocked_since = NULL WHERE state = 'running' AND blocked_since IS NOT NULL;

-- Writes wait while the index is built (a SHARE lock; reads go on), as for every index before it.
CREATE INDEX job_key_unblocked ON jobs.job (concurrency_key, id)
  WHERE concurrency_key IS NOT NULL AND finished_at IS NULL AND blocked_since IS NULL;

-- As in 0006, with the room counted over the key's unblocked jobs only (the running ones and the
-- due ones whose message is on its way), and only up to the limit: right after a large enqueue
-- every job of the key is unblocked and due, and each claim that blocks one wakes the key. No
-- room is no room either way, and room is the same figure.
CREATE OR REPLACE FUNCTION jobs.wake_key(k text, lim integer) RETURNS integer LANGUAGE plpgsql VOLATILE
  SET enable_seqscan = off AS $$
DECLARE
  room integer;
  woken integer;
BEGIN
  PERFORM jobs.lock_key(k);
  SELECT lim - count(*)
    INTO room
    FROM (SELECT 1 FROM jobs.job
           WHERE concurrency_key = k AND finished_at IS NULL AND blocked_since IS NULL
             AND (state = 'running' OR (state = 'pending' AND run_after <= statement_timestamp()))
           LIMIT lim) busy;
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

-- As in 0007, with the per-key check of each blocked job counting the key's running jobs over
-- job_key_unblocked, up to the key's limit.
CREATE OR REPLACE FUNCTION jobs.wake_type(t text) RETURNS integer LANGUAGE plpgsql VOLATILE
  SET enable_seqscan = off AS $$
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
         OR (SELECT count(*) FROM (SELECT 1 FROM jobs.job o
              WHERE o.concurrency_key = b.concurrency_key AND o.finished_at IS NULL AND o.blocked_since IS NULL
                AND o.state = 'running' LIMIT b.concurrency_limit) running) < b.concurrency_limit)
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

-- Last in the file: its ACCESS EXCLUSIVE lock is held only from here to the COMMIT, with no scan.
ALTER TABLE jobs.job ADD CONSTRAINT job_running_not_blocked CHECK (state <> 'running' OR blocked_since IS NULL) NOT VALID;
