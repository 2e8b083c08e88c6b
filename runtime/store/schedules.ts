// The schedules' transactions (statements in sql-schedules.ts). A pass over one schedule is one
// transaction: lock the schedule's row, plan the due occurrences with its missed policy, claim
// them in jobs.schedule_occurrence, enqueue their jobs through JobClient.enqueue (the job and its
// outbox row, as every enqueue), settle the row, COMMIT; the caller publishes after the COMMIT.
// Exactly once per occurrence holds twice over: the row lock keeps two tasks from planning one
// schedule at once, and the occurrence's primary key refuses a second job for it even without
// the lock (store tests race the claim alone).

import type pg from 'pg';
import { withTransaction } from '../db/transaction.ts';
import type { Job } from '../domain/job.ts';
import {
  occurrence,
  occurrenceKey,
  planOccurrences,
  workKeyOf,
  type Occurrence,
  type OccurrencePlan,
  type ScheduleDefinition,
} from '../handlers/schedule.ts';
import { type EnqueueResult, type JobClient, sameJson } from './client.ts';
import type { Queryable } from './job-store.ts';
import { recordPastWork } from './schedule-work.ts';
import { runSchedule } from './sql-schedules.ts';

/** An occurrence enqueued by a pass (or found already enqueued by the job's key: duplicate). */
export interface FiredOccurrence {
  occurrence: Occurrence;
  job: Job;
  duplicate: boolean;
  late: boolean;
}

/** Who did a work key's work (jobs.schedule_work): the schedule, its occurrence (or trigger) and the job. */
export interface WorkDoneBy {
  workKey: string;
  schedule: string;
  occurrenceAt: Date;
  manual: boolean;
  jobId: string | null;
}

/** An occurrence a pass did not enqueue: its work key's work was done already. */
export interface SkippedOccurrence {
  occurrence: Occurrence;
  late: boolean;
  doneBy: WorkDoneBy;
}

/**
 * The database's clock read around a statement that returned statement_timestamp(): `dbMs` was
 * the database's time at `perfMs` of this process's monotonic clock (performance.now(), the
 * round trip's middle). The scheduler looks by it (its own wall clock may step). Absent when the
 * round trip was too slow for the sample to say much (over a second).
 */
export interface ClockSample {
  dbClock?: { dbMs: number; perfMs: number };
}

export type PassOutcome =
  /** Another task holds the schedule's row right now (it does the work), or the row was missing and is created now. */
  | { kind: 'busy' }
  | ({ kind: 'paused'; settledThrough: Date } & ClockSample)
  | ({
      kind: 'done';
      fired: FiredOccurrence[];
      /** Occurrences not enqueued: the schedule's `key` says their work was done already. */
      skipped: SkippedOccurrence[];
      plan: OccurrencePlan;
      /** Everything up to here is settled (the next pass starts after it). */
      settledThrough: Date;
      /** Publish after the COMMIT (the outbox relay does it otherwise). */
      afterCommit: () => Promise<void>;
    } & ClockSample);

/** The longest round trip whose statement_timestamp() is taken as a sample of the database's clock. */
const CLOCK_SAMPLE_MAX_RTT_MS = 1000;

/** Runs `statement` (on a connection already held) and samples the database's clock from its `db_now` (first row). */
async function sampled<R extends { db_now: Date }>(statement: () => Promise<{ rows: R[] }>): Promise<{ rows: R[] } & ClockSample> {
  const before = performance.now();
  const res = await statement();
  const after = performance.now();
  const dbNow = res.rows[0]?.db_now;
  if (!dbNow || after - before > CLOCK_SAMPLE_MAX_RTT_MS) return res;
  return Object.assign(res, { dbClock: { dbMs: dbNow.getTime(), perfMs: (before + after) / 2 } });
}

/** A schedule's state as the database has it. */
export interface ScheduleState {
  name: string;
  settledThrough: Date;
  lastOccurrenceAt: Date | null;
  lastJobId: string | null;
  lastFiredAt: Date | null;
  paused: { at: Date; by: string; reason: string | null } | null;
  createdAt: Date;
  /** The newest occurrences enqueued, newest first, each with its job's state (null: the job is gone). */
  recent: {
    at: Date;
    jobId: string | null;
    firedAt: Date;
    late: boolean;
    state: string | null;
    /** Not enqueued: its work key's work was done by that job (in that state; null: gone). */
    skipped: { workKey: string; jobId: string | null; state: string | null } | null;
  }[];
}

