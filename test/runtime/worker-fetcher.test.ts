// Fetching (runtime/worker/fetcher.ts): one claim for a received batch, duplicates in one receive,
// and every way a message it could not claim is settled by its job row; the receive loop's
// database gate. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import { OutboxRelay } from '../../runtime/store/outbox-relay.ts';
import { LostClaims } from '../../runtime/worker/lost-claims.ts';
import { createPlatform, FAST_TIMINGS, waitFor, type Platform } from '../support/platform.ts';
import { deliver, receiveFor, setLease, workerUnits, type Units } from '../support/worker-units.ts';

let p: Platform;
let u: Units;
beforeEach(async () => {
  p = await createPlatform();
  u = workerUnits(p);
});
afterEach(async () => {
  u.ctx.stopping = true;
  u.ctx.stopAc.abort();
  await u.messages.drain();
  await p.close();
});

async function enqueue(batch: string, extra: { maxAttempts?: number; runAt?: Date } = {}) {
  const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch, entries: 1 }, ...extra });
  return r!.job;
}
const state = async (id: string) => (await p.store.get(id))!;
const visibility = () => vi.spyOn(p.queue, 'changeVisibility');
const dlq = () => p.dlq.peek();

describe('fetcher: claiming a received batch', () => {
  it('claims every job of a batch in one statement and hands each to the coordinator once; a second copy in the same receive is deleted', async () => {
    const a = await enqueue('F-A');
    const b = await enqueue('F-B');
    await p.queue.send([{ body: jobMessageBody(a.id, 'ledger.post') }]);
    const claim = vi.spyOn(u.ctx.store, 'claim');
    const got = await p.queue.receive(10, 0.5);
    expect(got).toHaveLength(3);
    await u.fetcher.handleBatch(got);
    expect(claim).toHaveBeenCalledTimes(1);
    expect(u.started.map((h) => h.job.id).sort()).toEqual([a.id, b.id].sort());
    expect(u.started.every((h) => h.job.attempt === 1)).toBe(true);
    expect((await state(a.id)).leaseOwner).toBe('unit-worker');
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(2);
  });

  it('an unparseable body is dead-lettered as unparseable-body and deleted', async () => {
    await p.queue.send([{ body: 'not json' }]);
    await u.fetcher.handleBatch(await p.queue.receive(10, 0.5));
    expect(dlq()).toMatchObject([{ body: 'not json', attributes: { Reason: 'unparseable-body', WorkerId: 'unit-worker' } }]);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });
});

