// The test kit (erp-jobs/testing) does what its README section promises, beyond the example
// (test/examples/testing-your-handler.test.ts): each outcome of runOnce, a dead job on its final
// attempt after a crash, what the kit refuses and says, what an ERP transaction enqueued, and a
// close that leaves no database, pool or timer behind.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestKit, NonRetryableError, type TestKit } from 'erp-jobs/testing';
import { defineJob } from '../../runtime/handlers/types.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';

const broken = defineJob<{ why: string }, never>({
  type: 'test.broken',
  description: 'always fails, without retry when asked',
  parse: (p) => p as { why: string },
  async run(p) {
    throw p.why === 'final' ? new NonRetryableError('cannot ever work') : new Error('transient');
  },
});

/** test.deaf: after its first checkpoint, waits on nothing it will ever get, ignoring its signal. */
const deaf = defineJob<Record<string, never>, null, { step: number }>({
  type: 'test.deaf',
  description: 'ignores its abort signal',
  parse: () => ({}),
  async run(_p, ctx) {
    await ctx.saveCheckpoint({ step: 1 }).catch(() => undefined);
    await new Promise<void>(() => undefined);
    return null;
  },
});

/** test.ddl: changes a table's definition through ctx.db, which the services' role may not do. */
const ddl = defineJob<Record<string, never>, null>({
  type: 'test.ddl',
  description: 'alters a table',
  parse: () => ({}),
  async run(_p, ctx) {
    await ctx.db.query('ALTER TABLE ledger_entries ADD COLUMN IF NOT EXISTS note text');
    return null;
  },
});

let kit: TestKit;
beforeAll(async () => {
  kit = await createTestKit({ jobs: [ledgerPost, broken, deaf, ddl], timings: { maxAttempts: 2 } });
});
afterAll(() => kit?.close());

const lines = async (batch: string) => (await kit.pool.query('SELECT 1 FROM ledger_entries WHERE batch = $1', [batch])).rowCount;
const dlqBodies = () => kit.dlq.peek().map((m) => JSON.parse(m.body) as { jobId: string; reason: string });