/** One of scheduleList's recent occurrences, as the statement builds it. */
interface RecentRow {
  at: string;
  jobId: string | null;
  firedAt: string;
  late: boolean;
  state: string | null;
  skippedWork: string | null;
  doneByJobId: string | null;
  doneByState: string | null;
}

export class ScheduleStore {
  constructor(
    private readonly pool: pg.Pool,
    private readonly client: JobClient,
  ) {}

  /** Create the missing rows of `names` (settled through `now`, null: the database's clock); returns every one's settled_through. */
  async ensure(names: string[], now: Date | null, db?: Queryable): Promise<Map<string, Date> & ClockSample> {
    if (names.length === 0) return new Map();
    // On a connection held first, so the clock sample does not count a wait for one.
    if (!db) return withTransaction(this.pool, (tx) => this.ensure(names, now, tx));
    const res = await sampled(() => runSchedule<{ name: string; settled_through: Date; db_now: Date }>(db, 'scheduleEnsure', [names, now]));
    return Object.assign(new Map(res.rows.map((r) => [r.name, r.settled_through])), { dbClock: res.dbClock });
  }

  /** A sample of the database's clock alone (the scheduler's, when its last one is old). */
  async sampleClock(): Promise<ClockSample> {
    return withTransaction(this.pool, async (tx) => ({
      dbClock: (await sampled(() => runSchedule<{ db_now: Date }>(tx, 'clockNow', []))).dbClock,
    }));
  }

  /**
   * One pass over `def` at `now` (see the top of this file); null: at the database's clock, so a
   * task whose clock runs ahead never enqueues an occurrence before its time (a month-end close
   * before the month has ended) nor settles one it has not reached.
   */
  async pass(def: ScheduleDefinition, now: Date | null, triedInTime?: Date): Promise<PassOutcome> {
    return withTransaction(this.pool, async (tx): Promise<PassOutcome> => {
      const { rows, dbClock } = await sampled(() =>
        runSchedule<{ settled_through: Date; paused_at: Date | null; db_now: Date }>(tx, 'scheduleLock', [def.name]),
      );
      const row = rows[0];
      if (!row) {
        // Locked by another task, or deleted since this process ensured it: (re)create it, next
        // pass. In this transaction: a second connection could wait behind long jobs for a free one.
        await this.ensure([def.name], now, tx);
        return { kind: 'busy' };
      }
      if (row.paused_at) return { kind: 'paused', settledThrough: row.settled_through, dbClock };
      const plan = planOccurrences(def, row.settled_through, now ?? row.db_now, undefined, triedInTime);
      if (!plan.through) {
        return { kind: 'done', fired: [], skipped: [], plan, settledThrough: row.settled_through, afterCommit: async () => {}, dbClock };
      }
      const { fired, skipped, afterCommit } = await this.fire(tx, def, plan.fire);
      const last = fired.at(-1);
      await runSchedule(tx, 'scheduleSettle', [def.name, plan.through, last?.occurrence.at ?? null, last?.job.id ?? null]);
      return { kind: 'done', fired, skipped, plan, settledThrough: plan.through, afterCommit, dbClock };
    });
  }

