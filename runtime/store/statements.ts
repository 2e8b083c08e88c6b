// Running the store's statements: each a named statement from sql.ts, prepared once per
// connection, with the pool's read timeout; the parameters' cheap encodings; and the order in
// which a worker's statements over many rows take their locks.

import type pg from 'pg';
import { timed } from '../db/pool.ts';
import { SQL, type SqlName } from './sql.ts';

/** JSON text for a jsonb parameter; SQL NULL (not the JSON literal null) for nothing. */
export const jsonOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : JSON.stringify(v));

/**
 * A uuid[] or int[] parameter in PostgreSQL's array text form. UUIDs and integers need no
 * quoting, so this skips the pg driver's per-element escaping on the per-job paths (claim,
 * completion). Only for values already known to be UUIDs (validated message ids, ids read from
 * the table) or integers; it is still a bound parameter, never SQL text.
 */
export const pgArray = (xs: readonly (string | number)[]): string => `{${xs.join(',')}}`;

/**
 * Rows in id order. A worker's statements over many of its rows at once (the heartbeat's renewal,
 * a release, the batched completion's `id = ANY`, which scans the primary key) lock them in one
 * order, so two of them running side by side on rows they share wait for each other instead of
 * deadlocking (test/runtime/lock-order.test.ts: 3 deadlocks in 20 rounds of 200 jobs before).
 */
export const byId = <T extends { id: string }>(xs: readonly T[]): T[] => [...xs].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));

/**
 * `statement()` once more when PostgreSQL chose it as a deadlock's victim (40P01), up to three
 * tries: for a fenced autocommit statement of the worker's own rows, a retry after the other
 * side went through is what was meant. The id order above makes it rare; the access path an
 * `id = ANY` statement takes (a bitmap scan visits rows in their physical order) is the planner's
 * choice, not ours.
 */
export async function deadlockRetried<T>(statement: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await statement();
    } catch (err) {
      if (tries >= 3 || (err as { code?: unknown }).code !== '40P01') throw err;
    }
  }
}

export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/** Run a named statement as a prepared statement (parsed once per connection). */
export async function run<R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Queryable,
  name: SqlName,
  values: unknown[],
): Promise<pg.QueryResult<R>> {
  return (await db.query(timed(db, { name, text: SQL[name], values }))) as pg.QueryResult<R>; // with the pool's read timeout, if any
}

/** Runs the named statements of `sql` (poison, schedules, dead reports, on-call), each prepared per connection as `prefix.name`. */
export function namedStatements<K extends string>(prefix: string, sql: Readonly<Record<K, string>>) {
  return async <R extends pg.QueryResultRow = pg.QueryResultRow>(db: Queryable, name: K, values: unknown[]): Promise<pg.QueryResult<R>> =>
    (await db.query(timed(db, { name: `${prefix}.${name}`, text: sql[name], values }))) as pg.QueryResult<R>;
}
