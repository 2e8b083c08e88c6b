// Completing a job's attempt: every state write after the handler, each fenced by the lease
// token (DESIGN 2, 3). Success commits with the handler's own transaction when it opened one, or
// in a batch with other jobs (one UPDATE for many) when it wrote nothing; a failure goes back to
// pending with backoff or, at the cap, to dead and the DLQ; a graceful stop releases what is left.
// The message follows the row: deleted when the job is done, hidden until a retry is due.

import { backoffSeconds } from '../domain/backoff.ts';
import { errorToJson } from '../domain/errors.ts';
import { attemptsUsed, type Job, type Progress } from '../domain/job.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { LeaseToken, ReleasedJob } from '../store/job-store.ts';
import { Batcher } from './batcher.ts';
import type { DeadLetters } from './dead-letter.ts';
import type { Heartbeat } from './heartbeat.ts';
import { sleep, type Held, type WorkerContext } from './held.ts';
import type { JobTransaction } from './job-transaction.ts';
import { LostClaims } from './lost-claims.ts';
import type { QueueMessages } from './messages.ts';

export { INTERRUPTED_RELEASE_LIMIT } from './lost-claims.ts';

/** How long a job of a type this worker lacks waits before a worker sees it again (handOnUnknownType). */
export const UNKNOWN_TYPE_RETRY_SECONDS = 60;

/** The executor's per-job log (runtime/worker/executor.ts), as the completer uses it. */
export interface AttemptLog {
  info(a: string | Record<string, unknown>, b?: string): void;
  warn(a: string | Record<string, unknown>, b?: string): void;
  error(a: string | Record<string, unknown>, b?: string): void;
}

export class Completer {
  private readonly completions: Batcher<LeaseToken & { result: unknown; progress: Progress | null; held: Held }, boolean>;
  /** Jobs left running under this worker that the database could not be asked to release: released once it answers (the fetcher's gate). */
  readonly lost: LostClaims;

  constructor(
    private readonly ctx: WorkerContext,
    private readonly messages: QueueMessages,
    private readonly deadLetters: DeadLetters,
    private readonly heartbeat: Heartbeat,
    /** The coordinator's: the job's handler slot goes to the next job. */
    private readonly freeSlot: (h: Held) => void,
  ) {
    this.lost = new LostClaims(ctx);
    // Jobs whose handlers wrote nothing complete together: one fenced UPDATE for many.
    this.completions = new Batcher(
      async (items) => {
        const lost = await ctx.store.completeMany(items);
        return items.map((i) => {
          // Settled in the same turn as the answer: a renewal answered next finds it so (heartbeat.ts).
          if (!lost.has(i.id)) i.held.settled = true;
          return !lost.has(i.id);
        });
      },
      { maxItems: 500, delayMs: 0, maxInFlight: 2 },
    );
  }

  /**
   * Mark the job succeeded, fenced: with the handler's transaction when it opened one, else in the
   * next batch. False: the lease was lost. Rejects when the commit's outcome is unknown.
   */
  commit(h: Held, tx: JobTransaction, result: unknown, log?: AttemptLog): Promise<boolean> {
    if (tx.opened)
      return tx.commitWith((client) => this.ctx.store.complete(client, h.token, result, h.lastProgress)).then((ok) => (h.settled = ok));
    // The handler is done and holds no connection: its slot goes to the next job while the
    // completion commits in a batch with others (the job stays held, and heartbeated, until then).
    this.freeSlot(h);
    return this.completeBatched(h, result, log);
  }

  /**
   * The batched completion, tried again while the database cannot be reached (a failover) for as
   * long as the job is still ours: the handler's work is done and wrote nothing, its result is in
   * hand, and counting the outage as the attempt's failure would run it again and spend an
   * attempt (dead, on the last one). The heartbeat renews the lease meanwhile; an outage longer
   * than the lease does not make the job lost (`completing`: the heartbeat does not give it up):
   * the completion, fenced by attempt, lands when the database answers, unless another worker
   * reclaimed the job first (then it matches nothing, and the job is that worker's). Before, the
   * job was given up with its lease and run again, or died on its last attempt, its work done.
   */
  private async completeBatched(h: Held, result: unknown, log?: AttemptLog): Promise<boolean> {
    h.completing = true;
    try {
      return await this.completeBatchedRetrying(h, result, log);
    } finally {
      h.completing = false;
    }
  }

