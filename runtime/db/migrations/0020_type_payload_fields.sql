-- The payload fields of each job type's latest registration (JobStore.registerJobTypes): during a
-- rolling deploy that adds a field to a type, a worker still on the old image meets jobs carrying
-- that field. Its strict schema refuses them, and before, the job ended dead at once (a page, and
-- a re-enqueue by hand). Now a worker whose schema lacks a field the latest registration has
-- hands the job on, no attempt spent, for a worker that knows it; a field no registration has (a
-- misspelling from a SQL enqueue) still ends the job dead at once, the field named. Null: the
-- registration did not say (a type without a schema, or a task from before this migration).
ALTER TABLE jobs.job_type ADD COLUMN payload_fields jsonb;
