import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestKit, type TestKit } from 'erp-jobs/testing';
import { inventoryCost } from '../../runtime/handlers/inventory-cost.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';

let kit: TestKit;
beforeAll(async () => (kit = await createTestKit({ jobs: [ledgerPost, inventoryCost] })));
afterAll(() => kit.close());
const lines = async (batch: string) => (await kit.pool.query('SELECT 1 FROM ledger_entries WHERE batch = $1', [batch])).rowCount;

it('a failed attempt is retried', async () => {
  const job = await kit.enqueue('ledger.post', { batch: 'B-1', entries: 3, failAttempts: 1 });
  expect(await kit.runOnce(job)).toMatchObject({ state: 'pending', attemptLog: [{ outcome: 'retry' }] });
  expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded', attempt: 2 });
  expect(await lines('B-1')).toBe(3);
});

it('a crashed worker’s job is reclaimed and resumes from its last checkpoint', async () => {
  const job = await kit.enqueue('inventory.cost', { store: 'S1', period: '2026-11', skus: 30, chunkSize: 10 });
  const first = await kit.start(job, { pauseAt: { checkpoint: 2 } }); // chunk 1 saved, chunk 2 not
  await first.crash();
  await kit.reclaim();
  const done = await kit.runOnce(job);
  expect(done).toMatchObject({ state: 'succeeded', attempt: 2, result: { resumedFrom: 10, skus: 30 } });
});

it('a zombie’s late completion is refused: the lines land once', async () => {
  const job = await kit.enqueue('ledger.post', { batch: 'B-2', entries: 5 });
  const zombie = await kit.start(job, { pauseAt: 'end' }); // lines written, not committed
  zombie.freeze(); // no heartbeat: its lease runs out at reclaim
  await kit.reclaim();
  expect(await kit.runOnce(job)).toMatchObject({ state: 'succeeded', attempt: 2 });
  await zombie.resume(); // its completion is fenced out, its lines rolled back
  expect(await lines('B-2')).toBe(5);
});
