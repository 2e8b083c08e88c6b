import * as z from 'zod';
import { defineJob, type JobContext } from '../../runtime/handlers/types.ts';
import { text, wholeNumber } from '../../runtime/handlers/validate.ts';

export const postInvoices = defineJob({
  type: 'invoices.post',
  description: 'Post a batch of invoices, a chunk at a time',
  // The payload's schema: p's type, the 400 naming `payload.<field>`, `jobs types --describe`,
  // GET /v1/job-types and the OpenAPI payload shape all come from it. An unknown field is refused.
  schema: z.strictObject({
    batch: text({ max: 100 }).describe('the batch to post'),
    chunk: wholeNumber(1, 1_000, 100).describe('invoices per chunk'), // optional: 100 when absent
  }),
  async run(p, ctx: JobContext<{ after: string }>) {
    let after = ctx.checkpoint?.after ?? '0'; // resume after the last chunk a checkpoint committed
    for (;;) {
      ctx.signal.throwIfAborted(); // the lease is lost or the worker stops: end promptly
      // A bigint comes back as a string (node-postgres keeps every digit); keep ids that way.
      const { rows } = await ctx.db.query<{ id: string }>(
        'SELECT id FROM erp.invoice WHERE batch = $1 AND id > $2 AND posted_at IS NULL ORDER BY id LIMIT $3',
        [p.batch, after, p.chunk],
      );
      if (rows.length === 0) break;
      const ids = rows.map((r) => r.id);
      await ctx.db.query('INSERT INTO erp.ledger_line (invoice_id, amount) SELECT id, total FROM erp.invoice WHERE id = ANY($1)', [ids]);
      await ctx.db.query('UPDATE erp.invoice SET posted_at = now() WHERE id = ANY($1)', [ids]);
      after = ids.at(-1)!;
      await ctx.saveCheckpoint({ after }); // commits this chunk's rows with the checkpoint, or neither
    }
    return { lastInvoice: after }; // stored as the job's result
  },
});
