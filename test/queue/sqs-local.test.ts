// SqsQueue against a local SQS endpoint (fauxqs): the SQS behaviour the worker relies on —
// visibility, redelivery with a new receipt handle, stale handles, batches, redrive to the DLQ.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';

let sqs: LocalSqs;
let q: SqsQueue;
let dlq: SqsQueue;
beforeAll(async () => {
  sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 1, maxReceiveCount: 2 }, prefix: 'sqs-test' });
  q = new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
  dlq = new SqsQueue({ queueUrl: sqs.dlqUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
});
afterAll(() => sqs.stop());

async function drain(queue: SqsQueue) {
  for (;;) {
    const got = await queue.receive(10, 0);
    if (got.length === 0) return;
    await queue.delete(got.map((m) => m.receipt));
  }
}

describe('SqsQueue on a local SQS endpoint', () => {
  it('sends in batches of 10 and receives up to 10 at a time with attributes, receive counts and when each was sent', async () => {
    const before = Date.now();
    await q.send(Array.from({ length: 23 }, (_, i) => ({ body: `m${i}`, attributes: { Reason: 'test', Index: String(i) } })));
    const seen: string[] = [];
    for (let i = 0; i < 5 && seen.length < 23; i++) {
      const got = await q.receive(10, 1);
      expect(got.length).toBeLessThanOrEqual(10);
      for (const m of got) {
        expect(m.receiveCount).toBe(1);
        expect(m.attributes.Reason).toBe('test');
        // SentTimestamp: the worker replaces a message too old to wait again (the queue-age alarm).
        expect(m.sentAt).toBeGreaterThanOrEqual(before - 5000);
        expect(m.sentAt).toBeLessThanOrEqual(Date.now() + 5000);
      }
      seen.push(...got.map((m) => m.body));
      expect(await q.delete(got.map((m) => m.receipt))).toEqual([]);
    }
    expect(seen.sort()).toEqual(Array.from({ length: 23 }, (_, i) => `m${i}`).sort());
  });

  it('redelivers after the visibility timeout with a new receipt handle; the old one is stale', async () => {
    await drain(q);
    await q.send([{ body: 'redeliver-me' }]);
    const [first] = await q.receive(1, 1);
    expect(first).toBeDefined();
    await new Promise((r) => setTimeout(r, 1200));
    const [second] = await q.receive(1, 2);
    expect(second!.messageId).toBe(first!.messageId);
    expect(second!.receiveCount).toBe(2);
    expect(second!.receipt).not.toBe(first!.receipt);
    // The owner's old handle can no longer extend the message.
    const failures = await q.changeVisibility([{ receipt: first!.receipt, seconds: 30 }]);
    expect(failures).toHaveLength(1);
    expect(failures[0]!.stale).toBe(true);
    expect(await q.changeVisibility([{ receipt: second!.receipt, seconds: 30 }])).toEqual([]);
    await q.delete([second!.receipt]);
  });

  it('extending visibility keeps a message hidden; visibility 0 returns it at once', async () => {
    await drain(q);
    await q.send([{ body: 'hold' }]);
    const [m] = await q.receive(1, 1);
    await q.changeVisibility([{ receipt: m!.receipt, seconds: 5 }]);
    await new Promise((r) => setTimeout(r, 1300));
    expect(await q.receive(1, 0)).toEqual([]);
    await q.changeVisibility([{ receipt: m!.receipt, seconds: 0 }]);
    const [again] = await q.receive(1, 1);
    expect(again!.body).toBe('hold');
    await q.delete([again!.receipt]);
  });

  it('a delayed message stays hidden until its delay passes', async () => {
    await drain(q);
    await q.send([{ body: 'later', delaySeconds: 1 }]);
    expect(await q.receive(1, 0)).toEqual([]);
    const got = await q.receive(1, 3);
    expect(got[0]?.body).toBe('later');
    await q.delete([got[0]!.receipt]);
  });

  it('redrives a message received more than maxReceiveCount times to the DLQ', async () => {
    await drain(q);
    await drain(dlq);
    await q.send([{ body: 'poison-loop' }]);
    for (let i = 0; i < 2; i++) {
      const got = await q.receive(1, 2);
      expect(got).toHaveLength(1);
      await new Promise((r) => setTimeout(r, 1100));
    }
    expect(await q.receive(1, 1)).toEqual([]);
    const inDlq = await dlq.receive(1, 2);
    expect(inDlq[0]?.body).toBe('poison-loop');
    await dlq.delete([inDlq[0]!.receipt]);
  });

  it('receive resolves with nothing when its signal aborts during a long poll', async () => {
    await drain(q);
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(), 200);
    expect(await q.receive(10, 10, ac.signal)).toEqual([]);
    expect(Date.now() - t0).toBeLessThan(3000);
  });
});
