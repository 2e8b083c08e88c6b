// What a claim and a completion write to the job table (issue 16, migration 0013): the claim is a
// HOT update (no index entry, the new version beside the old one) for every job of a batch, and
// neither statement locks a row first (a BEFORE row trigger made PostgreSQL write a lock record
// per job). Read from PostgreSQL's own accounts: pg_stat_user_tables' HOT count and, where the
// server has pg_walinspect (the embedded one does), the WAL records that touched the table.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../../runtime/db/transaction.ts';
import { JobStore, type NewJob } from '../../runtime/store/job-store.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

let db: TestDb;
let pool: pg.Pool;
let store: JobStore;
let walinspect = false;
beforeAll(async () => {
  db = await createTestDb();
  // One connection for everything: statistics reach pg_stat_user_tables when the session that
  // made them reports them, and pg_stat_force_next_flush() reports only its own session's.
  pool = db.newPool(1);
  store = new JobStore(pool);
  await pool.query('CREATE TABLE wal_flush (x int)');
  walinspect = await pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect').then(
    () => true,
    () => false,
  );
});
afterAll(() => db.drop());

/** The heap's WAL records for jobs.job between two positions, by type (HOT_UPDATE, UPDATE, LOCK…). */
async function heapRecords(from: string, to: string): Promise<Record<string, number>> {
  const { rows } = await pool.query(
    `SELECT split_part(record_type, '+', 1) AS t, count(*)::int AS n
       FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
      WHERE resource_manager LIKE 'Heap%'
        AND block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/' || pg_relation_filenode('jobs.job') || ' %'
      GROUP BY 1`,
    [from, to],
  );
  return Object.fromEntries(rows.map((r) => [r.t as string, r.n as number]));
}

const lsn = async () => (await pool.query('SELECT pg_current_wal_insert_lsn()::text AS l')).rows[0].l as string;

/** pg_walinspect reads only flushed WAL (the suite's server commits asynchronously): flush it with a synchronous commit. */
async function flushWal(): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SET LOCAL synchronous_commit = on');
    await c.query('INSERT INTO wal_flush VALUES (1)'); // a commit that wrote nothing is not flushed
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

/** Statistics reach pg_stat_user_tables when a session reports them: force it and read. */
async function hotCounts(): Promise<{ upd: number; hot: number }> {
  const c = await pool.connect();
  try {
    await c.query('SELECT pg_stat_force_next_flush()');
    await c.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await c.query(
      "SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables WHERE relid = 'jobs.job'::regclass",
    );
    return rows[0];
  } finally {
    c.release();
  }
}

describe('what a claim and a completion write', () => {
  it('jobs.job has no BEFORE row trigger (PostgreSQL would lock every row an UPDATE changes before firing it)', async () => {
    const { rows } = await pool.query(
      // tgtype bits: 1 = FOR EACH ROW, 2 = BEFORE (pg_trigger.h).
      "SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobs.job'::regclass AND NOT tgisinternal AND (tgtype & 3) = 3",
    );
    expect(rows).toEqual([]);
  });

  for (const [kind, make] of [
    ['no-op', (_i: number): NewJob => ({ type: 'bench.noop', payload: {}, maxAttempts: 5 })],
    ['ledger.post', (i: number): NewJob => ({ type: 'ledger.post', payload: { batch: `month-end-${i}`, entries: 5 }, maxAttempts: 5 })],
  ] as const) {
    it(`a batch of 400 ${kind} jobs: every claim is a HOT update, and no row is locked before its update`, async () => {
      const ids = (
        await withTransaction(pool, (c) =>
          store.insertMany(
            c,
            Array.from({ length: 400 }, (_, i) => make(i)),
          ),
        )
      ).map((r) => r.job.id);
      await pool.query('DELETE FROM jobs.outbox');
      // Each pool connection reports its own statistics: settle them before the first reading.
      await new Promise((r) => setTimeout(r, 50));
      const before = await hotCounts();
      const start = await lsn();

      const claimed = await store.claim(ids, 'w-cost', 60);
      expect(claimed).toHaveLength(400);
      const afterClaim = await hotCounts();
      const mid = await lsn();
      const lost = await store.completeMany(claimed.map((j) => ({ id: j.id, attempt: j.attempt, result: null })));
      expect(lost.size).toBe(0);
      const end = await lsn();
      const after = await hotCounts();

      expect(afterClaim.upd - before.upd).toBe(400);
      expect(afterClaim.hot - before.hot).toBe(400); // fill factor 50 left about 1 in 6 claims without room on the page
      expect(after.upd - afterClaim.upd).toBe(400); // the completion changes finished_at, in index predicates: never HOT
      if (walinspect) {
        await flushWal();
        // The claims: HOT updates with no row lock before them (a BEFORE UPDATE trigger on
        // jobs.job would write one LOCK record per claim: 400).
        const claims = await heapRecords(start, mid);
        expect(claims.LOCK ?? 0).toBe(0);
        expect(claims.HOT_UPDATE).toBe(400);
        expect(claims.UPDATE ?? 0).toBe(0);
        // The completions: one plain UPDATE each. Not their LOCK records: a completion that finds
        // no room on its page marks the old row locked while it moves to another (heap_update's
        // own LOCK record), and the room depends on what pruning other sessions' snapshots allow
        // (a fully parallel CI run once saw 308 such records here).
        const completions = await heapRecords(mid, end);
        expect(completions.UPDATE).toBe(400);
        expect(completions.HOT_UPDATE ?? 0).toBe(0);
      }
    });
  }
});
