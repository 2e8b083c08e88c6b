// The dead-report sweeper: every dead job's report reaches the DLQ (DESIGN 9), even when the
// worker that killed the job could not send it. The worker sends the report right after the
// death commits and marks it sent (store/dead-reports.ts); in between it can be SIGKILLed, its
// task stopped, or the DLQ can refuse all three tries. Its message then comes back, finds the job
// terminal and is deleted, so nothing else would ever page on-call for that job. Every worker
// task runs this loop: deaths still unreported a grace period later are claimed (one sweeper
// each), reported with the reason their row gives, and marked.
//
// The grace covers the sender's own tries (three, 1.4 s of backoff between them, each a DLQ call)
// so that a slow sender and the sweeper rarely both send; when they do, the DLQ holds two
// letters naming the same dead job, and both are judged by that one job row. A claim that fails
// to send is tried again after `retrySeconds`.

import type pg from 'pg';
import type { JobTimings } from '../config/rules.ts';
import type { DeadLetterReason } from '../domain/events.ts';
import type { Job } from '../domain/job.ts';
import { deadJobReason } from '../domain/settlement.ts';
import type { Logger } from '../observability/log.ts';
import { claimUnreportedDeaths, sendFailed, stillUnreported } from '../store/dead-reports.ts';
import { MaintenanceLoop } from '../support/maintenance-loop.ts';

export interface DeadReportTimings {
  intervalMs: number;
  /** A death younger than this is left to its own sender. */
  graceSeconds: number;
  /** A claimed death whose report failed is tried again this long after. */
  retrySeconds: number;
  batchSize: number;
}

/** From the job timings: a pass per heartbeat (1 to 10 s); the grace and retry a lease (at least 10 s). */
export function deadReportTimings(t: Pick<JobTimings, 'leaseSeconds' | 'heartbeatSeconds'>): DeadReportTimings {
  const grace = Math.max(10, t.leaseSeconds);
  return {
    intervalMs: Math.max(1000, Math.min(10_000, t.heartbeatSeconds * 1000)),
    graceSeconds: grace,
    retrySeconds: grace,
    batchSize: 100,
  };
}

export interface SweepPass {
  claimed: number;
  reported: number;
}

export class DeadReportSweeper {
  private readonly loop: MaintenanceLoop<SweepPass>;
  private stopping = false;

  constructor(
    private readonly o: {
      pool: pg.Pool;
      /** Sends the report and marks it sent (the worker's DeadLetters.reportDeadJob); false if the DLQ refused it. */
      report: (job: Job, reason: DeadLetterReason) => Promise<boolean>;
      log: Logger;
      timings: DeadReportTimings;
    },
  ) {
    this.loop = new MaintenanceLoop('dead-report sweeper', () => this.pass(), o.log, o.timings.intervalMs);
  }

  start(): void {
    this.loop.start();
  }

  /** Ends the pass in progress after the report being sent (a DLQ outage would hold a stop for 1.4 s a report); what it claimed is tried again after retrySeconds. */
  stop(): Promise<void> {
    this.stopping = true;
    return this.loop.stop();
  }

  runOnce(): Promise<SweepPass> {
    return this.loop.runOnce();
  }

  private async pass(): Promise<SweepPass> {
    const t = this.o.timings;
    const jobs = await claimUnreportedDeaths(this.o.pool, t.graceSeconds, t.retrySeconds, t.batchSize);
    let reported = 0;
    for (const claimed of jobs) {
      if (this.stopping) break;
      // Claimed maybe long ago (a DLQ that hangs makes each report minutes): reported, discarded
      // or redriven since, it is not reported (review: stale and duplicate letters kept the DLQ
      // alarm on, and nothing dropped them).
      const still = await stillUnreported(this.o.pool, claimed);
      if (!still) continue;
      const { job } = still;
      const reason = deadJobReason(job);
      const sent = await this.o.report(job, reason);
      if (sent) reported++;
      else await sendFailed(this.o.pool, still).catch(() => undefined); // else tried again after the send bound
      this.o.log[sent ? 'warn' : 'error'](
        { jobId: job.id, type: job.type, reason, deadAt: job.finishedAt, lastOwner: job.attemptLog.at(-1)?.owner ?? null },
        sent
          ? 'dead job had no report on the DLQ (its worker stopped before sending it, or the DLQ refused it); reported now'
          : `dead job still has no report on the DLQ (the DLQ refused it); trying again in ${t.retrySeconds} s`,
      );
    }
    return { claimed: jobs.length, reported };
  }
}
