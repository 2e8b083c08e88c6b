// One transaction on a pooled connection: BEGIN, the work, COMMIT (or ROLLBACK when asked, for a
// dry run), ROLLBACK on any error, and the connection back to the pool either way. Written once
// here; the enqueue, the relay, the reconciler and the operators' writes all use it.

import type pg from 'pg';

export async function withTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
  opts: { rollback?: boolean } = {},
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query(opts.rollback ? 'ROLLBACK' : 'COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
