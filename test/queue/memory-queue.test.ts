// The in-process transport keeps SQS's delivery semantics (runtime/queue/types.ts): the worker
// tests and the benchmark rely on them. A fake clock drives visibility.
import { describe, expect, it } from 'vitest';
import { MemoryQueue } from '../../runtime/queue/memory.ts';

function clocked(opts: { maxReceiveCount?: number; withDlq?: boolean } = {}) {
  let now = 1_000_000;
  const dlq = opts.withDlq ? new MemoryQueue({ visibilityTimeoutSeconds: 30, now: () => now }) : undefined;
  const q = new MemoryQueue({
    visibilityTimeoutSeconds: 30,
    now: () => now,
    ...(opts.maxReceiveCount !== undefined ? { maxReceiveCount: opts.maxReceiveCount } : {}),
    ...(dlq ? { deadLetterQueue: dlq } : {}),
  });
  return { q, dlq, advance: (ms: number) => (now += ms) };
}

const bodies = (ms: { body: string }[]) => ms.map((m) => m.body);

describe('MemoryQueue (SQS semantics, in process)', () => {
  it('hides a received message for the visibility timeout, then delivers it again with a new handle and a higher receive count', async () => {
    const { q, advance } = clocked();
    await q.send([{ body: 'a' }, { body: 'b' }]);
    const first = await q.receive(10, 0);
    expect(bodies(first)).toEqual(['a', 'b']);
    expect(first.map((m) => m.receiveCount)).toEqual([1, 1]);
    expect(await q.receive(10, 0)).toEqual([]);
    advance(29_999);
    expect(await q.receive(10, 0)).toEqual([]);
    advance(1);
    const again = await q.receive(10, 0);
    expect(bodies(again).sort()).toEqual(['a', 'b']);
    expect(again.map((m) => m.receiveCount)).toEqual([2, 2]);
    expect(again[0]!.receipt).not.toBe(first.find((m) => m.body === again[0]!.body)!.receipt);
  });

  it('receives at most `max`, in send order, and leaves the rest visible', async () => {
    const { q } = clocked();
    await q.send(Array.from({ length: 25 }, (_, i) => ({ body: `m${i}` })));
    expect(bodies(await q.receive(10, 0))).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    expect(bodies(await q.receive(10, 0))).toEqual(Array.from({ length: 10 }, (_, i) => `m${i + 10}`));
    expect(q.depth()).toEqual({ visible: 5, inFlight: 20, total: 25 });
  });

  it('only the newest handle changes visibility or deletes; an old handle is stale', async () => {
    const { q, advance } = clocked();
    await q.send([{ body: 'a' }]);
    const [r1] = await q.receive(1, 0);
    advance(30_000);
    const [r2] = await q.receive(1, 0);
    const failures = await q.changeVisibility([{ receipt: r1!.receipt, seconds: 0 }]);
    expect(failures).toMatchObject([{ receipt: r1!.receipt, stale: true }]);
    // Deleting with the stale handle "succeeds" without deleting (SQS).
    expect(await q.delete([r1!.receipt])).toEqual([]);
    expect(q.depth().total).toBe(1);
    expect(await q.changeVisibility([{ receipt: r2!.receipt, seconds: 0 }])).toEqual([]);
    const [r3] = await q.receive(1, 0);
    expect(r3!.receiveCount).toBe(3);
    await q.delete([r3!.receipt]);
    expect(q.depth().total).toBe(0);
  });

  it('changeVisibility hides for exactly the seconds given, and 0 makes the message visible at once', async () => {
    const { q, advance } = clocked();
    await q.send([{ body: 'a' }, { body: 'b' }]);
    const [a, b] = await q.receive(2, 0);
    await q.changeVisibility([
      { receipt: a!.receipt, seconds: 5 },
      { receipt: b!.receipt, seconds: 0 },
    ]);
    expect(bodies(await q.receive(10, 0))).toEqual(['b']);
    advance(4_999);
    expect(await q.receive(10, 0)).toEqual([]);
    advance(1);
    expect(bodies(await q.receive(10, 0))).toEqual(['a']);
  });

  it('a delayed send stays hidden until its delay is over', async () => {
    const { q, advance } = clocked();
    await q.send([{ body: 'later', delaySeconds: 10 }, { body: 'now' }]);
    expect(bodies(await q.receive(10, 0))).toEqual(['now']);
    advance(10_000);
    expect(bodies(await q.receive(10, 0))).toEqual(['later']);
  });

  it('redrives a message received more than maxReceiveCount times to the dead-letter queue', async () => {
    const { q, dlq, advance } = clocked({ maxReceiveCount: 2, withDlq: true });
    await q.send([{ body: 'poison', attributes: { JobId: 'x' } }]);
    for (let i = 0; i < 2; i++) {
      expect(await q.receive(1, 0)).toHaveLength(1);
      advance(30_000);
    }
    expect(await q.receive(1, 0)).toEqual([]);
    expect(q.depth().total).toBe(0);
    expect(dlq!.peek()).toMatchObject([{ body: 'poison', attributes: { JobId: 'x', RedrivenAfterReceives: '2' } }]);
  });

  it('a long poll returns as soon as a message is sent, and [] when aborted', async () => {
    const q = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    const waiting = q.receive(10, 5);
    setTimeout(() => void q.send([{ body: 'hello' }]), 20);
    expect(bodies(await waiting)).toEqual(['hello']);
    const ac = new AbortController();
    const aborted = q.receive(10, 5, ac.signal);
    setTimeout(() => ac.abort(), 20);
    expect(await aborted).toEqual([]);
  });

  it('a long poll wakes when a hidden message becomes visible again', async () => {
    const q = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    await q.send([{ body: 'a' }]);
    const [m] = await q.receive(1, 0);
    await q.changeVisibility([{ receipt: m!.receipt, seconds: 0.05 }]);
    const t0 = Date.now();
    const again = await q.receive(1, 2);
    expect(bodies(again)).toEqual(['a']);
    expect(Date.now() - t0).toBeLessThan(1_000);
  });
});
