// ledger.post: posts a batch of journal lines. The example of a handler whose effects must land
// exactly once although SQS delivers at least once: the rows go into ledger_entries through
// ctx.db, which commits only with the fenced completion. ledger_entries has no unique
// constraint, so a double post would show as duplicate rows; the tests count them.
import * as z from 'zod';
import { defineJob } from './types.ts';
import { pause, text, wholeNumber } from './validate.ts';

const payload = z.strictObject({
  batch: text({ max: 100 }).describe('the batch of journal entries'),
  entries: wholeNumber(1, 100_000).describe('how many lines to post'),
  workMs: wholeNumber(0, 3_600_000, 0).describe('simulated work before posting, in ms (honours the abort signal)'),
  failAttempts: wholeNumber(0, 100, 0).describe('fail the first N attempts (to exercise retries and dead-lettering)'),
  // The shape of a handler that writes as it goes, and what a database failover cuts in the middle.
  workAfterWriteMs: wholeNumber(0, 3_600_000, 0).describe(
    "simulated work after the rows are written, with the job's transaction open, in ms",
  ),
});

export type LedgerPostPayload = z.output<typeof payload>;

export const ledgerPost = defineJob({
  type: 'ledger.post',
  description: 'Post a batch of journal entries to the general ledger',
  schema: payload,
  // A batch posted once must never post again: its key is kept forever, so re-sending batch B-1
  // (an ERP's retry, a resubmitted file) returns the original job, however long ago it ended.
  idempotency: { keep: 'forever' },
  async run(p, ctx): Promise<{ batch: string; posted: number }> {
    const step = 50;
    for (let done = 0; done < p.workMs; done += step) {
      await pause(Math.min(step, p.workMs - done), ctx.signal);
      ctx.progress((Math.min(done + step, p.workMs) / p.workMs) * 0.9, `working (${Math.min(done + step, p.workMs)}/${p.workMs} ms)`);
    }
    if (ctx.job.attempt <= p.failAttempts) {
      throw new Error(`simulated failure of batch ${p.batch} on attempt ${ctx.job.attempt} (fails the first ${p.failAttempts})`);
    }
    await ctx.db.query('INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, $3::int) AS g', [
      ctx.job.id,
      p.batch,
      p.entries,
    ]);
    if (p.workAfterWriteMs > 0) await pause(p.workAfterWriteMs, ctx.signal);
    ctx.progress(1, `posted ${p.entries} entries`);
    return { batch: p.batch, posted: p.entries };
  },
});
