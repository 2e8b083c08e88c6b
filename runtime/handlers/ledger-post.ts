// ledger.post: posts a batch of journal lines. The example of a handler whose effects must land
// exactly once although SQS delivers at least once: the rows go into ledger_entries through
// ctx.db, which commits only with the fenced completion. ledger_entries has no unique
// constraint, so a double post would show as duplicate rows; the tests count them.
import { defineJob } from './types.ts';
import { int, noExtraKeys, object, pause, str } from './validate.ts';

export interface LedgerPostPayload {
  batch: string;
  entries: number;
  /** Simulated work before posting, in ms (honours the abort signal). */
  workMs: number;
  /** Fail the first N attempts (to exercise retries and dead-lettering). */
  failAttempts: number;
  /**
   * Simulated work after the rows are written, with the job's transaction open (ms): the shape
   * of a handler that writes as it goes, and what a database failover cuts in the middle.
   */
  workAfterWriteMs: number;
}

export const ledgerPost = defineJob<LedgerPostPayload, { batch: string; posted: number }>({
  type: 'ledger.post',
  description: 'Post a batch of journal entries to the general ledger',
  parse(payload) {
    const o = object(payload);
    noExtraKeys(o, ['batch', 'entries', 'workMs', 'failAttempts', 'workAfterWriteMs']);
    return {
      batch: str(o, 'batch', { max: 100 }),
      entries: int(o, 'entries', { min: 1, max: 100_000 }),
      workMs: int(o, 'workMs', { min: 0, max: 3_600_000, default: 0 }),
      failAttempts: int(o, 'failAttempts', { min: 0, max: 100, default: 0 }),
      workAfterWriteMs: int(o, 'workAfterWriteMs', { min: 0, max: 3_600_000, default: 0 }),
    };
  },
  async run(p, ctx) {
    const step = 50;
    for (let done = 0; done < p.workMs; done += step) {
      await pause(Math.min(step, p.workMs - done), ctx.signal);
      ctx.progress(Math.min(done + step, p.workMs) / p.workMs * 0.9, `working (${Math.min(done + step, p.workMs)}/${p.workMs} ms)`);
    }
    if (ctx.job.attempt <= p.failAttempts) {
      throw new Error(`simulated failure of batch ${p.batch} on attempt ${ctx.job.attempt} (fails the first ${p.failAttempts})`);
    }
    await ctx.db.query(
      'INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, $3::int) AS g',
      [ctx.job.id, p.batch, p.entries],
    );
    if (p.workAfterWriteMs > 0) await pause(p.workAfterWriteMs, ctx.signal);
    ctx.progress(1, `posted ${p.entries} entries`);
    return { batch: p.batch, posted: p.entries };
  },
});