describe('fetcher: settling a message whose job it could not claim, by the job row', () => {
  it('no such job: dead-lettered as unknown-job with the job id', async () => {
    const id = '01900000-0000-7000-8000-000000000001';
    await u.fetcher.handleBatch([await deliver(p, id)]);
    expect(dlq()).toMatchObject([{ attributes: { Reason: 'unknown-job', JobId: id, Detail: `no job ${id} in the job table` } }]);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });

  it('a terminal job: its message is a leftover, deleted', async () => {
    const job = await enqueue('F-DONE');
    await p.db.pool.query("UPDATE jobs.job SET state = 'cancelled', finished_at = now(), cancelled_by = 'test' WHERE id = $1", [job.id]);
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
    expect(u.started).toEqual([]);
  });

  it('a pending job not yet due: hidden until due', async () => {
    const job = await enqueue('F-LATER', { runAt: new Date(Date.now() + 120_000) });
    await p.queue.send([{ body: jobMessageBody(job.id, 'ledger.post') }]);
    const spy = visibility();
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    const seconds = spy.mock.calls.at(-1)![0][0]!.seconds;
    expect(seconds).toBeGreaterThan(110);
    expect(seconds).toBeLessThanOrEqual(121);
  });

  it('a pending job due in 2 hours: its publish is deferred until 15 min before (no message meanwhile), and this message deleted', async () => {
    // Review: the message was hidden up to 12 h, and SQS's oldest-message age (the queue-age alarm,
    // 2 h in prod) counts a message from its sending: every job enqueued for tonight paged on-call.
    // Then a fresh message every 15 min: a receive, a claim, a send and a delete per job per quarter-hour.
    const runAt = new Date(Date.now() + 2 * 3_600_000);
    const job = await enqueue('F-TONIGHT', { runAt });
    await p.queue.send([{ body: jobMessageBody(job.id, 'ledger.post') }]); // a message from before the deferral (or a re-publish)
    const spy = visibility();
    const send = vi.spyOn(p.queue, 'send');
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    await new OutboxRelay(p.db.pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 }).runOnce();
    expect(spy).not.toHaveBeenCalled();
    expect(send).not.toHaveBeenCalled();
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
    const { rows } = await p.db.pool.query('SELECT publish_after FROM jobs.outbox_deferred WHERE job_id = $1', [job.id]);
    expect(rows.map((r) => r.publish_after.getTime())).toEqual([runAt.getTime() - 900_000]);
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox')).rows[0].n).toBe(0);
  });

  it('a pending job due in a minute whose message is already 20 min old: replaced by a fresh one, not hidden again', async () => {
    const job = await enqueue('F-OLD', { runAt: new Date(Date.now() + 60_000) });
    await p.queue.send([{ body: jobMessageBody(job.id, 'ledger.post') }]);
    const m = await receiveFor(p, job.id);
    const spy = visibility();
    const send = vi.spyOn(p.queue, 'send');
    await u.fetcher.handleBatch([{ ...m, sentAt: Date.now() - 20 * 60_000 }]);
    expect(spy).not.toHaveBeenCalled();
    expect(send.mock.calls.map((c) => c[0])).toEqual([
      [{ body: jobMessageBody(job.id, 'ledger.post'), delaySeconds: expect.any(Number), lane: 'bulk' }],
    ]);
    expect(send.mock.calls[0]![0][0]!.delaySeconds).toBeLessThanOrEqual(61);
  });

  it('a pending job near its receive limit: re-published as a fresh message, the old one deleted', async () => {
    const job = await enqueue('F-NEAR', { runAt: new Date(Date.now() + 60_000) });
    await p.queue.send([{ body: jobMessageBody(job.id, 'ledger.post') }]);
    const m = await receiveFor(p, job.id);
    const send = vi.spyOn(p.queue, 'send');
    await u.fetcher.handleBatch([{ ...m, receiveCount: FAST_RECEIVE_LIMIT }]);
    expect(send.mock.calls.map((c) => c[0])).toEqual([
      [{ body: jobMessageBody(job.id, 'ledger.post'), delaySeconds: expect.any(Number), lane: 'bulk' }],
    ]);
    await u.messages.drain();
    expect(p.queue.peek().every((x) => x.receiveCount === 0)).toBe(true);
  });

  it('a running job with a live lease: a duplicate, deleted and counted', async () => {
    const job = await enqueue('F-LIVE');
    await p.store.claim([job.id], 'other-worker', 30);
    const events: string[] = [];
    u.ctx.opts.onEvent = (e) => events.push(`${e.kind}:${e.detail}`);
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    expect(events).toEqual(['duplicate-ignored:held by other-worker']);
    expect(p.metrics.get(METRIC.duplicateDeliveries)).toBe(1);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });

  it('a running job whose lease runs out within a heartbeat: hidden until just after it, to reclaim then', async () => {
    const job = await enqueue('F-EXPIRING');
    await p.store.claim([job.id], 'slow-worker', 30);
    await setLease(p, job.id, 0.4);
    const spy = visibility();
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    expect(spy.mock.calls.at(-1)![0]).toEqual([expect.objectContaining({ seconds: 1 })]);
    expect(p.metrics.get(METRIC.claimMisses)).toBe(1);
    expect(p.queue.depth().total).toBe(1);
  });

  it('the same, its message near the receive limit: a fresh message due just after the lease, the old one deleted, not a page from the DLQ', async () => {
    const job = await enqueue('F-EXPIRING-NEAR');
    await p.store.claim([job.id], 'slow-worker', 30);
    await setLease(p, job.id, 0.4);
    const m = await receiveFor(p, job.id);
    const send = vi.spyOn(p.queue, 'send');
    await u.fetcher.handleBatch([{ ...m, receiveCount: FAST_RECEIVE_LIMIT }]);
    expect(send.mock.calls.map((c) => c[0])).toEqual([[{ body: jobMessageBody(job.id, 'ledger.post'), delaySeconds: 1, lane: 'bulk' }]]);
    await u.messages.drain();
    expect(p.queue.peek().map((x) => x.receiveCount)).toEqual([0]);
    expect(p.dlq.peek()).toEqual([]);
  });

  it('a running job whose lease expired on its final attempt: dead, its reason in the DLQ, its message deleted', async () => {
    const job = await enqueue('F-LAST', { maxAttempts: 1 });
    await p.store.claim([job.id], 'doomed-worker', 30);
    await setLease(p, job.id, -1);
    await u.fetcher.handleBatch([await receiveFor(p, job.id)]);
    expect((await state(job.id)).state).toBe('dead');
    expect(dlq()).toMatchObject([{ attributes: { Reason: 'lease-expired-final-attempt', JobId: job.id, LastOwner: 'doomed-worker' } }]);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });
});

