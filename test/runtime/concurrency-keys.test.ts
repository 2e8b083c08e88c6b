// Issue 14, concurrency keys: the database keeps every key within its limit, in the claim
// itself. Against the real PostgreSQL with real concurrent connections: 50 claimers race over
// jobs that share keys with limits 1 and 3 while a sampler reads the running jobs per key in a
// tight loop; the messages are simulated (an inbox of job ids, the outbox drained into it) so
// that only the database decides.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatJob } from '../../runtime/cli/format.ts';
import { migrate } from '../../runtime/db/migrate.ts';
import { uuidv7 } from '../../runtime/domain/uuid7.ts';
import { withTransaction } from '../../runtime/db/transaction.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { JobStore, type NewJob } from '../../runtime/store/job-store.ts';
import { KEY_SQL } from '../../runtime/store/sql-keys.ts';
import { raceClaimers } from '../support/claim-race.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

let db: TestDb;
let pool: pg.Pool;
let store: JobStore;
beforeAll(async () => {
  db = await createTestDb();
  pool = db.newPool(60);
  store = new JobStore(pool);
});
afterAll(async () => {
  await pool.end();
  await db.drop();
});

const LIMITS: Record<string, number> = { 'ledger:company-1': 1, 'ledger:company-2': 1, 'costing:store-1': 3, 'costing:store-2': 3 };

async function enqueue(jobs: NewJob[]): Promise<string[]> {
  const inserted = await withTransaction(pool, (c) => store.insertMany(c, jobs));
  await pool.query('DELETE FROM jobs.outbox'); // the test's inbox stands for the messages
  return inserted.map((i) => i.job.id);
}

/** Whether a set of [start, end] intervals ever has more than `limit` open at once. */
function maxOverlap(intervals: [number, number][]): number {
  const edges = intervals.flatMap(([s, e]) => [
    [s, 1],
    [e, -1],
  ]);
  // An end before a start at the same instant: a hand-over is not an overlap.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let open = 0;
  let most = 0;
  for (const [, d] of edges) most = Math.max(most, (open += d!));
  return most;
}

describe('concurrency keys', () => {
  it('50 concurrent claimers over keys with limits 1 and 3: never more running than the limit, every job once, each key in order', async () => {
    const specs: NewJob[] = [];
    for (let i = 0; i < 30; i++) {
      for (const [key, limit] of Object.entries(LIMITS)) {
        specs.push({ type: 'ledger.post', payload: { i }, maxAttempts: 3, concurrencyKey: key, concurrencyLimit: limit });
      }
      specs.push({ type: 'ledger.post', payload: { i }, maxAttempts: 3 }); // unkeyed, beside them
    }
    const ids = await enqueue(specs);
    // The sampler: running jobs per key, as often as the database answers.
    const most: Record<string, number> = {};
    const { starts, samples } = await raceClaimers({
      pool,
      store,
      ids,
      claimers: 50,
      sample: async () => {
        const { rows } = await pool.query(
          "SELECT concurrency_key AS k, count(*)::int AS n FROM jobs.job WHERE state = 'running' AND concurrency_key IS NOT NULL GROUP BY 1",
        );
        for (const r of rows) most[r.k] = Math.max(most[r.k] ?? 0, r.n);
      },
    });

    for (const [key, limit] of Object.entries(LIMITS)) expect({ key, over: most[key]! > limit }).toEqual({ key, over: false });
    // The race was real: a key with room for three had more than one running at once.
    expect(Math.max(most['costing:store-1']!, most['costing:store-2']!)).toBeGreaterThan(1);
    expect(samples).toBeGreaterThan(50);
    expect([...starts.values()].every((n) => n === 1)).toBe(true);
    expect(starts.size).toBe(ids.length);
    const { rows } = await pool.query(
      `SELECT id, concurrency_key AS k, attempt, state, blocked_since,
              extract(epoch FROM claimed_at) AS s, extract(epoch FROM finished_at) AS e
         FROM jobs.job ORDER BY id`,
    );
    expect(rows.every((r) => r.state === 'succeeded' && r.attempt === 1 && r.blocked_since === null)).toBe(true);
    for (const [key, limit] of Object.entries(LIMITS)) {
      const mine = rows.filter((r) => r.k === key);
      // From the database's own times: never more than the limit at once…
      const overlap = maxOverlap(mine.map((r) => [Number(r.s), Number(r.e)]));
      expect({ key, over: overlap > limit }).toEqual({ key, over: false });
      // …and with a limit of 1, each job started after the one enqueued before it.
      if (limit === 1) expect(mine.map((r) => Number(r.s))).toEqual(mine.map((r) => Number(r.s)).sort((a, b) => a - b));
    }
  });
});

