// The release of jobs left running under a worker with no handler (runtime/worker/lost-claims.ts). The conventions at
// the top of sql.ts hold here; sql.ts merges this into SQL, so it is run by name like the rest.

import { releaseSet } from './sql-fragments.ts';

export const LOST_CLAIM_SQL = {
  /**
   * Jobs left running under the worker ($2, unique to the process) with no handler: a claim
   * statement whose connection failed before its answer came (a failover, a reset) may have
   * committed; a job claimed ahead whose lease ran out in an outage before it started; an attempt
   * whose own transaction lost its connection. Among $1 (less those the worker holds), each still
   * running under that owner, and at the attempt $4 gives where the worker knows it (null for a
   * lost claim answer, whose attempt it never learnt), goes back to pending as a release
   * (releases + 1: no attempt spent; due when it was), with an outbox row so a message is
   * published. $5, for an interrupted attempt: the most such releases a job gets (each marked
   * `interrupted` in its attempt log; since its last redrive); past it the row is left, and its attempt counts. Fenced by
   * owner, attempt and state: a job reclaimed, rescued, cancelled or finished since, or claimed
   * again by this worker, matches no row, and the row lock makes a concurrent claim or completion
   * of it wait and re-check (EvalPlanQual). Ids sorted by the caller, so the primary-key scan
   * locks in key order.
   */
  jobReleaseLostClaims: `
    WITH lost AS (
      UPDATE jobs.job j
         SET state = 'pending',
             ${releaseSet("CASE WHEN $5::int IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('interrupted', true) END")}
        FROM unnest($1::uuid[], $4::int[]) AS r(id, attempt)
       WHERE j.id = r.id AND j.state = 'running' AND j.lease_owner = $2 AND (r.attempt IS NULL OR j.attempt = r.attempt)
         -- Counted since the last redrive: a redrive gives a fresh budget, of these releases too.
         AND ($5::int IS NULL OR (SELECT count(*) FROM jsonb_array_elements(j.attempt_log) WITH ORDINALITY AS x(e, n)
                                   WHERE x.e ? 'interrupted'
                                     AND x.n > (SELECT coalesce(max(y.n), 0) FROM jsonb_array_elements(j.attempt_log) WITH ORDINALITY AS y(e, n)
                                                 WHERE y.e->>'outcome' = 'redriven')) < $5::int)
      RETURNING j.id, j.type, j.lane, j.attempt, j.concurrency_key
    ), outboxed AS (
      INSERT INTO jobs.outbox (job_id) SELECT id FROM lost RETURNING id AS outbox_id, job_id
    )
    SELECT l.id, l.type, l.lane, l.attempt, l.concurrency_key, o.outbox_id FROM lost l JOIN outboxed o ON o.job_id = l.id`,
} as const;
