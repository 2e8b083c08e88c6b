-- Schedules (issue 15): recurring jobs declared in code (runtime/handlers/schedules.ts) and run
-- by every API and worker task (runtime/maintenance/scheduler.ts). What must hold across tasks
-- and restarts lives here: each schedule's state (paused, by whom; the instant through which its
-- occurrences are settled; the last one enqueued) and the occurrences already enqueued. The
-- statements are in runtime/store/sql-schedules.ts.

-- One row per schedule, created by the first scheduler that sees its declaration. A pass locks
-- the row, so two tasks never plan the same schedule at once; settled_through only moves forward.
CREATE TABLE jobs.schedule (
  name               text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9]*(-[a-z0-9]+)*$' AND length(name) <= 100),
  -- Every occurrence at or before this instant is settled: enqueued, left out by the missed
  -- policy, or older than the schedule's first sighting or its last resume. A pass considers
  -- only the occurrences after it.
  settled_through    timestamptz NOT NULL,
  last_occurrence_at timestamptz,
  last_job_id        uuid,
  last_fired_at      timestamptz,
  paused_at          timestamptz,
  paused_by          text CHECK (length(paused_by) BETWEEN 1 AND 200),
  pause_reason       text CHECK (length(pause_reason) BETWEEN 1 AND 1000),
  created_at         timestamptz NOT NULL DEFAULT now(),
  CHECK ((paused_at IS NULL) = (paused_by IS NULL))
);

-- The occurrences enqueued, one row each: the exactly-once record. The row is inserted in the
-- same transaction as its job (ON CONFLICT DO NOTHING: a second inserter gets no row and enqueues
-- nothing), so an occurrence has one job whatever number of tasks race and whatever happens to
-- the job's idempotency key later. job_id is set in that same transaction, right after the job.
-- Rows older than 90 days before a schedule's newest are pruned when it fires: by then its
-- settled_through is far past them and no pass considers them again.
CREATE TABLE jobs.schedule_occurrence (
  schedule      text NOT NULL REFERENCES jobs.schedule (name) ON DELETE CASCADE,
  occurrence_at timestamptz NOT NULL,
  job_id        uuid,
  fired_at      timestamptz NOT NULL DEFAULT now(),
  -- Enqueued more than a minute after its time: caught up after the platform was down.
  late          boolean NOT NULL,
  PRIMARY KEY (schedule, occurrence_at)
);

-- On-call pauses, resumes and triggers schedules (jobs schedules pause|resume|trigger, the same
-- on the API): recorded beside the other operator actions. 0005's CHECK is widened, as 0004 and
-- 0005 did before (an applied migration never changes).
ALTER TABLE jobs.operator_action DROP CONSTRAINT operator_action_action_check;
ALTER TABLE jobs.operator_action ADD CONSTRAINT operator_action_action_check
  CHECK (action IN ('job-redrive', 'job-discard', 'job-republish', 'dlq-resend', 'dlq-drop', 'dlq-discard', 'dlq-move', 'dlq-move-cancel',
                    'schedule-pause', 'schedule-resume', 'schedule-trigger'));