describe('concurrency keys: the ways a job leaves its key', () => {
  it('batched completions ending jobs of two keys in opposite orders, concurrently: no deadlock, both keys woken', async () => {
    for (let round = 0; round < 20; round++) {
      const k1 = `cross-a-${round}`;
      const k2 = `cross-b-${round}`;
      // Two running jobs per key (limit 2) and one blocked behind each key.
      const ids = await enqueue(
        [k1, k2, k2, k1, k1, k2].map((k) => ({ type: 'ledger.post', payload: {}, maxAttempts: 3, concurrencyKey: k, concurrencyLimit: 2 })),
      );
      const { claimed, blocked } = await store.claimKeyed(ids, 'w', 30);
      expect(claimed.map((j) => j.id).sort()).toEqual(ids.slice(0, 4).sort());
      expect(blocked.sort()).toEqual(ids.slice(4).sort());
      // One batch ends (k1, k2) in that row order, the other (k2, k1).
      const token = (i: number) => ({ id: ids[i]!, attempt: 1, result: null });
      const lost = await Promise.all([store.completeMany([token(0), token(1)]), store.completeMany([token(2), token(3)])]);
      expect(lost.map((l) => l.size)).toEqual([0, 0]);
      const { rows } = await pool.query('DELETE FROM jobs.outbox WHERE job_id = ANY($1::uuid[]) RETURNING job_id', [ids.slice(4)]);
      expect(rows.map((r) => r.job_id).sort()).toEqual(ids.slice(4).sort());
    }
  });

  it("an operator's cancel of the running job publishes the key's next one; a cancelled blocked job is simply gone", async () => {
    const ids = await enqueue([0, 1, 2].map(() => ({ type: 'ledger.post', payload: {}, maxAttempts: 3, concurrencyKey: 'cancel-k' })));
    const first = await store.claimKeyed(ids, 'w', 30);
    expect(first.claimed.map((j) => j.id)).toEqual([ids[0]]);
    expect(first.blocked.sort()).toEqual([ids[1], ids[2]].sort());
    // What `jobs show` says of a blocked job.
    const shown = formatJob((await store.get(ids[1]!))!, { keyHolders: await store.runningWithKey('cancel-k') });
    expect(shown).toMatch(new RegExp(`waiting   for key cancel-k since .+, held by job ${ids[0]} \\(starts when the key has room\\)`));
    expect(shown).toContain('concurrency cancel-k (at most 1 at a time)');
    expect((await store.waiting(10)).find((g) => g.concurrencyKey === 'cancel-k')).toEqual({
      waitsFor: 'key cancel-k',
      concurrencyKey: 'cancel-k',
      type: 'ledger.post',
      jobs: 2,
      since: expect.any(Date),
      heldBy: [ids[0]],
      limit: 1,
    });
    await store.cancel(ids[2]!, 'controller'); // blocked: nothing to publish
    expect((await pool.query('SELECT job_id FROM jobs.outbox')).rows).toEqual([]);
    await store.cancel(ids[0]!, 'controller'); // running: the key has room for ids[1]
    const { rows } = await pool.query('DELETE FROM jobs.outbox RETURNING job_id, relay_now');
    expect(rows).toEqual([{ job_id: ids[1], relay_now: true }]);
    const next = await store.claimKeyed([ids[1]!], 'w', 30);
    expect(next.claimed.map((j) => j.id)).toEqual([ids[1]]);
  });
});

