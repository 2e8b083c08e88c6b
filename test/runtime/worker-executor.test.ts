// Executing one attempt (runtime/worker/executor.ts): the handler runs with its context, and the
// outcome is decided: succeeded (batched or with its transaction), failed, dead, or nothing once
// the lease is lost. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeaseLostError, NonRetryableError } from '../../runtime/domain/errors.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import * as z from 'zod';
import { defineJob, type JobContext } from '../../runtime/handlers/types.ts';
import { registerJobTypes } from '../../runtime/store/job-types.ts';
import { attemptsUsed } from '../../runtime/domain/job.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { INTERRUPTED_RELEASE_LIMIT } from '../../runtime/worker/completer.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';
import { claimOne, hold, setLease, workerUnits, type Units } from '../support/worker-units.ts';

const seen: { ctx: JobContext | null; checkpointErr: unknown } = { ctx: null, checkpointErr: null };
const jobs = [
  ledgerPost,
  defineJob<{ steps: number }, { steps: number }>({
    type: 'test.steps',
    description: 'reports progress and a checkpoint, writes nothing',
    parse: (p) => p as { steps: number },
    async run(p, ctx) {
      seen.ctx = ctx;
      ctx.progress(0.5, 'half');
      await ctx.saveCheckpoint({ step: 1 }, { fraction: 0.6 });
      return { steps: p.steps };
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.fatal',
    description: 'fails for good',
    parse: () => ({}),
    async run() {
      throw new NonRetryableError('period closed');
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.cut',
    description: "writes, then its transaction's connection is cut (as a failover's reset does)",
    parse: () => ({}),
    async run(_p, ctx) {
      await ctx.db.query('SELECT 1');
      await ctx.db.query('SELECT pg_terminate_backend(pg_backend_pid())');
      return null;
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.remote',
    description: 'its own statement fails with a connection error from elsewhere (dblink), on a live connection',
    parse: () => ({}),
    async run(_p, ctx) {
      await ctx.db.query("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '08006', MESSAGE = 'could not connect to the remote server'; END $$");
      return null;
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.standby',
    description: 'its statement reaches a read-only server (a connection that landed on a standby in a failover)',
    parse: () => ({}),
    async run(_p, ctx) {
      await ctx.db.query(
        "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '25006', MESSAGE = 'cannot execute INSERT in a read-only transaction'; END $$",
      );
      return null;
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.elsewhere',
    description: 'fails reaching a database of its own (not the job transaction)',
    parse: () => ({}),
    async run() {
      throw Object.assign(new Error('connect ECONNREFUSED 10.0.0.9:5432'), { code: 'ECONNREFUSED' });
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.zombie',
    description: 'saves a checkpoint after its lease was taken',
    parse: () => ({}),
    async run(_p, ctx) {
      try {
        await ctx.saveCheckpoint({ step: 9 });
      } catch (err) {
        seen.checkpointErr = err;
        throw err;
      }
      return null;
    },
  }),
];

let p: Platform;
let u: Units;
beforeEach(async () => {
  seen.ctx = null;
  seen.checkpointErr = null;
  p = await createPlatform({ registry: new JobRegistry(jobs) });
  u = workerUnits(p);
});
afterEach(async () => {
  await u.completer.drain();
  await u.messages.drain();
  await p.close();
});
const state = async (id: string) => (await p.store.get(id))!;

describe('executor', () => {
  it('a handler that writes nothing: its context carries the job, its slot frees before the batched completion, the job succeeds with its result and progress', async () => {
    const h = await claimOne(p, u, 'test.steps', { steps: 3 });
    await u.executor.execute(h);
    expect(seen.ctx!.job).toMatchObject({ id: h.job.id, type: 'test.steps', attempt: 1 });
    expect(u.freed).toEqual([h]);
    const done = await state(h.job.id);
    expect(done).toMatchObject({ state: 'succeeded', result: { steps: 3 }, checkpoint: { step: 1 }, progress: { fraction: 0.6 } });
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });

  it('a handler with effects: they commit with the completion in its own transaction', async () => {
    const h = await claimOne(p, u, 'ledger.post', { batch: 'X-1', entries: 4 });
    await u.executor.execute(h);
    expect(u.freed).toEqual([]);
    expect((await state(h.job.id)).state).toBe('succeeded');
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM ledger_entries WHERE batch = 'X-1'")).rows[0].n).toBe(4);
  });

  it('a throwing handler fails the attempt: back to pending with its error, its effects rolled back', async () => {
    const h = await claimOne(p, u, 'ledger.post', { batch: 'X-FAIL', entries: 2, failAttempts: 1 });
    await u.executor.execute(h);
    const after = await state(h.job.id);
    expect(after.state).toBe('pending');
    expect(after.lastError!.message).toMatch(/simulated failure of batch X-FAIL/);
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM ledger_entries WHERE batch = 'X-FAIL'")).rows[0].n).toBe(0);
  });

  it('a job of a type this worker lacks (a deploy half done) is handed on, not failed: pending, due as it was, no attempt spent, its message hidden a minute; a worker with the type runs it', async () => {
    const h = await claimOne(p, u, 'test.steps', { steps: 2 });
    const due = (await state(h.job.id)).runAfter;
    h.job = { ...h.job, type: 'test.newer' };
    await u.executor.execute(h);
    const after = await state(h.job.id);
    expect(after).toMatchObject({ state: 'pending', attempt: 1, releases: 1, lastError: null });
    expect(attemptsUsed(after)).toBe(0);
    expect(after.runAfter.getTime()).toBe(due.getTime());
    expect(after.attemptLog.at(-1)).toMatchObject({
      outcome: 'released',
      message: expect.stringMatching(
        /^no handler for job type "test\.newer" in worker .* \(known: .*test\.steps.*\): left for a worker that has it$/,
      ),
    });
    // Hidden for a minute, not dead-lettered, not deleted.
    expect(p.queue.depth()).toMatchObject({ visible: 0, inFlight: 1 });
    expect(p.dlq.depth().total).toBe(0);
    // A worker that has the type takes it: the attempt is its first.
    const [again] = await u.ctx.store.claim([h.job.id], u.ctx.workerId, u.ctx.opts.timings.leaseSeconds);
    expect(again!.attempt).toBe(2);
    await u.executor.execute(hold(u.ctx, again!, h.message));
    expect(await state(h.job.id)).toMatchObject({ state: 'succeeded', result: { steps: 2 } });
  });

  describe('a rolling deploy that adds a payload field: a worker still on the old image', () => {
    // Review finding: the old worker's strict schema refused the new field and the job ended dead
    // at once (a DLQ page, a re-enqueue by hand), for every job the new API accepted meanwhile.
    const newerImage = async () => {
      const newer = defineJob({ ...ledgerPost, schema: ledgerPost.schema.extend({ warehouse: z.string().optional() }) });
      await registerJobTypes(p.db.pool, new JobRegistry([newer]), { maxAttempts: 3 }, 'api-new-image');
    };

    it("hands on a job with a field the type's latest registration has: pending, no attempt spent, the field named; a worker that knows it runs the job", async () => {
      await newerImage();
      const h = await claimOne(p, u, 'ledger.post', { batch: 'X-NEW', entries: 2 }, 1);
      h.job = { ...h.job, payload: { batch: 'X-NEW', entries: 2, warehouse: 'W-7' } };
      await u.executor.execute(h);
      const after = await state(h.job.id);
      expect(after).toMatchObject({ state: 'pending', attempt: 1, releases: 1, lastError: null });
      expect(after.attemptLog.at(-1)).toMatchObject({
        outcome: 'released',
        message: expect.stringMatching(
          /^payload field\(s\) warehouse of "ledger\.post" are not known to worker .*: left for a worker that knows them$/,
        ),
      });
      expect(p.dlq.depth().total).toBe(0);
      // Its one attempt is still there for the new image's worker.
      expect((await u.ctx.store.claim([h.job.id], 'new-image-worker', 30)).map((j) => j.attempt)).toEqual([2]);
    });

    it('a field no registration has (a misspelling, enqueued through SQL) still ends the job dead at once, the field named', async () => {
      await newerImage();
      const h = await claimOne(p, u, 'ledger.post', { batch: 'X-TYPO', entries: 2 });
      h.job = { ...h.job, payload: { batch: 'X-TYPO', entries: 2, warehous: 'W-7' } };
      await u.executor.execute(h);
      expect(await state(h.job.id)).toMatchObject({ state: 'dead', lastError: { message: /payload\.warehous: is not a field/ } });
    });

    it('a known field that is wrong, beside the new one, ends the job dead at once as before', async () => {
      await newerImage();
      const h = await claimOne(p, u, 'ledger.post', { batch: 'X-BAD', entries: 2 });
      h.job = { ...h.job, payload: { batch: 'X-BAD', entries: -1, warehouse: 'W-7' } };
      await u.executor.execute(h);
      expect((await state(h.job.id)).state).toBe('dead');
    });
  });

  it('a job of an unknown type whose message SQS would redrive at its next receive gets a fresh message instead', async () => {
    const h = await claimOne(p, u, 'test.steps', { steps: 1 });
    h.job = { ...h.job, type: 'test.newer' };
    h.message = { ...h.message, receiveCount: u.ctx.opts.timings.maxReceiveCount };
    await u.executor.execute(h);
    await u.messages.drain();
    expect((await state(h.job.id)).state).toBe('pending');
    // The old message deleted, a fresh one (receive count 0) on its way, delayed.
    await waitFor(() => p.queue.peek().length === 1 && p.queue.peek()[0]!.receiveCount === 0, 5000, 'a fresh message');
    expect(p.dlq.depth().total).toBe(0);
  });

  it('an attempt whose own transaction lost its connection is released, not counted: a job on its last attempt runs again', async () => {
    const h = await claimOne(p, u, 'test.cut', {}, 1);
    await u.executor.execute(h);
    const after = await state(h.job.id);
    expect(after).toMatchObject({ state: 'pending', attempt: 1, releases: 1, lastError: null });
    expect(after.attemptLog.at(-1)).toMatchObject({
      outcome: 'released',
      message: expect.stringMatching(/lost the job's database connection/),
    });
    expect(p.metrics.get(METRIC.jobsFailed) ?? 0).toBe(0);
    // Claimable at once, its one attempt still to use.
    expect((await u.ctx.store.claim([h.job.id], 'next-worker', 30)).map((j) => j.attempt)).toEqual([2]);
  });

  it("a read-only server (a connection that reached a standby in a failover) is the outage's too, though its ROLLBACK answers: released, not counted", async () => {
    const h = await claimOne(p, u, 'test.standby', {}, 1);
    await u.executor.execute(h);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', attempt: 1, releases: 1, lastError: null });
  });

  it("a connection error from elsewhere (a database of the handler's own) fails the attempt as any error: counted, with its backoff", async () => {
    const h = await claimOne(p, u, 'test.elsewhere', {});
    await u.executor.execute(h);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', attempt: 1, releases: 0, lastError: { message: /ECONNREFUSED/ } });
  });

  it('a connection error on a connection that still answers (a dblink query, say) fails the attempt as any error', async () => {
    // Review finding: class 08 from the handler's own statement read as a lost connection, and the attempt ran again at once, uncounted.
    const h = await claimOne(p, u, 'test.remote', {});
    await u.executor.execute(h);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', attempt: 1, releases: 0, lastError: { message: /remote server/ } });
  });

  it(`a job whose attempts lost their connection ${INTERRUPTED_RELEASE_LIMIT} times: the next one counts (a handler that keeps cutting its connection ends at its cap), however often it was released otherwise; a redrive starts the count again`, async () => {
    const h = await claimOne(p, u, 'test.cut', {}, 1);
    // Released for other reasons (deploys): these do not count toward the limit (review finding).
    await p.db.pool.query('UPDATE jobs.job SET releases = releases + 7, attempt = attempt + 7 WHERE id = $1', [h.job.id]);
    let held = hold(u.ctx, { ...h.job, attempt: 8, releases: 7 }, h.message);
    for (let i = 0; i < INTERRUPTED_RELEASE_LIMIT; i++) {
      await u.executor.execute(held);
      expect(await state(h.job.id)).toMatchObject({ state: 'pending' });
      const [again] = await u.ctx.store.claim([h.job.id], u.ctx.workerId, 30);
      held = hold(u.ctx, again!, h.message);
    }
    await u.executor.execute(held);
    const after = await state(h.job.id);
    expect(after).toMatchObject({ state: 'dead', lastError: { message: /terminating connection/ } });
    expect(after.attemptLog.filter((a) => a.outcome === 'released')).toHaveLength(INTERRUPTED_RELEASE_LIMIT);

    // Redriven with one attempt (a probe): a fresh budget of these releases too, so the next
    // interruption does not spend that one attempt.
    const r = await new DeadJobService(p.db.pool, p.publisher).redrive({ ids: [h.job.id], by: 'oncall', maxAttempts: 1 });
    expect(r.jobs.map((j) => j.id)).toEqual([h.job.id]);
    const [redriven] = await u.ctx.store.claim([h.job.id], u.ctx.workerId, 30);
    await u.executor.execute(hold(u.ctx, redriven!, h.message));
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', releases: redriven!.releases + 1 });
  });

  it('a non-retryable error or a bad payload: dead after one attempt', async () => {
    const fatal = await claimOne(p, u, 'test.fatal', {});
    await u.executor.execute(fatal);
    expect(await state(fatal.job.id)).toMatchObject({ state: 'dead', lastError: { message: 'period closed', retryable: false } });

    const bad = await claimOne(p, u, 'ledger.post', { batch: 'X-BAD', entries: 1 });
    bad.job = { ...bad.job, payload: { entries: 'many' } };
    await u.executor.execute(bad);
    expect((await state(bad.job.id)).state).toBe('dead');
  });

  it('a job whose lease is lost or which was released before it ran: the handler never runs', async () => {
    const h = await claimOne(p, u, 'test.steps', { steps: 1 });
    h.lost = true;
    await u.executor.execute(h);
    expect(seen.ctx).toBeNull();
    expect((await state(h.job.id)).state).toBe('running');
  });

  it('a checkpoint refused by the fence is a lost lease: the handler sees LeaseLostError and the worker neither completes nor fails the job', async () => {
    const h = await claimOne(p, u, 'test.zombie', {});
    await setLease(p, h.job.id, -1);
    await p.store.claim([h.job.id], 'thief', 30);
    await u.executor.execute(h);
    expect(seen.checkpointErr).toBeInstanceOf(LeaseLostError);
    expect(h.lost).toBe(true);
    expect(await state(h.job.id)).toMatchObject({ state: 'running', attempt: 2, leaseOwner: 'thief', checkpoint: null });
  });
});
