// The live view's statements, named, with their reasoning. All read-only but `notify`, and none
// inside a job's transaction: watching the platform must not change what it does.

export const LIVE_SQL = {
  /**
   * Publish buffered events: one round trip for many, each payload a JSON array under the 8000-byte
   * limit (events.ts packs them). Autocommit on the pool: the notifications are delivered when
   * this statement's own transaction commits, independently of any job's.
   */
  notify: `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`,

  /**
   * Running jobs by lease expiry, with the lease left by the database's clock, so the page's
   * countdown does not depend on the browser's or the API host's clock. Read from the active jobs
   * (`finished_at IS NULL`, the job_active index), so it stays small however many jobs have ever
   * run: no index can name the state or the lease (a claim changes both and must stay a HOT
   * update), and with `state = 'running'` alone this read the whole table every second
   * (35 ms at 100,000 finished jobs).
   */
  leases: `
    SELECT id, type, lease_owner, attempt, releases, max_attempts, progress, started_at,
           (extract(epoch FROM lease_expires_at - statement_timestamp()) * 1000)::int AS lease_left_ms
      FROM jobs.job
     WHERE finished_at IS NULL AND state = 'running'
     ORDER BY lease_expires_at
     LIMIT $1`,
} as const;
