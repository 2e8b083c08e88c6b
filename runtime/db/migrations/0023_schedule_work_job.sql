-- A work key's job, looked up when the pruner deletes a job that gave its work up (cancelled, or
-- dead and discarded): the key goes with it, so the next occurrence or trigger takes the work
-- over (its row would otherwise hold the key as done by a job that is gone, for 400 days).
-- jobs.schedule_work is small (a row per keyed occurrence): the build takes a moment.
CREATE INDEX schedule_work_job ON jobs.schedule_work (job_id) WHERE job_id IS NOT NULL;