describe('test kit', () => {
  it('runOnce: succeeded, a retry run at once despite its backoff, dead at the cap (and on the DLQ), dead when non-retryable', async () => {
    const ok = await kit.enqueue('ledger.post', { batch: 'K-1', entries: 4 });
    expect(await kit.runOnce(ok)).toMatchObject({ state: 'succeeded', attempt: 1, result: { posted: 4 } });
    expect(await lines('K-1')).toBe(4);

    const flaky = await kit.enqueue('test.broken', { why: 'transient' });
    const retry = await kit.runOnce(flaky.id);
    expect(retry).toMatchObject({ state: 'pending', lastError: { message: 'transient' } });
    expect(retry.runAfter.getTime()).toBeGreaterThan(Date.now()); // a backoff was scheduled…
    const dead = await kit.runOnce(flaky); // …and runOnce does not wait for it
    expect(dead).toMatchObject({ state: 'dead', attempt: 2 });
    expect((await kit.attemptLog(flaky)).map((a) => a.outcome)).toEqual(['retry', 'dead']);
    expect(dlqBodies()).toContainEqual(expect.objectContaining({ jobId: flaky.id, reason: 'attempts-exhausted' }));

    const final = await kit.enqueue('test.broken', { why: 'final' });
    expect(await kit.runOnce(final)).toMatchObject({ state: 'dead', attempt: 1, lastError: { name: 'NonRetryableError' } });
    await expect(kit.runOnce(final)).rejects.toThrow(`job ${final.id} is dead: it has no attempt left to run`);
  });

  it('a crash on the final attempt: reclaim sends the job to dead with its reason on the DLQ', async () => {
    const job = await kit.enqueue('ledger.post', { batch: 'K-2', entries: 2 }, { maxAttempts: 1 });
    const a = await kit.start(job, { pauseAt: 'end' }); // rows written, completion not committed
    await a.crash();
    expect(await kit.job(job.id)).toMatchObject({ state: 'running', attempt: 1 }); // the lease has not run out yet
    await expect(kit.runOnce(job)).rejects.toThrow(/live lease held by .*kit\.reclaim\(\)/);
    const moved = await kit.reclaim();
    expect(moved.map((j) => [j.id, j.state])).toEqual([[job.id, 'dead']]);
    expect(dlqBodies()).toContainEqual(expect.objectContaining({ jobId: job.id, reason: 'lease-expired-final-attempt' }));
    expect(await lines('K-2')).toBe(0);
  });

  it('handlers run as the services do when deployed, with row access only: one that alters a table fails here as in AWS, while the test itself may', async () => {
    // Newcomer review: the kit ran handlers as the database's owner, so this handler passed its
    // test and then went dead in `npm start` (must be owner of table).
    const job = await kit.enqueue('test.ddl', {});
    expect(await kit.runOnce(job)).toMatchObject({
      state: 'pending',
      lastError: { message: expect.stringMatching(/must be owner of table ledger_entries/) },
    });
    await kit.pool.query('ALTER TABLE ledger_entries ADD COLUMN IF NOT EXISTS note text'); // the test's own pool: the owner
  });

  it('a crash under a handler that ignores its abort signal fails the test with the job named, instead of hanging it', async () => {
    const job = await kit.enqueue('test.deaf', {});
    const a = await kit.start(job, { pauseAt: { checkpoint: 1 } });
    await expect(a.crash()).rejects.toThrow(
      new RegExp(
        `handlers still running 2 s after their abort signal: test\\.deaf ${job.id}\\. A handler must stop when ctx\\.signal fires`,
      ),
    );
    // As after a SIGKILL: its lease runs out at reclaim and the job goes back for another attempt.
    expect((await kit.reclaim()).map((j) => [j.id, j.state])).toEqual([[job.id, 'pending']]);
  });

  it('a zombie of a single-transaction handler: its completion is refused and its rows rolled back', async () => {
    const job = await kit.enqueue('ledger.post', { batch: 'K-3', entries: 5 });
    const zombie = await kit.start(job, { pauseAt: 'end' });
    zombie.freeze();
    expect(await kit.reclaim()).toHaveLength(1);
    expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded', attempt: 2 });
    const end = await zombie.resume();
    expect(end.error).toBeUndefined(); // the handler had returned: the fence refused its completion
    expect(end.job).toMatchObject({ state: 'succeeded', attempt: 2 });
    expect(await lines('K-3')).toBe(5);
  });

  it('says so when the handler never reaches the point', async () => {
    const job = await kit.enqueue('ledger.post', { batch: 'K-4', entries: 1 });
    await expect(kit.start(job, { pauseAt: { checkpoint: 1 } })).rejects.toThrow(
      `job ${job.id}'s attempt ended (succeeded) without reaching checkpoint 1`,
    );
  });

  it('what an ERP transaction enqueued since a mark: committed jobs only, with their outbox row until published', async () => {
    const mark = await kit.mark();
    const tx = await kit.pool.connect();
    try {
      await tx.query('BEGIN');
      await kit.client.enqueue(tx, { type: 'ledger.post', payload: { batch: 'K-5', entries: 1 } });
      await tx.query('ROLLBACK');
      await tx.query('BEGIN');
      const { afterCommit } = await kit.client.enqueue(tx, [
        { type: 'ledger.post', payload: { batch: 'K-6', entries: 1 } },
        { type: 'ledger.post', payload: { batch: 'K-7', entries: 1 } },
      ]);
      await tx.query('COMMIT');
      const before = await kit.enqueuedSince(mark);
      expect(before.map((j) => [j.payload, j.inOutbox])).toEqual([
        [{ batch: 'K-6', entries: 1, workMs: 0, failAttempts: 0, workAfterWriteMs: 0 }, true],
        [{ batch: 'K-7', entries: 1, workMs: 0, failAttempts: 0, workAfterWriteMs: 0 }, true],
      ]);
      await afterCommit();
    } finally {
      tx.release();
    }
  });
});

describe('test kit start', () => {
  it("with the local stack's row-access role exported as DATABASE_URL, says so and what to run instead", async () => {
    const adminUrl = inject('pgAdminUrl');
    const admin = new pg.Client({ connectionString: adminUrl });
    admin.on('error', () => undefined);
    await admin.connect();
    const role = `kit_rowonly_${process.pid}`;
    const saved = process.env.DATABASE_URL;
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rowonly' NOCREATEDB`);
      const u = new URL(adminUrl);
      u.username = role;
      u.password = 'rowonly';
      process.env.DATABASE_URL = u.toString();
      const err = await createTestKit({ jobs: [ledgerPost], databaseUrl: u.toString() }).catch((e: unknown) => e);
      expect((err as Error).message).toBe(
        `the test kit creates a database of its own, and ${role} (from DATABASE_URL) may not create databases. If this shell exported .jobs-local/env, DATABASE_URL is the local stack's row-access role: unset it (the kit then uses an embedded PostgreSQL of its own) or run the tests with DATABASE_URL="$DATABASE_ADMIN_URL".`,
      );
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = saved;
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });
});

describe('test kit close', () => {
  it('drops its database and ends its pools, with an attempt still paused', async () => {
    const other = await createTestKit({ jobs: [ledgerPost] });
    const job = await other.enqueue('ledger.post', { batch: 'K-8', entries: 1 });
    await other.start(job, { pauseAt: 'start' });
    const name = new URL(other.databaseUrl).pathname.slice(1);
    await other.close();
    expect(other.pool.ended).toBe(true);
    const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
    admin.on('error', () => undefined);
    await admin.connect();
    try {
      expect((await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount).toBe(0);
    } finally {
      await admin.end();
    }
  });
});
