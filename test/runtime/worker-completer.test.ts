// Completing (runtime/worker/completer.ts): batched completion, failure with backoff, the cap and
// the DLQ, the fresh message before SQS would redrive, and release on a graceful stop; every
// write fenced by the lease token. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { JobTransaction } from '../../runtime/worker/job-transaction.ts';
import { createPlatform, FAST_TIMINGS, type Platform, waitFor } from '../support/platform.ts';
import { claimOne, setLease, workerUnits, type Units } from '../support/worker-units.ts';

let p: Platform;
let u: Units;
const events: string[] = [];
beforeEach(async () => {
  events.length = 0;
  p = await createPlatform();
  u = workerUnits(p, { onEvent: (e) => events.push(e.kind), random: () => 0.5 });
});
afterEach(async () => {
  await u.completer.drain();
  await u.messages.drain();
  await p.close();
});
const state = async (id: string) => (await p.store.get(id))!;
const ledger = (batch: string, maxAttempts?: number) => claimOne(p, u, 'ledger.post', { batch, entries: 1 }, maxAttempts);
const noTx = () => new JobTransaction(p.db.pool);

describe('completer: success', () => {
  it('jobs that wrote nothing complete together in one statement; their slots free first', async () => {
    const a = await ledger('C-A');
    const b = await ledger('C-B');
    const many = vi.spyOn(u.ctx.store, 'completeMany');
    const done = await Promise.all([u.completer.commit(a, noTx(), { ok: 'a' }), u.completer.commit(b, noTx(), { ok: 'b' })]);
    expect(done).toEqual([true, true]);
    expect(many).toHaveBeenCalledTimes(1);
    expect(u.freed).toEqual([a, b]);
    expect(await state(a.job.id)).toMatchObject({ state: 'succeeded', result: { ok: 'a' } });
    u.completer.succeeded(a, silentLogger);
    expect(events).toEqual(['succeeded']);
    expect(p.metrics.get(METRIC.jobsSucceeded)).toBe(1);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(1);
  });

  it('a completion after another worker reclaimed the job is refused (false), and changes nothing', async () => {
    const h = await ledger('C-LATE');
    await setLease(p, h.job.id, -1);
    await p.store.claim([h.job.id], 'thief', 30);
    expect(await u.completer.commit(h, noTx(), null)).toBe(false);
    expect(await state(h.job.id)).toMatchObject({ state: 'running', attempt: 2 });
  });
});

