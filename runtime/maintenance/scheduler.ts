// The scheduler: every API and worker task runs one over the schedules declared in code
// (handlers/schedules.ts), and the database decides which task enqueues an occurrence
// (store/schedules.ts): exactly one job per occurrence however many tasks run, and the
// occurrences that fell while every task was down are handled by the schedule's missed policy
// when the first task comes back. Nothing new to deploy, and it works the same locally.
//
// A pass costs nothing while no occurrence is due: each schedule's next occurrence is known in
// memory (from the settled_through the database returned), and only a due one opens a
// transaction. The clock is injectable (tests step it through months and daylight-saving
// changes without waiting).

import type pg from 'pg';
import { LATE_AFTER_MS, MAX_CATCH_UP, nextOccurrence, planOccurrences, type ScheduleDefinition } from '../handlers/schedule.ts';
import type { Logger } from '../observability/log.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Metrics } from '../observability/metrics.ts';
import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import type { JobClient } from '../store/client.ts';
import { type ClockSample, ScheduleStore, type FiredOccurrence } from '../store/schedules.ts';

/** How often a task looks for due occurrences: an occurrence is enqueued at most this late while a task runs. */
export const DEFAULT_SCHEDULER_INTERVAL_MS = 5000;

/** A sample of the database's clock older than this is taken again (the monotonic clock drifts little). */
const CLOCK_SAMPLE_MAX_AGE_MS = 10 * 60_000;
/** The wall clock and the monotonic clock disagreeing by this much since the sample: the wall clock stepped (or the VM paused); sample again. */
const CLOCK_STEP_MS = 1000;

export interface SchedulerOptions {
  pool: pg.Pool;
  /** Enqueues the occurrences' jobs (validated as any enqueue) in the pass's transaction. */
  client: JobClient;
  schedules: readonly ScheduleDefinition[];
  log: Logger;
  /**
   * The time (tests step it through months). Default: the database's clock decides what is due
   * (store/schedules.ts pass), so a task whose clock runs ahead enqueues nothing early; and the
   * database's clock, as last sampled and carried forward on the monotonic clock, says when to
   * look, so a task whose own clock runs behind (or steps) does not reach an occurrence late
   * (under `skip`, not at all). Sampled by every pass that opens a transaction, and on its own
   * when the last sample is CLOCK_SAMPLE_MAX_AGE_MS old or the wall clock has stepped since.
   */
  clock?: () => Date;
  intervalMs?: number;
  /** Counts SchedulePassesFailed (the worker's CloudWatch metrics; the "schedule failing" alarm watches it). */
  metrics?: Pick<Metrics, 'count'>;
  /** Called after the COMMIT for each occurrence enqueued (the live view's feed). Must not throw. */
  onFired?: (schedule: ScheduleDefinition, fired: FiredOccurrence) => void | Promise<void>;
}

export interface SchedulerPass {
  fired: { schedule: string; occurrence: string; jobId: string; late: boolean; duplicate: boolean }[];
  /** Schedules another task was handling (or whose row was just created): looked at again next pass. */
  busy: string[];
  /** Schedules whose pass failed (logged): looked at again next pass. */
  failed: string[];
}

export class Scheduler {
  private readonly store: ScheduleStore;
  private readonly loop: MaintenanceLoop<SchedulerPass>;
  private readonly clock: () => Date;
  /** Each schedule's next occurrence to act on (null: none ever); empty until the rows are ensured. */
  private readonly nextDue = new Map<string, Date | null>();
  /** Each schedule's due occurrence that a pass tried in its time and failed (a failover): `skip` still runs it. */
  private readonly triedInTime = new Map<string, Date>();
  /** The last sample of the database's clock (store/schedules.ts ClockSample), and the wall clock then. */
  private dbClock: { dbMs: number; perfMs: number; wallMs: number } | undefined;

  constructor(private readonly opts: SchedulerOptions) {
    this.store = new ScheduleStore(opts.pool, opts.client);
    this.clock = opts.clock ?? (() => (this.dbClock ? new Date(this.dbClock.dbMs + performance.now() - this.dbClock.perfMs) : new Date()));
    const interval = opts.intervalMs ?? DEFAULT_SCHEDULER_INTERVAL_MS;
    // The first pass soon after start: it creates the rows of new schedules and catches up.
    this.loop = new MaintenanceLoop('scheduler', () => this.pass(), opts.log, interval, Math.min(interval, 1000));
  }