describe('fetcher: the first receive overlaps the start-up', () => {
  it('receives while the worker starts, claims nothing until it is ready, then claims what it received', async () => {
    const job = await enqueue('F-READY');
    const receive = vi.spyOn(p.queue, 'receive');
    const claim = vi.spyOn(u.ctx.store, 'claim');
    let ready!: () => void;
    const loop = u.fetcher.receiveLoop(new Promise<void>((r) => (ready = r)));
    await waitFor(() => receive.mock.results.length > 0, 2000, 'the first receive went out before the start-up ended');
    await new Promise((r) => setTimeout(r, 200));
    expect(claim).not.toHaveBeenCalled();
    expect(u.started).toEqual([]);
    ready();
    await waitFor(() => u.started.some((h) => h.job.id === job.id), 5000, 'claimed once started');
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
  });

  it('while it starts, one receive: a start-up held up does not hold a capacity of messages', async () => {
    for (let i = 0; i < 30; i++) await enqueue(`F-ONE-${i}`);
    const receive = vi.spyOn(p.queue, 'receive');
    let ready!: () => void;
    const loop = u.fetcher.receiveLoop(new Promise<void>((r) => (ready = r)));
    await waitFor(() => receive.mock.results.length > 0, 2000, 'received');
    expect(await (receive.mock.results[0]!.value as Promise<unknown[]>)).toHaveLength(10);
    await new Promise((r) => setTimeout(r, 300));
    expect(receive).toHaveBeenCalledTimes(1);
    ready();
    await waitFor(() => u.started.length >= 20, 5000, 'claimed once started, and received more');
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
  });

  it('a stop does not wait for a start-up that hangs (a statement a failover left without an answer)', async () => {
    const job = await enqueue('F-HUNG-START');
    const receive = vi.spyOn(p.queue, 'receive');
    const vis = visibility();
    const loop = u.fetcher.receiveLoop(new Promise<void>(() => undefined));
    await waitFor(() => receive.mock.results.length > 0, 2000, 'received');
    await (receive.mock.results[0]!.value as Promise<unknown>);
    await new Promise((r) => setTimeout(r, 100));
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
    await u.messages.drain();
    expect(vis.mock.calls.flatMap((c) => c[0].map((x) => x.seconds))).toEqual([0]);
    expect((await state(job.id)).state).toBe('pending');
  });

  it('stopped while starting: what was received goes back unclaimed, at once', async () => {
    const job = await enqueue('F-STOP-STARTING');
    const receive = vi.spyOn(p.queue, 'receive');
    const claim = vi.spyOn(u.ctx.store, 'claim');
    const vis = visibility();
    let ready!: () => void;
    const loop = u.fetcher.receiveLoop(new Promise<void>((r) => (ready = r)));
    await waitFor(() => receive.mock.results.length > 0, 2000, 'received');
    await (receive.mock.results[0]!.value as Promise<unknown>);
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    ready();
    await loop;
    await u.messages.drain();
    expect(claim).not.toHaveBeenCalled();
    expect(vis.mock.calls.flatMap((c) => c[0].map((x) => x.seconds))).toEqual([0]);
    expect((await state(job.id)).state).toBe('pending');
    expect(p.queue.depth()).toMatchObject({ visible: 1 });
  });
});

const FAST_RECEIVE_LIMIT = 9; // FAST_TIMINGS.maxReceiveCount - 1

