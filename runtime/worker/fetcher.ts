// Fetching: the receive loop. It receives as many messages as there is claim room for (counted
// after a burst of finished handlers, so one claim takes the room), claims their jobs in one
// statement and hands what it claimed to the coordinator. A message it could not claim is settled
// by what its job row says (runtime/domain/settlement.ts): deleted, hidden until due,
// re-published, retried shortly, reclaimed after the lease, or dead-lettered. While the database
// is unreachable it receives nothing and hands back what it held but did not start.

import { isQueryReadTimeout } from '../db/pool.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { METRIC } from '../observability/metric-names.ts';
import { parseJobMessage } from '../queue/message.ts';
import { SQS_BATCH_LIMIT, type ReceivedMessage } from '../queue/types.ts';
import type { ClaimedJob } from '../store/job-store.ts';
import type { DeadLetters } from './dead-letter.ts';
import { longPollSeconds, sleep, type WorkerContext } from './held.ts';
import { defaultBulkSlots, LaneReceiver } from './lane-choice.ts';
import type { QueueMessages } from './messages.ts';
import { Batcher } from './batcher.ts';
import { DatabaseGate } from './database-gate.ts';
import { Pace } from './pace.ts';
import { settleUnclaimed } from './settle-unclaimed.ts';
import { LostClaims } from './lost-claims.ts';
import { Signal } from './signal.ts';

/** What the fetcher asks of the coordinator, which owns the handler slots. */
export interface Slots {
  /** Jobs waiting for a slot plus handlers running. */
  inHand(): number;
  /** Resolves when a slot frees (or the worker stops). */
  waitForSlot(): Promise<void>;
  /** A claimed job: hold it and run it when a slot is free. */
  start(job: ClaimedJob, message: ReceivedMessage, claimSentAt: number): void;
  /** Bulk-lane jobs waiting for a slot plus bulk handlers running (lane-choice.ts). */
  bulkInHand?(): number;
  /** Handler slots freed since the worker started: how fast jobs finish (pace.ts). */
  finished(): number;
}

/**
 * Receiving ahead (pace.ts: at most 200 ms of work, 400 while climbing) asks for at most this many capacities
 * (concurrency + prefetch), a bound on memory. Too much ahead (long jobs right after fast ones)
 * is handed to idle peers (worker.ts releaseSurplus). Measured (no-op, concurrency 10, 15 ms per
 * SQS call, 100–150 messages in flight at 4,000 jobs/s here), share of the zero-delay rate:
 * 2 capacities 65 %, 4: 79 %, 8: 81 %, 16: 88 % (medians of 3). At twice that rate (a quieter
 * machine, drains of 20,000) 16 capacities was the bound at concurrency 10 (the loop waited with
 * no room 5 times in 6): 85–86 % against 96–97 % with 32, two alternating pairs of 2 runs
 * (docs/performance-history.md, session 25). On a faster day (16,000 jobs/s at 0 ms, drains of
 * 10,000) 32 bound it again: 64 with AHEAD_MAX_MESSAGES 1,280, below.
 */
export const AHEAD_CAPACITIES = 64;
/**
 * ...and at most this many messages, whatever the capacity: what must be covered is the rate ×
 * the round trip (1,280 is twice a 20 ms round trip at 32,000 jobs/s, twice this machine's
 * fastest drain through SQS), not the concurrency. Past it, receives queue behind each other (at the endpoint, in the
 * worker's own event loop) and the round trip the worker measures grows with what it asked, so it
 * asks more: at concurrency 50 (3,200 allowed) 2,000–3,000 messages were asked at once, round
 * trips read 100–200 ms while the slots sat empty, and each backlog ended with ~300 receives
 * coming back empty. With 640 (no-op jobs, concurrency 50, drains of 5,000, 3 runs each, two
 * pairs): 0.234–0.256 SQS calls per job → 0.211–0.215, the worker's CPU per 1,000 jobs through
 * SQS 0.048–0.059 s → 0.040–0.048, the rates the same within the runs' ranges. Then, on a day
 * when the zero-delay drains ran at 15,000–16,600 jobs/s (drains of 10,000, two alternating
 * pairs of 3 runs), 640 messages and 32 capacities held the delayed drains back: with 1,280 and
 * 64, no-op jobs with 15 ms per call kept 93 and 95 % of the zero-delay rate at concurrency 10
 * (88 and 86 % before) and 99 and 101 % at 50 (93 and 89 %), at 0.208–0.213 SQS calls per job
 * (0.203–0.207).
 */
