// The reads of the active jobs (finished_at IS NULL: pending and running) that run on a schedule
// — the rescuer, the reconciler, the stuck-job count, the live view — must cost what the active
// jobs cost, however many jobs have ever run. job_active, the partial index on the active rows,
// is there for them, but left to itself the planner reads more:
//  - it prices the heap rows the index leads to as scattered random reads (they are the newest
//    rows, together at the table's end) and the index at its high-water size, so with 3,000 jobs
//    active it scanned the whole table at 24,000, 100,000 and 250,000 finished jobs alike;
//  - when it does take job_active as a bitmap scan, it visits every entry a finished job left
//    there (a completion moves the row out of the index; its old entry stays until VACUUM, and
//    autovacuum waits for a fifth of the table to be dead), so the read grows with the table too.
// Measured (bench/table-growth.ts, --as-planned for the before): the reconciler's count read 9,657
// buffers in 38 ms at 100,000 finished jobs and 23,349 in 159 ms at 250,000; after a burst, a
// bitmap scan of job_active read 22,615 buffers through 213,369 entries for 3,000 rows.
//
// So those reads run here, in a transaction whose planner takes a plain index scan (SET LOCAL, this
// transaction only: the hot path and the handlers' own statements plan as before). A plain index
// scan marks each entry whose row is dead to everyone as it passes (the bitmap scan cannot), so the
// next pass skips it without touching the table: with 60,000 such entries, the first pass read
// 49,772 buffers, every later one 2,582 (1.5 ms). Each pass then costs the active jobs plus what
// finished since the last pass, whatever the table's size. When most jobs are active (a month-end
// backlog) the index scan follows the ids, which is the order the rows were written in. No
// parallel workers either: starting them cost more than these reads (a 3,000-row count took 68 ms
// with two of them on a busy machine).

import type pg from 'pg';
import { timed } from '../db/pool.ts';
import { withTransaction } from '../db/transaction.ts';

/** The planner settings of those reads, for a transaction of the caller's own (the reconciler's), until it ends. */
export const ACTIVE_JOBS_PLAN =
  'SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL max_parallel_workers_per_gather = 0';

/** `read` in a transaction of its own with the active jobs' plan (above). */
export function onActiveJobs<T>(pool: pg.Pool, read: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return withTransaction(pool, async (client) => {
    await client.query(timed(client, { text: ACTIVE_JOBS_PLAN })); // with the read timeout, as every statement of the pass
    return read(client);
  });
}