  private async completeBatchedRetrying(h: Held, result: unknown, log?: AttemptLog): Promise<boolean> {
    // At most a second apart: after the outage the completion must land before the job's message,
    // back from its visibility timeout, lets another worker reclaim it.
    for (let wait = 250; ; wait = Math.min(wait * 2, 1_000)) {
      try {
        return await this.completions.add({ ...h.token, result, progress: h.lastProgress, held: h });
      } catch (err) {
        // Stopping too: the stop waits for this while it drains, and gives the job up (released) at its deadline.
        if (!isDatabaseUnavailable(err) || h.lost || h.released) throw err;
        if (wait === 250) log?.warn({ err }, 'database unreachable at completion: trying again while the lease holds');
        await sleep(this.ctx.stopping ? Math.min(wait, 1_000) : wait, this.ctx.stopping ? undefined : this.ctx.stopAc.signal);
        if (h.lost || h.released) throw err;
      }
    }
  }

  /** The success committed: count it, tell observers, delete the message. */
  succeeded(h: Held, log: AttemptLog): void {
    const { ctx } = this;
    ctx.metrics.count(METRIC.jobsSucceeded);
    ctx.emit('succeeded', h.job);
    ctx.metrics.timing(METRIC.jobDuration, Date.now() - h.claimedAt);
    log.info({ durationMs: Date.now() - h.claimedAt }, 'job succeeded');
    this.messages.delete(h.message, 'job succeeded', h);
  }

  /** The attempt failed: back to pending after a backoff, or dead (and dead-lettered) at the cap or when non-retryable. */
  async fail(h: Held, err: unknown, nonRetryable: boolean, log: AttemptLog): Promise<void> {
    const { ctx } = this;
    const { job } = h;
    const t = ctx.opts.timings;
    const delay = backoffSeconds(
      { baseSeconds: t.backoffBaseSeconds, maxSeconds: t.backoffMaxSeconds },
      attemptsUsed(job),
      ctx.opts.random,
    );
    let after: Job | null;
    try {
      after = await ctx.store.fail(h.token, errorToJson(err, !nonRetryable), delay, nonRetryable);
    } catch (dbErr) {
      if (isDatabaseUnavailable(dbErr))
        log.warn(
          { err: dbErr, cause: err },
          'database unreachable: the failed attempt is not recorded; the job is reclaimed once its lease runs out',
        );
      else
        log.error({ err: dbErr, cause: err }, 'could not record the failed attempt; the lease will expire and the job will be reclaimed');
      return;
    }
    if (!after) {
      this.heartbeat.loseLease(h, 'failure');
      return;
    }
    h.settled = true;
    if (after.state === 'dead') {
      ctx.metrics.count(METRIC.jobsDeadLettered);
      ctx.emit('dead-lettered', after, after.lastError?.message);
      log.error({ err, attemptsUsed: attemptsUsed(after), maxAttempts: after.maxAttempts }, 'job dead');
      await this.deadLetters.deadLetterJob(after, h.message, nonRetryable ? 'non-retryable' : 'attempts-exhausted', h);
      return;
    }
    ctx.metrics.count(METRIC.jobsFailed);
    ctx.emit('retried', job, `${after.lastError?.message ?? 'failed'}; retry in ${Math.round(delay * 10) / 10} s`);
    log.warn({ err, retryInSeconds: Math.round(delay * 10) / 10 }, 'attempt failed; will retry');
    await this.hideFor(h, Math.ceil(delay), after.runAfter);
  }

