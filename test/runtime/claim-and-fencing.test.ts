// DESIGN 1, 2, 3: the claim is one conditional UPDATE with exactly one winner, every claim is a
// new fencing token, and a worker whose job was reclaimed is refused at every write, its
// handler's effects rolled back with its refused completion.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobStore } from '../../runtime/store/job-store.ts';
import { JobTransaction } from '../../runtime/worker/job-transaction.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

async function enqueueLedger(p: Platform, batch: string, extra: Record<string, unknown> = {}, maxAttempts?: number) {
  const [r] = await p.client.enqueueNow({
    type: 'ledger.post',
    payload: { batch, entries: 5, ...extra },
    ...(maxAttempts ? { maxAttempts } : {}),
  });
  return r!.job;
}

const ledgerRows = async (p: Platform, batch: string) =>
  (await p.db.pool.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch = $1', [batch])).rows[0].n as number;

/** Pretend the lease ran out, without waiting for it. */
const expireLease = (p: Platform, id: string) =>
  p.db.pool.query("UPDATE jobs.job SET lease_expires_at = statement_timestamp() - interval '1 second' WHERE id = $1", [id]);

describe('claim', () => {
  let p: Platform;
  let claimers: JobStore[];
  beforeAll(async () => {
    p = await createPlatform();
    // 50 claimers, each with its own connection: real concurrent transactions.
    claimers = Array.from({ length: 50 }, () => new JobStore(p.db.newPool(1)));
    await Promise.all(claimers.map((c) => c.pool.query('SELECT 1')));
  });
  afterAll(() => p.close());

  it('50 concurrent claimers of one job: exactly one winner, every time (30 rounds)', async () => {
    for (let round = 0; round < 30; round++) {
      const job = await enqueueLedger(p, `B-CLAIM-${round}`);
      const results = await Promise.all(claimers.map((c, i) => c.claim([job.id], `w${i}`, 30)));
      const winners = results.flatMap((r, i) => (r.length ? [{ i, job: r[0]! }] : []));
      expect(winners, `round ${round}`).toHaveLength(1);
      expect(winners[0]!.job.attempt).toBe(1);
      const row = await p.store.get(job.id);
      expect(row!.leaseOwner).toBe(`w${winners[0]!.i}`);
      expect(row!.attempt).toBe(1);
    }
  });

  it('50 concurrent reclaimers of an expired lease: exactly one winner, attempt + 1', async () => {
    for (let round = 0; round < 10; round++) {
      const job = await enqueueLedger(p, `B-RECLAIM-${round}`);
      await p.store.claim([job.id], 'dead-worker', 30);
      await expireLease(p, job.id);
      const results = await Promise.all(claimers.map((c, i) => c.claim([job.id], `w${i}`, 30)));
      const winners = results.filter((r) => r.length === 1);
      expect(winners).toHaveLength(1);
      expect(winners[0]![0]!.attempt).toBe(2);
    }
  });

  it('claims a batch of received jobs in one statement and skips what is not claimable', async () => {
    const a = await enqueueLedger(p, 'B-BATCH-A');
    const b = await enqueueLedger(p, 'B-BATCH-B');
    const running = await enqueueLedger(p, 'B-BATCH-RUNNING');
    await p.store.claim([running.id], 'other', 30);
    const [later] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'B-LATER', entries: 1 },
      runAt: new Date(Date.now() + 60_000),
    });
    const cancelled = await enqueueLedger(p, 'B-BATCH-CANCELLED');
    await p.client.cancel(cancelled.id, 'test');
    const got = await p.store.claim(
      [a.id, b.id, running.id, later!.job.id, cancelled.id, '00000000-0000-4000-8000-000000000000'],
      'me',
      30,
    );
    expect(got.map((j) => j.id).sort()).toEqual([a.id, b.id].sort());
  });

  it('tells a reclaim (lease ran out, or rescued) from a first claim, a retry and a claim after a release', async () => {
    const first = await enqueueLedger(p, 'B-KIND-FIRST');
    const [c1] = await p.store.claim([first.id], 'w', 30);
    expect(c1).toMatchObject({ attempt: 1, reclaimed: false });
    expect(c1!.createdAt.getTime()).toBe(first.createdAt.getTime());

    await p.store.fail({ id: first.id, attempt: 1 }, { name: 'Error', message: 'boom', retryable: true }, 0, false);
    const [retry] = await p.store.claim([first.id], 'w', 30);
    expect(retry).toMatchObject({ attempt: 2, reclaimed: false });

    await p.store.release([{ id: first.id, attempt: 2 }], 'stopping');
    const [afterRelease] = await p.store.claim([first.id], 'w', 30);
    expect(afterRelease).toMatchObject({ attempt: 3, reclaimed: false });

    await expireLease(p, first.id);
    const [reclaim] = await p.store.claim([first.id], 'w2', 30);
    expect(reclaim).toMatchObject({ attempt: 4, reclaimed: true });

    const rescuedJob = await enqueueLedger(p, 'B-KIND-RESCUED');
    await p.store.claim([rescuedJob.id], 'w', 30);
    await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = statement_timestamp() - interval '1 hour' WHERE id = $1", [
      rescuedJob.id,
    ]);
    expect((await p.store.rescueExpired(60, 100)).map((r) => r.job.id)).toContain(rescuedJob.id);
    const [afterRescue] = await p.store.claim([rescuedJob.id], 'w', 30);
    expect(afterRescue).toMatchObject({ attempt: 2, reclaimed: true });
  });

  it('does not reclaim a job whose lease is still live', async () => {
    const job = await enqueueLedger(p, 'B-LIVE');
    await p.store.claim([job.id], 'owner', 30);
    expect(await p.store.claim([job.id], 'thief', 30)).toEqual([]);
  });

  it('does not reclaim an expired job with no attempts left; deadLetterExpired makes it dead with the reason', async () => {
    const job = await enqueueLedger(p, 'B-LAST', {}, 1);
    await p.store.claim([job.id], 'doomed-worker', 30);
    await expireLease(p, job.id);
    expect(await p.store.claim([job.id], 'w', 30)).toEqual([]);
    const [dead] = await p.store.deadLetterExpired([job.id]);
    expect(dead!.state).toBe('dead');
    expect(dead!.lastError!.message).toMatch(/lease expired on the final attempt \(worker doomed-worker/);
    expect(dead!.attemptLog.at(-1)).toMatchObject({ attempt: 1, owner: 'doomed-worker', outcome: 'dead' });
  });
});