export const AHEAD_MAX_MESSAGES = 1280;

export class Fetcher {
  /** Since when the database has been unreachable (a failover): no receiving until it answers. */
  private readonly gate: DatabaseGate;
  /** Receives lane by lane when the lanes have queues of their own; null when one queue serves every lane. */
  private readonly lanes: LaneReceiver | null;
  /** Messages asked for by receives in flight, and received ones being claimed. */
  private asked = 0;
  private claiming = 0;
  /** Receives waiting on SQS, and receives whose messages are being claimed. */
  private polling = 0;
  private receivesClaiming = 0;
  /** The last receive came back full: the queue has more. Idle at start: one long poll until it brings a full batch. */
  private queueBusy = false;
  private receiveFailures = 0;
  private claimFailures = 0;
  /** No receive before this (Date.now()): backing off after a failure. */
  private backoffUntil = 0;
  private readonly pace: Pace;
  /** Handler slots plus prefetch: the jobs the worker holds in hand at most, before asking ahead. */
  private readonly capacity: number;
  /** Receives that end in the same turn of the event loop are claimed together. */
  private readonly claims = new Batcher<ReceivedMessage[], undefined>((batches) => this.claimArrivals(batches), {
    maxItems: 50,
    delayMs: 0,
    maxInFlight: 2,
  });
  /** Fires when a receive returns, and when it and its claim end: the loop counts the room again. */
  private readonly arrival = new Signal();
  /** The worker's start-up: claims wait for it (receiveLoop); `started` once it is done. */
  private ready: Promise<void> = Promise.resolve();
  private started = true;

  constructor(
    private readonly ctx: WorkerContext,
    private readonly messages: QueueMessages,
    private readonly deadLetters: DeadLetters,
    private readonly slots: Slots,
    bulkSlots = defaultBulkSlots(ctx.opts.timings.concurrency),
    /** Jobs of claims that failed without an answer, and others left running unstarted: released once the database answers (the completer's). */
    private readonly lost = new LostClaims(ctx),
  ) {
    this.gate = new DatabaseGate(ctx);
    const t = ctx.opts.timings;
    this.capacity = t.concurrency + (ctx.opts.prefetch ?? t.concurrency);
    this.pace = new Pace(() => slots.finished(), undefined, this.capacity);
    this.lanes = ctx.queue.shared
      ? null
      : new LaneReceiver(ctx, messages, {
          // Bulk's share of the jobs in hand, prefetched ones included, so that a bulk job waits
          // for the slot a finishing bulk job frees (with prefetch, that slot would go to urgent).
          bulkInHandTarget: Math.ceil((bulkSlots * this.capacity) / t.concurrency),
          waitSeconds: ctx.opts.receiveWaitSeconds ?? longPollSeconds(t.drainSeconds),
          bulkInHand: () => slots.bulkInHand?.() ?? 0,
        });
  }

