// One transaction on a pooled connection: BEGIN, the work, COMMIT (or ROLLBACK when asked, for a
// dry run), ROLLBACK on any error, and the connection back to the pool either way. Written once
// here; the enqueue, the relay, the reconciler and the operators' writes all use it.

import type pg from 'pg';
import { inheritQueryTimeout, isQueryReadTimeout, releaseClient, timed } from './pool.ts';

export async function withTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  opts: {
    rollback?: boolean;
    /** What to throw instead when the COMMIT itself fails (its outcome unknown: it may have committed). */
    commitError?: (err: unknown) => unknown;
  } = {},
): Promise<T> {
  const client = await pool.connect();
  // The pool's read timeout (platformQueryTimeoutMs) holds for every statement of the transaction.
  inheritQueryTimeout(pool, client);
  const q = (text: string) => client.query(timed(client, { text }));
  let broken: Error | undefined;
  let committing = false;
  try {
    await q('BEGIN');
    const result = await work(client);
    committing = !opts.rollback;
    await q(opts.rollback ? 'ROLLBACK' : 'COMMIT');
    return result;
  } catch (err) {
    // A statement that got no answer leaves the connection busy with it: a ROLLBACK would wait
    // behind it. The connection is dropped instead (the server ends the transaction with it).
    if (isQueryReadTimeout(err)) broken = err as Error;
    else await q('ROLLBACK').catch((e: unknown) => void (isQueryReadTimeout(e) && (broken = e as Error)));
    throw committing && opts.commitError ? opts.commitError(err) : err;
  } finally {
    releaseClient(client, broken);
  }
}
