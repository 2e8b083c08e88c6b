// `jobs republish` and POST /v1/jobs/republish: an operator forces a fresh message for pending
// jobs (a purge they know of, a redrive to the wrong queue, a queue that answers no counts). The
// reconciler (runtime/maintenance/reconciler.ts) does this by itself within minutes; this is for when
// on-call will not wait. Published through the outbox after COMMIT, recorded with who asked and
// why. Only pending jobs: a job named by id in any other state is reported as skipped.

import type pg from 'pg';
import { ValidationError } from '../domain/errors.ts';
import type { JobState } from '../domain/job.ts';
import type { Lane } from '../domain/lanes.ts';
import type { Publisher } from '../store/outbox.ts';
import { withTransaction } from '../db/transaction.ts';
import { run } from '../store/job-store.ts';
import { operatorName, runOps } from './db.ts';
import type { Skipped } from './dead-jobs.ts';

export interface RepublishRequest {
  ids?: string[];
  type?: string;
  /** Pending jobs due before this time (`--older-than 10m`: due for more than ten minutes). */
  dueBefore?: Date;
  by: string;
  reason?: string | null;
  /** At most this many (default 10,000). */
  limit?: number;
}

export interface RepublishReport {
  jobs: { id: string; type: string; runAfter: string }[];
  skipped: Skipped[];
}

export const REPUBLISH_DEFAULT_LIMIT = 10_000;

export class RepublishService {
  constructor(
    private readonly pool: pg.Pool,
    private readonly publisher: Publisher,
  ) {}

  async republish(r: RepublishRequest): Promise<RepublishReport> {
    if (!r.ids?.length && !r.type && !r.dueBefore) {
      throw new ValidationError('selection', 'name the jobs: ids, a type, or pending jobs due before a time (--older-than)');
    }
    const limit = r.limit ?? REPUBLISH_DEFAULT_LIMIT;
    const { rows } = await withTransaction(this.pool, (client) =>
      run<{ id: string; type: string; run_after: Date; lane: Lane; outbox_id: string }>(client, 'jobRepublish', [
        r.ids?.length ? r.ids : null,
        r.type ?? null,
        r.dueBefore ?? null,
        limit,
        operatorName(r.by),
        r.reason ?? null,
      ]),
    );
    await this.publisher.publish(
      rows.map((x) => ({ outboxId: x.outbox_id, jobId: x.id, type: x.type, lane: x.lane, runAfter: x.run_after })),
    );
    const skipped: Skipped[] = [];
    if (r.ids?.length) {
      const done = new Set(rows.map((x) => x.id));
      const rest = r.ids.filter((id) => !done.has(id));
      if (rest.length > 0) {
        const { rows: states } = await runOps<{ id: string; type: string; state: JobState }>(this.pool, 'jobStates', [rest]);
        const byId = new Map(states.map((s) => [s.id, s]));
        for (const id of rest) {
          const s = byId.get(id);
          skipped.push({
            id,
            type: s?.type ?? null,
            state: s?.state ?? null,
            reason: !s
              ? 'no such job'
              : s.state === 'running'
                ? 'running: its owner holds the message (the rescuer re-publishes it if the owner dies)'
                : s.state === 'pending'
                  ? 'pending but not selected (type or --older-than did not match, or past the limit)'
                  : `${s.state}: a finished job needs no message`,
          });
        }
      }
    }
    return { jobs: rows.map((x) => ({ id: x.id, type: x.type, runAfter: x.run_after.toISOString() })), skipped };
  }
}
