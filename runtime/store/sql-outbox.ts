// The outbox's statements (runtime/store/outbox.ts, DESIGN 7): a publish queued for existing
// jobs, the relay's pass over rows their enqueuer left, and the deferred publishes of jobs due
// beyond the publish horizon (migration 0018). The conventions at the top of sql.ts hold here;
// sql.ts merges these into SQL, so every statement is still run by name through one table.

import { PUBLISH_HORIZON } from './sql-fragments.ts';

export const OUTBOX_SQL = {
  /** Queue a publish for existing jobs in the caller's transaction, with each job's type and lane (its message's queue). */
  outboxInsert: `
    WITH outboxed AS (INSERT INTO jobs.outbox (job_id) SELECT unnest($1::uuid[]) RETURNING id, job_id)
    SELECT o.id AS outbox_id, o.job_id, j.type, j.lane FROM outboxed o LEFT JOIN jobs.job j ON j.id = o.job_id`,

  /**
   * The relay: outbox rows older than $1 seconds, whose enqueuer died between COMMIT and publish
   * (or whose publish failed, or which it left because the job is due beyond PUBLISH_HORIZON),
   * not leased by another relay: at most $2 of them leased for $5 seconds, in one statement that
   * commits at once (migration 0021). The relay sends them holding no connection, then deletes
   * the rows sent and releases the rest (outboxSettle); a relay that dies in between leaves its
   * rows to another when the lease ends (a second message at worst: harmless). SKIP LOCKED:
   * concurrent relays split the rows. The message delay comes from the job's run_after (SQS caps
   * it at 900 s); its queue from the job's lane. `later`: the job is due beyond the horizon, so the
   * row is deferred (outboxDefer) instead of sent. $3: take the rows brought back from deferral
   * too (the concurrency keys' wake-up, on the hot path, does not). $4: rows whose send failed
   * earlier in this pass, left for the next. $6: lanes whose queue refuses sends (the relay backs
   * off from them): their rows are not leased, so 12,000 rows of a deleted queue are not written
   * twice a pass, every second, in every task.
   */
  outboxLeaseDue: `
    WITH leased AS (
      UPDATE jobs.outbox o SET leased_until = statement_timestamp() + $5::float8 * interval '1 second'
       WHERE o.id IN (
         SELECT c.id FROM jobs.outbox c LEFT JOIN jobs.job cj ON cj.id = c.job_id
          WHERE (c.created_at < statement_timestamp() - $1::float8 * interval '1 second' OR c.relay_now OR (c.from_deferred AND $3::boolean))
            AND (c.leased_until IS NULL OR c.leased_until <= statement_timestamp())
            AND NOT (c.id = ANY($4::bigint[]))
            AND NOT (coalesce(cj.lane::text, 'bulk') = ANY($6::text[]))
          ORDER BY c.id
          LIMIT $2
            FOR UPDATE OF c SKIP LOCKED)
      RETURNING o.id, o.job_id, o.from_deferred, o.leased_until
    )
    SELECT l.id AS outbox_id, l.job_id, j.type, j.state, j.lane, l.from_deferred, l.leased_until::text AS lease,
           greatest(0, ceil(extract(epoch FROM j.run_after - statement_timestamp())))::int AS delay_seconds,
           coalesce(j.run_after > statement_timestamp() + ${PUBLISH_HORIZON}, false) AS later
      FROM leased l
      LEFT JOIN jobs.job j ON j.id = l.job_id
     ORDER BY l.id`,

  /**
   * The relay after its sends: delete the rows $1 (sent, or needing no message), release the rows
   * $2 (not sent) for the next pass, those still under its own lease ($3, as the lease statement returned it: text, every microsecond) only: a pass that
   * outlived its lease (SQS slow) must not release rows another relay has leased since.
   */
  outboxSettle: `
    WITH released AS (UPDATE jobs.outbox SET leased_until = NULL WHERE id = ANY($2::bigint[]) AND leased_until = $3::timestamptz)
    DELETE FROM jobs.outbox WHERE id = ANY($1::bigint[])`,

  outboxDelete: `DELETE FROM jobs.outbox WHERE id = ANY($1::bigint[])`,

  /**
   * For Publisher.publishCommitted, each of the outbox rows `$1` of jobs `$2`: whether its job
   * committed, and whether the row is still there (a relay may have published it first: the row
   * of a transaction longer than the relay's minimum age is old the moment it commits).
   */
  outboxCommitted: `
    SELECT e.outbox_id::text AS outbox_id, j.id IS NOT NULL AS committed, o.id IS NOT NULL AS queued
      FROM unnest($1::bigint[], $2::uuid[]) AS e(outbox_id, job_id)
      LEFT JOIN jobs.job j ON j.id = e.job_id
      LEFT JOIN jobs.outbox o ON o.id = e.outbox_id`,

  /**
   * Defer the outbox rows $1 (leased by outboxLeaseDue, their jobs due beyond PUBLISH_HORIZON):
   * each job's publish waits in jobs.outbox_deferred until run_after - PUBLISH_HORIZON, and the
   * outbox rows go. One deferred row per job: a later deferral sets the time from the job's
   * current run_after. A job cancelled since the lease keeps its outbox row, which the relay
   * releases and its next pass drops (a terminal job needs no message).
   */
  outboxDefer: `
    WITH moved AS (
      DELETE FROM jobs.outbox o USING jobs.job j WHERE o.id = ANY($1::bigint[]) AND j.id = o.job_id AND j.state = 'pending'
      RETURNING o.job_id, j.run_after
    )
    INSERT INTO jobs.outbox_deferred (job_id, publish_after)
    SELECT DISTINCT job_id, run_after - ${PUBLISH_HORIZON} FROM moved
    ON CONFLICT (job_id) DO UPDATE SET publish_after = EXCLUDED.publish_after`,

  /**
   * The deferred publishes whose time has come, at most $1, back to the outbox as rows the relay
   * publishes at its next pass whatever their age (from_deferred), with the delay left until the
   * job is due. SKIP LOCKED: relays in several processes split them.
   */
  outboxUndefer: `
    WITH due AS (
      DELETE FROM jobs.outbox_deferred d
       WHERE d.job_id IN (SELECT job_id FROM jobs.outbox_deferred WHERE publish_after <= statement_timestamp()
                           ORDER BY publish_after LIMIT $1 FOR UPDATE SKIP LOCKED)
      RETURNING d.job_id
    )
    INSERT INTO jobs.outbox (job_id, from_deferred) SELECT job_id, true FROM due`,
} as const;
