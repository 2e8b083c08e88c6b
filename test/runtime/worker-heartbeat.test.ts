// The heartbeat (runtime/worker/heartbeat.ts): one statement renews every lease this worker holds
// and carries their progress; the messages' visibility follows the lease; a lease the database
// refused, or one that ran out unrenewed, is lost and its handler aborted. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LeaseLostError } from '../../runtime/domain/errors.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { createPlatform, FAST_TIMINGS, waitFor, type Platform } from '../support/platform.ts';
import { claimOne, setLease, workerUnits, type Units } from '../support/worker-units.ts';

let p: Platform;
let u: Units;
const events: string[] = [];
beforeEach(async () => {
  events.length = 0;
  p = await createPlatform();
  u = workerUnits(p, { onEvent: (e) => events.push(`${e.kind}:${e.jobId}`) });
});
afterEach(async () => {
  await u.heartbeat.stop();
  await u.messages.drain();
  await p.close();
});
const state = async (id: string) => (await p.store.get(id))!;
const ledger = (batch: string) => claimOne(p, u, 'ledger.post', { batch, entries: 1 });

describe('heartbeat', () => {
  it('renews every held lease in one statement, writes the progress reported since, and extends each message to the lease', async () => {
    const a = await ledger('H-A');
    const b = await ledger('H-B');
    await setLease(p, a.job.id, 0.5);
    a.unsentProgress = a.lastProgress = { fraction: 0.25, message: 'a quarter' };
    const renew = vi.spyOn(u.ctx.store, 'renewLeases');
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    await u.heartbeat.tick();
    expect(renew).toHaveBeenCalledTimes(1);
    const after = await state(a.job.id);
    expect(after.leaseExpiresAt!.getTime()).toBeGreaterThan(Date.now() + 1000);
    expect(after.progress).toEqual({ fraction: 0.25, message: 'a quarter' });
    expect(a.unsentProgress).toBeNull();
    expect(vis.mock.calls.map((c) => c[0])).toContainEqual([
      { receipt: a.message.receipt, seconds: FAST_TIMINGS.leaseSeconds },
      { receipt: b.message.receipt, seconds: FAST_TIMINGS.leaseSeconds },
    ]);
    expect(events.sort()).toEqual([`lease-renewed:${a.job.id}`, `lease-renewed:${b.job.id}`].sort());
  });

  it('a lease another worker took: lost at the tick, the handler aborted with LeaseLostError, counted', async () => {
    const h = await ledger('H-LOST');
    const signal = (h.ac = new AbortController()).signal;
    await setLease(p, h.job.id, -1);
    await p.store.claim([h.job.id], 'thief', 30);
    await u.heartbeat.tick();
    expect(h.lost).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    // Counted once the job row says it is not a cancel.
    await waitFor(() => p.metrics.get(METRIC.leasesLost) === 1, 2000, 'counted');
    expect(events).toEqual([`lease-lost:${h.job.id}`]);
  });

  it('a lease not renewed for a whole lease (the database hung) is lost without asking the database', async () => {
    const h = await ledger('H-FENCE');
    h.lastRenewedAt = performance.now() - FAST_TIMINGS.leaseSeconds * 1000 - 100;
    u.heartbeat.fenceUnrenewed();
    expect(h.lost).toBe(true);
    expect(p.metrics.get(METRIC.leasesLost)).toBe(1); // at once: the database may not answer
    expect(h.abortReason).toBeInstanceOf(LeaseLostError);
    expect((h.abortReason as Error).message).toMatch(/the lease ran out before the database could renew it/);
  });

  it('a job claimed ahead whose lease ran out before it started is no lost lease: given up unstarted, and released with no attempt spent', async () => {
    // Review finding: counted and left to the rescuer, such a job on its last attempt died without having run.
    const running = await ledger('H-RUN');
    const ahead = await claimOne(p, u, 'ledger.post', { batch: 'H-AHEAD', entries: 1 }, 1);
    ahead.started = false;
    for (const h of [running, ahead]) h.lastRenewedAt = performance.now() - FAST_TIMINGS.leaseSeconds * 1000 - 100;
    u.heartbeat.fenceUnrenewed();
    expect(running.lost).toBe(true);
    expect(ahead).toMatchObject({ lost: false, released: true });
    expect(u.givenUpUnstarted).toEqual([ahead]);
    expect(p.metrics.get(METRIC.leasesLost)).toBe(1);
    // The worker releases it (completer.releaseUnstarted): pending, due now, its one attempt unspent.
    await u.completer.releaseUnstarted(u.givenUpUnstarted);
    expect(u.completer.lost.pending).toBe(false); // released now: nothing left for when the database answers
    expect(await state(ahead.job.id)).toMatchObject({ state: 'pending', attempt: 1, releases: 1, maxAttempts: 1 });
    expect((await p.store.claim([ahead.job.id], 'next-worker', 30)).map((j) => j.attempt)).toEqual([2]);
  });

  it('a step of the wall clock neither fences a healthy lease nor keeps an unrenewed one: the lease is timed on the monotonic clock', async () => {
    // Fault review: Date.now() timed the lease, so an NTP step or a resumed VM 30 s ahead
    // self-fenced every running job (the handler ran twice); a step back kept a lease this worker
    // had not renewed alive in its own eyes for that much longer.
    const h = await ledger('H-CLOCK');
    const wall = Date.now;
    const at = (offsetMs: number) => vi.spyOn(Date, 'now').mockImplementation(() => wall() + offsetMs);
    at(FAST_TIMINGS.leaseSeconds * 1000 * 10);
    u.heartbeat.fenceUnrenewed();
    expect(h.lost).toBe(false);
    vi.restoreAllMocks();
    h.lastRenewedAt = performance.now() - FAST_TIMINGS.leaseSeconds * 1000 - 100;
    at(-FAST_TIMINGS.leaseSeconds * 1000 * 10);
    u.heartbeat.fenceUnrenewed();
    expect(h.lost).toBe(true);
    vi.restoreAllMocks();
  });

  it('a renewal that reaches the database after the lease ran out renews nothing, and the job given up is claimable at once (attempt counted), its message visible', async () => {
    // Fault review, probe E: a renewal delayed past the lease (a slow pool, a stalled connection)
    // gave the job a fresh lease after this worker had aborted its handler; its returning message
    // was deleted as a duplicate of that live lease, and the job waited for the rescuer.
    const h = await ledger('H-LATE');
    const renew = u.ctx.store.renewLeases.bind(u.ctx.store);
    vi.spyOn(u.ctx.store, 'renewLeases').mockImplementationOnce(async (tokens, seconds) => {
      await new Promise((r) => setTimeout(r, FAST_TIMINGS.leaseSeconds * 1000 + 500));
      return renew(tokens, seconds);
    });
    const vis = vi.spyOn(p.queue, 'changeVisibility');
    const late = u.heartbeat.tick(); // the renewal that will arrive late
    await new Promise((r) => setTimeout(r, FAST_TIMINGS.leaseSeconds * 1000 + 100));
    void u.heartbeat.tick(); // the next tick: the lease ran out unrenewed, self-fenced and given up
    expect(h.lost).toBe(true);
    await late;
    await waitFor(
      () => vis.mock.calls.some((c) => c[0].some((x) => x.receipt === h.message.receipt && x.seconds === 0)),
      2000,
      'message visible',
    );
    const [again] = await p.store.claim([h.job.id], 'another-worker', 30);
    expect(again).toMatchObject({ id: h.job.id, attempt: 2 });
  });

  it('SQS answering slowly holds up only the visibility extension: the leases are renewed in the database every tick, none is lost', async () => {
    // Fault review: the extension was awaited inside the renewal, one beat at a time, so a
    // visibility call slower than a lease (throttling, a request timing out and retried) stopped
    // the renewals, and every running job was self-fenced as unrenewed.
    const h = await ledger('H-SLOW-SQS');
    let answer: () => void = () => undefined;
    const vis = vi.spyOn(p.queue, 'changeVisibility').mockImplementationOnce(() => new Promise((resolve) => (answer = () => resolve([]))));
    const renew = vi.spyOn(u.ctx.store, 'renewLeases');
    const first = u.heartbeat.tick();
    await waitFor(() => vis.mock.calls.length === 1, 2000, 'the extension sent');
    // Two leases' worth of ticks while SQS does not answer.
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, (FAST_TIMINGS.leaseSeconds * 1000) / 2));
      void u.heartbeat.tick();
      await waitFor(() => renew.mock.calls.length === i + 2, 2000, `renewal ${i + 2}`);
    }
    expect(h.lost).toBe(false);
    expect(p.metrics.get(METRIC.leasesLost)).toBe(0);
    expect((await state(h.job.id)).leaseExpiresAt!.getTime()).toBeGreaterThan(Date.now()); // still running out from the last renewal, not from the claim
    // One extension at a time: none sent while the first is on its way, the next tick sends again.
    expect(vis).toHaveBeenCalledTimes(1);
    answer();
    await first;
    await u.heartbeat.tick();
    expect(vis).toHaveBeenCalledTimes(2);
  });

  it("a renewal that cannot reach the database closes the fetcher's gate and loses nothing yet", async () => {
    const h = await ledger('H-DOWN');
    vi.spyOn(u.ctx.store, 'renewLeases').mockRejectedValueOnce(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    await u.heartbeat.tick();
    expect(u.databaseDown).toHaveLength(1);
    expect(h.lost).toBe(false);
  });

  it('a stale message handle (delivered again since) is noted: the lease still protects the job', async () => {
    const h = await ledger('H-STALE');
    await p.queue.changeVisibility([{ receipt: h.message.receipt, seconds: 0 }]);
    await p.queue.receive(10, 0.5);
    await u.heartbeat.tick();
    expect(h.receiptStale).toBe(true);
    expect(h.lost).toBe(false);
  });

  it('losing the lease of a job that ended (cancelled) deletes its leftover message', async () => {
    const h = await ledger('H-CANCEL');
    await p.client.cancel(h.job.id, 'test');
    await u.heartbeat.tick();
    expect(h.lost).toBe(true);
    await waitFor(
      async () => {
        await u.messages.drain();
        return p.queue.depth().total === 0;
      },
      3000,
      'leftover message deleted',
    );
  });
});
