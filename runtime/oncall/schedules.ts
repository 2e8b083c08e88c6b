// On-call's view of the schedules (`jobs schedules list|pause|resume|trigger`, the same under
// /v1/schedules): each declared schedule with its next occurrences and its last ones (with their
// jobs' states), paused or not and by whom; pause and resume, which hold across every task and
// restart because the scheduler reads them from the database; and trigger, one job now. Each
// change is recorded in jobs.operator_action in the transaction that makes it.

import type pg from 'pg';
import { ValidationError } from '../domain/errors.ts';
import { nextOccurrence, nextOccurrences, occurrence, type ScheduleDefinition } from '../handlers/schedule.ts';
import type { JobClient } from '../store/client.ts';
import { ScheduleStore } from '../store/schedules.ts';
import { JobStore } from '../store/job-store.ts';
import type { Job } from '../domain/job.ts';
import { operatorName } from './db.ts';

/** A schedule as on-call sees it. */
export interface ScheduleView {
  name: string;
  description: string | null;
  cron: string;
  timeZone: string;
  type: string;
  missed: ScheduleDefinition['missed'];
  paused: { at: string; by: string; reason: string | null } | null;
  /** The next occurrences by the cron expression (while paused they will not run). */
  next: { at: string; label: string }[];
  /** The newest occurrences enqueued, newest first. */
  last: {
    at: string;
    label: string;
    jobId: string | null;
    state: string | null;
    late: boolean;
    firedAt: string;
    /** Not enqueued: the schedule's work key says its work was done, by this job (in this state; null: gone). */
    skipped: { workKey: string; jobId: string | null; state: string | null } | null;
  }[];
  /** Occurrences up to here are settled (enqueued, missed by policy, or before the schedule was first seen or resumed). */
  settledThrough: string | null;
  /**
   * The first unsettled occurrence, when it has been due for more than a minute and the schedule
   * is not paused: no task has managed to enqueue it (its passes fail, or no task runs). Null
   * otherwise.
   */
  overdue: { at: string; label: string; seconds: number } | null;
}

/** A trigger that enqueued nothing: the schedule's work key says the work was done, by this. */
export interface AlreadyDone {
  workKey: string;
  /** The schedule whose occurrence (or trigger) did it. */
  schedule: string;
  /** Its occurrence's label, or `trigger at <instant>`. */
  occurrence: string;
  /** Its job (null: enqueued by a task that died before it recorded the job, or no longer kept). */
  jobId: string | null;
}

/** A due occurrence not enqueued after this long is shown overdue (the schedulers look every 5 s). */
export const OVERDUE_AFTER_MS = 60_000;

export class ScheduleService {
  private readonly store: ScheduleStore;
  private readonly jobs: JobStore;
  private readonly byName: Map<string, ScheduleDefinition>;

  constructor(
    pool: pg.Pool,
    client: JobClient,
    readonly schedules: readonly ScheduleDefinition[],
    /** The time (tests step it); default the database's for pause, resume and trigger, this machine's for list. */
    private readonly clock?: () => Date,
  ) {
    this.store = new ScheduleStore(pool, client);
    this.jobs = new JobStore(pool);
    this.byName = new Map(schedules.map((s) => [s.name, s]));
  }

  /** The declaration of `name`, or a ValidationError listing the known ones. */
  definition(name: string): ScheduleDefinition {
    const def = this.byName.get(name);
    if (!def) {
      const known = [...this.byName.keys()].sort();
      throw new ValidationError(
        'name',
        `no schedule "${name}" in this build; known schedules: ${known.length ? known.join(', ') : '(none)'}`,
      );
    }
    return def;
  }

  async list(opts: { next?: number; last?: number } = {}): Promise<ScheduleView[]> {
    const now = this.clock?.() ?? new Date();
    const states = await this.store.states(
      this.schedules.map((s) => s.name),
      opts.last ?? 3,
    );
    return this.schedules.map((def) => {
      const st = states.get(def.name);
      const due = st && !st.paused ? nextOccurrence(def, st.settledThrough) : null;
      const late = due ? now.getTime() - due.getTime() : 0;
      return {
        name: def.name,
        description: def.description ?? null,
        cron: def.cron,
        timeZone: def.timeZone,
        type: def.job.type,
        missed: def.missed,
        paused: st?.paused ? { at: st.paused.at.toISOString(), by: st.paused.by, reason: st.paused.reason } : null,
        next: nextOccurrences(def, now, opts.next ?? 3).map((at) => ({ at: at.toISOString(), label: occurrence(def, at).label })),
        last: (st?.recent ?? []).map((o) => ({
          at: o.at.toISOString(),
          label: occurrence(def, o.at).label,
          jobId: o.jobId,
          state: o.state,
          late: o.late,
          firedAt: o.firedAt.toISOString(),
          skipped: o.skipped,
        })),
        settledThrough: st?.settledThrough.toISOString() ?? null,
        overdue:
          due && late > OVERDUE_AFTER_MS
            ? { at: due.toISOString(), label: occurrence(def, due).label, seconds: Math.floor(late / 1000) }
            : null,
      };
    });
  }

  /** Pause `name`: no occurrence is enqueued until it is resumed. `changed: false` when it already was. */
  async pause(name: string, by: string, reason: string | null): Promise<{ changed: boolean; schedule: ScheduleView }> {
    this.definition(name);
    const r = await this.store.pause(name, operatorName(by), reason, this.clock?.() ?? null);
    return { changed: r !== null, schedule: await this.one(name) };
  }

  /** Resume `name` from its next occurrence; those that fell while it was paused are not enqueued. `changed: false` when it was not paused. */
  async resume(name: string, by: string, reason: string | null): Promise<{ changed: boolean; schedule: ScheduleView }> {
    this.definition(name);
    const r = await this.store.resume(name, operatorName(by), reason, this.clock?.() ?? null);
    return { changed: r !== null, schedule: await this.one(name) };
  }

  /**
   * Enqueue one job of `name` now (key `schedule:<name>:manual:<instant>`), published after the
   * COMMIT. A schedule with a work key (`key`) whose work is done already enqueues nothing and
   * says who did it (`alreadyDone`, with that job if it is still kept), unless `again`.
   */
  async trigger(
    name: string,
    by: string,
    reason: string | null,
    again = false,
  ): Promise<
    | { job: Job; duplicate: boolean; key: string; alreadyDone?: undefined }
    | { job: Job | null; duplicate: true; key: string; alreadyDone: AlreadyDone }
  > {
    const def = this.definition(name);
    const t = await this.store.trigger(def, this.clock?.() ?? null, operatorName(by), reason, again);
    await t.afterCommit();
    if (t.doneBy) {
      const d = t.doneBy;
      return {
        job: d.jobId ? await this.jobs.get(d.jobId) : null,
        duplicate: true,
        key: d.workKey,
        alreadyDone: {
          workKey: d.workKey,
          schedule: d.schedule,
          occurrence: d.manual
            ? `trigger at ${d.occurrenceAt.toISOString()}`
            : occurrence(this.byName.get(d.schedule) ?? def, d.occurrenceAt).label,
          jobId: d.jobId,
        },
      };
    }
    return { job: t.result.job, duplicate: t.result.duplicate, key: t.result.job.idempotencyKey ?? '' };
  }

  private async one(name: string): Promise<ScheduleView> {
    return (await this.list()).find((s) => s.name === name)!;
  }
}
