// Issue 14, limits per job type: `defineJob({ maxRunning })` caps a type's running jobs across
// the fleet, enforced by the database in the claim like a concurrency key (migration 0007).
// Against the real PostgreSQL with real concurrent connections: 50 claimers race over jobs of a
// limited type (some also keyed) while a sampler counts the running jobs per type and per key.
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { formatJob } from '../../runtime/cli/format.ts';
import { withTransaction } from '../../runtime/db/transaction.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { JobStore, type NewJob } from '../../runtime/store/job-store.ts';
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

async function enqueue(jobs: NewJob[]): Promise<string[]> {
  const inserted = await withTransaction(pool, (c) => store.insertMany(c, jobs));
  await pool.query('DELETE FROM jobs.outbox'); // the test's inbox stands for the messages
  return inserted.map((i) => i.job.id);
}

const outbox = async () => (await pool.query('DELETE FROM jobs.outbox RETURNING job_id')).rows.map((r) => r.job_id as string).sort();
const running = async (type: string) =>
  (await pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE type = $1 AND state = 'running'", [type])).rows[0].n as number;

describe('limits per job type', () => {
  beforeEach(async () => {
    await pool.query('DELETE FROM jobs.outbox'); // each test has its own types
  });

  it('50 concurrent claimers, a type limited to 3 (some of its jobs also keyed): never more than 3 running, keys within theirs, every job once', async () => {
    await store.syncTypeLimits([{ type: 'race.costing', maxRunning: 3 }], 'test');
    const specs: NewJob[] = [];
    for (let i = 0; i < 40; i++) {
      specs.push({
        type: 'race.costing',
        payload: { i },
        maxAttempts: 3,
        ...(i % 2 ? { concurrencyKey: `store-${i % 4}`, concurrencyLimit: 1 } : {}),
      });
      specs.push({ type: 'race.free', payload: { i }, maxAttempts: 3 }); // unlimited, beside them
    }
    const ids = await enqueue(specs);
    let mostType = 0;
    let mostFree = 0;
    let mostKey = 0;
    const { starts, samples } = await raceClaimers({
      pool,
      store,
      ids,
      claimers: 50,
      sample: async () => {
        const { rows } = await pool.query(
          `SELECT count(*) FILTER (WHERE type = 'race.costing')::int AS t, count(*) FILTER (WHERE type = 'race.free')::int AS f,
                  (SELECT coalesce(max(n), 0)::int FROM (SELECT count(*) AS n FROM jobs.job
                     WHERE state = 'running' AND concurrency_key IS NOT NULL GROUP BY concurrency_key) k) AS k
             FROM jobs.job WHERE state = 'running'`,
        );
        mostType = Math.max(mostType, rows[0].t);
        mostFree = Math.max(mostFree, rows[0].f);
        mostKey = Math.max(mostKey, rows[0].k);
      },
    });

    expect({ mostType, mostKey }).toEqual({ mostType: Math.min(mostType, 3), mostKey: Math.min(mostKey, 1) });
    expect(mostType).toBe(3); // the limit was reached: the race was real
    expect(mostFree).toBeGreaterThan(3); // and the unlimited type beside it was not held to it
    expect(samples).toBeGreaterThan(50);
    expect(starts.size).toBe(ids.length);
    expect([...starts.values()].every((n) => n === 1)).toBe(true);
    const { rows } = await pool.query('SELECT state, type_slot, blocked_since FROM jobs.job WHERE id = ANY($1::uuid[])', [ids]);
    expect(rows.every((r) => r.state === 'succeeded' && r.type_slot === false && r.blocked_since === null)).toBe(true);
  });

  it('every way a job stops running frees its slot and publishes the next blocked job; a reclaim keeps it', async () => {
    await store.syncTypeLimits([{ type: 'ways.costing', maxRunning: 1 }], 'test');
    const ids = await enqueue(Array.from({ length: 6 }, (_, i) => ({ type: 'ways.costing', payload: { i }, maxAttempts: 5 })));
    const claimNext = async (expected: string) => {
      const r = await store.claimKeyed(ids, 'w', 30);
      expect(r.claimed.map((j) => j.id)).toEqual([expected]);
      expect(await running('ways.costing')).toBe(1);
      return r.claimed[0]!;
    };
    // A plain claim never takes a job of a limited type.
    expect(await store.claim(ids, 'w', 30)).toEqual([]);
    let job = await claimNext(ids[0]!);
    expect(await outbox()).toEqual([]); // the others are blocked, without messages

    // A reclaim of an expired lease keeps the slot: nobody else starts meanwhile.
    await pool.query("UPDATE jobs.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [job.id]);
    const reclaimed = await store.claimKeyed([ids[3]!, job.id], 'w2', 30);
    expect(reclaimed.claimed.map((j) => j.id)).toEqual([job.id]);
    expect(reclaimed.blocked).toEqual([ids[3]]);
    job = reclaimed.claimed[0]!;

    // A failure with a retry ends the attempt: the slot is free and the oldest blocked job is
    // woken; the retry, older, goes first and the woken one waits again (a receive, no attempt).
    await store.fail({ id: job.id, attempt: job.attempt }, { message: 'boom' } as never, 0, false);
    expect(await outbox()).toEqual([ids[1]]);
    job = await claimNext(ids[0]!);
    // An operator's cancel of the running job.
    await store.cancel(job.id, 'controller');
    expect(await outbox()).toEqual([ids[1]]);
    job = await claimNext(ids[1]!);
    // Success.
    expect(await store.complete(pool, { id: job.id, attempt: job.attempt }, null)).toBe(true);
    expect(await outbox()).toEqual([ids[2]]);
    const holder = await claimNext(ids[2]!);
    // What `jobs show` says of a job waiting for a slot.
    const shown = formatJob((await store.get(ids[4]!))!, { typeSlots: { limit: 1, holders: await store.runningWithType('ways.costing') } });
    expect(shown).toMatch(
      new RegExp(`waiting   for a slot of ways.costing since .+, held by job ${holder.id} \\(at most 1 running at once\\)`),
    );
    expect(shown).toContain('limit     ways.costing runs at most 1 at a time across the fleet');
    // The live view's and jobs list's reading: blocked jobs by what they wait for, and who holds it.
    const waiting = (await store.waiting(10)).filter((g) => g.type === 'ways.costing');
    expect(waiting).toEqual([
      {
        waitsFor: 'a slot of ways.costing',
        concurrencyKey: null,
        type: 'ways.costing',
        jobs: 3,
        since: expect.any(Date),
        heldBy: [holder.id],
        limit: 1,
      },
    ]);
  });

  it('the other ways out — a batched completion of several holders, a release, a rescue, a dead-letter — free their slots, each says so in what it returns, and the freed slots go to blocked jobs', async () => {
    await store.syncTypeLimits([{ type: 'ways.batch', maxRunning: 3 }], 'test');
    const ids = await enqueue(Array.from({ length: 9 }, (_, i) => ({ type: 'ways.batch', payload: { i }, maxAttempts: 1 })));
    const slots = async () =>
      (await pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE type = 'ways.batch' AND type_slot")).rows[0].n as number;
    const claimThree = async () => {
      const r = await store.claimKeyed(ids, 'w', 30);
      expect(r.claimed).toHaveLength(3);
      expect(await slots()).toBe(3);
      await outbox(); // the wake-ups of the slots freed before this claim
      return r.claimed;
    };

    // Three holders completed in one statement: three slots free, three blocked jobs published.
    let held = await claimThree();
    expect(await store.completeMany(held.map((j) => ({ id: j.id, attempt: j.attempt, result: null })))).toEqual(new Set());
    expect(await slots()).toBe(0);
    expect(await outbox()).toHaveLength(3);

    // A graceful stop's release: back to pending, slot free.
    held = await claimThree();
    expect(await store.release([{ id: held[0]!.id, attempt: held[0]!.attempt }], 'stopping')).toEqual(new Set([held[0]!.id]));
    expect(await slots()).toBe(2);

    // The rescuer (lease long expired, attempts left? none: maxAttempts 1, so dead) and the dead-letter of a final attempt.
    await pool.query("UPDATE jobs.job SET lease_expires_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])", [
      [held[1]!.id, held[2]!.id],
    ]);
    const dead = await store.deadLetterExpired([held[1]!.id]);
    expect(dead.map((j) => [j.state, j.typeSlot])).toEqual([['dead', false]]);
    const rescued = await store.rescueExpired(0, 10);
    expect(rescued.map((r) => [r.job.id, r.job.state, r.job.typeSlot])).toEqual([[held[2]!.id, 'dead', false]]);
    expect(await slots()).toBe(0);

    // A failure and a cancel say so too (the rows they return are what the API and `jobs` print).
    held = await claimThree();
    const failed = await store.fail({ id: held[0]!.id, attempt: held[0]!.attempt }, { message: 'boom' } as never, 0, false);
    expect([failed?.state, failed?.typeSlot]).toEqual(['dead', false]);
    const cancelled = await store.cancel(held[1]!.id, 'controller');
    expect([cancelled?.state, cancelled?.typeSlot]).toEqual(['cancelled', false]);
    expect(await slots()).toBe(1);
  });

  it('raising a limit publishes as many blocked jobs as it frees; removing it publishes them all and the plain claim takes them', async () => {
    await store.syncTypeLimits([{ type: 'sync.costing', maxRunning: 1 }], 'test');
    const ids = await enqueue(Array.from({ length: 5 }, (_, i) => ({ type: 'sync.costing', payload: { i }, maxAttempts: 3 })));
    expect((await store.claimKeyed(ids, 'w', 30)).claimed.map((j) => j.id)).toEqual([ids[0]]);
    expect(await store.syncTypeLimits([{ type: 'sync.costing', maxRunning: 1 }], 'test')).toEqual([]); // unchanged: nothing
    expect(await store.syncTypeLimits([{ type: 'sync.costing', maxRunning: 3 }], 'test')).toEqual(['sync.costing']);
    expect(await outbox()).toEqual([ids[1], ids[2]].sort());
    expect(await store.typeLimit('sync.costing')).toBe(3);
    expect(await store.syncTypeLimits([{ type: 'sync.costing', maxRunning: null }], 'test')).toEqual(['sync.costing']);
    expect(await outbox()).toEqual([ids[3], ids[4]].sort());
    expect(await store.typeLimit('sync.costing')).toBeNull();
    expect((await store.claim(ids.slice(1), 'w', 30)).map((j) => j.id).sort()).toEqual(ids.slice(1).sort());
  });

  it('a limit must be a whole number from 1 to 10000, named in the refusal', () => {
    const def = { type: 'bad.limit', description: 'x', parse: (p: unknown) => p, run: async () => null };
    expect(() => new JobRegistry([{ ...def, maxRunning: 0 }])).toThrow(
      'job type "bad.limit": maxRunning 0 must be an integer from 1 to 10000 (jobs running at once across the fleet)',
    );
    expect(() => new JobRegistry([{ ...def, concurrency: { key: () => 'k', limit: 1.5 } }])).toThrow(
      /concurrency.limit 1.5 must be an integer/,
    );
  });
});

let live = 0;
let most = 0;
const costing = defineJob<{ n: number }, null>({
  type: 'test.costing',
  description: 'a heavy run, at most 2 across the fleet',
  parse: (x) => x as { n: number },
  maxRunning: 2,
  async run() {
    most = Math.max(most, ++live);
    await new Promise((r) => setTimeout(r, 20));
    live--;
    return null;
  },
});

describe('limits per job type through the workers', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform({
      registry: new JobRegistry([costing]),
      timings: { leaseSeconds: 1, heartbeatSeconds: 0.3, visibilityTimeoutSeconds: 1 },
    });
  });
  afterAll(() => p.close());

  it('3 workers of concurrency 4, 30 jobs of a type with maxRunning 2: never more than 2 at once, all done, nothing left in the queues', async () => {
    for (let w = 0; w < 3; w++) p.worker({ timings: { concurrency: 4 } }).start();
    await p.client.enqueueNow(Array.from({ length: 30 }, (_, n) => ({ type: 'test.costing', payload: { n } })));
    await waitFor(
      async () => (await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE state = 'succeeded'")).rows[0].n === 30,
      60_000,
      'all 30 done',
    );
    expect(most).toBe(2);
    const { rows } = await p.db.pool.query('SELECT max_running, set_by FROM jobs.type_limit WHERE type = $1', ['test.costing']);
    expect(rows).toEqual([{ max_running: 2, set_by: expect.any(String) }]);
    // Every message is settled (a woken job's second copy included) and none went to the DLQ.
    await waitFor(() => p.queue.depth().total === 0, 10_000, 'the queue empty');
    expect(p.dlq.depth().total).toBe(0);
  });
});
