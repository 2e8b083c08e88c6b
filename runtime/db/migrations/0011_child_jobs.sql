-- Child jobs (issue 15): a handler may enqueue jobs through its context (ctx.enqueue), inside its
-- fenced transaction, so the children exist only if the attempt that enqueued them commits — with
-- its completion, or with a checkpoint's chunk — and never for a zombie's attempt. The child
-- records its parent.
--
-- Last in the row (0001 on column order); set at insert, never changed. No foreign key: its
-- trigger would run on every update of jobs.job, heartbeats included (see 0003's dead_job).
--
-- Fan-in (a parent that waits for its children) is the next step; this is the data it needs: the
-- children of a job, by state, from this index without scanning the table.
ALTER TABLE jobs.job ADD COLUMN parent_id uuid;

CREATE INDEX job_parent ON jobs.job (parent_id, id) WHERE parent_id IS NOT NULL;
