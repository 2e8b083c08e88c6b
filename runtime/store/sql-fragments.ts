// The pieces of SQL text that several job-table statements share, so each is written once: the
// job's column lists, the triage columns of a dead job and the dead-job filter. The statements
// themselves are in sql.ts (the workers' transitions) and sql-operator.ts (the operators');
// runtime/oncall/sql.ts reads dead jobs with the same filter.

import { SQS_MAX_DELAY_SECONDS } from '../queue/types.ts';

/**
 * How far ahead a job gets its message (SQS delays a message at most 900 s). A job due later
 * gets none yet: its publish intent waits in jobs.outbox_deferred until run_after minus this
 * (migration 0018), and the outbox relay publishes it then.
 */
export const PUBLISH_HORIZON = `${SQS_MAX_DELAY_SECONDS} * interval '1 second'`;

/** The job columns as a statement returns them (unqualified). */
export const JOB_COLUMNS = `id, type, payload, state, idempotency_key, attempt, releases, max_attempts, lease_owner,
  lease_expires_at, run_after, progress, checkpoint, last_error, attempt_log, result, cancelled_by,
  created_at, started_at, finished_at, concurrency_key, concurrency_limit, blocked_since, type_slot, parent_id, lane`;

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
    'concurrency_key',
    'concurrency_limit',
    'blocked_since',
    'type_slot',
    'parent_id',
    'lane',
    'claimed_at',
  ]
    .map((c) => `${a}.${c}`)
    .join(', ');

/** Triage of a dead job, from jobs.dead_job (alias d). */
export const DEAD = 'd.dead_at, d.discarded_at, d.discarded_by, d.discard_reason';

/**
 * The dead-job filter shared by list, redrive and discard, over jobs.dead_job d joined to
 * jobs.job j: $1 ids | $2 type | $3 since | $4 until (on the time of death) | `$lane` the lane,
 * its parameter's number per statement (each adds it after its own). `j.state = 'dead'` is
 * re-checked under the row lock where a statement locks.
 */
export const deadFilter = (lane: number) => `j.state = 'dead'
       AND ($1::uuid[] IS NULL OR d.job_id = ANY($1::uuid[]))
       AND ($2::text IS NULL OR d.type = $2::text)
       AND ($3::timestamptz IS NULL OR d.dead_at >= $3::timestamptz)
       AND ($4::timestamptz IS NULL OR d.dead_at < $4::timestamptz)
       AND ($${lane}::text IS NULL OR j.lane = $${lane}::text)`;

/**
 * What a claim sets (the plain claim in sql.ts and the keyed one in sql-keys.ts). A running job is
 * never blocked (migration 0015's constraint): blocked_since is null already for almost every
 * claim (no change, so still a HOT update), but not for a woken keyed job claimed in the same
 * breath, nor for a job of a type whose limit was removed while it waited and that wake_type
 * skipped (locked at that moment), which the plain claim then starts. A reclaim (the row still
 * running, its lease expired: its owner died or stalled) records the attempt it ends, its owner
 * and the lease's expiry, as the rescuer does when it gets there first: without it a crashed
 * attempt left no trace in `jobs show`, and which of the two got there was a race. (Every SET
 * expression reads the row as it was: `attempt` and `lease_owner` are the ended attempt's.)
 */
export const CLAIM_SET = `       SET state = 'running',
           attempt_log = CASE WHEN state = 'running' THEN attempt_log || jsonb_build_array(jsonb_build_object(
             'attempt', attempt, 'owner', lease_owner, 'at', statement_timestamp(), 'outcome', 'reclaimed',
             'name', 'LeaseExpired', 'message', 'lease expired (worker ' || coalesce(lease_owner, '?') || ' stopped heartbeating); reclaimed by ' || $2))
             ELSE attempt_log END,
           last_error = CASE WHEN state = 'running' THEN jsonb_build_object('name', 'LeaseExpired', 'retryable', true,
             'message', 'lease expired (worker ' || coalesce(lease_owner, '?') || ' stopped heartbeating)') ELSE last_error END,
           attempt = attempt + 1,
           lease_owner = $2,
           lease_expires_at = statement_timestamp() + $3::float8 * interval '1 second',
           started_at = coalesce(started_at, statement_timestamp()),
           claimed_at = statement_timestamp(),
           blocked_since = NULL`;

/**
 * What a release of `j` sets besides its state and due time: no attempt spent (releases + 1), a
 * "released" entry in the attempt log with the reason ($3) and `extra` (a jsonb expression merged
 * into the entry), the lease and the type's slot given up. The graceful release (sql.ts
 * jobRelease) and the release of jobs left running with no handler (sql-lost-claims.ts).
 */
export const releaseSet = (extra = "'{}'::jsonb") => `releases = j.releases + 1,
           attempt_log = j.attempt_log || jsonb_build_array(jsonb_build_object(
             'attempt', j.attempt, 'owner', j.lease_owner, 'at', statement_timestamp(), 'outcome', 'released',
             'message', $3::text) || ${extra}),
           lease_owner = NULL, lease_expires_at = NULL, type_slot = false`;
export const RELEASE_SET = releaseSet();

/** What a claim returns: the ClaimedJob row (job-store.ts). */
export const CLAIM_RETURNING = `    RETURNING id, type, payload, attempt, releases, max_attempts, checkpoint, progress, concurrency_key, type_slot, lane,
              -- Numbers rather than timestamps and the attempt log: the worker parses a float per
              -- row instead of a date string and a JSON array (a measurable share of its CPU).
              -- date_part, not extract: extract returns numeric (PostgreSQL 14+), slower to compute.
              date_part('epoch', created_at) * 1000 AS created_at_ms,
              (date_part('epoch', statement_timestamp()) - date_part('epoch', greatest(created_at, run_after))) * 1000 AS queue_lag_ms,
              -- A reclaim: this claim or the rescuer recorded the attempt before this one as ended by
              -- its lease (or, for a row older than that record, it ended in no retry or release).
              CASE WHEN attempt > 1
                   THEN coalesce((attempt_log->-1->>'attempt')::int <> attempt - 1 OR attempt_log->-1->>'outcome' IN ('rescued', 'reclaimed'), true)
                   ELSE false END AS reclaimed`;

/** The job `jobId` (a column) gave its schedule work up: cancelled, or dead and discarded by on-call (0022). */
export const givenUp = (jobId: string) => `EXISTS (
       SELECT 1 FROM jobs.job j LEFT JOIN jobs.dead_job d ON d.job_id = j.id
        WHERE j.id = ${jobId} AND (j.state = 'cancelled' OR (j.state = 'dead' AND d.discarded_at IS NOT NULL)))`;
