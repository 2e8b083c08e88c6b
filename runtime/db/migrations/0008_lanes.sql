-- Priority lanes (issue 14): a job's lane, `urgent` or `bulk` (the default). Its messages go to
-- its lane's queue and its dead letter to the lane's DLQ (runtime/domain/lanes.ts); the worker
-- takes from the urgent lane first without starving bulk (runtime/worker/lane-choice.ts).
--
-- Last in the row (see 0001 on column order) and never changed after the insert, so claims and
-- heartbeats stay HOT updates. No index: the lane is read with the row, never searched for by
-- itself (the listing's filter rides on the id-ordered scans of 0001). A constant default is
-- stored in the catalog, not written into every existing row.
ALTER TABLE jobs.job
  ADD COLUMN lane text NOT NULL DEFAULT 'bulk' CONSTRAINT job_lane_known CHECK (lane IN ('urgent', 'bulk'));
