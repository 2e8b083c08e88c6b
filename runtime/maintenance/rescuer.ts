// The rescuer: finds running jobs whose lease expired a grace period ago — their worker died,
// froze or lost the network, and their message may be gone — and puts them back to pending with
// a fresh message (or to dead on their final attempt). The next claim increments the attempt,
// so the old owner, should it wake up, is refused at every write. The direct path (the message
// returns after the lease and the claim reclaims the job) is usually faster; the rescuer is the
// net for messages a duplicate delivery deleted, a stale receipt handle could not extend, or a
// dead worker's open long poll swallowed.

import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import { settledWithin } from '../support/settled.ts';
import type { Logger } from '../observability/log.ts';
import type { JobStore } from '../store/job-store.ts';
import type { Job } from '../domain/job.ts';
import type { Publisher } from '../store/outbox.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { timed } from '../db/pool.ts';

export interface RescuerOptions {
  /** How long after lease expiry a job counts as abandoned. */
  graceSeconds: number;
  intervalMs: number;
  batchSize: number;
  /** Called for each job the rescuer sent to dead (the worker dead-letters its message); at most MAX_REPORTS_IN_FLIGHT at once. */
  onDead?: (job: Job) => Promise<void>;
  /** Counts the jobs each pass sent to dead, every one (the dead-jobs metric), reported or not. */
  countDead?: (n: number) => void;
  /** How long after the database answers again (a failover) the rescuer leaves expired leases to their owners (default OWNERS_FIRST_MS). */
  ownersFirstMs?: number;
}

/**
 * After a pass found the database unavailable (a failover), how long the rescuer waits, once it
 * answers again, before it rescues anything. Every lease ran out during a long outage, and each
 * owner, when the database returns, releases with no attempt spent the jobs the outage took from
 * it (claimed ahead and never started, an attempt whose connection was cut: worker/lost-claims.ts),
 * once its gate's probe answers (at most a second apart, worker/database-gate.ts). A rescuer that
 * went first counted an attempt for each, and a job on its last attempt died without having run
 * (review finding). A worker that did die is rescued a few seconds later.
 */
export const OWNERS_FIRST_MS = 5_000;

/** Dead-letter reports of one rescuer under way at once at most. */
const MAX_REPORTS_IN_FLIGHT = 10;
/** How long a stopping rescuer waits for its reports under way (a report cut off is sent again by the sweeper: a duplicate letter). */
const REPORTS_STOP_WAIT_MS = 3_000;

export class Rescuer {
  private readonly loop: MaintenanceLoop<Job[]>;
  private readonly reporting = new Set<Promise<void>>();

  constructor(
    private readonly store: JobStore,
    private readonly publisher: Publisher,
    private readonly log: Logger,
    private readonly opts: RescuerOptions,
  ) {
    this.loop = new MaintenanceLoop('rescuer', () => this.pass(), log, opts.intervalMs);
  }

  start(): void {
    this.loop.start();
  }

  /** Stops the loop, and waits for the reports under way at most REPORTS_STOP_WAIT_MS (the dead-report sweeper sends the rest). */
  async stop(): Promise<void> {
    await this.loop.stop();
    await settledWithin([...this.reporting], REPORTS_STOP_WAIT_MS);
  }

  runOnce(): Promise<Job[]> {
    return this.loop.runOnce();
  }

  /** A pass found the database unavailable; then, when it answered again (the monotonic clock: a wall clock stepping back would hold rescuing). */
  private outage = false;
  private answeredAt = Number.NEGATIVE_INFINITY;

  private async pass(): Promise<Job[]> {
    if (this.outage) {
      // Rescue nothing until the database has answered for a while (a failure here: still down).
      await this.store.pool.query(timed(this.store.pool, { text: 'SELECT 1' }));
      this.outage = false;
      this.answeredAt = performance.now();
      this.log.info(
        { ownersFirstMs: this.opts.ownersFirstMs ?? OWNERS_FIRST_MS },
        'rescuer: the database answers again; expired leases are left to their owners a little longer',
      );
    }
    if (performance.now() - this.answeredAt < (this.opts.ownersFirstMs ?? OWNERS_FIRST_MS)) return [];
    let moved: Awaited<ReturnType<JobStore['rescueExpired']>>;
    try {
      moved = await this.store.rescueExpired(this.opts.graceSeconds, this.opts.batchSize);
    } catch (err) {
      if (isDatabaseUnavailable(err)) this.outage = true;
      throw err;
    }
    for (const { job } of moved) {
      this.log.warn(
        { jobId: job.id, type: job.type, attempt: job.attempt, state: job.state, lastOwner: job.attemptLog.at(-1)?.owner },
        job.state === 'dead' ? 'rescuer: lease expired on the final attempt; job is dead' : 'rescuer: lease expired; job re-queued',
      );
    }
    await this.publisher.publish(
      moved.filter((m) => m.outboxId).map((m) => ({ outboxId: m.outboxId!, jobId: m.job.id, type: m.job.type, lane: m.job.lane })),
    );
    const dead = moved.filter((m) => m.job.state === 'dead').length;
    if (dead > 0) this.opts.countDead?.(dead);
    // The dead jobs' reports go on beside the next passes: each may wait out the DLQ's retries,
    // and awaited one by one they held rescuing (and the re-queued jobs' publish) for minutes
    // while the DLQ was unreachable (maintenance review). Beyond the limit in flight, and should a
    // report fail, the dead-report sweeper reports them.
    for (const { job } of moved) {
      if (job.state !== 'dead' || !this.opts.onDead || this.reporting.size >= MAX_REPORTS_IN_FLIGHT) continue;
      const report: Promise<void> = this.opts
        .onDead(job)
        .catch((err: unknown) =>
          this.log.warn({ err, jobId: job.id }, 'rescuer: dead-letter report failed; the dead-report sweeper retries it'),
        )
        .finally(() => this.reporting.delete(report));
      this.reporting.add(report);
    }
    return moved.map((m) => m.job);
  }
}