  /**
   * `ready`: the worker's start-up (startup.ts: its types and fleet limits recorded, its first
   * connections open). The first receive goes out meanwhile, so a worker started into a backlog
   * has its first messages when its connections are, not a round trip later; nothing is claimed
   * before `ready` (a fleet limit is in force before its type's first claim).
   */
  async receiveLoop(ready: Promise<void> = Promise.resolve()): Promise<void> {
    this.started = false;
    this.ready = ready
      .catch(() => undefined)
      .then(() => {
        this.started = true;
        this.arrival.fire();
      });
    const { ctx, slots, capacity } = this;
    const maxBatch = ctx.opts.maxClaimBatch ?? Math.min(500, capacity);
    // Jobs whose handler finished stay held (and heartbeated) until their batched completion commits,
    // taking no claim room (the next claim overlaps that commit); a slow database is bounded by maxHeld.
    const maxHeld = capacity + maxBatch;
    const receives = new Set<Promise<void>>();
    while (!ctx.stopping) {
      if (this.gate.closed && !(await this.gate.probe())) continue;
      // No claim of this worker's in flight meanwhile: one could take a noted job for this worker.
      const unavailable = this.lost.pending ? await this.claims.drain().then(() => this.lost.release()) : null;
      if (unavailable) {
        this.gate.close(unavailable);
        continue;
      }
      // Until the worker has started, one receive: a start-up held up (a failover, a hung
      // statement) holds one batch of messages unclaimed, not a capacity's worth (review).
      if (!this.started && this.asked + this.claiming > 0) {
        await Promise.race([this.ready, this.arrival.wait(), slots.waitForSlot()]);
        continue;
      }
      if (this.backoffUntil > Date.now()) {
        await sleep(this.backoffUntil - Date.now(), ctx.stopAc.signal);
        continue;
      }
      const inHand = slots.inHand();
      const coming = this.asked + this.claiming;
      // Receive for the free slots and for those expected to free while the receive is on its
      // way (pace.ts): receives overlap each other, the claims and the handlers.
      const ahead = this.pace.ahead(Math.min(AHEAD_CAPACITIES * capacity, AHEAD_MAX_MESSAGES), inHand < ctx.opts.timings.concurrency);
      const room = Math.min(capacity + ahead - inHand, maxHeld + ahead - ctx.held.size) - coming;
      // While jobs are in hand or on the way, wait until half the capacity is free: a few large
      // claims cost the database less than many small ones.
      const busy = inHand + coming > 0;
      // An idle queue gets one long poll at a time (a call per wait). The next opens when the last
      // returns, not after its claim commits (a message arriving meanwhile would wait that out), but
      // not past a second claim: a hung database holds two batches (and a poll's per lane) at most.
      const idleWait = !this.queueBusy && (this.polling > 0 || this.receivesClaiming > 1);
      if (room <= 0 || (busy && room < Math.min(maxBatch, Math.ceil(capacity / 2))) || idleWait) {
        // Waiting starts before anything is awaited, so a receive ending meanwhile is not missed.
        const woken = Promise.race([slots.waitForSlot(), this.arrival.wait()]);
        if (coming === 0) await this.lanes?.noRoom();
        await woken;
        // Slots free one by one as a burst of short handlers ends within this turn of the event
        // loop; count the room after the burst, so one claim takes it all, not its first half.
        await new Promise<void>((r) => setImmediate(r));
        continue;
      }
      // A busy queue gets every full receive (10) the room holds at once — a receive costs the same
      // for 1 message as for 10 — without waiting, and an idle one (its last receive came back
      // short) one long poll. Busy receives must not wait: when the queue empties, receives
      // parked in long polls would each take the next messages to arrive, and claim long jobs
      // at the pace of the fast ones just finished, while an idle peer gets none.
      const want = Math.min(room, maxBatch);
      const sizes: number[] = [];
      if (!this.queueBusy || want < SQS_BATCH_LIMIT) sizes.push(Math.min(want, SQS_BATCH_LIMIT));
      else for (let k = Math.floor(want / SQS_BATCH_LIMIT); k > 0; k--) sizes.push(SQS_BATCH_LIMIT);
      const waitSeconds = this.queueBusy ? 0 : (ctx.opts.receiveWaitSeconds ?? longPollSeconds(ctx.opts.timings.drainSeconds));
      for (const n of sizes) {
        const p: Promise<void> = this.receiveAndClaim(n, waitSeconds).finally(() => {
          receives.delete(p);
          this.arrival.fire();
        });
        receives.add(p);
      }
    }
    // Stopping: the receives in flight return (or are aborted at the drain deadline) and hand back what they bring.
    while (receives.size > 0) await Promise.allSettled([...receives]);
    await this.claims.drain();
    if (!this.gate.closed) await this.lost.release();
    await this.lanes?.stop();
  }

