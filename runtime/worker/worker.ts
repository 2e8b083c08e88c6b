// The worker: receives job messages, claims their jobs in the database, runs the handlers
// under a lease kept alive by one heartbeat per tick, and settles each message by what the
// job row says (DESIGN 8). The queue is any JobQueue: SQS in production, MemoryQueue in tests.
//
// This file is the coordinator and the public API: it holds the jobs and the handler slots, and
// composes the units the way River splits its worker:
//   fetcher.ts    receive, back-pressure, the database gate, claim, settle what it could not claim
//   executor.ts   one attempt: the handler, its context and log, the outcome
//   completer.ts  batched and transactional completion, failure with backoff, release
//   heartbeat.ts  lease renewal in one statement, visibility extension, lost leases
//   dead-letter.ts the one sender of dead letters; messages.ts the queue writes they share
//   startup.ts    the job types registered and the connections opened before the first claim
// What settles a message (run, delete, hide, dead-letter) is said once, for the DLQ as well, in
// runtime/domain/settlement.ts.

import { hostname } from 'node:os';
import type { DeadLetterReason } from '../domain/events.ts';
import { isAnswerLost } from '../db/unavailable.ts';
import type { Job } from '../domain/job.ts';
import type { ReceivedMessage } from '../queue/types.ts';
import type { ClaimedJob, JobStore } from '../store/job-store.ts';
import { Completer } from './completer.ts';
import { DeadLetters } from './dead-letter.ts';
import { JobExecutor } from './executor.ts';
import { defaultBulkSlots, nextWaiting } from './lane-choice.ts';
import { Fetcher } from './fetcher.ts';
import { Heartbeat } from './heartbeat.ts';
import { ABANDON_GRACE_MS, sleep, WorkerContext, type Held, type WorkerOptions } from './held.ts';
import { settledWithin } from '../support/settled.ts';
import { QueueMessages, STOPPING_SQS_CALL_MS } from './messages.ts';
import { registerTypes, warm } from './startup.ts';

export type { DeadLetterReason, WorkerEvent, WorkerEventKind } from '../domain/events.ts';
export { sleep, type WorkerOptions } from './held.ts';

/** How often the worker looks for jobs claimed ahead that will not start soon (releaseSurplus); the first in line waited this long: the line is not moving. */
const SURPLUS_CHECK_MS = 250;
const SURPLUS_WAIT_MS = 1_000;

/** How long after the drain deadline a stop stops waiting for handlers that ignore their abort signal (ECS kills at + 10 s). */
const STOP_GRACE_END_MS = 6_000;

export class Worker {
  readonly workerId: string;
  readonly store: JobStore;
  // Protected for one reader: the test kit's worker (testing/worker.ts) stops like a killed process through them.
  protected readonly ctx: WorkerContext;
  private readonly messages: QueueMessages;
  private readonly deadLetters: DeadLetters;
  protected readonly beat: Heartbeat;
  private readonly completer: Completer;
  private readonly executor: JobExecutor;
  private readonly fetcher: Fetcher;
  private stopPromise: Promise<void> | null = null;
  private readonly runs = new Set<Promise<void>>(); // every runJob not yet settled
  /** When a stopping worker stops waiting for its running jobs (epoch ms). */
  private drainDeadline = Number.POSITIVE_INFINITY;
  protected loopPromise: Promise<void> | null = null;
  private slotWaiters: (() => void)[] = [];
  /** Claimed jobs waiting for a handler slot. */
  protected readonly waiting: Held[] = [];
  /** Handlers running now (a handler with its own transaction counts until it commits). */
  private active = 0;
  /** Of those, bulk-lane ones; and the slots bulk keeps while urgent work waits (lane-choice.ts). */
  private activeBulk = 0;
  private readonly bulkSlots: number;
  private busy = false;
  private slotsFreed = 0; // handler slots freed since start (the fetcher's pace.ts reads how fast jobs finish)
  /** Checks whether jobs claimed ahead wait in a line that stopped moving (releaseSurplus), and whether a pass is under way. */
  private surplusTimer: NodeJS.Timeout | null = null;
  private releasing = false;

