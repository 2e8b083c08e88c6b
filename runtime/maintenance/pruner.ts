// The pruner: finished jobs, discarded dead jobs, poison messages and operator actions leave the
// tables once their retention is over (runtime/config/retention.ts, a type's keepFinishedDays),
// so the job table does not grow forever. What it never removes: a job a lasting idempotency key
// still returns (its key stays with it), a job that has not finished, and a dead job on-call has
// not discarded. The rules are in its statements (runtime/store/sql-retention.ts).
//
// Every worker runs it, once a minute. Each statement is its own short transaction over a batch
// of 500 rows locked with SKIP LOCKED, so two workers' pruners split the work, and a pass stops
// after a few batches: a backlog (the first pass after a long outage or an upgrade) drains over
// several passes instead of in one long burst of writes.

import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import type { Retention } from '../config/retention.ts';
import type { Logger } from '../observability/log.ts';
import { run, type Queryable } from '../store/job-store.ts';

export interface PrunerOptions {
  retention: Pick<Retention, 'discardedDeadDays' | 'poisonDays' | 'operatorActionDays'>;
  intervalMs?: number;
  /** Rows per statement. */
  batchSize?: number;
  /** Statements per table and pass, at most. */
  maxBatches?: number;
}

/** What one pass removed (jobs: deleted; postponed: looked at and not due yet). */
export interface PruneCounts {
  jobs: number;
  postponed: number;
  keys: number;
  deadJobs: number;
  poisonMessages: number;
  operatorActions: number;
}

export class Pruner {
  private readonly loop: MaintenanceLoop<PruneCounts>;
  private readonly batchSize: number;
  private readonly maxBatches: number;

  constructor(
    private readonly db: Queryable,
    private readonly log: Logger,
    private readonly opts: PrunerOptions,
  ) {
    this.batchSize = opts.batchSize ?? 500;
    this.maxBatches = opts.maxBatches ?? 10;
    this.loop = new MaintenanceLoop('pruner', () => this.pass(), log, opts.intervalMs ?? 60_000);
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  runOnce(): Promise<PruneCounts> {
    return this.loop.runOnce();
  }

  private async pass(): Promise<PruneCounts> {
    const c: PruneCounts = { jobs: 0, postponed: 0, keys: 0, deadJobs: 0, poisonMessages: 0, operatorActions: 0 };
    const { discardedDeadDays, poisonDays, operatorActionDays } = this.opts.retention;
    for (let i = 0; i < this.maxBatches; i++) {
      const r = (await run(this.db, 'jobPrune', [this.batchSize, discardedDeadDays])).rows[0]!;
      c.jobs += r.pruned;
      c.postponed += r.postponed;
      c.keys += r.keys;
      c.deadJobs += r.dead;
      if (r.pruned + r.postponed < this.batchSize) break;
    }
    c.poisonMessages = await this.batches('poisonPrune', poisonDays);
    c.operatorActions = await this.batches('operatorActionPrune', operatorActionDays);
    if (c.jobs + c.poisonMessages + c.operatorActions > 0) this.log.info({ pruned: c }, 'pruner: removed what is past its retention');
    return c;
  }

  private async batches(name: 'poisonPrune' | 'operatorActionPrune', days: number): Promise<number> {
    let total = 0;
    for (let i = 0; i < this.maxBatches; i++) {
      const n = (await run(this.db, name, [days, this.batchSize])).rowCount ?? 0;
      total += n;
      if (n < this.batchSize) break;
    }
    return total;
  }
}