  /** One receive of up to `n` messages, then their claim (batched with others that arrive together). */
  private async receiveAndClaim(n: number, waitSeconds: number): Promise<void> {
    const { ctx } = this;
    this.asked += n;
    this.polling++;
    const t0 = performance.now();
    const sampled = this.started;
    let messages: ReceivedMessage[];
    try {
      messages = this.lanes ? await this.lanes.receive(n) : await ctx.queue.receiveFrom('bulk', n, waitSeconds, ctx.receiveAc.signal);
      this.receiveFailures = 0;
    } catch (err) {
      this.receiveFailures++;
      const wait = Math.min(30_000, 200 * 2 ** Math.min(this.receiveFailures, 8)) * (0.5 + Math.random() / 2);
      this.backoffUntil = Math.max(this.backoffUntil, Date.now() + wait);
      ctx.log.warn({ err, retryInMs: Math.round(wait) }, 'receive failed; retrying');
      return;
    } finally {
      this.asked -= n;
      this.polling--;
    }
    // What a lane's poll had brought says nothing of the queue's depth, nor of a round trip.
    const fromPolls = this.lanes?.fromPolls.has(messages) ?? false;
    if (!fromPolls) this.queueBusy = messages.length >= n;
    if (messages.length === 0) return;
    if (ctx.stopping) {
      // Received while stopping: hand them straight back.
      await this.messages.changeVisibility(messages.map((m) => ({ receipt: m.receipt, seconds: 0 })));
      return;
    }
    this.claiming += messages.length;
    this.receivesClaiming++;
    // The loop counts the room again now, while this claim runs.
    this.arrival.fire();
    try {
      await this.claims.add(messages);
    } finally {
      this.claiming -= messages.length;
      this.receivesClaiming--;
    }
    // A receive whose claim waited for the start-up measures the start-up, not a round trip (review).
    if (!fromPolls && sampled) this.pace.receive(n, messages.length, performance.now() - t0);
  }

  /** Claim what the receives that arrived together brought, in one statement; never rejects. */
  private async claimArrivals(batches: ReceivedMessage[][]): Promise<undefined[]> {
    const messages = batches.flat();
    // A stop does not wait for the start-up: these go back unclaimed at once.
    if (!this.started) await Promise.race([this.ready, stopped(this.ctx.stopAc.signal)]);
    // Stopped while the worker was starting: nothing of these is claimed.
    if (this.ctx.stopping) {
      await this.handBack(messages);
      return batches.map(() => undefined);
    }
    try {
      await this.handleBatch(messages);
      this.claimFailures = 0;
    } catch (err) {
      if (isDatabaseUnavailable(err)) {
        // A failover: nothing can be claimed. Hand back what we did not start, so that a worker
        // takes it once the database answers instead of after the visibility timeout, and stop
        // receiving until then: a gated loop spends no receives toward maxReceiveCount.
        this.databaseUnavailable(err);
        // A poll opened while this claim ran would take them again at once (a second receive
        // toward the DLQ); until it returns they are still hidden. What the lanes' polls brought
        // goes back too: it waits for a pass that the closed gate will not make.
        await this.openReceivesEnded();
        messages.push(...(this.lanes?.takeReady() ?? []));
        // A claim that timed out may have committed on the server: its jobs then hold a lease
        // nobody uses, and a message back at once would find it live and be deleted as a
        // duplicate; hidden for a lease, it returns when the job is claimable. A gate closing again
        // right after each opening (a full disk) hides them for its hold, so that several workers
        // do not each turn them over.
        await this.handBack(
          messages,
          isQueryReadTimeout(err) ? Math.ceil(this.ctx.opts.timings.leaseSeconds) : this.gate.handBackSeconds(),
        );
      } else {
        this.claimFailures++;
        // The messages reappear after their visibility timeout; nothing is lost, but each receive counts toward the DLQ.
        this.ctx.metrics.count(METRIC.claimsFailed);
        this.ctx.log.error({ err, messages: messages.length }, 'could not handle received messages; they will be redelivered');
        this.backoffUntil = Math.max(this.backoffUntil, Date.now() + Math.min(30_000, 200 * 2 ** Math.min(this.claimFailures, 8)));
      }
    }
    return batches.map(() => undefined);
  }

  /** Once the open receives have answers (the closed gate opens none until a probe answers). */
  private async openReceivesEnded(): Promise<void> {
    // Each receive that returns fires `arrival` (at once with messages, else as it ends).
    while (this.polling > 0) await this.arrival.wait();
    await this.lanes?.pollsEnded();
  }

  /** Close the database gate (also called by the heartbeat). */
  databaseUnavailable(err: unknown): void {
    this.gate.close(err);
  }

  /** Received messages whose jobs this worker did not start go back to the queue now. */
  private async handBack(messages: ReceivedMessage[], seconds = 0): Promise<void> {
    const started = new Set([...this.ctx.held.values()].map((h) => h.message));
    const back = messages.filter((m) => !started.has(m));
    if (back.length > 0) await this.messages.changeVisibility(back.map((m) => ({ receipt: m.receipt, seconds })));
  }

