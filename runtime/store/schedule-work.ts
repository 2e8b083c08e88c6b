// Work a schedule did with no work key recorded (jobs.schedule_work, migration 0022), recorded from
// its history before a key is claimed. Only code that knows keys writes them, so without this the
// work of
//  - the schedule's occurrences before its `key` was declared (a release that adds the key and
//    moves the month-end close from the 1st to the 2nd would close November twice),
//  - occurrences and triggers of the previous image during a rolling deploy, or after a rollback
//    put it back (old and new tasks fire the same schedules side by side),
// looked never done, and a keyed occurrence or `jobs schedules trigger` did it again (rollout
// review). The history is the schedule's occurrences and operator triggers whose job is still
// kept (finished jobs stay 30 days by default): each is given the key today's declaration gives
// its instant, and holds it only if its job is the one today's declaration would enqueue there
// (same type and payload: a schedule that now closes the current month instead of the last one
// did other work before) and did not give the work up (cancelled, or dead and discarded). A
// renamed schedule's history stays under its old name: rename in a release of its own, after the
// key is in.
//
// How far the history has been read is kept on the schedule's row (migration 0023), moved in the
// same transaction: a pass that rolls back reads it again, and a schedule that fires every minute
// reads only what is new, in whichever process.

import { occurrence, workKeyOf, type Occurrence, type ScheduleDefinition } from '../handlers/schedule.ts';
import { runSchedule } from './sql-schedules.ts';
import type { Queryable } from './statements.ts';

/**
 * Record `def`'s past work whose key is not recorded yet. `sameJob(o, type, payload)`: whether a
 * past job is the one today's declaration enqueues at occurrence `o` (its payload validated as
 * today's type does, so a field the type has since given a default still matches). Returns the
 * keys recorded.
 */
export async function recordPastWork(
  tx: Queryable,
  def: ScheduleDefinition,
  sameJob: (o: Occurrence, type: string, payload: unknown) => boolean,
): Promise<string[]> {
  if (!def.key) return [];
  const through = (
    await runSchedule<{
      work_read_through: Date | null;
      work_triggers_read_through: Date | null;
      occurrences_to: Date | null;
      triggers_to: Date;
    }>(tx, 'workThrough', [def.name])
  ).rows[0]!;
  // The schedule's row first (a pass holds it already): a trigger that locked the keys' rows
  // before it deadlocked with a pass, which takes them in that order (second review).
  await runSchedule(tx, 'workReadThrough', [def.name, through.occurrences_to, through.triggers_to]);
  const { rows } = await runSchedule<{
    at: Date;
    manual: boolean;
    job_id: string;
    idempotency_key: string | null;
    type: string;
    payload: unknown;
  }>(tx, 'workPast', [def.name, through.work_read_through, through.work_triggers_read_through]);
  const past: { k: string; at: Date; manual: boolean; jobId: string }[] = [];
  const manualPrefix = `schedule:${def.name}:manual:`;
  for (const r of rows) {
    // A trigger's instant is in its job's key (the action's time is its transaction's start).
    const keyed = r.manual && r.idempotency_key?.startsWith(manualPrefix) ? new Date(r.idempotency_key.slice(manualPrefix.length)) : null;
    const at = keyed && !Number.isNaN(keyed.getTime()) ? keyed : r.at;
    try {
      const o = occurrence(def, at, r.manual);
      if (sameJob(o, r.type, r.payload)) past.push({ k: workKeyOf(def, o), at, manual: r.manual, jobId: r.job_id });
    } catch {
      // Today's declaration gives that instant no key or no payload: its work is not known as done.
    }
  }
  if (past.length === 0) return [];
  const { rows: recorded } = await runSchedule<{ work_key: string }>(tx, 'workBackfill', [
    def.name,
    past.map((p) => p.k),
    past.map((p) => p.at),
    past.map((p) => p.manual),
    past.map((p) => p.jobId),
  ]);
  return recorded.map((r) => r.work_key);
}
