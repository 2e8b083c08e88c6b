// The claim of jobs with a concurrency key (issue 14, migration 0006): at no moment do more jobs
// of one key run than its limit, and the jobs of a key start in enqueue order. Enforced by the
// database in the claim, not by a lock held during the run: a dead worker's job keeps its place
// until it is reclaimed, like any job. A job type's fleet limit (migration 0007,
// `defineJob({ maxRunning })`) is enforced by the same claim: the jobs of a limited type start
// only while fewer than the limit hold a slot of their type (type_slot), under a lock per type
// taken after the keys' (types in type order), and wait blocked like keyed jobs otherwise.
//
// Why it is race-free. The keyed claim is one transaction of three statements (JobStore.claimKeyed):
//  1. keyLockClaim locks the candidate rows (in id order), then each key among them (in key
//     order, jobs.lock_key: an advisory transaction lock). Rows first, keys second, in key
//     order, everywhere: a transaction that ends keyed jobs holds their rows and takes their
//     keys at its COMMIT, all at once in key order (jobs.key_wake_at_commit), so no two takers
//     can wait on each other in a cycle.
//  2. jobClaimKeyed runs after the locks, so under READ COMMITTED its snapshot holds every claim
//     of these keys that committed before (a claim needs the key's lock, which we hold). It
//     counts, per candidate, the key's running jobs and — for a fresh start — the key's due
//     pending jobs enqueued before it: a candidate starts only when that count is below the
//     limit. The count stops at the limit, the older jobs first (they are the oldest in the key's
//     index), and the running jobs are read from job_key_unblocked (migration 0015: a running job
//     is never blocked), so a key's blocked backlog is not read at all. A job that stops running
//     meanwhile still counts as running (its COMMIT waits for our lock): the count errs on the
//     side of refusing, never of one too many. Candidates of one key in one claim each count the
//     older ones as ahead of them, so together they stay within the limit, in order. A reclaim (running, lease expired) keeps the place it holds.
//  3. jobBlockKeyed marks the due candidates it did not start as blocked: the worker deletes
//     their messages (no receives toward maxReceiveCount while they wait), and jobs.wake_key
//     publishes the oldest blocked jobs of a key through the outbox when it has room: at the
//     COMMIT of a transaction that ended a job of the key, and here (keyWake) in case the
//     refusal was for order only (an older job was due) and the key has room now.

import { CLAIM_RETURNING, CLAIM_SET } from './sql-fragments.ts';