  /** Claim the jobs of messages received together in one statement, then settle the rest. */
  async handleBatch(messages: ReceivedMessage[]): Promise<void> {
    const { ctx } = this;
    const byJob = new Map<string, ReceivedMessage[]>();
    const poison: { message: ReceivedMessage; reason: string }[] = [];
    for (const m of messages) {
      const parsed = parseJobMessage(m.body);
      if (!parsed.ok) poison.push({ message: m, reason: parsed.reason });
      else if (!ctx.adoptReturned(parsed.message.jobId, m))
        byJob.set(parsed.message.jobId, [...(byJob.get(parsed.message.jobId) ?? []), m]);
    }
    for (const p of poison) {
      await this.deadLetters.deadLetterMessage(p.message, 'unparseable-body', { detail: p.reason });
    }
    const ids = [...byJob.keys()];
    if (ids.length === 0) return;
    // The lease runs from the claim statement, which is after this moment: counting from here
    // errs on the safe side when the worker decides alone that a lease ran out.
    const sentAt = performance.now();
    const claimed = await this.lost.watch(ids, () => ctx.store.claim(ids, ctx.workerId, ctx.opts.timings.leaseSeconds));
    const misses = new Set(ids);
    // Urgent first: each start takes a free slot at once, before the rest of the batch is in hand.
    claimed.sort((a, b) => Number(b.lane === 'urgent') - Number(a.lane === 'urgent'));
    for (const job of claimed) {
      misses.delete(job.id);
      this.startClaimed(job, byJob, sentAt);
    }
    if (misses.size > 0) await this.settleMisses([...misses], byJob, sentAt);
  }

  private startClaimed(job: ClaimedJob, byJob: Map<string, ReceivedMessage[]>, sentAt: number): void {
    const { ctx } = this;
    const [first, ...copies] = byJob.get(job.id)!;
    this.lost.forget(job.id);
    ctx.metrics.timing(METRIC.queueLag, job.queueLagMs);
    ctx.emit(job.reclaimed ? 'reclaimed' : 'claimed', job);
    this.slots.start(job, first!, sentAt);
    // Two copies of one job's message in one receive: we hold the job, the copy is surplus.
    for (const c of copies) this.messages.delete(c, 'duplicate copy in the same receive');
  }

  /**
   * Messages whose jobs the claim did not take. Jobs with a concurrency key or of a type with a
   * fleet limit are claimed here, under their key's and type's locks (store.claimKeyed): started
   * if there is room, else blocked, and a blocked job's message is deleted (the job is published
   * again when there is room). The rest are settled by what each job row says.
   */
  private async settleMisses(missed: string[], byJob: Map<string, ReceivedMessage[]>, sentAt: number): Promise<void> {
    const { ctx } = this;
    const jobs = await ctx.store.getMany(missed);
    let ids = missed;
    // Whether a type is limited is the database's to say (jobs.type_limit, which every worker
    // writes at start), so every job that may still start is offered to the keyed claim; one
    // with neither a key nor a limited type is left alone there and settled below.
    const keyed = missed.filter((id) => {
      const j = jobs.get(id);
      return j && (j.state === 'pending' || j.state === 'running');
    });
    if (keyed.length > 0) {
      const { claimed, blocked } = await this.lost.watch(keyed, () =>
        ctx.store.claimKeyed(keyed, ctx.workerId, ctx.opts.timings.leaseSeconds),
      );
      for (const job of claimed) this.startClaimed(job, byJob, sentAt);
      for (const id of blocked) {
        const job = jobs.get(id)!;
        ctx.emit('blocked', job, job.concurrencyKey ? `waiting for key ${job.concurrencyKey}` : `waiting for a slot of ${job.type}`);
        for (const m of byJob.get(id)!)
          this.messages.delete(m, 'blocked by its concurrency key or type limit: published again when there is room');
      }
      // Blocking may have woken an older job of the key (keyWake in claimKeyed).
      if (blocked.length > 0) ctx.keyWake.nudge();
      const done = new Set([...claimed.map((j) => j.id), ...blocked]);
      ids = missed.filter((id) => !done.has(id));
    }
    await settleUnclaimed(ctx, this.messages, this.deadLetters, ids, jobs, byJob);
  }
}

/** Resolves when `signal` aborts (at once if it has). */
function stopped(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((r) => signal.addEventListener('abort', () => r(), { once: true }));
}
