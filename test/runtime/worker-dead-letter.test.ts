// The worker's one sender of dead letters (runtime/worker/dead-letter.ts): a dead job's report with
// its reason, a poison message with its reason (and its row for on-call), retries of the DLQ send,
// and the source message deleted only once the DLQ has the reason. Real PostgreSQL, MemoryQueue.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createPlatform, type Platform } from '../support/platform.ts';
import { receiveFor, workerUnits, type Units } from '../support/worker-units.ts';

let p: Platform;
let u: Units;
beforeEach(async () => {
  p = await createPlatform();
  u = workerUnits(p);
});
afterEach(async () => {
  await u.messages.drain();
  await p.close();
});

async function deadJob(batch: string) {
  const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch, entries: 1 }, maxAttempts: 1 });
  const [c] = await p.store.claim([r!.job.id], 'owner-1', 30);
  return (await p.store.fail({ id: c!.id, attempt: c!.attempt }, { name: 'Error', message: 'ledger locked', retryable: true }, 1, false))!;
}

describe('dead letters', () => {
  it('a dead job is reported with its reason, error, attempts and last owner', async () => {
    const job = await deadJob('D-1');
    expect(await u.deadLetters.reportDeadJob(job, 'attempts-exhausted', 'src-9')).toBe(true);
    const [m] = p.dlq.peek();
    expect(m!.attributes).toEqual({
      Reason: 'attempts-exhausted',
      JobId: job.id,
      JobType: 'ledger.post',
      Lane: 'bulk',
      Attempts: '1',
      ErrorMessage: 'ledger locked',
      LastOwner: 'owner-1',
      SourceMessageId: 'src-9',
    });
    expect(JSON.parse(m!.body)).toMatchObject({
      jobId: job.id,
      reason: 'attempts-exhausted',
      error: { message: 'ledger locked' },
      attempts: 1,
      maxAttempts: 1,
      lastOwner: 'owner-1',
    });
  });

  it("a dead job's message is deleted once the DLQ has the report, and kept when the DLQ cannot be reached", async () => {
    const job = await deadJob('D-2');
    const m = await receiveFor(p, job.id);
    await u.deadLetters.deadLetterJob(job, m, 'attempts-exhausted');
    await u.messages.drain();
    expect(p.queue.peek().filter((x) => x.body.includes(job.id))).toEqual([]);

    const job2 = await deadJob('D-3');
    const m2 = await receiveFor(p, job2.id);
    const send = vi.spyOn(p.dlq, 'send').mockRejectedValue(new Error('DLQ unreachable'));
    await u.deadLetters.deadLetterJob(job2, m2, 'attempts-exhausted');
    expect(send).toHaveBeenCalledTimes(3);
    await u.messages.drain();
    expect(p.queue.peek().filter((x) => x.body.includes(job2.id))).toHaveLength(1);
  });

  it('a poison message goes to the DLQ as it came, with the reason, is recorded for on-call, and is deleted', async () => {
    await p.queue.send([{ body: '{"oops":' }]);
    const [m] = await p.queue.receive(1, 0.5);
    await u.deadLetters.deadLetterMessage(m!, 'unparseable-body', { detail: 'body is not JSON' });
    expect(p.dlq.peek()).toMatchObject([
      {
        body: '{"oops":',
        attributes: { Reason: 'unparseable-body', Detail: 'body is not JSON', SourceMessageId: m!.messageId, WorkerId: 'unit-worker' },
      },
    ]);
    const { rows } = await p.db.pool.query('SELECT reason, body, worker_id FROM jobs.poison_message');
    expect(rows).toEqual([{ reason: 'unparseable-body', body: '{"oops":', worker_id: 'unit-worker' }]);
    await u.messages.drain();
    expect(p.queue.depth().total).toBe(0);
  });
});
