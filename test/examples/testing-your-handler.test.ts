import { afterAll, expect, it } from 'vitest';
import { createTestKit, LeaseLostError } from 'erp-jobs/testing';
import { postInvoices } from './invoices-post.ts';

const kit = await createTestKit({ jobs: [postInvoices] }); // your handlers on a fresh database; nothing runs by itself
afterAll(() => kit.close());
await kit.pool.query(`-- the kit's database has your migrations/app tables (README "Your tables"); here, if not yet:
  CREATE TABLE IF NOT EXISTS erp.invoice (id bigserial PRIMARY KEY, batch text, total numeric, posted_at timestamptz);
  CREATE TABLE IF NOT EXISTS erp.ledger_line (invoice_id bigint NOT NULL REFERENCES erp.invoice, amount numeric NOT NULL)`);
async function batch(name: string) {
  await kit.pool.query('INSERT INTO erp.invoice (batch, total) SELECT $1, 1 FROM generate_series(1, 30)', [name]);
  return kit.enqueue('invoices.post', { batch: name, chunk: 10 }); // 30 invoices, 10 a chunk
}
const LINES = 'SELECT FROM erp.ledger_line l JOIN erp.invoice i ON i.id = l.invoice_id WHERE i.batch = $1';
const posted = async (batch: string) => (await kit.pool.query(LINES, [batch])).rowCount;
it('a failed attempt is retried from its last checkpoint', async () => {
  const job = await batch('B-1');
  const first = await kit.start(job, { pauseAt: { checkpoint: 3 } }); // chunks 1 and 2 committed, 3 written
  expect((await first.fail(new Error('period closed'))).job).toMatchObject({ state: 'pending', attemptLog: [{ outcome: 'retry' }] });
  expect(await posted('B-1')).toBe(20);
  expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded', attempt: 2 });
  expect(await posted('B-1')).toBe(30);
});
it('a crashed worker’s job is reclaimed and resumes after its last checkpoint', async () => {
  const job = await batch('B-2');
  await (await kit.start(job, { pauseAt: { checkpoint: 2 } })).crash();
  await kit.reclaim(); // its lease runs out; the rescuer re-queues the job
  expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded', attempt: 2 });
  expect(await posted('B-2')).toBe(30);
});
it('a zombie’s late checkpoint is refused with its chunk', async () => {
  const zombie = await kit.start(await batch('B-3'), { pauseAt: { checkpoint: 2 } });
  zombie.freeze(); // no heartbeat: at reclaim its lease runs out and the job goes to another worker
  await kit.reclaim();
  const second = kit.runOnce(zombie.job); // waits for the invoices the zombie has locked
  expect((await zombie.resume()).error).toBeInstanceOf(LeaseLostError);
  expect(await second).toMatchObject({ state: 'succeeded', attempt: 2 });
  expect(await posted('B-3')).toBe(30);
});
