// Who holds an idempotency key, after an enqueue lost it (jobInsertMany inserted no row): the
// active job of a type whose keys are unique among active jobs, or the job a lasting key names
// (migration 0009; README "Idempotency keys that outlive the job"). The store's rare path: an
// enqueue that wins its key never comes here.

import type pg from 'pg';
import { rowToJob, type Job } from '../domain/job.ts';
import { SQL } from './sql.ts';
import { timed } from '../db/pool.ts';

type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/** What of a new job decides its key (job-store.ts NewJob). */
export interface KeyedJob {
  type: string;
  idempotencyKey?: string | null;
  /**
   * Days its idempotency key outlives it (Infinity: forever), from its type's `idempotency`; absent
   * or null: the key is unique among active jobs only.
   */
  keyKeepDays?: number | null;
  /** Days the job is kept after it finishes (Infinity: forever); default DEFAULT_KEEP_FINISHED_DAYS; never less than keyKeepDays. */
  keepDays?: number;
}

/**
 * The order a batch's rows are inserted in: by type and key, a stable sort (of one key's rows,
 * the first asked for wins), so that two batches sharing keys in different orders do not each
 * wait on a key the other inserted first (a deadlock: PostgreSQL fails one, a 500). Request
 * order when no row has a key.
 */
export function insertOrder(jobs: Pick<KeyedJob, 'type' | 'idempotencyKey'>[]): number[] {
  const at = jobs.map((_, i) => i);
  if (!jobs.some((j) => j.idempotencyKey)) return at;
  const key = (i: number) => `${jobs[i]!.type}\u0000${jobs[i]!.idempotencyKey ?? ''}`;
  return at.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : a - b));
}

/** How long a finished job is kept when neither its type nor JOBS_KEEP_FINISHED_DAYS says. */
export const DEFAULT_KEEP_FINISHED_DAYS = 30;

/** The days a new job is kept after it finishes: its own, else the default, and never less than its lasting key's window. */
export function keepDaysOf(j: KeyedJob): number {
  return Math.max(j.keepDays ?? DEFAULT_KEEP_FINISHED_DAYS, (j.idempotencyKey && j.keyKeepDays) || 0);
}

/**
 * The job that holds `spec`'s key, or null when the key is free and the caller may insert again.
 * Runs in the caller's transaction (READ COMMITTED: it sees what the winner committed).
 */
export async function keyHolder(db: Queryable, spec: KeyedJob): Promise<Job | null> {
  return spec.keyKeepDays == null ? activeByKey(db, spec) : lastingKey(db, spec);
}

async function activeByKey(db: Queryable, spec: KeyedJob): Promise<Job | null> {
  const { rows } = await q(db, 'jobGetActiveByKey', [spec.type, spec.idempotencyKey]);
  return rows[0] ? rowToJob(rows[0]) : null;
}

/**
 * The job a lasting key returns, or null when the key is free: no key row, or a key whose window
 * has passed (dropped here, in the caller's transaction). An active job enqueued before its type
 * kept keys holds the key in the active-jobs index only: its key row is made here, or the one the
 * caller's enqueue just inserted (naming a job that lost to it) is pointed at it, and it is returned.
 */
async function lastingKey(db: Queryable, spec: KeyedJob): Promise<Job | null> {
  const { rows } = await q(db, 'keyGet', [spec.type, spec.idempotencyKey]);
  const key = rows[0];
  if (key?.job_found) {
    if (!key.expired) return rowToJob(key);
    await q(db, 'keyRelease', [spec.type, spec.idempotencyKey, key.key_job_id]);
    return null;
  }
  const active = await activeByKey(db, spec);
  if (key) {
    if (active) {
      const moved = await q(db, 'keyRepoint', [spec.type, spec.idempotencyKey, key.key_job_id, active.id]);
      return moved.rowCount === 1 ? active : null;
    }
    await q(db, 'keyRelease', [spec.type, spec.idempotencyKey, key.key_job_id]);
    return null;
  }
  if (!active) return null;
  const keyDays = spec.keyKeepDays === Infinity ? null : spec.keyKeepDays;
  const adopted = await q(db, 'keyAdopt', [spec.type, spec.idempotencyKey, active.id, keyDays]);
  return adopted.rowCount === 1 ? active : null;
}

/** A named statement as a prepared statement (job-store.ts run(), which this file cannot import without a cycle). */
function q(db: Queryable, name: 'jobGetActiveByKey' | 'keyGet' | 'keyRelease' | 'keyRepoint' | 'keyAdopt', values: unknown[]) {
  // With the read timeout of the pool or transaction (a silent primary must not hold the connection for TCP's 15 minutes).
  return db.query(timed(db, { name, text: SQL[name], values }));
}
