-- On-call can cancel an SQS message move task of the DLQ (`jobs dlq move-cancel`,
-- POST /v1/dlq/move-tasks/cancel), and the trail of operator actions records who did, beside the
-- 'dlq-move' row that started the task (both carry its taskHandle in detail). 0003's CHECK names
-- every action, so it is widened here rather than edited there: a migration once applied is never
-- changed (runtime/db/migrate.ts). The table is small and only on-call writes to it, so a
-- validating ADD CONSTRAINT is a short lock.
ALTER TABLE jobs.operator_action DROP CONSTRAINT operator_action_action_check;
ALTER TABLE jobs.operator_action ADD CONSTRAINT operator_action_action_check
  CHECK (action IN ('job-redrive', 'job-discard', 'dlq-resend', 'dlq-drop', 'dlq-discard', 'dlq-move', 'dlq-move-cancel'));