describe('completer: failure', () => {
  it('a retryable failure: pending after a backoff, the message hidden until then', async () => {
    const h = await ledger('C-RETRY', 3);
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    await u.completer.fail(h, new Error('ledger locked'), false, silentLogger);
    const after = await state(h.job.id);
    expect(after).toMatchObject({ state: 'pending', lastError: { message: 'ledger locked', retryable: true } });
    expect(after.runAfter.getTime()).toBeGreaterThan(Date.now() - 1000);
    expect(vis.mock.calls.map((c) => c[0])).toContainEqual([{ receipt: h.message.receipt, seconds: 1 }]);
    expect(events).toEqual(['retried']);
    expect(p.metrics.get(METRIC.jobsFailed)).toBe(1);
  });

  it('the last attempt: dead, reported to the DLQ with the reason, attempts and last owner, the message deleted', async () => {
    const h = await ledger('C-CAP', 1);
    await u.completer.fail(h, new Error('still locked'), false, silentLogger);
    expect((await state(h.job.id)).state).toBe('dead');
    expect(p.dlq.peek()).toMatchObject([
      {
        attributes: {
          Reason: 'attempts-exhausted',
          JobId: h.job.id,
          Attempts: '1',
          LastOwner: 'unit-worker',
          ErrorMessage: 'still locked',
          SourceMessageId: h.message.messageId,
        },
      },
    ]);
    expect(events).toEqual(['dead-lettered']);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });

  it('a non-retryable failure: dead at once, as non-retryable', async () => {
    const h = await ledger('C-FATAL', 5);
    await u.completer.fail(h, new Error('period closed'), true, silentLogger);
    expect(p.dlq.peek()[0]!.attributes.Reason).toBe('non-retryable');
  });

  it('a retry whose message is one receive from SQS redrive: a fresh message through the outbox, the old one deleted', async () => {
    const h = await ledger('C-NEAR', 5);
    h.message = { ...h.message, receiveCount: FAST_TIMINGS.maxReceiveCount - 1 };
    const publish = vi.spyOn(u.ctx.opts.publisher, 'publish');
    await u.completer.fail(h, new Error('flaky'), false, silentLogger);
    expect(publish).toHaveBeenCalledWith([expect.objectContaining({ jobId: h.job.id, runAfter: expect.any(Date) })]);
    await u.messages.drain();
    expect(p.queue.peek().every((m) => m.receiveCount === 0)).toBe(true);
  });

  it('a retry of a long attempt (its message 50 min old): a fresh message through the outbox, so the queue-age alarm does not count the attempts before', async () => {
    // Review: the retry rode on the same message, whose age (SQS counts it from its sending) then
    // held every earlier attempt's run and backoff: a long job's third attempt paged on-call.
    const h = await ledger('C-LONG', 5);
    h.message = { ...h.message, sentAt: Date.now() - 50 * 60_000 };
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    const publish = vi.spyOn(u.ctx.opts.publisher, 'publish');
    await u.completer.fail(h, new Error('lock timeout'), false, silentLogger);
    expect(vis).not.toHaveBeenCalled();
    expect(publish).toHaveBeenCalledWith([expect.objectContaining({ jobId: h.job.id, runAfter: expect.any(Date) })]);
    await u.messages.drain();
    expect(p.queue.peek()).toEqual([expect.objectContaining({ receiveCount: 0 })]);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', lastError: { message: 'lock timeout' } });
  });

  it('a failure after another worker reclaimed the job is a lost lease: nothing written', async () => {
    const h = await ledger('C-ZOMBIE', 5);
    await setLease(p, h.job.id, -1);
    await p.store.claim([h.job.id], 'thief', 30);
    await u.completer.fail(h, new Error('late'), false, silentLogger);
    expect(h.lost).toBe(true);
    // The thief's reclaim recorded the lease's expiry; the late failure wrote nothing over it.
    expect(await state(h.job.id)).toMatchObject({ state: 'running', attempt: 2, lastError: { name: 'LeaseExpired' } });
    // Said once the job row shows it was not a cancel (heartbeat.ts loseLease).
    await waitFor(() => events.length > 0, 2000, 'lease-lost event');
    expect(events).toEqual(['lease-lost']);
  });
});

describe('completer: release', () => {
  it('hands the jobs back (pending, the release not counted as an attempt), aborts their handlers, makes their messages visible at once', async () => {
    const h = await ledger('C-REL');
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    await u.completer.release([h]);
    expect(h.released).toBe(true);
    expect(h.abortReason).toBeInstanceOf(Error);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', releases: 1, leaseOwner: null });
    expect(vis.mock.calls.map((c) => c[0])).toContainEqual([{ receipt: h.message.receipt, seconds: 0 }]);
    expect(events).toEqual(['released']);
  });

  it('a released job whose message handle went stale gets a fresh message through the outbox', async () => {
    const h = await ledger('C-REL-STALE');
    h.receiptStale = true;
    const publish = vi.spyOn(u.ctx.opts.publisher, 'publish');
    await u.completer.release([h]);
    expect(publish).toHaveBeenCalledWith([expect.objectContaining({ jobId: h.job.id })]);
  });

  it('a released job whose message is 50 min old (a long part-run) gets a fresh message, so its next run does not age it further', async () => {
    // Review: released on a deploy 50 min into an hour-long run, the job ran again on the same
    // message, and the queue-age alarm (2 h) counted both runs.
    const h = await ledger('C-REL-OLD');
    h.message = { ...h.message, sentAt: Date.now() - 50 * 60_000 };
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    const publish = vi.spyOn(u.ctx.opts.publisher, 'publish');
    await u.completer.release([h]);
    expect(vis.mock.calls.map((c) => c[0])).not.toContainEqual([expect.objectContaining({ receipt: h.message.receipt })]);
    expect(publish).toHaveBeenCalledWith([expect.objectContaining({ jobId: h.job.id })]);
    await u.messages.drain();
    expect(p.queue.peek()).toEqual([expect.objectContaining({ receiveCount: 0 })]);
    expect(await state(h.job.id)).toMatchObject({ state: 'pending', releases: 1 });
  });
});