  /**
   * Claim occurrences of `def` and enqueue a job for each one claimed, in `tx`. An occurrence
   * already claimed (by any transaction, ever) enqueues nothing. Exposed for the store's tests,
   * which race it without the row lock.
   */
  async fire(
    tx: Queryable,
    def: ScheduleDefinition,
    occurrences: { at: Date; late: boolean }[],
  ): Promise<{ fired: FiredOccurrence[]; skipped: SkippedOccurrence[]; afterCommit: () => Promise<void> }> {
    const none = { fired: [], skipped: [], afterCommit: async () => {} };
    if (occurrences.length === 0) return none;
    const claimed = await runSchedule<{ occurrence_at: Date }>(tx, 'occurrenceClaim', [
      def.name,
      occurrences.map((o) => o.at),
      occurrences.map((o) => o.late),
    ]);
    const mine = new Set(claimed.rows.map((r) => r.occurrence_at.getTime()));
    let chosen = occurrences.filter((o) => mine.has(o.at.getTime())).map((o) => ({ ...o, occurrence: occurrence(def, o.at) }));
    // The schedule's work keys: an occurrence whose work was done already (by any schedule, at
    // any time, or a trigger) is settled without a job. Two of this pass with one key: the oldest
    // does the work.
    const skipped: SkippedOccurrence[] = [];
    let keys: string[] = [];
    if (def.key && chosen.length > 0) {
      await this.recordPastWork(tx, def);
      const all = chosen.map((c) => workKeyOf(def, c.occurrence));
      const first = new Map<string, number>();
      for (const [i, k] of all.entries()) if (!first.has(k)) first.set(k, i);
      const distinct = [...first.values()];
      const got = await runSchedule<{ work_key: string }>(tx, 'workClaim', [
        def.name,
        distinct.map((i) => all[i]),
        distinct.map((i) => chosen[i]!.at),
        false,
      ]);
      const won = new Set(got.rows.map((r) => r.work_key));
      const wins = chosen.map((_, i) => first.get(all[i]!) === i && won.has(all[i]!));
      const otherKeys = [...new Set(all.filter((k) => !won.has(k)))];
      const done = new Map((await this.doneBy(tx, otherKeys)).map((d) => [d.workKey, d]));
      for (const [i, c] of chosen.entries()) {
        if (wins[i]) continue;
        const k = all[i]!;
        // Taken by this pass's older occurrence (its job set below), or done before.
        const doneBy = done.get(k) ?? {
          workKey: k,
          schedule: def.name,
          occurrenceAt: chosen[first.get(k)!]!.at,
          manual: false,
          jobId: null,
        };
        skipped.push({ occurrence: c.occurrence, late: c.late, doneBy });
      }
      if (skipped.length > 0)
        await runSchedule(tx, 'occurrenceSkipped', [def.name, skipped.map((k) => k.occurrence.at), skipped.map((k) => k.doneBy.workKey)]);
      chosen = chosen.filter((_, i) => wins[i]);
      keys = all.filter((_, i) => wins[i]);
    }
    if (chosen.length === 0) return { ...none, skipped };
    const { jobs, afterCommit } = await this.client.enqueue(
      tx,
      chosen.map((c) => this.spec(def, c.occurrence)),
    );
    await runSchedule(tx, 'occurrenceSetJobs', [def.name, chosen.map((c) => c.at), jobs.map((j) => j.job.id)]);
    if (keys.length > 0) {
      await runSchedule(tx, 'workSetJobs', [keys, jobs.map((j) => j.job.id)]);
      // Skipped for this pass's own older occurrence: its job is known now.
      for (const k of skipped) if (k.doneBy.jobId === null) k.doneBy.jobId = jobs[keys.indexOf(k.doneBy.workKey)]?.job.id ?? null;
    }
    return {
      fired: chosen.map((c, i) => ({ occurrence: c.occurrence, job: jobs[i]!.job, duplicate: jobs[i]!.duplicate, late: c.late })),
      skipped,
      afterCommit,
    };
  }

  private async doneBy(tx: Queryable, keys: string[]): Promise<WorkDoneBy[]> {
    const { rows } = await runSchedule<{ work_key: string; schedule: string; occurrence_at: Date; manual: boolean; job_id: string | null }>(
      tx,
      'workDoneBy',
      [keys],
    );
    return rows.map((r) => ({
      workKey: r.work_key,
      schedule: r.schedule,
      occurrenceAt: r.occurrence_at,
      manual: r.manual,
      jobId: r.job_id,
    }));
  }

