-- 0015's constraint, checked against the rows already there. In its own transaction (each
-- migration file is one): VALIDATE takes a SHARE UPDATE EXCLUSIVE lock, so claims, completions
-- and enqueues go on while it scans the table.
ALTER TABLE jobs.job VALIDATE CONSTRAINT job_running_not_blocked;
