// Every statement of the schedules (tables in 0010_schedules.sql), named after what it does, with
// the reason it is safe beside it. The jobs an occurrence enqueues go through the job store's own
// insert (JobClient.enqueue: the job and its outbox row), in the same transaction as these.

import { givenUp } from './sql-fragments.ts';
import { namedStatements } from './statements.ts';

/** A work key's job gave the work up (`w`: the jobs.schedule_work row). */
const KEY_GIVEN_UP = givenUp('w.job_id');

export const SCHEDULE_SQL = {
  /**
   * The rows of the schedules `$1` (names), created at `$2` (the scheduler's clock) when missing:
   * a schedule first seen now settles everything before now, so a new declaration never catches up
   * on its past. Rows the INSERT creates are not visible to the rest of its own statement, hence
   * the UNION with what it returned. With the database's clock (the scheduler learns its offset).
   */
  scheduleEnsure: `
    WITH created AS (
      INSERT INTO jobs.schedule (name, settled_through)
      SELECT n, COALESCE($2::timestamptz, statement_timestamp()) FROM unnest($1::text[]) AS n
      ON CONFLICT (name) DO NOTHING
      RETURNING name, settled_through
    )
    SELECT name, settled_through, statement_timestamp() AS db_now FROM created
    UNION ALL
    SELECT name, settled_through, statement_timestamp() FROM jobs.schedule WHERE name = ANY($1::text[])`,

  /** The database's clock, for the scheduler's sample (store/schedules.ts ClockSample). */
  clockNow: `SELECT statement_timestamp() AS db_now`,

  /**
   * A pass over one schedule starts here: its row, locked for the rest of the transaction. SKIP
   * LOCKED: another task holding it is planning the same occurrences right now, so this one leaves
   * the schedule to it rather than wait (no row comes back). A task that reads it after the other
   * committed sees the new settled_through and finds nothing due. With the database's clock, which
   * decides what is due (a task's own clock may run ahead).
   */
  scheduleLock: `
    SELECT name, settled_through, paused_at, statement_timestamp() AS db_now FROM jobs.schedule WHERE name = $1 FOR UPDATE SKIP LOCKED`,

  /**
   * Claim occurrences `$2` of schedule `$1` (with their `$3` late flags). The primary key is the
   * exactly-once rule: an occurrence another transaction inserted (committed, or committing: the
   * insert waits for it) comes back as no row, and its job is not enqueued again.
   */
  occurrenceClaim: `
    INSERT INTO jobs.schedule_occurrence (schedule, occurrence_at, late)
    SELECT $1::text, at, late FROM unnest($2::timestamptz[], $3::boolean[]) AS o(at, late)
    ON CONFLICT (schedule, occurrence_at) DO NOTHING
    RETURNING occurrence_at`,

  /**
   * Claim the work keys `$2` (a schedule's `key`, migration 0022; distinct) for schedule `$1`'s
   * occurrences `$3` (`$4`: an operator's trigger). A key already there (any schedule, any instant,
   * committed or committing: the insert waits) comes back as no row, its work done or being done,
   * unless its job was cancelled, or died and was discarded: on-call said that work is not to be
   * done by that job, and this claim takes the key over.
   */
  workClaim: `
    INSERT INTO jobs.schedule_work AS w (work_key, schedule, occurrence_at, manual)
    SELECT k, $1::text, at, $4::boolean FROM unnest($2::text[], $3::timestamptz[]) AS x(k, at)
    ON CONFLICT (work_key) DO UPDATE
       SET schedule = EXCLUDED.schedule, occurrence_at = EXCLUDED.occurrence_at, manual = EXCLUDED.manual,
           job_id = NULL, created_at = statement_timestamp()
     WHERE ${KEY_GIVEN_UP}
    RETURNING work_key, occurrence_at`,

  /**
   * An operator's trigger with --again: its job becomes the key's when the key is free (so the
   * occurrence after it does not do the work again), or held by a job cancelled or discarded. A
   * key whose job succeeded or still runs keeps it: cancelling the rerun must not free the work
   * that job did (review).
   */
  workRecord: `
    WITH mapped AS (
      -- The job's work, whoever holds the key (0024): a redrive of another job of it is skipped.
      INSERT INTO jobs.schedule_job_work (job_id, work_key, schedule, occurrence_at, manual)
      VALUES ($4, $1, $2, $3, true) ON CONFLICT (job_id) DO NOTHING
    )
    INSERT INTO jobs.schedule_work AS w (work_key, schedule, occurrence_at, manual, job_id)
    VALUES ($1, $2, $3, true, $4)
    ON CONFLICT (work_key) DO UPDATE
       SET schedule = EXCLUDED.schedule, occurrence_at = EXCLUDED.occurrence_at, manual = true, job_id = EXCLUDED.job_id,
           created_at = statement_timestamp()
     WHERE ${KEY_GIVEN_UP}`,

  /** Who did the work `$1`: the schedule, occurrence and job of each key. */
  workDoneBy: `SELECT work_key, schedule, occurrence_at, manual, job_id FROM jobs.schedule_work WHERE work_key = ANY($1::text[])`,

  /**
   * How far schedule `$1`'s history is read (store/schedule-work.ts), and how far it will be once
   * this read is recorded: its newest occurrence (committed now; one a pass has under way lies
   * past it, claimed in order under the schedule's row lock) and the database's time less an hour
   * (a trigger's instant is its transaction's start, and one may commit later).
   */
  workThrough: `
    SELECT s.work_read_through, s.work_triggers_read_through,
           (SELECT max(occurrence_at) FROM jobs.schedule_occurrence WHERE schedule = $1) AS occurrences_to,
           statement_timestamp() - interval '1 hour' AS triggers_to
      FROM (SELECT 1) AS one LEFT JOIN jobs.schedule s ON s.name = $1`,

  /**
   * Schedule `$1`'s work that may have no key recorded: its occurrences after `$2` and its
   * operator triggers after `$3` whose job is still kept (primary key; index operator_action_at).
   */
  workPast: `
    SELECT o.occurrence_at AS at, false AS manual, j.id AS job_id, j.idempotency_key, j.type, j.payload
      FROM jobs.schedule_occurrence o JOIN jobs.job j ON j.id = o.job_id
     WHERE o.schedule = $1 AND o.occurrence_at > coalesce($2::timestamptz, '-infinity')
    UNION ALL
    SELECT a.at, true, j.id, j.idempotency_key, j.type, j.payload
      FROM jobs.operator_action a JOIN jobs.job j ON j.id = a.job_id
     WHERE a.at > coalesce($3::timestamptz, '-infinity') AND a.action = 'schedule-trigger' AND a.detail->>'schedule' = $1`,

  /**
   * Record work keys `$2` of schedule `$1` as done by jobs `$5` (occurrences `$3`, triggers where
   * `$4`; the caller keeps only jobs that are what today's declaration enqueues there), each whose
   * job did not give the work up (cancelled, or dead and discarded). A key held by a job that gave
   * up is taken over. Of a key's jobs, one that succeeded records it, the earliest: cancelling a
   * rerun must not free the work the first job did.
   */
  workBackfill: `
    WITH mapped AS (
      INSERT INTO jobs.schedule_job_work (job_id, work_key, schedule, occurrence_at, manual)
      SELECT p.job_id, p.k, $1::text, p.at, p.manual
        FROM unnest($2::text[], $3::timestamptz[], $4::boolean[], $5::uuid[]) AS p(k, at, manual, job_id)
      ON CONFLICT (job_id) DO NOTHING
    )
    INSERT INTO jobs.schedule_work AS w (work_key, schedule, occurrence_at, manual, job_id)
    SELECT DISTINCT ON (p.k) p.k, $1::text, p.at, p.manual, p.job_id
      FROM unnest($2::text[], $3::timestamptz[], $4::boolean[], $5::uuid[]) AS p(k, at, manual, job_id)
      JOIN jobs.job j ON j.id = p.job_id
     WHERE NOT ${givenUp('p.job_id')}
     ORDER BY p.k, j.state = 'succeeded' DESC, p.at
    ON CONFLICT (work_key) DO UPDATE
       SET schedule = EXCLUDED.schedule, occurrence_at = EXCLUDED.occurrence_at, manual = EXCLUDED.manual, job_id = EXCLUDED.job_id,
           created_at = statement_timestamp()
     WHERE ${KEY_GIVEN_UP}
    RETURNING work_key`,

  /** Schedule `$1`'s history read through `$2` (occurrences) and `$3` (triggers), in the transaction that recorded it. */
  workReadThrough: `
    UPDATE jobs.schedule SET work_read_through = GREATEST(work_read_through, $2::timestamptz),
                             work_triggers_read_through = GREATEST(work_triggers_read_through, $3::timestamptz)
     WHERE name = $1`,

  /** The job of each work key `$1` (`$2`), in the transaction that enqueued it; and the work of each job (0024). */
  workSetJobs: `
    WITH mapped AS (
      -- The key's row was claimed earlier in this transaction (workClaim).
      INSERT INTO jobs.schedule_job_work (job_id, work_key, schedule, occurrence_at, manual)
      SELECT x.job_id, x.k, w.schedule, w.occurrence_at, w.manual
        FROM unnest($1::text[], $2::uuid[]) AS x(k, job_id) JOIN jobs.schedule_work w ON w.work_key = x.k
      ON CONFLICT (job_id) DO NOTHING
    )
    UPDATE jobs.schedule_work w SET job_id = x.job_id FROM unnest($1::text[], $2::uuid[]) AS x(k, job_id) WHERE w.work_key = x.k`,

  /** Occurrences `$2` of schedule `$1` not enqueued: their work `$3` was done (shown by scheduleList). */
  occurrenceSkipped: `
    UPDATE jobs.schedule_occurrence o SET skipped_work = x.k
      FROM unnest($2::timestamptz[], $3::text[]) AS x(at, k)
     WHERE o.schedule = $1 AND o.occurrence_at = x.at`,

  /** The job each claimed occurrence enqueued, in the same transaction. */
  occurrenceSetJobs: `
    UPDATE jobs.schedule_occurrence o SET job_id = x.job_id
      FROM unnest($2::timestamptz[], $3::uuid[]) AS x(at, job_id)
     WHERE o.schedule = $1 AND o.occurrence_at = x.at`,

  /**
   * Everything up to `$2` is settled; `$3`/`$4` the newest occurrence enqueued and its job, when
   * this pass enqueued one. Never moves settled_through back (a resume may have set it later).
   * Then the occurrence rows 90 days older than `$2` go: no pass looks before settled_through;
   * and the work keys older than 400 days (a year's work and a month more; a removed schedule's too).
   */
  scheduleSettle: `
    WITH old_work AS (
      DELETE FROM jobs.schedule_work WHERE created_at < statement_timestamp() - interval '400 days'
    ), settled AS (
      UPDATE jobs.schedule
         SET settled_through = greatest(settled_through, $2::timestamptz),
             last_occurrence_at = coalesce($3::timestamptz, last_occurrence_at),
             last_job_id = coalesce($4::uuid, last_job_id),
             last_fired_at = CASE WHEN $3::timestamptz IS NULL THEN last_fired_at ELSE now() END
       WHERE name = $1
      RETURNING name
    )
    DELETE FROM jobs.schedule_occurrence
     WHERE schedule = $1 AND occurrence_at < $2::timestamptz - interval '90 days' AND EXISTS (SELECT 1 FROM settled)`,

  /**
   * Pause `$1`, recorded as an operator action in the same statement. The row is created when no
   * scheduler has seen the schedule yet (settled through `$4`, else the database's now: an
   * operator's laptop clock is not the services'). An already paused schedule is left as it is
   * (no row, no action): the first pause's who and why stay.
   */
  schedulePause: `
    WITH paused AS (
      INSERT INTO jobs.schedule AS s (name, settled_through, paused_at, paused_by, pause_reason)
      VALUES ($1, coalesce($4::timestamptz, statement_timestamp()), now(), $2, $3)
      ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_by = $2, pause_reason = $3 WHERE s.paused_at IS NULL
      RETURNING name, paused_at, paused_by, pause_reason
    ), recorded AS (
      INSERT INTO jobs.operator_action (action, by, reason, detail)
      SELECT 'schedule-pause', $2, $3, jsonb_build_object('schedule', name) FROM paused
    )
    SELECT * FROM paused`,

  /**
   * Resume `$1`, recorded. The occurrences that fell while it was paused are settled (through `$4`,
   * else the database's now): a resume does not enqueue what the pause held back; `jobs schedules
   * trigger` does, on purpose. A schedule that is not paused is left as it is (no row).
   */
  scheduleResume: `
    WITH before AS (
      SELECT name, paused_at, paused_by FROM jobs.schedule WHERE name = $1 AND paused_at IS NOT NULL FOR UPDATE
    ), resumed AS (
      UPDATE jobs.schedule s
         SET paused_at = NULL, paused_by = NULL, pause_reason = NULL, settled_through = greatest(s.settled_through, coalesce($4::timestamptz, statement_timestamp()))
        FROM before b WHERE s.name = b.name
      RETURNING s.name
    ), recorded AS (
      INSERT INTO jobs.operator_action (action, by, reason, detail)
      SELECT 'schedule-resume', $2, $3, jsonb_build_object('schedule', b.name, 'pausedAt', b.paused_at, 'pausedBy', b.paused_by)
        FROM before b JOIN resumed r ON r.name = b.name
    )
    SELECT b.name, b.paused_at, b.paused_by FROM before b JOIN resumed r ON r.name = b.name`,

  /** An operator's trigger of `$1`, recorded with the job it enqueued (`$4`), in the job's transaction. */
  scheduleTriggerRecord: `
    INSERT INTO jobs.operator_action (action, by, job_id, reason, detail)
    VALUES ('schedule-trigger', $2, $4, $3, jsonb_build_object('schedule', $1::text, 'occurrence', $5::text, 'duplicate', $6::boolean))`,

  /**
   * The state of schedules `$1` and their `$2` newest occurrences, each with its job's state (a
   * pruned or missing job reads as null). The occurrences come from the primary key, newest first.
   */
  scheduleList: `
    SELECT s.name, s.settled_through, s.last_occurrence_at, s.last_job_id, s.last_fired_at,
           s.paused_at, s.paused_by, s.pause_reason, s.created_at,
           coalesce((
             SELECT json_agg(json_build_object('at', o.occurrence_at, 'jobId', o.job_id, 'firedAt', o.fired_at, 'late', o.late, 'state', j.state,
                                               'skippedWork', o.skipped_work, 'doneByJobId', w.job_id, 'doneByState', wj.state)
                             ORDER BY o.occurrence_at DESC)
               FROM (SELECT * FROM jobs.schedule_occurrence WHERE schedule = s.name ORDER BY occurrence_at DESC LIMIT $2) o
               LEFT JOIN jobs.job j ON j.id = o.job_id
               LEFT JOIN jobs.schedule_work w ON w.work_key = o.skipped_work
               LEFT JOIN jobs.job wj ON wj.id = w.job_id
           ), '[]'::json) AS recent
      FROM jobs.schedule s
     WHERE s.name = ANY($1::text[])`,
} as const;

export type ScheduleSqlName = keyof typeof SCHEDULE_SQL;

export const runSchedule = namedStatements<ScheduleSqlName>('schedule', SCHEDULE_SQL);
