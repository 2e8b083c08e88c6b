// Work a schedule did with no work key recorded (jobs.schedule_work, migration 0022), recorded from
// its history before a key is claimed. Only code that knows keys writes them, so without this the
// work of
//  - the schedule's occurrences before its `key` was declared (a release that adds the key and
//    moves the month-end close from the 1st to the 2nd would close November twice),
//  - occurrences and triggers of the previous image during a rolling deploy, or after a rollback
//    put it back (old and new tasks fire the same schedules side by side),
// looked never done, and a keyed occurrence or `jobs schedules trigger` did it again (rollout
// review). The history is the schedule's occurrences that enqueued a job (kept 90 days) and its
// operator triggers (kept 730 days); each one's key is computed with today's `key` and recorded
// unless its job gave the work up (cancelled, or dead and discarded). A renamed schedule's
// history stays under its old name: rename in a release of its own, after the key is in.
//
// How far back each schedule was read is remembered per process, so a schedule that fires every
// minute reads only what is new: its occurrences are claimed under its row lock with instants
// past its settled point, so one committed after a read lies past everything that read saw;
// triggers are read again over their last hour (a trigger's instant is its transaction's start).

import { occurrence, workKeyOf, type ScheduleDefinition } from '../handlers/schedule.ts';
import type { Queryable } from './statements.ts';
import { runSchedule } from './sql-schedules.ts';

/** A trigger's instant is its transaction's start: one that commits later may be older than the newest read. */
const TRIGGER_REREAD_MS = 60 * 60_000;

export class PastWork {
  /** Per schedule, the newest occurrence and the trigger instant read up to. */
  private readonly readTo = new Map<string, { occurrences: Date; triggers: Date }>();

  /** Record `def`'s past work whose key is not recorded yet (a key its jobs hold keeps its row); returns the keys recorded. */
  async record(tx: Queryable, def: ScheduleDefinition): Promise<string[]> {
    if (!def.key) return [];
    const from = this.readTo.get(def.name) ?? { occurrences: new Date(0), triggers: new Date(0) };
    const { rows } = await runSchedule<{ at: Date; job_id: string; manual: boolean }>(tx, 'workPast', [
      def.name,
      from.occurrences,
      from.triggers,
    ]);
    const past: { k: string; at: Date; manual: boolean; jobId: string }[] = [];
    for (const r of rows) {
      try {
        past.push({ k: workKeyOf(def, occurrence(def, r.at, r.manual)), at: r.at, manual: r.manual, jobId: r.job_id });
      } catch {
        // A key today's function cannot give for an old instant: that work is not known as done.
      }
    }
    const recorded =
      past.length === 0
        ? []
        : (
            await runSchedule<{ work_key: string }>(tx, 'workBackfill', [
              def.name,
              past.map((p) => p.k),
              past.map((p) => p.at),
              past.map((p) => p.manual),
              past.map((p) => p.jobId),
            ])
          ).rows.map((r) => r.work_key);
    this.readTo.set(def.name, {
      occurrences: rows.filter((r) => !r.manual).reduce((m, r) => (r.at > m ? r.at : m), from.occurrences),
      // Every trigger older than this has committed by now, and this read saw it.
      triggers: new Date(Math.max(from.triggers.getTime(), Date.now() - TRIGGER_REREAD_MS)),
    });
    return recorded;
  }
}
