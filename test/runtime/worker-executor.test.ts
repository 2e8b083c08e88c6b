// Executing one attempt (runtime/worker/executor.ts): the handler runs with its context, and the
// outcome is decided: succeeded (batched or with its transaction), failed, dead, or nothing once
// the lease is lost. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeaseLostError, NonRetryableError } from '../../runtime/domain/errors.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob, type JobContext } from '../../runtime/handlers/types.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { claimOne, setLease, workerUnits, type Units } from '../support/worker-units.ts';

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

  it('a non-retryable error, an unknown type or a bad payload: dead after one attempt', async () => {
    const fatal = await claimOne(p, u, 'test.fatal', {});
    await u.executor.execute(fatal);
    expect(await state(fatal.job.id)).toMatchObject({ state: 'dead', lastError: { message: 'period closed', retryable: false } });

    const bad = await claimOne(p, u, 'ledger.post', { batch: 'X-BAD', entries: 1 });
    bad.job = { ...bad.job, payload: { entries: 'many' } };
    await u.executor.execute(bad);
    expect((await state(bad.job.id)).state).toBe('dead');

    const unknown = await claimOne(p, u, 'test.steps', { steps: 1 });
    unknown.job = { ...unknown.job, type: 'test.gone' };
    await u.executor.execute(unknown);
    expect((await state(unknown.job.id)).lastError!.message).toMatch(/^no handler for job type "test.gone" in this worker \(known: /);
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