describe('fetcher: the database gate', () => {
  it('receives nothing while the database is down, then claims what waited once it answers', async () => {
    const job = await enqueue('F-GATE');
    const pool = u.ctx.opts.pool;
    const query = pool.query.bind(pool);
    let down = true;
    vi.spyOn(pool, 'query').mockImplementation(((...a: Parameters<typeof query>) =>
      down
        ? Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))
        : query(...a)) as typeof pool.query);
    const receive = vi.spyOn(p.queue, 'receive');
    u.fetcher.databaseUnavailable(new Error('failover'));
    expect(p.metrics.get(METRIC.databaseUnavailable)).toBe(1);
    const loop = u.fetcher.receiveLoop();
    await new Promise((r) => setTimeout(r, 400));
    expect(receive).not.toHaveBeenCalled();
    down = false;
    await waitFor(() => u.started.some((h) => h.job.id === job.id), 5000, 'claimed after the database answered');
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
  });

  it('a claim failing as unavailable while the database still answers (a full disk, 53100): the gate closes, the messages go back, and it reopens later each time, so they do not race to the DLQ', async () => {
    // maxReceiveCount 10, visibility 3 s: with the gate reopening at once, each message was received
    // every round trip (about 30 times in 6 s, DLQ'd in under 2 s); without the gate, once per visibility timeout.
    const job = await enqueue('F-DISK');
    vi.spyOn(u.ctx.store, 'claim').mockRejectedValue(
      Object.assign(new Error('could not extend file: No space left on device'), { code: '53100' }),
    );
    const receive = vi.spyOn(p.queue, 'receive');
    const vis = visibility();
    const loop = u.fetcher.receiveLoop();
    await new Promise((r) => setTimeout(r, 6000));
    const received = receive.mock.results.length;
    // Handed back at once the first time, then hidden for the gate's hold: other workers do not turn them over either.
    const handedBack = vis.mock.calls.flatMap((c) => c[0].map((x) => x.seconds));
    expect(handedBack[0]).toBe(0);
    expect(Math.max(...handedBack)).toBeGreaterThanOrEqual(1);
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
    expect(p.metrics.get(METRIC.databaseUnavailable)).toBeGreaterThanOrEqual(2);
    expect(dlq()).toHaveLength(0);
    // Closed again at once after each opening: held 1, 2, 4 s (capped at the visibility timeout, 3 s).
    expect(received).toBeLessThanOrEqual(5);
    expect((await state(job.id)).state).toBe('pending');
  }, 15_000);

  it('a claim that committed but whose answer a reset lost: once the database answers, the job is released unstarted and claimed again at once, on its last attempt too, not left to a 60 s lease and the rescuer', async () => {
    // Before: the job sat running under a lease nobody renewed, its returning message deleted as a
    // duplicate of that lease, then the rescuer spent its only attempt: dead without having run.
    const w = workerUnits(p, { timings: { ...FAST_TIMINGS, leaseSeconds: 60 } }, 'lost-answer-worker');
    const job = await enqueue('F-LOST-ANSWER', { maxAttempts: 1 });
    const claim = w.ctx.store.claim.bind(w.ctx.store);
    vi.spyOn(w.ctx.store, 'claim').mockImplementationOnce(async (...a: Parameters<typeof claim>) => {
      await claim(...a);
      throw new Error('Connection terminated unexpectedly');
    });
    const loop = w.fetcher.receiveLoop();
    try {
      await waitFor(() => w.started.some((h) => h.job.id === job.id), 5000, 'claimed again after the release');
    } finally {
      w.ctx.stopping = true;
      w.ctx.stopAc.abort();
      await loop;
      await w.messages.drain();
    }
    expect(w.started.map((h) => [h.job.id, h.token.attempt])).toEqual([[job.id, 2]]);
    const row = await state(job.id);
    expect(row).toMatchObject({ state: 'running', attempt: 2, releases: 1, leaseOwner: 'lost-answer-worker' });
    expect(row.attemptLog).toEqual([
      expect.objectContaining({
        attempt: 1,
        owner: 'lost-answer-worker',
        outcome: 'released',
        message: expect.stringContaining('got no answer'),
      }),
    ]);
    expect(p.metrics.get(METRIC.databaseUnavailable)).toBe(1);
    expect(dlq()).toHaveLength(0);
  });

  it('releasing lost claims touches only the jobs still running under this worker, and queues a publish for each', async () => {
    const [mine, theirs, waiting, done] = await Promise.all(['L-MINE', 'L-THEIRS', 'L-WAITING', 'L-DONE'].map((b) => enqueue(b)));
    await u.ctx.store.claim([mine!.id, done!.id], 'me', 60);
    await u.ctx.store.claim([theirs!.id], 'someone-else', 60);
    await u.ctx.store.completeMany([{ id: done!.id, attempt: 1, result: null }]);
    expect((await state(done!.id)).state).toBe('succeeded');
    // Noted at attempt 1, claimed again by this same worker since (attempt 2): that attempt is not the noted one (review finding).
    const again = await enqueue('L-AGAIN');
    await u.ctx.store.claim([again!.id], 'me', 60);
    await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [again!.id]);
    expect((await u.ctx.store.claim([again!.id], 'me', 60)).map((j) => j.attempt)).toEqual([2]);
    const tokens: { id: string; attempt: number | null }[] = [mine!.id, theirs!.id, waiting!.id, done!.id].map((id) => ({
      id,
      attempt: null,
    }));
    tokens.push({ id: again!.id, attempt: 1 });
    const outbox = async () => Number((await p.db.pool.query('SELECT count(*) FROM jobs.outbox')).rows[0].count);
    // The enqueues' own outbox rows are deleted by their publisher 20 ms after it sent them: not during the count.
    await p.publisher.flush();
    const before = await outbox();
    const released = await u.ctx.store.releaseLostClaims(tokens, 'me', 'lost');
    expect(released.map((r) => r.id)).toEqual([mine!.id]);
    expect(await outbox()).toBe(before + 1);
    expect(await state(again!.id)).toMatchObject({ state: 'running', attempt: 2, leaseOwner: 'me' });
    expect(await state(mine!.id)).toMatchObject({ state: 'pending', releases: 1, leaseOwner: null });
    expect(await state(theirs!.id)).toMatchObject({ state: 'running', leaseOwner: 'someone-else' });
    expect((await state(waiting!.id)).state).toBe('pending');
    expect((await state(done!.id)).state).toBe('succeeded');
  });

  it('notes only the jobs of a claim statement that got no answer, never releases one this worker holds, and keeps what a claim failing meanwhile noted', async () => {
    const lost = new LostClaims(u.ctx);
    const [a, b, c, d] = await Promise.all(['N-A', 'N-B', 'N-C', 'N-D'].map((x) => enqueue(x)));
    const me = u.ctx.workerId;
    const reset = () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });
    // A statement that answered: nothing noted, whatever fails after it (its attempts are the worker's to settle).
    await lost.watch([a!.id], () => u.ctx.store.claim([a!.id], me, 60));
    // A statement refused for another reason took nothing: nothing noted.
    await expect(
      lost.watch([d!.id], () => Promise.reject(Object.assign(new Error('permission denied'), { code: '42501' }))),
    ).rejects.toThrow();
    expect(lost.pending).toBe(false);
    // One that committed and lost its answer: noted.
    await expect(
      lost.watch([b!.id, c!.id], async () => {
        await u.ctx.store.claim([b!.id, c!.id], me, 60);
        throw reset();
      }),
    ).rejects.toThrow('ECONNRESET');
    expect(lost.pending).toBe(true);
    // c is held by this worker (a later claim of it answered): not released.
    u.ctx.held.set(c!.id, {} as never);
    // A claim failing while the release runs notes d: kept for the next time.
    const store = u.ctx.store;
    const releaseLostClaims = store.releaseLostClaims.bind(store);
    vi.spyOn(store, 'releaseLostClaims').mockImplementationOnce(async (...x: Parameters<typeof releaseLostClaims>) => {
      await lost.watch([d!.id], () => Promise.reject(reset())).catch(() => undefined);
      return releaseLostClaims(...x);
    });
    const nudge = vi.spyOn(u.ctx.keyWake, 'nudge');
    expect(await lost.release()).toBeNull();
    u.ctx.held.delete(c!.id);
    expect(await state(b!.id)).toMatchObject({ state: 'pending', releases: 1 });
    // A release may free a key's or a type's slot: its next job is woken (review: the type's never was).
    expect(nudge).toHaveBeenCalled();
    expect(await state(c!.id)).toMatchObject({ state: 'running', leaseOwner: me });
    expect(await state(a!.id)).toMatchObject({ state: 'running', leaseOwner: me });
    expect(lost.pending).toBe(true);
    lost.forget(d!.id);
    expect(lost.pending).toBe(false);
  });

  it('a claim the database refuses while it answers (a grant revoked: 42501) is counted as ClaimsFailed, the alarm a person is paged by, not as an outage', async () => {
    const job = await enqueue('F-REVOKED');
    vi.spyOn(u.ctx.store, 'claim').mockRejectedValue(Object.assign(new Error('permission denied for table job'), { code: '42501' }));
    const loop = u.fetcher.receiveLoop();
    await waitFor(() => p.metrics.get(METRIC.claimsFailed) >= 1, 5000, 'counted');
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
    expect(p.metrics.get(METRIC.databaseUnavailable)).toBe(0);
    // Left to return after the visibility timeout; the row untouched.
    expect((await state(job.id)).state).toBe('pending');
  });

  it('a claim that got no answer in time (it may have committed) hides its messages for a lease instead of handing them back at once', async () => {
    // At once, a message would find the lease the late claim may have taken, live and unused, and be deleted as a duplicate.
    await enqueue('F-READ-TIMEOUT');
    vi.spyOn(u.ctx.store, 'claim').mockRejectedValueOnce(new Error('Query read timeout'));
    const vis = visibility();
    const loop = u.fetcher.receiveLoop();
    await waitFor(() => vis.mock.calls.length > 0, 5000, 'handed back');
    u.ctx.stopping = true;
    u.ctx.stopAc.abort();
    await loop;
    expect(vis.mock.calls[0]![0].map((x) => x.seconds)).toEqual([Math.ceil(u.ctx.opts.timings.leaseSeconds)]);
    expect(p.metrics.get(METRIC.databaseUnavailable)).toBe(1);
  });
});
