// Jobs due beyond the publish horizon (SQS's longest delay, 15 min) get no message until they are
// due within it (migration 0018, runtime/store/outbox.ts): their publish waits in
// jobs.outbox_deferred and the outbox relay publishes it in time. Real PostgreSQL, MemoryQueue.
// Time passing is played by moving the rows' times back, not by waiting.
import type pg from 'pg';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Reconciler } from '../../runtime/maintenance/reconciler.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { registerJobTypes } from '../../runtime/store/job-types.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { OutboxRelay } from '../../runtime/store/outbox-relay.ts';
import { SQL } from '../../runtime/store/sql.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

let p: Platform;
beforeEach(async () => {
  p = await createPlatform();
});
afterEach(() => p.close());

const HOUR = 3_600_000;
const relay = (pool: pg.Pool = p.db.pool) =>
  new OutboxRelay(pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100, quiet: true });
const deferred = async (ids: string[]) =>
  (
    await p.db.pool.query<{ job_id: string; publish_after: Date }>(
      'SELECT job_id, publish_after FROM jobs.outbox_deferred WHERE job_id = ANY($1::uuid[]) ORDER BY job_id',
      [ids],
    )
  ).rows;
const outboxRows = async () => (await p.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM jobs.outbox')).rows[0]!.n;
/** As if the clock had moved on to 15 min before each job is due, less `dueInSeconds`. */
async function timePasses(ids: string[], dueInSeconds: number): Promise<void> {
  await p.db.pool.query(
    `UPDATE jobs.job SET run_after = statement_timestamp() + $2::float8 * interval '1 second' WHERE id = ANY($1::uuid[])`,
    [ids, dueInSeconds],
  );
  await p.db.pool.query(
    `UPDATE jobs.outbox_deferred SET publish_after = statement_timestamp() - interval '1 second' WHERE job_id = ANY($1::uuid[])`,
    [ids],
  );
}
const enqueueTonight = async (n: number, hoursAhead = 6) => {
  const runAt = new Date(Date.now() + hoursAhead * HOUR);
  const jobs = await p.client.enqueueNow(
    Array.from({ length: n }, (_, i) => ({ type: 'ledger.post', payload: { batch: `TONIGHT-${i}`, entries: 1 }, runAt })),
  );
  await p.publisher.flush();
  return { runAt, ids: jobs.map((j) => j.job.id) };
};

describe('a job due beyond 15 minutes', () => {
  it('gets no message at enqueue, nor from the relay, and the reconciler sees no lost message', async () => {
    const send = vi.spyOn(p.queue, 'send');
    const { runAt, ids } = await enqueueTonight(3);
    await relay().runOnce();
    expect(send).not.toHaveBeenCalled();
    expect(p.queue.depth().total).toBe(0);
    expect(await outboxRows()).toBe(0);
    expect((await deferred(ids)).map((r) => r.publish_after.getTime())).toEqual(ids.map(() => runAt.getTime() - 900_000));

    const reconciler = new Reconciler({
      pool: p.db.pool,
      publisher: new Publisher(p.db.pool, p.queue, silentLogger),
      countMessages: () => p.queue.approximateCount(),
      log: silentLogger,
      metrics: new CountingMetrics(),
      timings: { intervalMs: 200, minAgeSeconds: 0, republishWindowSeconds: 2 },
    });
    await reconciler.runOnce();
    expect(await reconciler.runOnce()).toMatchObject({ pending: 3, outbox: 3, deficit: 0, republished: 0 });
    expect(send).not.toHaveBeenCalled();

    // A due job whose message the queue lost, beside them: that one is re-published, not a deferred one.
    const [lost] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'LOST', entries: 1 } });
    await p.publisher.flush();
    p.queue.purge();
    send.mockClear();
    await reconciler.runOnce();
    expect(await reconciler.runOnce()).toMatchObject({ pending: 4, outbox: 3, deficit: 1, republished: 1 });
    expect(send.mock.calls.flatMap((c) => c[0].map((m) => JSON.parse(m.body).jobId))).toEqual([lost!.job.id]);
  });

  it('is published by the relay once due within 15 minutes, delayed to its time, once, and runs then', async () => {
    const { ids } = await enqueueTonight(2);
    await timePasses(ids, 2);
    const send = vi.spyOn(p.queue, 'send');
    expect(await relay().runOnce()).toBe(2);
    expect(send.mock.calls.flatMap((c) => c[0].map((m) => m.delaySeconds))).toEqual([2, 2]);
    expect(await deferred(ids)).toEqual([]);
    expect(await outboxRows()).toBe(0);
    expect(await relay().runOnce()).toBe(0); // nothing left to publish twice
    expect(await p.queue.receive(10, 0)).toEqual([]); // delayed: not before its time
    p.worker().start();
    await waitFor(async () => [...(await p.store.getMany(ids)).values()].every((j) => j.state === 'succeeded'), 15_000, 'both ran');
  });

  it('a retry whose backoff is longer than 15 minutes: its message deleted, its publish deferred', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'RETRY-LATER', entries: 1, failAttempts: 1 } });
    await p.publisher.flush();
    const id = r!.job.id;
    p.worker({ timings: { backoffBaseSeconds: 3600, backoffMaxSeconds: 7200 } }).start();
    await waitFor(async () => (await p.store.get(id))!.lastError !== null, 10_000, 'the first attempt failed');
    await waitFor(async () => p.queue.depth().total === 0, 5000, 'its message deleted');
    await relay().runOnce();
    const job = (await p.store.get(id))!;
    expect(job.state).toBe('pending');
    expect(job.runAfter.getTime()).toBeGreaterThan(Date.now() + 1800_000);
    expect((await deferred([id])).map((x) => x.publish_after.getTime())).toEqual([job.runAfter.getTime() - 900_000]);
    expect(p.queue.depth().total).toBe(0);
  });

  it('enqueued through jobs.enqueue() in SQL (its outbox row published by the relay): deferred by the relay, not sent', async () => {
    await registerJobTypes(p.db.pool, p.registry, { maxAttempts: 3 }, 'test');
    const { rows } = await p.db.pool.query<{ job_id: string }>(
      `SELECT job_id FROM jobs.enqueue(type => 'ledger.post', payload => '{"batch": "SQL-LATER", "entries": 1}', run_at => now() + interval '3 hours')`,
    );
    const id = rows[0]!.job_id;
    const send = vi.spyOn(p.queue, 'send');
    expect(await relay().runOnce()).toBe(0);
    expect(send).not.toHaveBeenCalled();
    expect(await outboxRows()).toBe(0);
    expect(await deferred([id])).toHaveLength(1);
  });

  it('moved later while deferred: not published at the old time, deferred again to the new one', async () => {
    const { ids } = await enqueueTonight(1);
    await timePasses(ids, 2);
    await p.db.pool.query(`UPDATE jobs.job SET run_after = now() + interval '5 hours' WHERE id = $1`, [ids[0]]);
    const send = vi.spyOn(p.queue, 'send');
    expect(await relay().runOnce()).toBe(0);
    expect(send).not.toHaveBeenCalled();
    const [row] = await deferred(ids);
    expect(row!.publish_after.getTime()).toBeGreaterThan(Date.now() + 4 * HOUR);
  });

  it('cancelled: its deferred publish goes with it', async () => {
    const { ids } = await enqueueTonight(1);
    await p.store.cancel(ids[0]!, 'test');
    expect(await deferred(ids)).toEqual([]);
  });

  it('a job due within 15 minutes still gets its message at once, delayed to its time', async () => {
    const send = vi.spyOn(p.queue, 'send');
    const [r] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'SOON', entries: 1 },
      runAt: new Date(Date.now() + 600_000),
    });
    await p.publisher.flush();
    expect(send).toHaveBeenCalledTimes(1);
    expect(send.mock.calls[0]![0][0]!.delaySeconds).toBeGreaterThan(595);
    expect(await deferred([r!.job.id])).toEqual([]);
  });

  it('relays in several processes at once publish each due job exactly once (real concurrent connections)', async () => {
    const { ids } = await enqueueTonight(250);
    await timePasses(ids, 60);
    const send = vi.spyOn(p.queue, 'send');
    const pools = [p.db.pool, p.db.newPool(), p.db.newPool()]; // closed with the database
    const sent = await Promise.all(pools.map((pool) => relay(pool).runOnce()));
    expect(sent.reduce((a, b) => a + b, 0)).toBe(250);
    const published = send.mock.calls.flatMap((c) => c[0].map((m) => JSON.parse(m.body).jobId as string));
    expect(published.sort()).toEqual([...ids].sort());
    expect(await deferred(ids)).toEqual([]);
  });

  it("100,000 jobs deferred for tomorrow: the relay's look for due ones, every second in every process, reads its index only", async () => {
    await p.db.pool.query(
      `INSERT INTO jobs.outbox_deferred (job_id, publish_after)
       SELECT gen_random_uuid(), now() + interval '1 day' + i * interval '1 second' FROM generate_series(1, 100000) i`,
    );
    await p.db.pool.query('ANALYZE jobs.outbox_deferred');
    // As a named statement runs after its fifth execution: the generic plan.
    const buffers = async () => {
      const c = await p.db.pool.connect();
      try {
        await c.query('BEGIN');
        await c.query('SET LOCAL plan_cache_mode = force_generic_plan');
        await c.query(`PREPARE undefer(int) AS ${SQL.outboxUndefer}`);
        const { rows } = await c.query('EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE undefer(100)');
        await c.query('ROLLBACK');
        await c.query('DEALLOCATE undefer'); // a prepared statement outlives the transaction
        expect(JSON.stringify(rows[0]['QUERY PLAN'])).not.toContain('Seq Scan');
        const plan = rows[0]['QUERY PLAN'][0].Plan;
        return plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
      } finally {
        c.release();
      }
    };
    expect(await buffers()).toBeLessThan(50); // none due
    await p.db.pool.query(
      `UPDATE jobs.outbox_deferred SET publish_after = now() - interval '1 minute' WHERE publish_after < now() + interval '1 day 5000 seconds'`,
    );
    // 5,000 due: one batch of 100 moved to the outbox, by index (about a dozen buffers a row: the
    // lookup, the delete, the outbox row and its index), whatever the table holds.
    expect(await buffers()).toBeLessThan(2000);
  });
});
