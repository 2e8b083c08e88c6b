// The release of claims whose answer was lost (runtime/worker/lost-claims.ts). The conventions at
// the top of sql.ts hold here; sql.ts merges this into SQL, so it is run by name like the rest.

import { RELEASE_SET } from './sql-fragments.ts';

export const LOST_CLAIM_SQL = {
  /**
   * A claim statement whose connection failed before its answer came (a failover, a reset) may
   * have committed: its jobs are then running under the worker's lease ($2, unique to the
   * process) with no handler. Among $1 (the jobs that statement named, less those the worker
   * holds), each still running under that owner goes back to pending as a release (releases + 1:
   * no attempt spent; due when it was), with an outbox row so a message is published. Fenced by
   * owner and state: a job reclaimed, rescued, cancelled or finished since matches no row, and
   * the row lock makes a concurrent claim or completion of it wait and re-check (EvalPlanQual).
   * Ids sorted by the caller, so the primary-key scan locks in key order.
   */
  jobReleaseLostClaims: `
    WITH lost AS (
      UPDATE jobs.job j
         SET state = 'pending',
             ${RELEASE_SET}
       WHERE j.id = ANY($1::uuid[]) AND j.state = 'running' AND j.lease_owner = $2
      RETURNING j.id, j.type, j.lane, j.attempt, j.concurrency_key
    ), outboxed AS (
      INSERT INTO jobs.outbox (job_id) SELECT id FROM lost RETURNING id AS outbox_id, job_id
    )
    SELECT l.id, l.type, l.lane, l.attempt, l.concurrency_key, o.outbox_id FROM lost l JOIN outboxed o ON o.job_id = l.id`,
} as const;
