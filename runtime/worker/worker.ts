// The worker: receives job messages, claims their jobs in the database, runs the handlers
// under a lease kept alive by one heartbeat per tick, and settles each message by what the
// job row says (DESIGN 8). The queue is any JobQueue: SQS in production, MemoryQueue in tests.
//
// What settles a message:
//   claimed by us → run; delete when the job succeeded or is dead (dead-lettered with its reason);
//                   on a retry, hide it until the backoff is over.
//   job missing   → poison: dead-letter the message with the reason, delete it.
//   job terminal  → a leftover copy: delete it.
//   pending, not due (backoff, runAt) → hide it until due (re-publish beyond SQS's limits).
//   running, live lease → a duplicate delivery: delete it. The owner's receipt handle is stale
//                   from now on, so if the owner dies, the rescuer re-publishes the job.
//   running, lease about to expire → hide it until just after expiry, then reclaim.
//   running, expired on its final attempt → dead, dead-lettered.

import { hostname } from 'node:os';
import type pg from 'pg';
import type { JobTimings } from '../config/rules.ts';
import { SQS_MAX_VISIBILITY_SECONDS } from '../config/rules.ts';
import { errorToJson, LeaseLostError, NonRetryableError } from '../domain/errors.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import type { JobContext } from '../handlers/types.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Logger } from '../observability/log.ts';
import type { Metrics } from '../observability/metrics.ts';
import { jobMessageBody, parseJobMessage } from '../queue/message.ts';
import { chunk, SQS_BATCH_LIMIT, SQS_MAX_DELAY_SECONDS, type EntryFailure, type JobQueue, type ReceivedMessage } from '../queue/types.ts';
import { backoffSeconds } from '../domain/backoff.ts';
import { attemptsUsed, isTerminal, type Job, type Progress } from '../domain/job.ts';
import { JobStore, type ClaimedJob, type LeaseToken } from '../store/job-store.ts';
import { recordPoisonMessage, type PoisonReason } from '../store/poison.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { DeadLetterReason, WorkerEvent, WorkerEventKind } from '../domain/events.ts';
import type { Publisher } from '../store/outbox.ts';
import { Batcher } from './batcher.ts';
import { JobTransaction } from './job-transaction.ts';

export interface WorkerOptions {
  pool: pg.Pool;
  queue: JobQueue;
  /** Where the worker sends what it cannot handle and dead jobs, with the reason. */
  dlq: JobQueue;
  registry: JobRegistry;
  publisher: Publisher;
  timings: JobTimings;
  workerId?: string;
  log: Logger;
  metrics?: Metrics;
  /** Long-poll wait per receive (SQS allows up to 20 s). */
  receiveWaitSeconds?: number;
  /**
   * Jobs claimed ahead of a free handler slot (default: concurrency). The worker holds at most
   * concurrency + prefetch jobs; prefetched jobs are leased and heartbeated like running ones,
   * and released at once on a graceful stop.
   */
  prefetch?: number;
  /** Most jobs claimed in one statement (received in parallel batches of 10); default: the whole capacity, at most 500. */
  maxClaimBatch?: number;
  random?: () => number;
  /** Called when the worker starts and stops holding jobs (ECS task scale-in protection). */
  onBusyChange?: (busy: boolean) => void;
  /** Observer of job events (live view); must not throw. */
  onEvent?: (e: WorkerEvent) => void;
}

/** A message to delete, and why (for the log line if the delete fails). */
interface PendingDelete {
  message: ReceivedMessage;
  why: string;
  jobId: string | undefined;
}

/** One job this worker holds. */
interface Held {
  job: ClaimedJob;
  token: LeaseToken;
  message: ReceivedMessage;
  /** Set when SQS refused our handle: someone received the message after us. */
  receiptStale: boolean;
  /** Created when the handler first reads ctx.signal (most short handlers never do). */
  ac: AbortController | null;
  /** Why the handler must stop, once it must (the signal carries it when created later). */
  abortReason: unknown;
  /** Progress reported since the last heartbeat (written with the next one). */
  unsentProgress: Progress | null;
  lastProgress: Progress | null;
  lost: boolean;
  released: boolean;
  lastRenewedAt: number;
  claimedAt: number;
  /** Its handler slot went to the next job (when the handler ended, before the batched completion). */
  slotFreed: boolean;
  done?: Promise<void>;
}

export type { DeadLetterReason, WorkerEvent, WorkerEventKind } from '../domain/events.ts';

const noopMetrics: Metrics = { count: () => undefined, timing: () => undefined };

export class Worker {
  readonly workerId: string;
  readonly store: JobStore;
  private readonly held = new Map<string, Held>();
  private readonly log: Logger;
  private readonly metrics: Metrics;
  private readonly stopAc = new AbortController();
  private stopping = false;
  private stopPromise: Promise<void> | null = null;
  private loopPromise: Promise<void> | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private heartbeating: Promise<void> | null = null;
  private slotWaiters: (() => void)[] = [];
  /** Claimed jobs waiting for a handler slot. */
  private readonly waiting: Held[] = [];
  /** Handlers running now (a handler with its own transaction counts until it commits). */
  private active = 0;
  private readonly deletes: Batcher<PendingDelete, void>;
  private readonly completions: Batcher<LeaseToken & { result: unknown; progress: Progress | null }, boolean>;
  private busy = false;
  /** Since when the database has been unreachable (a failover): no receiving until it answers. */
  private databaseDownSince: number | null = null;