  /**
   * The job's next try rides on its message, hidden `seconds` — unless SQS would dead-letter it at
   * its next receive (a job may allow more attempts than the queue's maxReceiveCount, and
   * duplicates spend receives too), or the message is older than MAX_WAITING_MESSAGE_AGE_SECONDS
   * (a long attempt: the queue-age alarm counts its run) or the wait is longer: then a fresh
   * message (receive count 0), due at `runAfter`, is queued through the outbox and this one
   * deleted. A receipt that no longer works gets one too.
   */
  private async hideFor(h: Held, seconds: number, runAfter: Date): Promise<void> {
    const replace = h.receiptStale ? null : this.messages.replaceBeforeWaiting(h.message, seconds);
    if (replace) {
      if (await this.messages.republish([h.job.id], runAfter)) {
        const why =
          replace === 'near-redrive'
            ? 'replaced by a fresh message before SQS would redrive it'
            : 'replaced by a fresh message: too old to wait again';
        this.messages.delete(h.message, why);
        return;
      }
      if (replace === 'near-redrive') return; // as before: left in flight, it returns when its visibility runs out
    }
    const failures = h.receiptStale ? [{ stale: true }] : await this.messages.changeVisibility([{ receipt: h.message.receipt, seconds }]);
    if (failures.length > 0) await this.messages.republish([h.job.id], runAfter);
  }

  /**
   * A job of a type this worker has no handler for: a deploy half done (newer tasks enqueue a type
   * the older workers lack), not a failure of the job. Handed back without spending an attempt,
   * still due since it was, its message hidden UNKNOWN_TYPE_RETRY_SECONDS for a worker that has
   * the type (a fresh message when SQS would otherwise redrive this one). If none ever takes it,
   * it shows in `jobs stuck` once due for JOBS_STUCK_PENDING_SECONDS, which pages (*jobs stuck*).
   */
  async handOnUnknownType(h: Held, log: AttemptLog): Promise<void> {
    const { ctx } = this;
    const { job } = h;
    await this.handOn(
      h,
      `no handler for job type "${job.type}" in worker ${ctx.workerId} (known: ${ctx.opts.registry.types().join(', ')}): left for a worker that has it`,
      log,
    );
  }

  /**
   * A job whose payload has fields this worker's schema lacks and the type's latest registration
   * has (a newer image, its deploy half done; executor.ts): handed on as a job of an unknown type is.
   */
  async handOnNewerPayload(h: Held, fields: string[], log: AttemptLog): Promise<void> {
    const { ctx } = this;
    await this.handOn(
      h,
      `payload field(s) ${fields.join(', ')} of "${h.job.type}" are not known to worker ${ctx.workerId}, an older image than the type's latest registration: left for a worker that knows them`,
      log,
    );
  }

  private async handOn(h: Held, why: string, log: AttemptLog): Promise<void> {
    const { ctx } = this;
    const { job } = h;
    let released: Set<string>;
    try {
      released = await ctx.store.release([h.token], why, { keepDue: true });
    } catch (err) {
      log.error({ err }, 'could not hand on the job; it is reclaimed when its lease runs out');
      return;
    }
    if (!released.has(job.id)) {
      this.heartbeat.loseLease(h, 'release');
      return;
    }
    h.settled = true;
    log.warn({ retryInSeconds: UNKNOWN_TYPE_RETRY_SECONDS }, `${why} (a deploy in progress?)`);
    ctx.emit('released', job, why);
    await this.hideFor(h, UNKNOWN_TYPE_RETRY_SECONDS, new Date(Date.now() + UNKNOWN_TYPE_RETRY_SECONDS * 1000));
  }

  /** Graceful stop (DESIGN 10): abort these jobs' handlers and hand the jobs back, fenced, visible at once. */
  async release(left: Held[]): Promise<void> {
    const { ctx } = this;
    for (const h of left) {
      h.released = true;
      ctx.abortHandler(h, new Error('worker stopping: job released to another worker'));
    }
    try {
      await this.handBack(left, `worker ${ctx.workerId} stopped before the job finished`, 'worker stopping');
    } catch (err) {
      if (isDatabaseUnavailable(err)) {
        // Released once the database answers, while the stop drains (worker.ts): before, they
        // waited out their leases and the rescuer counted their attempts, one on its last dying.
        this.lost.note(
          left.map((h) => h.token),
          'stopping',
        );
        ctx.log.warn(
          { err, jobs: left.length },
          'database unreachable while stopping: the jobs are released once it answers, within the drain',
        );
      } else ctx.log.error({ err }, 'release failed; the jobs will be reclaimed when their leases expire');
    }
  }

