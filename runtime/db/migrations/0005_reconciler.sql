-- The reconciler (runtime/store/reconciler.ts) and on-call's `jobs republish` (issue 11): the job
-- table heals the queue. When SQS loses messages (a purge, a stray consumer, retention, a
-- redrive to the wrong queue), pending jobs whose message is gone are published again through
-- the outbox.
--
-- republished_at: when a job was last published again by the reconciler or an operator. The
-- reconciler leaves a job alone for a while after re-publishing it, so a deficit it cannot place
-- exactly (the queue only says how many messages it holds, not for which jobs) never turns into
-- the same jobs published over and over. Written only on those rare paths, never by a claim, a
-- heartbeat or a completion; last column of the row and not indexed, so the index rule of 0001
-- holds and those stay HOT updates.
ALTER TABLE jobs.job ADD COLUMN republished_at timestamptz;

-- An operator's forced re-publish is recorded like every other on-call action (0003, 0004).
ALTER TABLE jobs.operator_action DROP CONSTRAINT operator_action_action_check;
ALTER TABLE jobs.operator_action ADD CONSTRAINT operator_action_action_check
  CHECK (action IN ('job-redrive', 'job-discard', 'job-republish', 'dlq-resend', 'dlq-drop', 'dlq-discard', 'dlq-move', 'dlq-move-cancel'));