export const KEY_SQL = {
  /** Statement 1: the candidates' rows, then their keys. */
  keyLockClaim: `SELECT jobs.lock_keyed_claim($1::uuid[])`,

  /**
   * Statement 2: start the candidates their keys and types have room for, oldest first. `cand`:
   * the claimable candidates their keys admit; `fresh`: those of a limited type that need a slot
   * (a reclaim keeps the one it holds), numbered per type against the type's free slots.
   */
  jobClaimKeyed: `
    WITH cand AS (
      SELECT j.id AS cid, j.type AS ctype, j.type_slot AS holds_slot, tl.max_running
        FROM jobs.job j LEFT JOIN jobs.type_limit tl ON tl.type = j.type
       WHERE j.id = ANY($1::uuid[]) AND (j.concurrency_key IS NOT NULL OR tl.type IS NOT NULL)
         AND ((j.state = 'pending' AND j.run_after <= statement_timestamp())
           OR (j.state = 'running' AND j.lease_expires_at < statement_timestamp()))
         AND j.attempt - j.releases < j.max_attempts
         AND (j.concurrency_key IS NULL
           OR (SELECT count(*) FROM (
                (SELECT 1 FROM jobs.job o
                  WHERE j.state = 'pending' AND o.concurrency_key = j.concurrency_key AND o.finished_at IS NULL
                    AND o.id < j.id AND o.state = 'pending' AND o.run_after <= statement_timestamp()
                  LIMIT j.concurrency_limit)
                UNION ALL
                (SELECT 1 FROM jobs.job o
                  WHERE o.concurrency_key = j.concurrency_key AND o.finished_at IS NULL AND o.blocked_since IS NULL
                    AND o.state = 'running' AND o.id <> j.id
                  LIMIT j.concurrency_limit)
                LIMIT j.concurrency_limit) ahead) < j.concurrency_limit)
    ), fresh AS (
      SELECT cid, row_number() OVER (PARTITION BY ctype ORDER BY cid) AS n,
             max_running - (SELECT count(*) FROM jobs.job s WHERE s.type = ctype AND s.type_slot) AS room
        FROM cand WHERE max_running IS NOT NULL AND NOT holds_slot
    )
    UPDATE jobs.job j
${CLAIM_SET},
           type_slot = j.type_slot OR c.max_running IS NOT NULL
      FROM cand c
     WHERE j.id = c.cid
       AND NOT EXISTS (SELECT 1 FROM fresh f WHERE f.cid = c.cid AND f.n > f.room)
${CLAIM_RETURNING}`,

  /**
   * Statement 3: the due candidates statement 2 did not start wait for their key or type
   * (already blocked ones too: their message is a copy to delete). Returns them with their key
   * and, for a limited type, their type.
   */
  jobBlockKeyed: `
    UPDATE jobs.job j
       SET blocked_since = coalesce(blocked_since, statement_timestamp())
      FROM (SELECT b.id AS bid, tl.type AS limited_type
              FROM jobs.job b LEFT JOIN jobs.type_limit tl ON tl.type = b.type
             WHERE b.id = ANY($1::uuid[]) AND (b.concurrency_key IS NOT NULL OR tl.type IS NOT NULL)) c
     WHERE j.id = c.bid AND j.state = 'pending' AND j.run_after <= statement_timestamp()
    RETURNING j.id, j.concurrency_key, j.concurrency_limit, c.limited_type`,

  /** The jobs of a key running now (jobs show: what a blocked job waits for). */
  keyRunning: `
    SELECT id FROM jobs.job WHERE concurrency_key = $1 AND finished_at IS NULL AND blocked_since IS NULL AND state = 'running' ORDER BY id`,

  /** After blocking: publish what the keys have room for (see 3 above). */
  keyWake: `SELECT coalesce(sum(jobs.wake_key(k, l)), 0)::int AS woken FROM unnest($1::text[], $2::int[]) AS t(k, l)`,

  /** After blocking: publish what the types have free slots for (their locks are held already). */
  typeWake: `SELECT coalesce(sum(jobs.wake_type(t)), 0)::int AS woken FROM unnest($1::text[]) AS u(t)`,

  /** The jobs of a type holding its slots now (jobs show: what a blocked job waits for). */
  typeRunning: `SELECT id FROM jobs.job WHERE type = $1 AND type_slot ORDER BY id`,

  /** The locks of these types, in the order given (sorted by the caller). */
  typeLock: `SELECT jobs.lock_type(t) FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n`,

  /**
   * What blocked jobs wait for, by key and type, longest waiting first (the live view, jobs list):
   * the holders of each key and of each limited type's slots, at most 5 named. Reads the blocked
   * jobs only (job_blocked_type).
   */
  waitingGroups: `
    WITH g AS (
      SELECT concurrency_key AS k, max(concurrency_limit) AS kl, type AS t, count(*)::int AS jobs, min(blocked_since) AS since
        FROM jobs.job WHERE blocked_since IS NOT NULL AND state = 'pending'
       GROUP BY concurrency_key, type ORDER BY min(blocked_since) LIMIT $1
    )
    SELECT g.k, g.kl, g.t, g.jobs, g.since, tl.max_running AS tl,
           ARRAY(SELECT o.id FROM jobs.job o
                  WHERE o.concurrency_key = g.k AND o.finished_at IS NULL AND o.blocked_since IS NULL AND o.state = 'running'
                  ORDER BY o.id LIMIT 5) AS key_holders,
           ARRAY(SELECT s.id FROM jobs.job s WHERE s.type = g.t AND s.type_slot ORDER BY s.id LIMIT 5) AS type_holders
      FROM g LEFT JOIN jobs.type_limit tl ON tl.type = g.t
     ORDER BY g.since`,

  /** The limit in force for a type, or none. */
  typeLimit: `SELECT max_running FROM jobs.type_limit WHERE type = $1`,

  /**
   * A worker's start: its definitions' limits. Types it defines without a limit lose theirs.
   * Changed types are woken (a raised or removed limit frees slots for blocked jobs) by the
   * caller, in type order, in the same transaction.
   */
  typeLimitsSync: `
    WITH wanted AS (
      SELECT * FROM unnest($1::text[], $2::int[]) AS w(type, max_running)
    ), removed AS (
      DELETE FROM jobs.type_limit l USING wanted w
       WHERE l.type = w.type AND w.max_running IS NULL
      RETURNING l.type
    ), upserted AS (
      INSERT INTO jobs.type_limit (type, max_running, set_by)
      SELECT type, max_running, $3 FROM wanted WHERE max_running IS NOT NULL
      ON CONFLICT (type) DO UPDATE SET max_running = excluded.max_running, set_at = now(), set_by = excluded.set_by
       WHERE jobs.type_limit.max_running <> excluded.max_running
      RETURNING type
    )
    SELECT type FROM removed UNION SELECT type FROM upserted ORDER BY 1`,
} as const;