  start(): void {
    if (this.opts.schedules.length > 0) this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One pass now, at the clock's time. */
  runOnce(): Promise<SchedulerPass> {
    return this.loop.runOnce();
  }

  private sampled(s: ClockSample): void {
    if (s.dbClock) this.dbClock = { ...s.dbClock, wallMs: Date.now() - (performance.now() - s.dbClock.perfMs) };
  }

  /** A fresh sample when the last is old, or the wall clock stepped since (NTP, a VM paused): both clocks should agree on the time since. */
  private async resampleIfStale(): Promise<void> {
    if (this.opts.clock) return;
    const c = this.dbClock;
    const sinceMono = c ? performance.now() - c.perfMs : Number.POSITIVE_INFINITY;
    const sinceWall = c ? Date.now() - c.wallMs : Number.POSITIVE_INFINITY;
    if (sinceMono < CLOCK_SAMPLE_MAX_AGE_MS && Math.abs(sinceWall - sinceMono) < CLOCK_STEP_MS) return;
    // Best effort: without a fresh sample the last one (or the system clock) still serves.
    this.sampled(await this.store.sampleClock().catch(() => ({})));
  }

  private async pass(): Promise<SchedulerPass> {
    if (this.nextDue.size > 0) await this.resampleIfStale();
    let now = this.clock();
    // What the store plans at: the injected clock, or the database's (null).
    const at = this.opts.clock ? now : null;
    const out: SchedulerPass = { fired: [], busy: [], failed: [] };
    if (this.nextDue.size === 0 && this.opts.schedules.length > 0) {
      const settled = await this.store
        .ensure(
          this.opts.schedules.map((s) => s.name),
          at,
        )
        .catch((err: unknown) => {
          // No schedule can fire until this works: counted as every schedule's pass failing.
          this.opts.metrics?.count(METRIC.schedulePassesFailed, this.opts.schedules.length);
          throw err;
        });
      this.sampled(settled);
      if (!this.opts.clock) now = this.clock();
      for (const s of this.opts.schedules) this.nextDue.set(s.name, nextOccurrence(s, settled.get(s.name) ?? now));
    }
    for (const def of this.opts.schedules) {
      const due = this.nextDue.get(def.name);
      if (!due || due > now) continue;
      try {
        const r = await this.store.pass(def, at, this.triedInTime.get(def.name));
        if (r.kind === 'busy') {
          out.busy.push(def.name);
          continue;
        }
        this.sampled(r);
        if (r.kind === 'paused') {
          // Looked at again at its next occurrence: still paused, or resumed (settled through the resume).
          this.nextDue.set(def.name, nextOccurrence(def, now));
          continue;
        }
        this.nextDue.set(def.name, nextOccurrence(def, r.settledThrough));
        if (r.plan.through) this.triedInTime.delete(def.name);
        await r.afterCommit();
        const { plan } = r;
        if (plan.notRun > 0) {
          this.opts.log.warn(
            {
              schedule: def.name,
              missed: def.missed,
              notRun: plan.notRun,
              moreNotRun: plan.moreNotRun,
              through: plan.through?.toISOString(),
            },
            `schedule ${def.name}: ${plan.moreNotRun ? 'at least ' : ''}${plan.notRun} missed occurrence(s) not run (missed: ${def.missed}${
              def.missed === 'all' ? `; at most the latest ${MAX_CATCH_UP} are caught up` : ''
            })`,
          );
        }
        for (const k of r.skipped) {
          const d = k.doneBy;
          this.opts.log.warn(
            { schedule: def.name, occurrence: k.occurrence.label, workKey: d.workKey, doneBy: d },
            `schedule ${def.name}: occurrence ${k.occurrence.label} not enqueued: its work ${d.workKey} was done already by ${d.jobId ? `job ${d.jobId}` : 'a job'} (schedule ${d.schedule}, ${d.manual ? 'a trigger' : 'its occurrence'} at ${d.occurrenceAt.toISOString()})`,
          );
        }
        for (const f of r.fired) {
          out.fired.push({ schedule: def.name, occurrence: f.occurrence.label, jobId: f.job.id, late: f.late, duplicate: f.duplicate });
          this.opts.log.info(
            { schedule: def.name, occurrence: f.occurrence.label, jobId: f.job.id, type: f.job.type, late: f.late, duplicate: f.duplicate },
            `schedule ${def.name}: occurrence ${f.occurrence.label} enqueued${f.late ? ' (late: caught up)' : ''}`,
          );
          await this.opts.onFired?.(def, f);
        }
      } catch (err) {
        out.failed.push(def.name);
        this.opts.metrics?.count(METRIC.schedulePassesFailed);
        // The newest occurrence due now (a failover longer than the schedule's period passes several):
        // tried within its minute, `skip` still runs it once the database answers.
        const newest = planOccurrences(def, new Date(due.getTime() - 1), now).through;
        if (newest && now.getTime() - newest.getTime() <= LATE_AFTER_MS) this.triedInTime.set(def.name, newest);
        // The occurrence stays due and the next pass tries it again (once it is late, the
        // schedule's missed policy decides whether it still runs).
        const overdueSeconds = Math.max(0, Math.round((now.getTime() - due.getTime()) / 1000));
        this.opts.log.warn(
          { err, schedule: def.name, due: due.toISOString(), overdueSeconds },
          `schedule ${def.name}: pass failed, its occurrence due ${due.toISOString()} not enqueued (${overdueSeconds} s overdue); retrying at the next pass`,
        );
      }
    }
    return out;
  }
}
