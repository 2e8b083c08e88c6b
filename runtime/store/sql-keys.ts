// The claim of jobs with a concurrency key (issue 14, migration 0006): at no moment do more jobs
// of one key run than its limit, and the jobs of a key start in enqueue order. Enforced by the
// database in the claim, not by a lock held during the run: a dead worker's job keeps its place
// until it is reclaimed, like any job.
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
//     limit. A job that stops running meanwhile still counts as running (its COMMIT waits for our
//     lock): the count errs on the side of refusing, never of one too many. Candidates of one key
//     in one claim each count the older ones as ahead of them, so together they stay within the
//     limit, in order. A reclaim (running, lease expired) keeps the place it holds.
//  3. jobBlockKeyed marks the due candidates it did not start as blocked: the worker deletes
//     their messages (no receives toward maxReceiveCount while they wait), and jobs.wake_key
//     publishes the oldest blocked jobs of a key through the outbox when it has room: at the
//     COMMIT of a transaction that ended a job of the key, and here (keyWake) in case the
//     refusal was for order only (an older job was due) and the key has room now.

import { CLAIM_RETURNING, CLAIM_SET } from './sql-fragments.ts';

export const KEY_SQL = {
  /** Statement 1: the candidates' rows, then their keys. */
  keyLockClaim: `SELECT jobs.lock_keyed_claim($1::uuid[])`,

  /** Statement 2: start the candidates their keys have room for, oldest first. */
  jobClaimKeyed: `
    UPDATE jobs.job j
${CLAIM_SET},
           blocked_since = NULL
     WHERE j.id = ANY($1::uuid[]) AND j.concurrency_key IS NOT NULL
       AND ((j.state = 'pending' AND j.run_after <= statement_timestamp())
         OR (j.state = 'running' AND j.lease_expires_at < statement_timestamp()))
       AND j.attempt - j.releases < j.max_attempts
       AND (SELECT count(*) FROM jobs.job o
             WHERE o.concurrency_key = j.concurrency_key AND o.finished_at IS NULL AND o.id <> j.id
               AND (o.state = 'running'
                 OR (j.state = 'pending' AND o.state = 'pending'
                     AND o.run_after <= statement_timestamp() AND o.id < j.id))) < j.concurrency_limit
${CLAIM_RETURNING}`,

  /**
   * Statement 3: the due candidates statement 2 did not start wait for their key (already
   * blocked ones too: their message is a copy to delete). Returns them with their key.
   */
  jobBlockKeyed: `
    UPDATE jobs.job
       SET blocked_since = coalesce(blocked_since, statement_timestamp())
     WHERE id = ANY($1::uuid[]) AND concurrency_key IS NOT NULL
       AND state = 'pending' AND run_after <= statement_timestamp()
    RETURNING id, concurrency_key, concurrency_limit`,

  /** The jobs of a key running now (jobs show: what a blocked job waits for). */
  keyRunning: `
    SELECT id FROM jobs.job WHERE concurrency_key = $1 AND finished_at IS NULL AND state = 'running' ORDER BY id`,

  /** After blocking: publish what the keys have room for (see 3 above). */
  keyWake: `SELECT coalesce(sum(jobs.wake_key(k, l)), 0)::int AS woken FROM unnest($1::text[], $2::int[]) AS t(k, l)`,
} as const;