  /**
   * An operator's `trigger`: one job now, outside the cron expression, with a key of its own
   * (`schedule:<name>:manual:<instant>`), recorded as an operator action in its transaction. A
   * paused schedule can be triggered (the operator asks for this one). Publish with afterCommit.
   */
  async trigger(
    def: ScheduleDefinition,
    /** null: the database's clock (an operator's laptop clock would name the wrong day or month). */
    at: Date | null,
    by: string,
    reason: string | null,
    again = false,
  ): Promise<
    | { result: EnqueueResult; occurrence: Occurrence; afterCommit: () => Promise<void>; doneBy?: undefined }
    | { result?: undefined; occurrence: Occurrence; afterCommit: () => Promise<void>; doneBy: WorkDoneBy }
  > {
    return withTransaction(this.pool, async (tx) => {
      const now = at ?? (await runSchedule<{ db_now: Date }>(tx, 'clockNow', [])).rows[0]!.db_now;
      const o = occurrence(def, now, true);
      const spec = this.spec(def, o);
      // The schedule's work key (without --again): work done already is not done again.
      const key = def.key && !again ? workKeyOf(def, o) : null;
      // The past work first, --again too (its record must not take a key a past job holds).
      if (def.key) await this.recordPastWork(tx, def);
      if (key) {
        const got = await runSchedule(tx, 'workClaim', [def.name, [key], [now], true]);
        if (got.rows.length === 0) {
          const doneBy = (await this.doneBy(tx, [key]))[0] ?? {
            workKey: key,
            schedule: def.name,
            occurrenceAt: now,
            manual: true,
            jobId: null,
          };
          await runSchedule(tx, 'scheduleTriggerRecord', [
            def.name,
            by,
            reason,
            doneBy.jobId,
            `${o.label} (work ${key} already done)`,
            true,
          ]);
          return { occurrence: o, afterCommit: async () => {}, doneBy };
        }
      }
      const { jobs, afterCommit } = await this.client.enqueue(tx, spec);
      const result = jobs[0]!;
      if (key) await runSchedule(tx, 'workSetJobs', [[key], [result.job.id]]);
      // --again: this job does the work now, so an occurrence after it does not do it a third time.
      else if (def.key) await runSchedule(tx, 'workRecord', [workKeyOf(def, o), def.name, now, result.job.id]);
      await runSchedule(tx, 'scheduleTriggerRecord', [def.name, by, reason, result.job.id, o.label, result.duplicate]);
      return { result, occurrence: o, afterCommit };
    });
  }

  /** Pause; null when it was already paused (nothing changed). `now`: null for the database's clock. */
  async pause(name: string, by: string, reason: string | null, now: Date | null): Promise<{ pausedAt: Date } | null> {
    const { rows } = await runSchedule<{ paused_at: Date }>(this.pool, 'schedulePause', [name, by, reason, now]);
    return rows[0] ? { pausedAt: rows[0].paused_at } : null;
  }

  /** Resume; null when it was not paused. `now`: null for the database's clock. */
  async resume(name: string, by: string, reason: string | null, now: Date | null): Promise<{ pausedAt: Date; pausedBy: string } | null> {
    const { rows } = await runSchedule<{ paused_at: Date; paused_by: string }>(this.pool, 'scheduleResume', [name, by, reason, now]);
    return rows[0] ? { pausedAt: rows[0].paused_at, pausedBy: rows[0].paused_by } : null;
  }

  /** The state of `names` (those with a row) and their `recent` newest occurrences. */
  async states(names: string[], recent: number): Promise<Map<string, ScheduleState>> {
    const { rows } = await runSchedule(this.pool, 'scheduleList', [names, recent]);
    return new Map(
      rows.map((r) => [
        r.name as string,
        {
          name: r.name as string,
          settledThrough: r.settled_through as Date,
          lastOccurrenceAt: (r.last_occurrence_at as Date | null) ?? null,
          lastJobId: (r.last_job_id as string | null) ?? null,
          lastFiredAt: (r.last_fired_at as Date | null) ?? null,
          paused: r.paused_at
            ? { at: r.paused_at as Date, by: r.paused_by as string, reason: (r.pause_reason as string | null) ?? null }
            : null,
          createdAt: r.created_at as Date,
          recent: (r.recent as RecentRow[]).map((o) => ({
            at: new Date(o.at),
            jobId: o.jobId,
            firedAt: new Date(o.firedAt),
            late: o.late,
            state: o.state,
            skipped: o.skippedWork ? { workKey: o.skippedWork, jobId: o.doneByJobId, state: o.doneByState } : null,
          })),
        },
      ]),
    );
  }

  /** Work done with no key recorded, recorded before a key is claimed (schedule-work.ts). */
  private recordPastWork(tx: Queryable, def: ScheduleDefinition): Promise<string[]> {
    // Both payloads as today's type validates them (a throw: not that job).
    return recordPastWork(tx, def, (o, type, payload) => {
      const spec = this.spec(def, o);
      return type === def.job.type && sameJson(this.client.validate({ ...spec, payload }).payload, this.client.validate(spec).payload);
    });
  }

  private spec(def: ScheduleDefinition, o: Occurrence) {
    return {
      type: def.job.type,
      payload: def.payload(o),
      idempotencyKey: occurrenceKey(def.name, o),
      ...(def.maxAttempts !== undefined ? { maxAttempts: def.maxAttempts } : {}),
    };
  }
}