describe('fencing: a worker whose job was reclaimed is refused at every write', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform();
  });
  afterAll(() => p.close());

  it("the first owner's late renewal, checkpoint, progress, completion and failure are all refused, and its ledger rows never appear", async () => {
    const job = await enqueueLedger(p, 'B-ZOMBIE');
    const storeA = new JobStore(p.db.newPool(3));
    const storeB = new JobStore(p.db.newPool(3));
    const [a] = await storeA.claim([job.id], 'worker-a', 30);
    expect(a!.attempt).toBe(1);
    // Worker A stops heartbeating (crash, GC pause, SIGSTOP); its lease expires.
    await expireLease(p, job.id);
    const [b] = await storeB.claim([job.id], 'worker-b', 30);
    expect(b!.attempt).toBe(2);

    const tokenA = { id: job.id, attempt: 1 };
    // A wakes up and tries every write it knows.
    expect(await storeA.renewLeases([{ ...tokenA, progress: { fraction: 0.5 } }], 30)).toEqual(new Set());
    expect(await storeA.checkpoint(tokenA, { at: 3 }, { fraction: 0.6 })).toBe(false);
    expect(await storeA.fail(tokenA, { name: 'Error', message: 'late', retryable: true }, 1, false)).toBeNull();
    expect(await storeA.release([tokenA], 'late')).toEqual(new Set());
    // Its handler wrote ledger rows in its job transaction; the fenced completion refuses, so they roll back.
    const txA = new JobTransaction(storeA.pool);
    await txA.query('INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, 5) g', [
      job.id,
      'B-ZOMBIE',
    ]);
    expect(await txA.commitWith((c) => storeA.complete(c, tokenA, { posted: 5 }))).toBe(false);
    expect(await ledgerRows(p, 'B-ZOMBIE')).toBe(0);

    // The row is exactly as B left it.
    const row = await p.store.get(job.id);
    expect(row).toMatchObject({ state: 'running', attempt: 2, leaseOwner: 'worker-b', checkpoint: null, progress: null });

    // B, the rightful owner, completes with its effects.
    const tokenB = { id: job.id, attempt: 2 };
    expect(await storeB.renewLeases([tokenB], 30)).toEqual(new Set([job.id]));
    const txB = new JobTransaction(storeB.pool);
    await txB.query('INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, 5) g', [
      job.id,
      'B-ZOMBIE',
    ]);
    expect(await txB.commitWith((c) => storeB.complete(c, tokenB, { posted: 5 }))).toBe(true);
    expect(await ledgerRows(p, 'B-ZOMBIE')).toBe(5);
    expect((await p.store.get(job.id))!.state).toBe('succeeded');
    // And A's completion after B's success is still refused.
    const txLate = new JobTransaction(storeA.pool);
    await txLate.query('INSERT INTO ledger_entries (job_id, batch, line_no) VALUES ($1, $2, 99)', [job.id, 'B-ZOMBIE']);
    expect(await txLate.commitWith((c) => storeA.complete(c, tokenA, {}))).toBe(false);
    expect(await ledgerRows(p, 'B-ZOMBIE')).toBe(5);
    await Promise.all([storeA.pool.end(), storeB.pool.end()]);
  });

  it('a batched completion completes the jobs still held and reports exactly the ones whose lease is lost', async () => {
    const held = await enqueueLedger(p, 'B-MANY-HELD');
    const retried = await enqueueLedger(p, 'B-MANY-RETRIED');
    const reclaimed = await enqueueLedger(p, 'B-MANY-RECLAIMED');
    const cancelled = await enqueueLedger(p, 'B-MANY-CANCELLED');
    for (const j of [held, retried, reclaimed, cancelled]) await p.store.claim([j.id], 'a', 30);
    await p.store.fail({ id: retried.id, attempt: 1 }, { name: 'Error', message: 'once', retryable: true }, 0, false);
    await p.store.claim([retried.id], 'a', 30);
    await expireLease(p, reclaimed.id);
    await p.store.claim([reclaimed.id], 'b', 30);
    await p.client.cancel(cancelled.id, 'ops');
    // Mixed attempts, one result, one progress report: every per-row lookup of the statement.
    const lost = await p.store.completeMany([
      { id: held.id, attempt: 1, result: { ok: true } },
      { id: retried.id, attempt: 2, result: null, progress: { fraction: 1, message: 'all posted' } },
      { id: reclaimed.id, attempt: 1, result: null },
      { id: cancelled.id, attempt: 1, result: null },
    ]);
    expect(lost).toEqual(new Set([reclaimed.id, cancelled.id]));
    expect(await p.store.get(held.id)).toMatchObject({ state: 'succeeded', result: { ok: true }, progress: null });
    expect(await p.store.get(retried.id)).toMatchObject({
      state: 'succeeded',
      attempt: 2,
      result: null,
      progress: { fraction: 1, message: 'all posted' },
    });
    expect(await p.store.get(reclaimed.id)).toMatchObject({ state: 'running', attempt: 2, leaseOwner: 'b' });
    expect((await p.store.get(cancelled.id))!.state).toBe('cancelled');

    // The usual batch: one attempt for all, nothing returned. A stale attempt among them is refused alone.
    const jobs = await Promise.all(['B-MANY-U1', 'B-MANY-U2', 'B-MANY-U3'].map((b) => enqueueLedger(p, b)));
    for (const j of jobs) await p.store.claim([j.id], 'a', 30);
    expect(await p.store.completeMany(jobs.map((j) => ({ id: j.id, attempt: 1, result: null })))).toEqual(new Set());
    for (const j of jobs) expect(await p.store.get(j.id)).toMatchObject({ state: 'succeeded', result: null });
    const again = await enqueueLedger(p, 'B-MANY-STALE');
    await p.store.claim([again.id], 'a', 30);
    expect(await p.store.completeMany([{ id: again.id, attempt: 7, result: null }])).toEqual(new Set([again.id]));
    expect((await p.store.get(again.id))!.state).toBe('running');
    await expect(
      p.store.completeMany([
        { id: again.id, attempt: 1, result: null },
        { id: again.id, attempt: 1, result: null },
      ]),
    ).rejects.toThrow(/twice/);
  });

  it('a completion racing a reclaim: exactly one of them wins, and effects exist only if the completion won', async () => {
    for (let round = 0; round < 20; round++) {
      const batch = `B-RACE-${round}`;
      const job = await enqueueLedger(p, batch);
      const storeA = new JobStore(p.db.newPool(2));
      const storeB = new JobStore(p.db.newPool(2));
      await storeA.claim([job.id], 'a', 30);
      await expireLease(p, job.id);
      const tx = new JobTransaction(storeA.pool);
      await tx.query('INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, 5) g', [job.id, batch]);
      const [completed, reclaimed] = await Promise.all([
        tx.commitWith((c) => storeA.complete(c, { id: job.id, attempt: 1 }, {})),
        storeB.claim([job.id], 'b', 30),
      ]);
      const row = await p.store.get(job.id);
      if (completed) {
        expect(reclaimed).toEqual([]);
        expect(row!.state).toBe('succeeded');
        expect(await ledgerRows(p, batch)).toBe(5);
      } else {
        expect(reclaimed).toHaveLength(1);
        expect(row).toMatchObject({ state: 'running', attempt: 2 });
        expect(await ledgerRows(p, batch)).toBe(0);
      }
      await Promise.all([storeA.pool.end(), storeB.pool.end()]);
    }
  });

  it("a cancelled job refuses its owner's completion", async () => {
    const job = await enqueueLedger(p, 'B-CANCEL-RUNNING');
    await p.store.claim([job.id], 'w', 30);
    const cancelled = await p.client.cancel(job.id, 'controller@store-12');
    expect(cancelled).toMatchObject({ cancelled: true, job: { state: 'cancelled', cancelledBy: 'controller@store-12' } });
    const tx = new JobTransaction(p.db.pool);
    await tx.query('INSERT INTO ledger_entries (job_id, batch, line_no) VALUES ($1, $2, 1)', [job.id, 'B-CANCEL-RUNNING']);
    expect(await tx.commitWith((c) => p.store.complete(c, { id: job.id, attempt: 1 }, {}))).toBe(false);
    expect(await ledgerRows(p, 'B-CANCEL-RUNNING')).toBe(0);
    // Cancelling again reports the job as it ended.
    expect(await p.client.cancel(job.id, 'someone')).toMatchObject({ cancelled: false, job: { state: 'cancelled' } });
    expect(await p.client.cancel('00000000-0000-4000-8000-000000000000', 'x')).toBeNull();
  });
});