  constructor(private readonly opts: WorkerOptions) {
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`;
    this.store = new JobStore(opts.pool);
    this.log = opts.log.child({ workerId: this.workerId });
    this.metrics = opts.metrics ?? noopMetrics;
    this.deletes = new Batcher<PendingDelete, void>(
      async (items) => {
        const failures = await opts.queue.delete(items.map((d) => d.message.receipt));
        for (const f of failures) {
          const d = items.find((i) => i.message.receipt === f.receipt);
          this.log.warn({ messageId: d?.message.messageId, why: d?.why, jobId: d?.jobId, code: f.code }, 'message delete failed; it will return and be settled again');
        }
        return [];
      },
      // SqsQueue.delete sends these in batches of 10 itself.
      {
        maxItems: 100,
        delayMs: 5,
        onError: (err, items) => this.log.warn({ err, messages: items.length, why: [...new Set(items.map((d) => d.why))] }, 'message delete failed; the messages will return and be settled again'),
      },
    );
    // Jobs whose handlers wrote nothing complete together: one fenced UPDATE for many.
    this.completions = new Batcher(
      async (items) => {
        const lost = await this.store.completeMany(items);
        return items.map((i) => !lost.has(i.id));
      },
      { maxItems: 500, delayMs: 0 },
    );
  }

  get runningJobs(): { id: string; attempt: number; type: string }[] {
    return [...this.held.values()].map((h) => ({ id: h.job.id, attempt: h.token.attempt, type: h.job.type }));
  }

  start(): void {
    if (this.loopPromise) return;
    const t = this.opts.timings;
    this.loopPromise = this.receiveLoop();
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), t.heartbeatSeconds * 1000);
    this.log.info({ concurrency: t.concurrency, leaseSeconds: t.leaseSeconds, heartbeatSeconds: t.heartbeatSeconds }, 'worker started');
  }

  /**
   * Graceful stop (DESIGN 10): stop receiving, let running jobs finish for `drainSeconds`,
   * then abort and release the rest (fenced, visibility 0) so another worker starts them at once.
   */
  stop(drainSeconds = this.opts.timings.drainSeconds): Promise<void> {
    this.stopPromise ??= this.doStop(drainSeconds);
    return this.stopPromise;
  }

  private async doStop(drainSeconds: number): Promise<void> {
    this.stopping = true;
    this.stopAc.abort();
    this.wakeSlotWaiters();
    await this.loopPromise;
    // Prefetched jobs never started: hand them back now rather than after the drain.
    const queued = this.waiting.splice(0);
    if (queued.length > 0) {
      await this.releaseJobs(queued);
      for (const h of queued) this.held.delete(h.job.id);
    }
    const running = () => [...this.held.values()].map((h) => h.done);
    if (this.held.size > 0) {
      this.log.info({ jobs: this.held.size, drainSeconds }, 'draining running jobs');
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled(running()),
        new Promise((r) => (timer = setTimeout(r, drainSeconds * 1000))),
      ]);
      clearTimeout(timer);
    }
    const left = [...this.held.values()].filter((h) => !h.lost && !h.released);
    if (left.length > 0) await this.releaseJobs(left);
    await Promise.allSettled(running());
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    await this.heartbeating;
    await this.completions.drain();
    await this.deletes.drain();
    await this.opts.publisher.flush();
    this.setBusy(false);
    this.log.info('worker stopped');
  }

  /**
   * Stop like a process killed with SIGKILL: no drain, no release, no further database or
   * queue writes; leases simply stop being renewed. For tests and the chaos tools.
   */
  async simulateCrash(): Promise<void> {
    this.stopping = true;
    this.stopAc.abort();
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    for (const h of this.held.values()) {
      h.released = true; // "released" here only means: this process will write nothing more
      this.abortHandler(h, new Error('worker crashed'));
    }
    for (const h of this.waiting.splice(0)) this.held.delete(h.job.id);
    this.wakeSlotWaiters();
    await this.loopPromise;
    await Promise.allSettled([...this.held.values()].map((h) => h.done));
  }

  private async releaseJobs(left: Held[]): Promise<void> {
    for (const h of left) {
      h.released = true;
      this.abortHandler(h, new Error('worker stopping: job released to another worker'));
    }
    let released = new Set<string>();
    try {
      released = await this.store.release(left.map((h) => h.token), `worker ${this.workerId} stopped before the job finished`);
    } catch (err) {
      this.log.error({ err }, 'release failed; the jobs will be reclaimed when their leases expire');
      return;
    }
    const mine = left.filter((h) => released.has(h.job.id));
    const visible = mine.filter((h) => !h.receiptStale);
    const failures = await this.changeVisibility(visible.map((h) => ({ receipt: h.message.receipt, seconds: 0 })));
    const republish = mine.filter((h) => h.receiptStale || failures.some((f) => f.receipt === h.message.receipt));
    await this.republish(republish.map((h) => h.job.id));
    for (const h of mine) {
      this.log.info({ jobId: h.job.id, type: h.job.type, attempt: h.token.attempt }, 'job released');
      this.emit('released', h.job, 'worker stopping');
    }
  }

  // ---------------------------------------------------------------- receiving and claiming

  private async receiveLoop(): Promise<void> {
    let failures = 0;
    const t = this.opts.timings;
    const capacity = t.concurrency + (this.opts.prefetch ?? t.concurrency);
    const maxBatch = this.opts.maxClaimBatch ?? Math.min(500, capacity);
    // Jobs whose handler finished stay held (and heartbeated) until their batched completion
    // commits; they do not take claim room, so the next claim overlaps that commit. The bound on
    // held jobs keeps a slow database from piling up completions.
    const maxHeld = capacity + maxBatch;
    while (!this.stopping) {
      if (this.databaseDownSince !== null && !(await this.databaseAnswers())) continue;
      const room = Math.min(capacity - (this.waiting.length + this.active), maxHeld - this.held.size, maxBatch);
      // While jobs are in hand, wait until half the capacity is free: a few large claims cost
      // the database less than many small ones.
      const busy = this.waiting.length + this.active > 0;
      if (room <= 0 || (busy && room < Math.min(maxBatch, Math.ceil(capacity / 2)))) {
        await new Promise<void>((r) => this.slotWaiters.push(r));
        // Slots free one by one as a burst of short handlers finishes within this turn of the
        // event loop; count the room after the burst, so one claim takes it all rather than
        // the first half of it.
        await new Promise<void>((r) => setImmediate(r));
        continue;
      }
      let messages: ReceivedMessage[];
      try {
        messages = await this.receiveMany(room, this.opts.receiveWaitSeconds ?? 20);
        failures = 0;
      } catch (err) {
        failures++;
        const wait = Math.min(30_000, 200 * 2 ** Math.min(failures, 8)) * (0.5 + Math.random() / 2);
        this.log.warn({ err, retryInMs: Math.round(wait) }, 'receive failed; retrying');
        await sleep(wait, this.stopAc.signal);
        continue;
      }
      if (messages.length === 0) continue;
      if (this.stopping) {
        // Received while stopping: hand them straight back.
        await this.changeVisibility(messages.map((m) => ({ receipt: m.receipt, seconds: 0 })));
        break;
      }
      try {
        await this.handleBatch(messages);
        failures = 0;
      } catch (err) {
        if (isDatabaseUnavailable(err)) {
          // A failover: nothing can be claimed. Hand back what we did not start, so another
          // worker (or this one, once the database answers) takes it at once instead of after
          // the visibility timeout, and stop receiving until the database answers: a gated
          // receive loop spends no SQS receives toward maxReceiveCount meanwhile.
          this.databaseUnavailable(err);
          await this.handBack(messages);
          continue;
        }
        failures++;
        // The messages reappear after their visibility timeout; nothing is lost.
        this.log.error({ err, messages: messages.length }, 'could not handle received messages; they will be redelivered');
        await sleep(Math.min(30_000, 200 * 2 ** Math.min(failures, 8)), this.stopAc.signal);
      }
    }
  }

  private databaseUnavailable(err: unknown): void {
    if (this.databaseDownSince !== null) return;
    this.databaseDownSince = Date.now();
    this.metrics.count(METRIC.databaseUnavailable);
    this.log.warn({ err }, 'database unreachable: receiving stops until it answers; running jobs keep their leases until they run out');
  }

  /**
   * While the database is down: one probe per pass, with backoff (capped at a heartbeat, so a
   * returning database is noticed within one). True once it answers.
   */
  private async databaseAnswers(): Promise<boolean> {
    try {
      await this.opts.pool.query('SELECT 1');
    } catch {
      const downMs = Date.now() - (this.databaseDownSince ?? Date.now());
      const wait = Math.min(this.opts.timings.heartbeatSeconds * 1000, 250 + downMs / 4) * (0.75 + Math.random() / 4);
      await sleep(wait, this.stopAc.signal);
      return false;
    }
    const downMs = Date.now() - this.databaseDownSince!;
    this.databaseDownSince = null;
    this.log.info({ downMs }, 'database answers again: receiving resumes');
    return true;
  }

  /** Received messages whose jobs this worker did not start go back to the queue now. */
  private async handBack(messages: ReceivedMessage[]): Promise<void> {
    const started = new Set([...this.held.values()].map((h) => h.message));
    const back = messages.filter((m) => !started.has(m));
    if (back.length > 0) await this.changeVisibility(back.map((m) => ({ receipt: m.receipt, seconds: 0 })));
  }

  /**
   * Up to `want` messages: one long-polling receive of 10 and, when more are wanted, parallel
   * receives that do not wait, so a busy queue fills a large claim and an idle one costs one
   * long poll.
   */
  private async receiveMany(want: number, waitSeconds: number): Promise<ReceivedMessage[]> {
    const sizes: number[] = [];
    for (let left = want; left > 0; left -= SQS_BATCH_LIMIT) sizes.push(Math.min(SQS_BATCH_LIMIT, left));
    const first = await this.opts.queue.receive(sizes[0]!, waitSeconds, this.stopAc.signal);
    if (sizes.length === 1 || first.length < sizes[0]!) return first;
    const more = await Promise.allSettled(sizes.slice(1).map((n) => this.opts.queue.receive(n, 0, this.stopAc.signal)));
    return [...first, ...more.flatMap((r) => (r.status === 'fulfilled' ? r.value : []))];
  }

  /** Claim the jobs of messages received together in one statement, then settle the rest. */
  async handleBatch(messages: ReceivedMessage[]): Promise<void> {
    const byJob = new Map<string, ReceivedMessage[]>();
    const poison: { message: ReceivedMessage; reason: string }[] = [];
    for (const m of messages) {
      const parsed = parseJobMessage(m.body);
      if (!parsed.ok) poison.push({ message: m, reason: parsed.reason });
      else byJob.set(parsed.message.jobId, [...(byJob.get(parsed.message.jobId) ?? []), m]);
    }
    for (const p of poison) {
      await this.deadLetterMessage(p.message, 'unparseable-body', { detail: p.reason });
    }
    const ids = [...byJob.keys()];
    if (ids.length === 0) return;
    // The lease runs from the claim statement, which is after this moment: counting from here
    // errs on the safe side when the worker decides alone that a lease ran out.
    const sentAt = Date.now();
    const claimed = await this.store.claim(ids, this.workerId, this.opts.timings.leaseSeconds);
    const misses = new Set(ids);
    for (const job of claimed) {
      misses.delete(job.id);
      const [first, ...copies] = byJob.get(job.id)!;
      this.metrics.timing(METRIC.queueLag, job.queueLagMs);
      this.emit(job.reclaimed ? 'reclaimed' : 'claimed', job);
      this.startJob(job, first!, sentAt);
      // Two copies of one job's message in one receive: we hold the job, the copy is surplus.
      for (const c of copies) this.deleteMessage(c, 'duplicate copy in the same receive');
    }
    if (misses.size > 0) await this.settleMisses([...misses], byJob);
  }

  private async settleMisses(ids: string[], byJob: Map<string, ReceivedMessage[]>): Promise<void> {
    const jobs = await this.store.getMany(ids);
    const t = this.opts.timings;
    for (const id of ids) {
      const job = jobs.get(id);
      for (const m of byJob.get(id)!) {
        if (!job) {
          await this.deadLetterMessage(m, 'unknown-job', { jobId: id, detail: `no job ${id} in the job table` });
          continue;
        }
        const log = { jobId: id, type: job.type, attempt: job.attempt, receiveCount: m.receiveCount };
        if (isTerminal(job.state)) {
          this.deleteMessage(m, `job is ${job.state}`);
          continue;
        }
        const now = job.dbNow.getTime();
        if (job.state === 'pending') {
          const dueInMs = job.runAfter.getTime() - now;
          if (dueInMs > 0) await this.hideUntil(m, job, Math.ceil(dueInMs / 1000));
          else {
            // Due but locked by another claimer right now: try again shortly.
            this.metrics.count(METRIC.claimMisses);
            await this.changeVisibility([{ receipt: m.receipt, seconds: 1 }]);
          }
          continue;
        }
        // running
        const leaseLeftMs = (job.leaseExpiresAt?.getTime() ?? 0) - now;
        if (leaseLeftMs > t.heartbeatSeconds * 1000) {
          // A live owner renews every heartbeat, so it keeps more than one heartbeat of lease.
          this.metrics.count(METRIC.duplicateDeliveries);
          this.emit('duplicate-ignored', job, `held by ${job.leaseOwner}`);
          this.log.info({ ...log, owner: job.leaseOwner }, 'duplicate delivery ignored: another worker holds a live lease');
          this.deleteMessage(m, 'duplicate delivery of a job with a live lease');
        } else if (leaseLeftMs > 0) {
          // The owner has missed heartbeats: come back just after its lease ends and reclaim.
          this.metrics.count(METRIC.claimMisses);
          await this.changeVisibility([{ receipt: m.receipt, seconds: Math.max(1, Math.ceil(leaseLeftMs / 1000)) }]);
        } else if (attemptsUsed(job) >= job.maxAttempts) {
          const [dead] = await this.store.deadLetterExpired([id]);
          if (dead) {
            this.metrics.count(METRIC.jobsDeadLettered);
            this.emit('dead-lettered', dead, 'lease expired on the final attempt');
            this.log.error({ ...log, lastOwner: job.leaseOwner }, 'job dead: lease expired on its final attempt');
            await this.deadLetterJob(dead, m, 'lease-expired-final-attempt');
          } else {
            await this.changeVisibility([{ receipt: m.receipt, seconds: 1 }]);
          }
        } else {
          this.metrics.count(METRIC.claimMisses);
          await this.changeVisibility([{ receipt: m.receipt, seconds: 1 }]);
        }
      }
    }
  }

  /**
   * Hide a message until its job is due. SQS limits: a visibility change of at most 12 h, and
   * each early arrival costs a receive against maxReceiveCount. When the wait does not fit, or
   * the message is near its receive limit, send a fresh message (receive count 0) and delete
   * this one — in that order, so a failure leaves the old message in place.
   */
  private async hideUntil(m: ReceivedMessage, job: Job, seconds: number): Promise<void> {
    const limit = SQS_MAX_VISIBILITY_SECONDS - 60;
    const nearRedrive = m.receiveCount >= this.opts.timings.maxReceiveCount - 1;
    if (seconds <= limit && !nearRedrive) {
      const [failure] = await this.changeVisibility([{ receipt: m.receipt, seconds }]);
      if (!failure) return;
    }
    try {
      await this.opts.queue.send([{ body: jobMessageBody(job.id, job.type), delaySeconds: Math.min(SQS_MAX_DELAY_SECONDS, seconds) }]);
      this.deleteMessage(m, 're-published for a later due time');
    } catch (err) {
      this.log.warn({ err, jobId: job.id }, 're-publish for a later due time failed; the message will return');
    }
  }

  // ------------------------------------------------------------------------ running a job

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
    this.held.set(job.id, h);
    this.setBusy(true);
    this.waiting.push(h);
    this.dispatch();
  }

  /** Start waiting jobs while handler slots are free. */
  private dispatch(): void {
    const t = this.opts.timings;
    while (this.active < t.concurrency && this.waiting.length > 0 && !this.stopping) {
      const h = this.waiting.shift()!;
      this.active++;
      h.done = this.runJob(h);
    }
  }

  /** One job from its start to its settlement; never rejects. */
  private async runJob(h: Held): Promise<void> {
    try {
      await this.execute(h);
    } catch (err) {
      this.log.error({ err, jobId: h.job.id }, 'unexpected error settling a job; its lease will expire and it will be reclaimed');
    } finally {
      this.freeSlot(h);
      this.held.delete(h.job.id);
      if (this.held.size === 0) this.setBusy(false);
      this.wakeSlotWaiters();
    }
  }

  /** The job's handler slot goes to the next waiting job (once per job). */
  private freeSlot(h: Held): void {
    if (h.slotFreed) return;
    h.slotFreed = true;
    this.active--;
    this.dispatch();
    this.wakeSlotWaiters();
  }

  private async execute(h: Held): Promise<void> {
    const { job } = h;
    if (h.lost || h.released) return;
    // Log bindings per call rather than a child logger per job: pino serializes a child's
    // bindings when it is made, a cost every job would pay even with logging turned down.
    const log = new JobLog(this.log, job);
    const def = this.opts.registry.get(job.type);
    if (!def) {
      return this.failAttempt(h, new NonRetryableError(`no handler for job type "${job.type}" in this worker (known: ${this.opts.registry.types().join(', ')})`), true, log);
    }
    let payload: unknown;
    try {
      payload = def.parse(job.payload);
    } catch (err) {
      return this.failAttempt(h, err, true, log);
    }
    const tx = new JobTransaction(this.opts.pool);
    const ctx = new AttemptContext(h, this, log, tx);
    log.info('job started');
    let result: unknown;
    try {
      result = await def.run(payload, ctx);
    } catch (err) {
      // A handler that caught the fence's refusal and threw its own error still ends dead with
      // the fence's reason: a retry could apply effects that already landed outside the fence.
      const cause = tx.violation ?? err;
      await tx.rollback();
      if (h.lost || h.released) return;
      return this.failAttempt(h, cause, cause instanceof NonRetryableError, log);
    }
    if (h.lost || h.released) {
      await tx.rollback();
      return;
    }
    let completed: boolean;
    try {
      if (tx.opened) {
        completed = await tx.commitWith((client) => this.store.complete(client, h.token, result ?? null, h.lastProgress));
      } else {
        // The handler is done and holds no connection: its slot goes to the next job while the
        // completion commits in a batch with others (the job stays held, and heartbeated, until then).
        this.freeSlot(h);
        completed = await this.completions.add({ ...h.token, result: result ?? null, progress: h.lastProgress });
      }
    } catch (err) {
      // The COMMIT may or may not have happened. The fenced failure below matches no row if it did.
      // A NonRetryableError here is the transaction's own verdict (the handler left the fence).
      await tx.rollback();
      log.warn({ err }, 'completion did not commit');
      return this.failAttempt(h, err, err instanceof NonRetryableError, log);
    }
    if (!completed) {
      this.loseLease(h, 'completion');
      return;
    }
    this.metrics.count(METRIC.jobsSucceeded);
    this.emit('succeeded', job);
    this.metrics.timing(METRIC.jobDuration, Date.now() - h.claimedAt);
    log.info({ durationMs: Date.now() - h.claimedAt }, 'job succeeded');
    this.deleteMessage(h.message, 'job succeeded', h);
  }

  private async failAttempt(h: Held, err: unknown, nonRetryable: boolean, log: JobLog): Promise<void> {
    const { job } = h;
    const delay = backoffSeconds(
      { baseSeconds: this.opts.timings.backoffBaseSeconds, maxSeconds: this.opts.timings.backoffMaxSeconds },
      attemptsUsed(job),
      this.opts.random,
    );
    let after: Job | null;
    try {
      after = await this.store.fail(h.token, errorToJson(err, !nonRetryable), delay, nonRetryable);
    } catch (dbErr) {
      if (isDatabaseUnavailable(dbErr)) log.warn({ err: dbErr, cause: err }, 'database unreachable: the failed attempt is not recorded; the job is reclaimed once its lease runs out');
      else log.error({ err: dbErr, cause: err }, 'could not record the failed attempt; the lease will expire and the job will be reclaimed');
      return;
    }
    if (!after) {
      this.loseLease(h, 'failure');
      return;
    }
    if (after.state === 'dead') {
      this.metrics.count(METRIC.jobsDeadLettered);
      this.emit('dead-lettered', after, after.lastError?.message);
      log.error({ err, attemptsUsed: attemptsUsed(after), maxAttempts: after.maxAttempts }, 'job dead');
      await this.deadLetterJob(after, h.message, nonRetryable ? 'non-retryable' : 'attempts-exhausted', h);
      return;
    }
    this.metrics.count(METRIC.jobsFailed);
    this.emit('retried', job, `${after.lastError?.message ?? 'failed'}; retry in ${Math.round(delay * 10) / 10} s`);
    log.warn({ err, retryInSeconds: Math.round(delay * 10) / 10 }, 'attempt failed; will retry');
    // The retry rides on this message, hidden until the backoff ends — unless SQS would
    // dead-letter it at its next receive (a job may allow more attempts than the queue's
    // maxReceiveCount, and duplicates spend receives too): then a fresh message (receive count 0)
    // is queued through the outbox and this one deleted.
    const nearRedrive = h.message.receiveCount >= this.opts.timings.maxReceiveCount - 1;
    if (nearRedrive && !h.receiptStale) {
      if (await this.republish([job.id], after.runAfter)) this.deleteMessage(h.message, 'replaced by a fresh message before SQS would redrive it');
      return;
    }
    const failures = h.receiptStale ? [{ stale: true }] : await this.changeVisibility([{ receipt: h.message.receipt, seconds: Math.ceil(delay) }]);
    if (failures.length > 0) await this.republish([job.id], after.runAfter);
  }

  // ------------------------------------------------------------------------ heartbeat

  /** One tick: renew every lease in one statement, extend the messages, abort what is lost. */
  heartbeat(): Promise<void> {
    // Every tick, even while the previous renewal still hangs on an unreachable database: a
    // lease this worker could not renew before it ran out is lost, whatever happens next.
    this.fenceUnrenewed();
    this.heartbeating ??= this.beat().finally(() => {
      this.heartbeating = null;
    });
    return this.heartbeating;
  }

  private async beat(): Promise<void> {
    const t = this.opts.timings;
    const entries = [...this.held.values()].filter((h) => !h.lost && !h.released);
    if (entries.length === 0) return;
    const sentProgress = entries.map((h) => h.unsentProgress);
    // The renewed lease runs from the statement, which is after this moment (see fenceUnrenewed).
    const now = Date.now();
    let held: Set<string>;
    try {
      held = await this.store.renewLeases(entries.map((h, i) => ({ ...h.token, progress: sentProgress[i] })), t.leaseSeconds);
    } catch (err) {
      if (isDatabaseUnavailable(err)) this.databaseUnavailable(err);
      this.log.warn({ err, jobs: entries.length }, 'heartbeat could not reach the database');
      this.fenceUnrenewed();
      return;
    }
    const renewed: Held[] = [];
    entries.forEach((h, i) => {
      if (!held.has(h.job.id)) return this.loseLease(h, 'heartbeat');
      h.lastRenewedAt = now;
      if (h.unsentProgress === sentProgress[i]) h.unsentProgress = null;
      renewed.push(h);
    });
    for (const h of renewed) this.emit('lease-renewed', { id: h.job.id, type: h.job.type, attempt: h.token.attempt });
    // The message returns when the lease would expire: if this worker dies now, the next receiver
    // finds the lease expired and reclaims the job at once, within one lease of the death. (The
    // extension is sent after the renewal committed, so it ends a few milliseconds after the lease;
    // a message that still arrives early is hidden again until the lease has run out.)
    const seconds = Math.min(SQS_MAX_VISIBILITY_SECONDS, Math.ceil(t.leaseSeconds));
    const live = renewed.filter((h) => !h.receiptStale);
    const failures = await this.changeVisibility(live.map((h) => ({ receipt: h.message.receipt, seconds })));
    for (const f of failures) {
      const h = live.find((x) => x.message.receipt === f.receipt);
      if (h && f.stale) {
        h.receiptStale = true;
        this.log.info({ jobId: h.job.id, attempt: h.token.attempt }, 'message handle is stale (the message was delivered again); the lease still protects the job');
      }
    }
  }

  /**
   * Self-fence (DESIGN 4, 12): a job whose lease this worker could not renew before it ran out
   * may already belong to another worker, so its handler is aborted as a lost lease. Its
   * transaction, if the database dropped it, was lost anyway; its message is left to return.
   */
  private fenceUnrenewed(): void {
    const deadline = Date.now() - this.opts.timings.leaseSeconds * 1000;
    for (const h of this.held.values()) {
      if (!h.lost && !h.released && h.lastRenewedAt < deadline) this.loseLease(h, 'heartbeat (the lease ran out before the database could renew it)');
    }
  }

  private loseLease(h: Held, during: string): void {
    if (h.lost) return;
    h.lost = true;
    this.metrics.count(METRIC.leasesLost);
    this.emit('lease-lost', { id: h.job.id, type: h.job.type, attempt: h.token.attempt }, during);
    this.log.warn({ jobId: h.job.id, type: h.job.type, attempt: h.token.attempt, during }, 'lease lost; handler aborted, this worker will not complete or fail the job');
    this.abortHandler(h, new LeaseLostError(h.job.id, h.token.attempt, during));
    // If the job ended (cancelled), our message is a leftover: delete it.
    void this.store
      .get(h.job.id)
      .then((j) => {
        if (j && isTerminal(j.state) && !h.receiptStale) this.deleteMessage(h.message, `job is ${j.state}`);
      })
      .catch(() => undefined);
  }

  // ------------------------------------------------------------------------ messages

  private deleteMessage(m: ReceivedMessage, why: string, h?: Held): void {
    this.deletes.push({ message: m, why, jobId: h?.job.id });
  }

  private async changeVisibility(changes: { receipt: string; seconds: number }[]): Promise<EntryFailure[]> {
    const out: EntryFailure[] = [];
    for (const batch of chunk(changes, SQS_BATCH_LIMIT)) {
      try {
        out.push(...(await this.opts.queue.changeVisibility(batch)));
      } catch (err) {
        this.log.warn({ err, count: batch.length }, 'visibility change failed');
        out.push(...batch.map((c) => ({ receipt: c.receipt, code: 'RequestFailed', message: String(err), stale: false })));
      }
    }
    return out;
  }

  /** Durable re-publish for jobs whose message we could not reposition: via the outbox. */
  private async republish(jobIds: string[], runAfter?: Date): Promise<boolean> {
    if (jobIds.length === 0) return true;
    try {
      const rows = await this.store.outboxInsert(this.opts.pool, jobIds);
      // Durable from here: the relay publishes what this send does not.
      await this.opts.publisher.publish(rows.map((r) => ({ ...r, ...(runAfter ? { runAfter } : {}) })));
      return true;
    } catch (err) {
      this.log.error({ err, jobIds }, 're-publish failed; the rescuer or the returning message will pick the jobs up');
      return false;
    }
  }

  /** Send a message the worker cannot handle to the DLQ with its reason, then delete it. */
  private async deadLetterMessage(m: ReceivedMessage, reason: DeadLetterReason, info: { jobId?: string; detail: string }): Promise<void> {
    const sent = await this.sendToDlq({
      body: m.body,
      attributes: {
        Reason: reason,
        Detail: info.detail.slice(0, 1000),
        SourceMessageId: m.messageId,
        ReceiveCount: String(m.receiveCount),
        WorkerId: this.workerId,
        ...(info.jobId ? { JobId: info.jobId } : {}),
      },
    });
    this.log.error({ messageId: m.messageId, reason, detail: info.detail, body: m.body.slice(0, 500) }, 'message dead-lettered');
    if (sent) {
      this.metrics.count(METRIC.messagesDeadLettered);
      // Also kept in the database, raw body included, for on-call's poison list (runtime/store/poison.ts).
      await recordPoisonMessage(this.opts.pool, { sourceMessageId: m.messageId, reason: reason as PoisonReason, detail: info.detail, body: m.body, attributes: m.attributes, jobId: info.jobId ?? null, workerId: this.workerId, receiveCount: m.receiveCount })
        .catch((err: unknown) => this.log.warn({ err, messageId: m.messageId }, 'could not record the poison message; its dead letter still has it'));
      this.emit('poison-dead-lettered', info.jobId ? { id: info.jobId, type: '?' } : null, `${reason}: ${info.detail}`);
      this.deleteMessage(m, `dead-lettered: ${reason}`);
    }
  }

  /** A dead job's message goes to the DLQ carrying the job id and the reason; then the source message is deleted. */
  private async deadLetterJob(job: Job, m: ReceivedMessage, reason: DeadLetterReason, h?: Held): Promise<void> {
    const sent = await this.reportDeadJob(job, reason, m.messageId);
    // Delete only once the DLQ has the reason. Otherwise the message returns, finds the job dead
    // (terminal) and is deleted then; the job row keeps the reason either way.
    if (sent && !h?.receiptStale) this.deleteMessage(m, `job dead: ${reason}`, h);
  }

  /**
   * Put a dead job on the DLQ with its reason (error, attempts, last owner). Also used for jobs
   * that died without a message in hand (the rescuer found them). Returns false if the DLQ
   * could not be reached.
   */
  async reportDeadJob(job: Job, reason: DeadLetterReason, sourceMessageId?: string): Promise<boolean> {
    const last = job.attemptLog.at(-1);
    const body = JSON.stringify({
      jobId: job.id,
      type: job.type,
      reason,
      error: job.lastError ? { name: job.lastError.name, message: job.lastError.message } : null,
      attempts: attemptsUsed(job),
      maxAttempts: job.maxAttempts,
      lastOwner: last?.owner ?? null,
      deadAt: job.finishedAt?.toISOString() ?? new Date().toISOString(),
    });
    return this.sendToDlq({
      body,
      attributes: {
        Reason: reason,
        JobId: job.id,
        JobType: job.type,
        Attempts: String(attemptsUsed(job)),
        ErrorMessage: (job.lastError?.message ?? '').slice(0, 1000) || '(none)',
        LastOwner: last?.owner ?? '(unknown)',
        ...(sourceMessageId ? { SourceMessageId: sourceMessageId } : {}),
      },
    });
  }

  private async sendToDlq(msg: { body: string; attributes: Record<string, string> }): Promise<boolean> {
    for (let i = 0; i < 3; i++) {
      try {
        await this.opts.dlq.send([msg]);
        return true;
      } catch (err) {
        this.log.warn({ err, try: i + 1 }, 'sending to the dead-letter queue failed');
        await sleep(200 * 2 ** i);
      }
    }
    return false;
  }

  /** ctx.saveCheckpoint: fenced; a refusal is a lost lease. */
  async saveCheckpointFor(h: Held, checkpoint: unknown, progress?: { fraction: number; message?: string }): Promise<void> {
    if (h.lost || h.released) throw new LeaseLostError(h.job.id, h.token.attempt, 'checkpoint');
    if (progress) recordProgress(h, progress.fraction, progress.message);
    const ok = await this.store.checkpoint(h.token, checkpoint, progress ? h.lastProgress : null);
    if (!ok) {
      this.loseLease(h, 'checkpoint');
      throw new LeaseLostError(h.job.id, h.token.attempt, 'checkpoint');
    }
  }

  private abortHandler(h: Held, reason: unknown): void {
    if (h.abortReason === undefined) h.abortReason = reason;
    h.ac?.abort(reason);
  }

  private emit(kind: WorkerEventKind, job?: { id: string; type: string; attempt?: number } | null, detail?: string): void {
    if (!this.opts.onEvent) return;
    try {
      this.opts.onEvent({
        kind,
        workerId: this.workerId,
        at: new Date().toISOString(),
        ...(job ? { jobId: job.id, type: job.type, ...(job.attempt !== undefined ? { attempt: job.attempt } : {}) } : {}),
        ...(detail ? { detail } : {}),
      });
    } catch {
      /* observers never break job processing */
    }
  }

  private setBusy(busy: boolean): void {
    if (busy === this.busy) return;
    this.busy = busy;
    this.opts.onBusyChange?.(busy);
  }

  private wakeSlotWaiters(): void {
    const w = this.slotWaiters;
    this.slotWaiters = [];
    for (const f of w) f();
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * A logger for one job's lines that makes a pino child (for the handler) only when asked for
 * one. A class, like AttemptContext below: a worker making thousands of these a second should not
 * also make a handful of closures for each.
 */
class JobLog {
  private made: Logger | null = null;
  private bound: Record<string, unknown> | null = null;
  constructor(
    private readonly base: Logger,
    private readonly job: { id: string; type: string; attempt: number },
  ) {}
  private get bindings(): Record<string, unknown> {
    return (this.bound ??= { jobId: this.job.id, type: this.job.type, attempt: this.job.attempt });
  }
  info(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('info')) return;
    if (typeof a === 'string') this.base.info(this.bindings, a);
    else this.base.info({ ...this.bindings, ...a }, b);
  }
  warn(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('warn')) return;
    if (typeof a === 'string') this.base.warn(this.bindings, a);
    else this.base.warn({ ...this.bindings, ...a }, b);
  }
  error(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('error')) return;
    if (typeof a === 'string') this.base.error(this.bindings, a);
    else this.base.error({ ...this.bindings, ...a }, b);
  }
  child(): Logger {
    return (this.made ??= this.base.child(this.bindings));
  }
}

function recordProgress(h: Held, fraction: number, message?: string): void {
  const p: Progress = { fraction: Math.min(1, Math.max(0, Number(fraction) || 0)), ...(message ? { message: String(message).slice(0, 500) } : {}) };
  h.unsentProgress = p;
  h.lastProgress = p;
}

/** The handler's view of one attempt (the JobContext contract). Call its functions as methods. */
class AttemptContext implements JobContext {
  readonly job: JobContext['job'];
  readonly checkpoint: unknown;

  constructor(
    private readonly h: Held,
    private readonly worker: Worker,
    private readonly jobLog: JobLog,
    readonly db: JobTransaction,
  ) {
    const j = h.job;
    this.job = { id: j.id, type: j.type, attempt: j.attempt, maxAttempts: j.maxAttempts, createdAt: j.createdAt };
    this.checkpoint = j.checkpoint ?? null;
  }

  get signal(): AbortSignal {
    const h = this.h;
    if (!h.ac) {
      h.ac = new AbortController();
      if (h.abortReason !== undefined) h.ac.abort(h.abortReason);
    }
    return h.ac.signal;
  }

  get log(): Logger {
    return this.jobLog.child();
  }

  progress(fraction: number, message?: string): void {
    recordProgress(this.h, fraction, message);
  }

  saveCheckpoint(checkpoint: unknown, progress?: { fraction: number; message?: string }): Promise<void> {
    return this.worker.saveCheckpointFor(this.h, checkpoint, progress);
  }
}