  constructor(private readonly opts: WorkerOptions) {
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`;
    const ctx = (this.ctx = new WorkerContext(opts, this.workerId));
    this.store = ctx.store;
    this.messages = new QueueMessages(ctx);
    this.deadLetters = new DeadLetters(ctx, this.messages);
    this.beat = new Heartbeat(
      ctx,
      this.messages,
      (err) => this.fetcher.databaseUnavailable(err),
      (unstarted) => this.releaseUnstarted(unstarted),
    );
    this.completer = new Completer(ctx, this.messages, this.deadLetters, this.beat, (h) => this.freeSlot(h));
    this.executor = new JobExecutor(ctx, this.completer, this.beat);
    this.bulkSlots = opts.bulkSlots ?? defaultBulkSlots(opts.timings.concurrency);
    this.fetcher = new Fetcher(
      ctx,
      this.messages,
      this.deadLetters,
      {
        inHand: () => this.waiting.length + this.active,
        waitForSlot: () => new Promise<void>((r) => this.slotWaiters.push(r)),
        start: (job, message, claimSentAt) => this.startJob(job, message, claimSentAt),
        bulkInHand: () => this.activeBulk + this.waiting.filter((h) => h.job.lane !== 'urgent').length,
        finished: () => this.slotsFreed,
      },
      this.bulkSlots,
      this.completer.lost,
    );
  }

  get runningJobs(): { id: string; attempt: number; type: string }[] {
    return [...this.ctx.held.values()].map(({ job, token }) => ({ id: job.id, attempt: token.attempt, type: job.type }));
  }

  start(): void {
    if (this.loopPromise) return;
    const t = this.opts.timings;
    // The first receive overlaps the start-up; its messages are claimed once that is done.
    this.loopPromise = this.fetcher.receiveLoop(registerTypes(this.ctx, this.store).then(() => warm(this.ctx)));
    this.beat.start();
    this.surplusTimer = setInterval(() => void this.releaseSurplus(), SURPLUS_CHECK_MS);
    this.surplusTimer.unref();
    this.ctx.log.info(
      { concurrency: t.concurrency, leaseSeconds: t.leaseSeconds, heartbeatSeconds: t.heartbeatSeconds, bulkSlots: this.bulkSlots },
      'worker started',
    );
    if (this.ctx.queue.shared)
      this.ctx.log.info(
        'one queue for every lane (no JOBS_URGENT_QUEUE_URL): urgent jobs share the bulk queue, so they are preferred only among the jobs this worker has claimed',
      );
  }

  /**
   * Graceful stop (DESIGN 10): stop receiving, let running jobs finish for `drainSeconds`,
   * then abort and release the rest (fenced, visibility 0) so another worker starts them at once.
   *
   * An open long poll is not aborted at once: SQS still answers a poll whose client has gone away,
   * and what it hands out stays hidden for the visibility timeout (measured: a stopped worker's last
   * poll took the next backlog's first 10 messages, which ran 60 s late). The poll may return by
   * itself (within its wait) and what it brought goes straight back; it is aborted at the drain
   * deadline. An idle worker takes up to one poll's wait to stop; a busy one drains meanwhile.
   */
  stop(drainSeconds = this.opts.timings.drainSeconds): Promise<void> {
    // A second stop may shorten the drain (a retired worker's long drain, then SIGTERM's), never lengthen it.
    this.drainDeadline = Math.min(this.drainDeadline, Date.now() + drainSeconds * 1000);
    this.stopPromise ??= this.doStop();
    return this.stopPromise;
  }

  /** Resolves at the drain deadline, which a later stop() may move earlier, or once `done()`. */
  private async drainTimeout(done: () => boolean): Promise<void> {
    while (!done() && Date.now() < this.drainDeadline) await sleep(Math.min(1000, this.drainDeadline - Date.now()));
  }

  private async doStop(): Promise<void> {
    const { ctx } = this;
    ctx.stopping = true;
    ctx.stopAc.abort();
    if (this.surplusTimer) clearInterval(this.surplusTimer);
    this.wakeSlotWaiters();
    // The open receive returns by itself, or is aborted at the drain deadline (see above).
    let loopEnded = false;
    void this.drainTimeout(() => loopEnded).then(() => ctx.receiveAc.abort());
    // Prefetched jobs never started: hand them back now rather than after the drain (and
    // again once the receive loop has ended, for those a claim under way when the stop came added).
    await this.releaseWaiting();
    await this.loopPromise;
    loopEnded = true;
    ctx.receiveAc.abort();
    await this.releaseWaiting();
    // Every handler still running, a lost attempt unwinding beside the job's next one included.
    const running = () => [...this.runs];
    if (ctx.held.size > 0 || this.runs.size > 0) {
      const left = Math.max(0, this.drainDeadline - Date.now());
      ctx.log.info({ jobs: ctx.held.size, drainSecondsLeft: Math.round(left / 100) / 10 }, 'draining running jobs');
      let drained = false;
      const settled = Promise.allSettled(running()).then(() => {
        drained = true;
      });
      const drainAc = new AbortController();
      const noted = this.releaseNoted(() => drained, drainAc.signal);
      await Promise.race([settled, this.drainTimeout(() => drained)]);
      drained = true;
      drainAc.abort();
      await noted;
    }
    const left = [...ctx.held.values()].filter((h) => !h.lost && !h.released);
    if (left.length > 0) await this.completer.release(left);
    // What the database could not be asked to release (an outage at the stop): until the drain's deadline.
    await this.releaseNoted(() => false);
    // The grace ends by the drain deadline + STOP_GRACE_END_MS at the latest: ECS kills at + 10 s,
    // and the final sends and the metrics' flush come after it (review).
    const graceMs = Math.max(500, Math.min(ABANDON_GRACE_MS, this.drainDeadline + STOP_GRACE_END_MS - Date.now()));
    if (!(await settledWithin(running(), graceMs)))
      ctx.log.error(
        { jobs: this.runningJobs, graceMs },
        'handlers still running after their abort signal (they do not watch ctx.signal): the worker stops without them; their jobs went back to the queue and their ctx.tx transactions are closed, but what they write elsewhere can still land',
      );
    await this.beat.stop();
    await this.completer.drain();
    await this.completer.lost.releaseAtStop(); // noted since the receive loop ended
    await this.ctx.keyWake.idle();
    // Side by side, bounded: deletes sent before the stop began carry no deadline of their own, and
    // the stop's margin before SIGKILL holds the release, the metrics and the publishes (outbox.ts drain).
    await Promise.all([settledWithin([this.messages.drain()], STOPPING_SQS_CALL_MS), this.opts.publisher.drain(2_000)]);
    this.setBusy(false);
    ctx.log.info('worker stopped');
  }

  /** Retry the noted releases (lost-claims.ts) every second until none is left, `done()` (`signal` wakes it), or the drain's deadline. */
  private async releaseNoted(done: () => boolean, signal?: AbortSignal): Promise<void> {
    const { lost } = this.completer;
    while (lost.pending && !done() && Date.now() < this.drainDeadline) {
      await lost.release();
      if (lost.pending) await sleep(Math.min(1000, Math.max(0, this.drainDeadline - Date.now())), signal);
    }
  }

  /** Jobs claimed ahead whose leases ran out before they started (heartbeat.ts): out of line, released unstarted. */
  private releaseUnstarted(unstarted: Held[]): void {
    for (const h of unstarted) this.ctx.forget(h);
    this.waiting.splice(0, this.waiting.length, ...this.waiting.filter((h) => !unstarted.includes(h)));
    void this.completer.releaseUnstarted(unstarted);
    this.wakeSlotWaiters(); // the fetcher counts its room again
    if (this.ctx.held.size === 0 && this.ctx.running === 0) this.setBusy(false);
  }

  /** Claimed jobs that never got a handler slot go back (fenced release, visibility 0). */
  private async releaseWaiting(): Promise<void> {
    const queued = this.waiting.splice(0);
    if (queued.length === 0) return;
    await this.completer.release(queued);
    for (const h of queued) this.ctx.forget(h);
  }

  /**
   * Jobs claimed ahead (pace.ts) that will not start soon go back to the queue for an idle peer.
   * The fetcher receives ahead by the rate at which jobs have been finishing; when long jobs
   * follow fast ones, the receives already on their way bring long jobs at the fast ones' pace
   * (up to 64 capacities or 1,280 messages: fetcher.ts). When the first job in line has waited SURPLUS_WAIT_MS,
   * the line is not moving: what waits beyond the prefetch is released (fenced, its attempt not
   * counted) and its message made visible. Not a message near its receive limit: one more
   * receive would send a healthy job to the DLQ, so it stays and runs here.
   */
  private async releaseSurplus(): Promise<void> {
    const { ctx } = this;
    const t = this.opts.timings;
    const surplus = this.waiting.length - (this.opts.prefetch ?? t.concurrency);
    if (this.releasing || surplus <= 0 || ctx.stopping || Date.now() - this.waiting[0]!.claimedAt < SURPLUS_WAIT_MS) return;
    const out: Held[] = [];
    for (let i = this.waiting.length - 1; i >= 0 && out.length < surplus; i--) {
      const h = this.waiting[i]!;
      if (h.message.receiveCount >= t.maxReceiveCount - 1) continue;
      this.waiting.splice(i, 1);
      h.released = true; // the heartbeat leaves it alone from here
      out.push(h);
    }
    if (out.length === 0) return;
    this.releasing = true;
    let released = new Set<string>();
    try {
      released = await this.completer.handBack(
        out,
        `worker ${ctx.workerId} claimed it ahead and had no slot for it`,
        'no slot soon: handed to another worker',
      );
      // Released, or no longer this worker's (the fenced release found another attempt): either way not held here.
      for (const h of out) ctx.forget(h);
    } catch (err) {
      if (isAnswerLost(err)) {
        // The release may have committed, its answer lost: run here, a job would run on a token
        // its row no longer holds (a wasted run and a lost lease counted). Released once the
        // database answers (fenced: nothing if it had committed), and published again.
        this.completer.lost.note(
          out.map((h) => h.token),
          'hand-back-lost',
        );
        for (const h of out) ctx.forget(h);
      } else {
        // The database could not be asked: nothing was released, the jobs stay in line here.
        ctx.log.warn({ err, jobs: out.length }, 'could not release jobs claimed ahead; they stay and run here');
        for (const h of out) h.released = false;
        this.waiting.push(...out);
      }
    } finally {
      this.releasing = false;
    }
    if (released.size > 0)
      ctx.log.info(
        { jobs: released.size, waiting: this.waiting.length },
        'jobs claimed ahead handed to other workers: long jobs followed fast ones',
      );
    if (ctx.held.size === 0 && ctx.running === 0) this.setBusy(false);
    this.dispatch();
    this.wakeSlotWaiters();
  }

  /** Claim the jobs of messages received together in one statement, then settle the rest (see fetcher.ts). */
  handleBatch(messages: ReceivedMessage[]): Promise<void> {
    return this.fetcher.handleBatch(messages);
  }

  /** One heartbeat tick now: renew every lease, extend the messages, abort what is lost (see heartbeat.ts). */
  heartbeat(): Promise<void> {
    return this.beat.tick();
  }

  /**
   * Put a dead job on the DLQ with its reason (error, attempts, last owner). Also used for jobs
   * that died without a message in hand (the rescuer found them). Returns false if the DLQ
   * could not be reached.
   */
  reportDeadJob(job: Job, reason: DeadLetterReason, sourceMessageId?: string): Promise<boolean> {
    return this.deadLetters.reportDeadJob(job, reason, sourceMessageId);
  }

  // ------------------------------------------------------------------------ held jobs and slots

  private startJob(job: ClaimedJob, message: ReceivedMessage, claimSentAt: number): void {
    const now = Date.now();
    const h: Held = {
      job,
      token: { id: job.id, attempt: job.attempt },
      message,
      receiptStale: false,
      ac: null,
      abortReason: undefined,
      unsentProgress: null,
      lastProgress: job.progress,
      lost: false,
      released: false,
      lastRenewedAt: claimSentAt,
      claimedAt: now,
      slotFreed: false,
    };
    this.ctx.held.set(job.id, h);
    this.setBusy(true);
    this.waiting.push(h);
    this.dispatch();
  }

  /** Start waiting jobs while handler slots are free: urgent first, bulk keeping its slots (lane-choice.ts). */
  private dispatch(): void {
    const t = this.opts.timings;
    while (this.active < t.concurrency && this.waiting.length > 0 && !this.ctx.stopping) {
      const [h] = this.waiting.splice(nextWaiting(this.waiting, this.activeBulk, this.bulkSlots), 1);
      this.active++;
      if (h!.job.lane !== 'urgent') this.activeBulk++;
      this.ctx.running++;
      const done = this.runJob(h!);
      h!.done = done;
      this.runs.add(done);
      void done.then(() => this.runs.delete(done));
    }
  }

  /** One job from its start to its settlement; never rejects. */
  private async runJob(h: Held): Promise<void> {
    try {
      await this.executor.execute(h);
    } catch (err) {
      this.ctx.log.error({ err, jobId: h.job.id }, 'unexpected error settling a job; its lease will expire and it will be reclaimed');
    } finally {
      this.freeSlot(h);
      this.ctx.forget(h);
      this.ctx.running--;
      // Its key or its type's slots may have room now: publish the next job (key-wake.ts).
      if (h.job.concurrencyKey || h.job.typeSlot) this.ctx.keyWake.nudge();
      if (this.ctx.held.size === 0 && this.ctx.running === 0) this.setBusy(false);
      this.wakeSlotWaiters();
    }
  }

  /** The job's handler slot goes to the next waiting job (once per job). */
  private freeSlot(h: Held): void {
    if (h.slotFreed) return;
    h.slotFreed = true;
    this.slotsFreed++;
    this.active--;
    if (h.job.lane !== 'urgent') this.activeBulk--;
    this.dispatch();
    this.wakeSlotWaiters();
  }

  private setBusy(busy: boolean): void {
    if (busy === this.busy) return;
    this.busy = busy;
    this.opts.onBusyChange?.(busy);
  }

  protected wakeSlotWaiters(): void {
    const w = this.slotWaiters;
    this.slotWaiters = [];
    for (const f of w) f();
  }
}
