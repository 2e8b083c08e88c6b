// Reads what the chaos run left behind, for verify.ts: every job row, the effects the example
// handlers wrote (ledger_entries, inventory_costs) grouped by job, and the messages on the DLQ
// and the job queue. Read-only; the queues are inspected without receiving (nothing moves).

import type pg from 'pg';
import type { FinalJob } from './verify.ts';

export async function collectJobs(db: Pick<pg.Pool, 'query'>): Promise<FinalJob[]> {
  const { rows } = await db.query(
    // Timestamps as text with microseconds, in UTC: one job's end is compared with the next
    // one's start (idempotency, concurrency keys), and a JavaScript Date would drop the microseconds.
    `SELECT id, type, state, attempt, releases, max_attempts, idempotency_key, payload, result, last_error, attempt_log,
            concurrency_key, concurrency_limit,
            to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS created_at,
            to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS claimed_at,
            to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS finished_at
       FROM jobs.job ORDER BY created_at, id`,
  );
  return rows.map((r) => ({
    id: r.id,
    type: r.type,
    state: r.state,
    attempt: r.attempt,
    releases: r.releases,
    maxAttempts: r.max_attempts,
    idempotencyKey: r.idempotency_key,
    payload: r.payload,
    result: r.result,
    createdAt: r.created_at,
    finishedAt: r.finished_at,
    concurrencyKey: r.concurrency_key,
    concurrencyLimit: r.concurrency_limit,
    claimedAt: r.claimed_at,
    lastError: r.last_error?.message ?? null,
    attemptLog: (r.attempt_log ?? []).map((a: { outcome: string; name?: string; message?: string }) => ({
      outcome: a.outcome,
      name: a.name,
      message: a.message,
    })),
  }));
}

export async function collectEffects(db: Pick<pg.Pool, 'query'>): Promise<{
  ledger: { jobId: string; batch: string; rows: number }[];
  inventory: { jobId: string; rows: number; total: number }[];
}> {
  const ledger = await db.query<{ job_id: string; batch: string; rows: number }>(
    'SELECT job_id, batch, count(*)::int AS rows FROM ledger_entries GROUP BY job_id, batch',
  );
  const inventory = await db.query<{ job_id: string; rows: number; total: string }>(
    'SELECT job_id, count(*)::int AS rows, sum(total_cost)::text AS total FROM inventory_costs GROUP BY job_id',
  );
  return {
    ledger: ledger.rows.map((r) => ({ jobId: r.job_id, batch: r.batch, rows: r.rows })),
    inventory: inventory.rows.map((r) => ({ jobId: r.job_id, rows: r.rows, total: Number(r.total) })),
  };
}