/** What the keyed test handler saw: per job, when it started and ended (this process's clock). */
const runs = new Map<string, { key: string; start: number; end?: number; attempt: number }[]>();
let gate: Promise<void> | null = null;
const keyed = defineJob<{ key: string; n: number; workMs?: number }, { n: number }>({
  type: 'test.keyed',
  description: 'records when it ran',
  parse: (x) => x as { key: string; n: number; workMs?: number },
  concurrency: { key: (x) => x.key },
  async run(x, ctx) {
    const r = { key: x.key, start: performance.now(), attempt: ctx.job.attempt } as {
      key: string;
      start: number;
      end?: number;
      attempt: number;
    };
    runs.set(ctx.job.id, [...(runs.get(ctx.job.id) ?? []), r]);
    if (gate && x.n === 0) await gate;
    await new Promise((res) => setTimeout(res, x.workMs ?? 3));
    r.end = performance.now();
    return { n: x.n };
  },
});

describe('concurrency keys through the workers', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform({
      registry: new JobRegistry([keyed]),
      timings: { leaseSeconds: 1, heartbeatSeconds: 0.3, visibilityTimeoutSeconds: 1 },
    });
  });
  afterAll(() => p.close());

  const rows = async (key: string) =>
    (
      await p.db.pool.query(
        `SELECT id, state, attempt, extract(epoch FROM claimed_at) * 1000 AS s, extract(epoch FROM finished_at) * 1000 AS e
           FROM jobs.job WHERE concurrency_key = $1 ORDER BY id`,
        [key],
      )
    ).rows.map((r) => ({ id: r.id as string, state: r.state as string, attempt: r.attempt as number, s: Number(r.s), e: Number(r.e) }));

  it('200 jobs on 5 keys, 3 workers: each key in enqueue order, one at a time, the next started as soon as one ended; never received over and over', async () => {
    const keys = ['ledger:company-1', 'ledger:company-2', 'ledger:company-3', 'costing:store-1', 'costing:store-2'];
    // Enqueued interleaved, in one transaction, so every key has a backlog from the start.
    await p.client.enqueueNow(Array.from({ length: 200 }, (_, i) => ({ type: 'test.keyed', payload: { key: keys[i % 5]!, n: i + 1 } })));
    for (let w = 0; w < 3; w++) p.worker().start();
    await waitFor(
      async () => (await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE state = 'succeeded'")).rows[0].n === 200,
      60_000,
      'all 200 done',
    );
    for (const key of keys) {
      const r = await rows(key);
      expect(r).toHaveLength(40);
      expect(r.every((x) => x.state === 'succeeded' && x.attempt === 1)).toBe(true);
      // In enqueue order, each after the one before it ended.
      for (let i = 1; i < r.length; i++) expect(r[i]!.s).toBeGreaterThanOrEqual(r[i - 1]!.e);
      // The key did not wait while it had room: the next job started within a moment of the last
      // one's end (the worker publishes the key's next job at once; this platform runs no relay).
      const gaps = r
        .slice(1)
        .map((x, i) => x.s - r[i]!.e)
        .sort((a, b) => a - b);
      expect({ key, medianGapUnder1s: gaps[Math.floor(gaps.length / 2)]! < 1000 }).toEqual({ key, medianGapUnder1s: true });
    }
    // A blocked job's message is deleted, not received again and again toward maxReceiveCount.
    expect(p.dlq.depth().total).toBe(0);
    // (The last deletes go out in batches, within 50 ms.)
    await waitFor(() => p.queue.depth().total === 0, 5_000, 'every message deleted');
  });

  it('a worker killed while holding a key: the key is free within a lease and its jobs go on, in order, each once', async () => {
    await Promise.all(p.workers.splice(0).map((w) => w.stop(1)));
    let open!: () => void;
    gate = new Promise((r) => {
      open = r;
    });
    await p.client.enqueueNow(Array.from({ length: 4 }, (_, i) => ({ type: 'test.keyed', payload: { key: 'ledger:killed', n: i } })));
    const a = p.worker();
    a.start();
    const [first] = await rows('ledger:killed');
    await waitFor(() => runs.get(first!.id)?.length === 1, 10_000, 'first job running');
    const killedAt = performance.now();
    const crashed = a.crash();
    open();
    await crashed;
    gate = null;
    p.worker().start();
    await waitFor(async () => (await rows('ledger:killed')).every((x) => x.state === 'succeeded'), 20_000, 'all four done');
    const r = await rows('ledger:killed');
    expect(r.map((x) => x.attempt)).toEqual([2, 1, 1, 1]);
    for (let i = 1; i < r.length; i++) expect(r[i]!.s).toBeGreaterThanOrEqual(r[i - 1]!.e);
    // Reclaimed within about a lease (1 s) and the message's visibility (1 s) after the kill.
    expect(runs.get(first!.id)![1]!.start - killedAt).toBeLessThan(5_000);
  });
});