  /**
   * The attempt's own transaction lost its connection (a failover, a reset: `err`): the outage's
   * fault, not the job's, so the attempt is not counted (before, the job failed it, and one on its
   * last attempt died). Released (fenced by attempt: a COMMIT that landed after all matches
   * nothing) with a fresh message, to run again; the database not answering, noted and released
   * once it does (lost-claims.ts). Its effects since its last checkpoint rolled back with the
   * connection. Past INTERRUPTED_RELEASE_LIMIT such releases of the job, it fails as any attempt.
   */
  async releaseInterrupted(h: Held, err: unknown, log: AttemptLog): Promise<void> {
    let released: ReleasedJob[];
    try {
      // Settled in the turn the release commits: a renewal answered during the publish must not read a lost lease.
      released = await this.lost.releaseNow([h.token], 'connection-lost', (r) => {
        if (r.length > 0) h.settled = true;
      });
    } catch (dbErr) {
      if (isDatabaseUnavailable(dbErr)) this.lost.note([h.token], 'connection-lost');
      else log.error({ err: dbErr, cause: err }, 'could not release the interrupted attempt; the job is reclaimed once its lease runs out');
      return;
    }
    // Past the limit, or no longer ours: failed as any attempt (fenced: a lost lease then).
    if (released.length === 0) return this.fail(h, err, false, log);
    log.warn({ err }, "the job's database connection was lost (a failover or a reset): attempt released, not counted");
    this.messages.delete(h.message, 'replaced by a fresh message: the attempt was released', h);
  }

  /**
   * Jobs claimed ahead whose leases ran out in an outage before they started (heartbeat.ts):
   * released unstarted, fenced by attempt (no attempt spent), their messages shown. What the
   * database could not be asked about goes to `note`, released once it answers (lost-claims.ts).
   */
  async releaseUnstarted(jobs: Held[]): Promise<void> {
    const { ctx } = this;
    try {
      await this.handBack(
        jobs,
        `worker ${ctx.workerId} claimed it ahead; its lease ran out before it started, the database not answering`,
        'unstarted',
      );
      // Their key's or type's next job may start now (key-wake.ts).
      if (jobs.some((h) => h.job.concurrencyKey || h.job.typeSlot)) ctx.keyWake.nudge();
    } catch (err) {
      if (isDatabaseUnavailable(err))
        this.lost.note(
          jobs.map((h) => h.token),
          'lease-ran-out',
        );
      else
        ctx.log.error({ err, jobs: jobs.length }, 'could not release jobs claimed ahead whose leases ran out; the rescuer re-queues them');
    }
  }

  /**
   * Hand claimed jobs back (fenced release in the database, then their messages visible at once,
   * or re-published when a receipt no longer works or the message is old: QueueMessages.showNow);
   * returns the ids released. Throws when the database could not be asked (nothing was released then).
   */
  async handBack(jobs: Held[], reason: string, detail: string): Promise<Set<string>> {
    const { ctx } = this;
    const released = await ctx.store.release(
      jobs.map((h) => h.token),
      reason,
    );
    const mine = jobs.filter((h) => released.has(h.job.id));
    for (const h of mine) h.settled = true;
    await this.messages.showNow(mine);
    for (const h of mine) {
      ctx.log.info({ jobId: h.job.id, type: h.job.type, attempt: h.token.attempt, why: detail }, 'job released');
      ctx.emit('released', h.job, detail);
    }
    return released;
  }

  /** Commit the completions still batched. */
  drain(): Promise<void> {
    return this.completions.drain();
  }
}
