// The heartbeat (DESIGN 4, 12): one tick renews every lease this worker holds in one fenced
// statement and extends their messages' visibility; a lease the database refused, or one that
// ran out before the database could renew it, is lost: its handler is aborted and this worker
// never completes or fails that job. The renewal and the extension are in flight independently:
// SQS answering slowly (throttling, retries of calls that time out) must not hold up the renewal
// in PostgreSQL, where the lease is decided, or every job would lose its lease to a slow queue.

import { SQS_MAX_VISIBILITY_SECONDS } from '../config/rules.ts';
import { LeaseLostError } from '../domain/errors.ts';
import { isTerminal } from '../domain/job.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Held, WorkerContext } from './held.ts';
import type { QueueMessages } from './messages.ts';

export class Heartbeat {
  private timer: NodeJS.Timeout | null = null;
  /** The renewal in flight (PostgreSQL), and the visibility extension in flight (SQS): one of each at a time. */
  private renewing: Promise<void> | null = null;
  private extending: Promise<void> | null = null;

  constructor(
    private readonly ctx: WorkerContext,
    private readonly messages: QueueMessages,
    /** The fetcher's database gate: a renewal that could not reach the database closes it. */
    private readonly onDatabaseUnavailable: (err: unknown) => void,
    /** Jobs claimed ahead whose leases ran out before they started: the worker releases them unstarted (worker.ts). */
    private readonly onUnstartedGivenUp: (held: Held[]) => void = () => undefined,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.ctx.opts.timings.heartbeatSeconds * 1000);
  }

  /** No further ticks (a crash: the renewal in flight is left alone). */
  halt(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** No further ticks, and the renewal in flight has ended (an extension still on its way to SQS is left to finish). */
  async stop(): Promise<void> {
    this.halt();
    await this.renewing;
  }

  /**
   * One tick: renew every lease in one statement, extend the messages, abort what is lost.
   * Resolves once the renewal and the extension it started (or the one still in flight) have ended.
   */
  async tick(): Promise<void> {
    // Every tick, even while the previous renewal still hangs on an unreachable database: a
    // lease this worker could not renew before it ran out is lost, whatever happens next.
    this.fenceUnrenewed();
    this.renewing ??= this.renew().finally(() => {
      this.renewing = null;
    });
    await this.renewing;
    await this.extending;
  }

  private async renew(): Promise<void> {
    const { ctx } = this;
    const t = ctx.opts.timings;
    const entries = [...ctx.held.values()].filter((h) => !h.lost && !h.released && !h.settled);
    if (entries.length === 0) return;
    const sentProgress = entries.map((h) => h.unsentProgress);
    // The renewed lease runs from the statement, which is after this moment (see fenceUnrenewed).
    const now = performance.now();
    let held: Set<string>;
    try {
      held = await ctx.store.renewLeases(
        entries.map((h, i) => ({ ...h.token, progress: sentProgress[i] })),
        t.leaseSeconds,
      );
    } catch (err) {
      if (isDatabaseUnavailable(err)) this.onDatabaseUnavailable(err);
      ctx.log.warn({ err, jobs: entries.length }, 'heartbeat could not reach the database');
      this.fenceUnrenewed();
      // A job whose completion waits for the database keeps its message hidden (SQS is up in a
      // database failover): back in the queue, another worker would claim the job from its own
      // completion once the database answers, and run it again (on its last attempt: dead).
      this.extendCompleting(entries);
      return;
    }
    const renewed: Held[] = [];
    entries.forEach((h, i) => {
      // Given up while the renewal was on its way (fenceUnrenewed: it took longer than the lease):
      // not ours any more, whatever the database answered; its lease was expired by the give-up.
      if (h.lost || h.released) return;
      // Settled here while the renewal was on its way (completed, failed): not ours to renew, not lost.
      if (h.settled || ctx.held.get(h.job.id) !== h) return;
      if (!held.has(h.job.id)) {
        // Its completion, fenced by attempt, gives the verdict: after an outage longer than the
        // lease the renewal matches nothing (the lease ran out) while the job is still ours.
        if (h.completing) return;
        this.loseLease(h, 'heartbeat');
        return;
      }
      h.lastRenewedAt = now;
      if (h.unsentProgress === sentProgress[i]) h.unsentProgress = null;
      renewed.push(h);
    });
    for (const h of renewed) ctx.emit('lease-renewed', { id: h.job.id, type: h.job.type, attempt: h.token.attempt });
    // The extension goes on its own: the next renewal does not wait for it. While one is still
    // on its way (SQS slow), this tick's is skipped. A message whose visibility runs out meanwhile
    // comes back to a receiver that finds the lease live in the database and deletes it as a
    // duplicate (settlement.ts); the job is safe in its lease, and should this worker die, the
    // rescuer re-queues it once the lease has run out.
    this.extendCompleting(entries, renewed);
  }

  /**
   * Extend `renewed`'s messages and those of `entries` whose completion is under way (their leases
   * renewed or not), unless an extension is still on its way.
   */
  private extendCompleting(entries: Held[], renewed: Held[] = []): void {
    const all = [...renewed, ...entries.filter((h) => h.completing && !renewed.includes(h))];
    if (all.length === 0) return;
    this.extending ??= this.extend(all).finally(() => {
      this.extending = null;
    });
  }

  private async extend(renewed: Held[]): Promise<void> {
    const { ctx } = this;
    // The message returns when the lease would expire: if this worker dies now, the next receiver
    // finds the lease expired and reclaims the job at once, within one lease of the death. (The
    // extension is sent after the renewal committed, so it ends a few milliseconds after the lease;
    // a message that still arrives early is hidden again until the lease has run out.)
    const seconds = Math.min(SQS_MAX_VISIBILITY_SECONDS, Math.ceil(ctx.opts.timings.leaseSeconds));
    const live = renewed.filter((h) => !h.receiptStale && ctx.held.get(h.job.id) === h && !h.lost && !h.released && !h.settled);
    if (live.length === 0) return;
    const failures = await this.messages.changeVisibility(live.map((h) => ({ receipt: h.message.receipt, seconds })));
    for (const f of failures) {
      const h = live.find((x) => x.message.receipt === f.receipt);
      if (h && f.stale) {
        h.receiptStale = true;
        ctx.log.info(
          { jobId: h.job.id, attempt: h.token.attempt },
          'message handle is stale (the message was delivered again); the lease still protects the job',
        );
      }
    }
  }

  /**
   * Self-fence (DESIGN 4, 12): a job whose lease this worker could not renew before it ran out
   * may already belong to another worker, so its handler is aborted as a lost lease. Its
   * transaction, if the database dropped it, was lost anyway; its message is left to return.
   * A job claimed ahead that never started (no handler slot yet) is no lost lease: it is given up
   * unstarted, and the worker releases it with no attempt spent (its claim counted one: left to
   * the rescuer, a job on its last attempt died without having run).
   */
  fenceUnrenewed(): void {
    const deadline = performance.now() - this.ctx.opts.timings.leaseSeconds * 1000;
    const fenced: Held[] = [];
    const unstarted: Held[] = [];
    for (const h of this.ctx.held.values()) {
      // A settled job (its row no longer running through us) has no lease left to lose; one whose
      // handler is done and wrote nothing waits for its fenced completion (completer.ts).
      if (h.lost || h.released || h.settled || h.completing || h.lastRenewedAt >= deadline) continue;
      if (!h.started) {
        h.released = true; // the heartbeat leaves it alone from here, and it never starts
        unstarted.push(h);
        continue;
      }
      this.loseLease(h, 'heartbeat (the lease ran out before the database could renew it)', true);
      fenced.push(h);
    }
    if (fenced.length > 0) void this.giveUp(fenced);
    if (unstarted.length > 0) this.onUnstartedGivenUp(unstarted);
  }

  /**
   * Make self-fenced jobs claimable now, where the database may still hold them for us: a renewal
   * or a claim that reached the database late (a slow pool, a stalled connection) gave the lease
   * a fresh term after this worker had given the job up, and its returning message would have
   * been deleted as a duplicate of a live lease, leaving the job to the rescuer. Their leases are
   * ended (a renewal for 0 s, fenced by attempt; a late renewal after it finds the lease expired
   * and renews nothing) and their messages made visible, so the next claim takes them with the
   * attempt counted, as for a dead worker. Best effort: with the database gone, the leases run out.
   */
  private async giveUp(fenced: Held[]): Promise<void> {
    const { ctx } = this;
    try {
      await ctx.store.renewLeases(
        fenced.map((h) => h.token),
        0,
      );
      await this.messages.showNow(fenced);
    } catch (err) {
      ctx.log.debug({ err, jobs: fenced.length }, 'could not end the leases this worker gave up; they run out by themselves');
    }
  }

  /**
   * The database refused a fenced write of this job (`during` says which): the job is no longer
   * ours. The handler is aborted at once; then the job row says why. Cancelled by an operator: said
   * at info, not counted as a lost lease (three cancels of running postings paged on-call for
   * "jobs running twice"). Anything else, or a row that cannot be read: a lost lease, counted.
   */
  loseLease(h: Held, during: string, unrenewed = false, succeededHere?: () => void): void {
    if (h.lost) return;
    const { ctx } = this;
    h.lost = true;
    ctx.abortHandler(h, new LeaseLostError(h.job.id, h.token.attempt, during));
    const lost = () => {
      ctx.metrics.count(METRIC.leasesLost);
      ctx.emit('lease-lost', { id: h.job.id, type: h.job.type, attempt: h.token.attempt }, during);
      ctx.log.warn(
        { jobId: h.job.id, type: h.job.type, attempt: h.token.attempt, during },
        'lease lost; handler aborted, this worker will not complete or fail the job',
      );
    };
    // Not renewed in time (the database hung or was gone): a lost lease whatever the row says, counted now.
    if (unrenewed) {
      lost();
      return;
    }
    void ctx.store
      .get(h.job.id)
      .then((j) => {
        if (j?.state === 'cancelled') {
          ctx.log.info(
            { jobId: h.job.id, type: h.job.type, attempt: h.token.attempt, cancelledBy: j.cancelledBy },
            'job cancelled while it ran; handler aborted',
          );
        } else if (j?.state === 'succeeded' && j.attempt === h.token.attempt) {
          // This very attempt completed it (only its fenced completion can): just before the
          // renewal was answered, or a completion that committed and whose answer was lost (its
          // retry then matched nothing): a success to count, with its message deleted there.
          if (succeededHere) return succeededHere();
          ctx.log.debug({ jobId: h.job.id, attempt: h.token.attempt, state: j.state }, 'job already settled by this attempt');
        } else lost();
        // If the job ended (cancelled), our message is a leftover: delete it.
        if (j && isTerminal(j.state) && !h.receiptStale) this.messages.delete(h.message, `job is ${j.state}`);
      })
      .catch(lost);
  }
}