describe("a key's backlog (migration 0015)", () => {
  /** Buffers the keyed claim of `id` and jobs.wake_key read, each under EXPLAIN (ANALYZE, BUFFERS), rolled back. */
  async function reads(key: string, id: string): Promise<{ claim: number; wake: number }> {
    const c = await pool.connect();
    c.on('error', () => undefined);
    const buffers = (rows: { 'QUERY PLAN': { Plan: Record<string, number> }[] }[]) => {
      const p = rows[0]!['QUERY PLAN'][0]!.Plan;
      return (p['Shared Hit Blocks'] ?? 0) + (p['Shared Read Blocks'] ?? 0);
    };
    try {
      await c.query('BEGIN');
      await c.query(KEY_SQL.keyLockClaim, [[id]]);
      // The function's first call on a connection also reads the catalogs: not what is measured.
      await c.query('SAVEPOINT warm');
      await c.query('SELECT jobs.wake_key($1, 1)', [key]);
      await c.query('ROLLBACK TO SAVEPOINT warm');
      // The fewest of three tries, each rolled back: a plan invalidated in between (an autoanalyze
      // of a table the statements touch) is planned again, reading statistics, on one try only
      // (fresh-clone CI at 2f6d801: a wake read 30 buffers once, against 3).
      let claim = Number.POSITIVE_INFINITY;
      let wake = Number.POSITIVE_INFINITY;
      for (let i = 0; i < 3; i++) {
        await c.query('SAVEPOINT try');
        claim = Math.min(
          claim,
          buffers((await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${KEY_SQL.jobClaimKeyed}`, [[id], 'w', 30])).rows),
        );
        // The claimed job runs; an end of another job of the key asks for room: none.
        wake = Math.min(wake, buffers((await c.query('EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT jobs.wake_key($1, 1)', [key])).rows));
        await c.query('ROLLBACK TO SAVEPOINT try');
      }
      return { claim, wake };
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  }

  it("what a claim and a wake read does not grow with the key's blocked backlog", async () => {
    const key = 'backlog:store-9';
    const add = (n: number) =>
      enqueue(
        Array.from({ length: n }, (_, i) => ({ type: 'x', payload: { i }, maxAttempts: 3, concurrencyKey: key, concurrencyLimit: 1 })),
      );
    const [oldest] = await add(300);
    // Draining: the worker has received every message once and blocked all but the oldest.
    await pool.query('UPDATE jobs.job SET blocked_since = now() WHERE concurrency_key = $1 AND id <> $2', [key, oldest]);
    await pool.query('VACUUM ANALYZE jobs.job');
    const small = await reads(key, oldest!);
    await add(6000);
    await pool.query('UPDATE jobs.job SET blocked_since = now() WHERE concurrency_key = $1 AND id <> $2', [key, oldest]);
    await pool.query('VACUUM ANALYZE jobs.job');
    const large = await reads(key, oldest!);
    // 20 times the backlog: the same reads (a page more where the index grew a level). Before
    // 0015 both counted every active job of the key: about 20 times as many buffers.
    expect(large.claim).toBeLessThanOrEqual(small.claim + 3);
    expect(large.wake).toBeLessThanOrEqual(small.wake + 3);
    expect(large.claim).toBeLessThan(40);
    const { rows } = await pool.query('SELECT state FROM jobs.job WHERE id = $1', [oldest]);
    expect(rows[0].state).toBe('pending'); // rolled back
    await pool.query('DELETE FROM jobs.job WHERE concurrency_key = $1', [key]);
  });

  it('the plain claim starts a job left blocked (its type lost its limit while wake_type skipped it) unblocked', async () => {
    const [id] = await enqueue([{ type: 'x', payload: {}, maxAttempts: 3 }]);
    await pool.query('UPDATE jobs.job SET blocked_since = now() WHERE id = $1', [id]);
    const claimed = await store.claim([id!], 'w', 30);
    expect(claimed.map((j) => j.id)).toEqual([id]);
    const { rows } = await pool.query('SELECT state, blocked_since FROM jobs.job WHERE id = $1', [id]);
    expect(rows).toEqual([{ state: 'running', blocked_since: null }]);
    await pool.query('DELETE FROM jobs.job WHERE id = $1', [id]);
  });

  it('a running job cannot be blocked: the constraint the counts rely on', async () => {
    const [id] = await enqueue([{ type: 'x', payload: {}, maxAttempts: 3, concurrencyKey: 'backlog:store-10', concurrencyLimit: 1 }]);
    await pool.query(
      "UPDATE jobs.job SET state = 'running', attempt = 1, lease_owner = 'w', lease_expires_at = now() + interval '1 minute' WHERE id = $1",
      [id],
    );
    await expect(pool.query('UPDATE jobs.job SET blocked_since = now() WHERE id = $1', [id])).rejects.toThrow(/job_running_not_blocked/);
    await pool.query('DELETE FROM jobs.job WHERE id = $1', [id]);
  });
});

describe('upgrading to migration 0015', () => {
  it("a key's backlog in flight carries over: a running job left blocked is unblocked, the constraint holds, the next job is woken", async () => {
    const old = await createTestDb({ migrateThrough: 14 });
    try {
      const key = 'upgrade:store-1';
      // Rows as that schema holds them, written in plain SQL: today's enqueue statement needs today's schema.
      const ids = Array.from({ length: 20 }, (_, i) => uuidv7(Date.now() + i));
      await old.pool.query(
        `INSERT INTO jobs.job (id, type, payload, max_attempts, concurrency_key, concurrency_limit)
         SELECT id, 'x', jsonb_build_object('i', n - 1), 3, $2, 1 FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, n)`,
        [ids, key],
      );
      await old.pool.query(
        "UPDATE jobs.job SET state = 'running', attempt = 1, lease_owner = 'w', lease_expires_at = now() + interval '1 minute', blocked_since = now() WHERE id = $1",
        [ids[0]],
      ); // the state 0015's constraint forbids, which nothing should ever have written
      await old.pool.query('UPDATE jobs.job SET blocked_since = now() WHERE id = ANY($1::uuid[])', [ids.slice(1)]);
      await old.pool.query('DELETE FROM jobs.outbox');

      expect((await migrate(old.pool)).applied).toContain('0015_key_backlog.sql');
      const { rows: fixed } = await old.pool.query('SELECT blocked_since FROM jobs.job WHERE id = $1', [ids[0]]);
      expect(fixed).toEqual([{ blocked_since: null }]);
      const { rows: con } = await old.pool.query("SELECT convalidated FROM pg_constraint WHERE conname = 'job_running_not_blocked'");
      expect(con).toEqual([{ convalidated: true }]);
      // The running job ends: at COMMIT its key wakes the oldest blocked job, exactly one.
      await old.pool.query(
        "UPDATE jobs.job SET state = 'succeeded', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        [ids[0]],
      );
      const { rows: woken } = await old.pool.query('SELECT job_id FROM jobs.outbox');
      expect(woken).toEqual([{ job_id: ids[1] }]);
    } finally {
      await old.drop();
    }
  });
});
