// The pieces of SQL text that several job-table statements share, so each is written once: the
// job's column lists, the triage columns of a dead job and the dead-job filter. The statements
// themselves are in sql.ts (the workers' transitions) and sql-operator.ts (the operators');
// runtime/oncall/sql.ts reads dead jobs with the same filter.

/** The job columns as a statement returns them (unqualified). */
export const JOB_COLUMNS = `id, type, payload, state, idempotency_key, attempt, releases, max_attempts, lease_owner,
  lease_expires_at, run_after, progress, checkpoint, last_error, attempt_log, result, cancelled_by,
  created_at, started_at, finished_at`;

/** The job columns, plus claimed_at (migration 0003). */
export const JOB = (a: string) =>
  [
    'id',
    'type',
    'payload',
    'state',
    'idempotency_key',
    'attempt',
    'releases',
    'max_attempts',
    'lease_owner',
    'lease_expires_at',
    'run_after',
    'progress',
    'checkpoint',
    'last_error',
    'attempt_log',
    'result',
    'cancelled_by',
    'created_at',
    'started_at',
    'finished_at',
    'claimed_at',
  ]
    .map((c) => `${a}.${c}`)
    .join(', ');

/** Triage of a dead job, from jobs.dead_job (alias d). */
export const DEAD = 'd.dead_at, d.discarded_at, d.discarded_by, d.discard_reason';

/**
 * The dead-job filter shared by list, redrive and discard, over jobs.dead_job d joined to
 * jobs.job j: $1 ids | $2 type | $3 since | $4 until (on the time of death). `j.state = 'dead'`
 * is re-checked under the row lock where a statement locks.
 */
export const DEAD_FILTER = `j.state = 'dead'
       AND ($1::uuid[] IS NULL OR d.job_id = ANY($1::uuid[]))
       AND ($2::text IS NULL OR d.type = $2::text)
       AND ($3::timestamptz IS NULL OR d.dead_at >= $3::timestamptz)
       AND ($4::timestamptz IS NULL OR d.dead_at < $4::timestamptz)`;
