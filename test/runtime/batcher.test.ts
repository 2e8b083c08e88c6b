// The worker's batching (runtime/worker/batcher.ts): what arrives together goes in one flush; with
// a limit on flushes in flight (completions, claims), what arrives meanwhile waits and goes in the
// next flush, together, so batches grow with the load instead of the statements multiplying; a
// drain flushes everything, waiting included; a failed flush rejects its own items only.
import { describe, expect, it } from 'vitest';
import { Batcher } from '../../runtime/worker/batcher.ts';

/** A flush function whose calls the test ends one by one. */
function held() {
  const calls: { items: number[]; end: (fail?: boolean) => void }[] = [];
  let inFlight = 0;
  let most = 0;
  const flush = (items: number[]) =>
    new Promise<number[]>((resolve, reject) => {
      most = Math.max(most, ++inFlight);
      calls.push({
        items,
        end: (fail) => {
          inFlight--;
          if (fail) reject(new Error('flush failed'));
          else resolve(items.map((i) => i * 10));
        },
      });
    });
  return { calls, flush, most: () => most };
}

const turn = () => new Promise<void>((r) => setImmediate(r));

describe('Batcher', () => {
  it('with maxInFlight 1, items added while a flush runs go together in the next one', async () => {
    const h = held();
    const b = new Batcher<number, number>(h.flush, { maxItems: 500, delayMs: 0, maxInFlight: 1 });
    const first = b.add(1);
    await turn();
    expect(h.calls.map((c) => c.items)).toEqual([[1]]);
    const rest = [2, 3, 4, 5].map((i) => b.add(i));
    await turn();
    await turn();
    expect(h.calls.length).toBe(1); // waiting for the first flush to end
    h.calls[0]!.end();
    expect(await first).toBe(10);
    await turn();
    expect(h.calls.map((c) => c.items)).toEqual([[1], [2, 3, 4, 5]]);
    h.calls[1]!.end();
    expect(await Promise.all(rest)).toEqual([20, 30, 40, 50]);
    expect(h.most()).toBe(1);
  });

  it('without a limit, each turn of the event loop flushes at once (several in flight)', async () => {
    const h = held();
    const b = new Batcher<number, number>(h.flush, { maxItems: 500, delayMs: 0 });
    void b.add(1);
    await turn();
    void b.add(2);
    await turn();
    expect(h.calls.map((c) => c.items)).toEqual([[1], [2]]);
    for (const c of h.calls) c.end();
  });

  it('maxItems still splits what waited; drain flushes the waiting items and waits for every flush', async () => {
    const h = held();
    const b = new Batcher<number, number>(h.flush, { maxItems: 3, delayMs: 0, maxInFlight: 1 });
    const all = [1, 2, 3, 4, 5, 6, 7].map((i) => b.add(i));
    await turn();
    expect(h.calls.map((c) => c.items)).toEqual([[1, 2, 3]]);
    let drained = false;
    const d = b.drain().then(() => (drained = true));
    for (let k = 0; k < 3; k++) {
      await turn();
      h.calls[k]!.end();
      await turn();
    }
    await d;
    expect(drained).toBe(true);
    expect(h.calls.map((c) => c.items)).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40, 50, 60, 70]);
    expect(h.most()).toBe(1);
  });

  it('a failed flush rejects its own items; the waiting ones still go', async () => {
    const h = held();
    const b = new Batcher<number, number>(h.flush, { maxItems: 500, delayMs: 0, maxInFlight: 1 });
    const a = b.add(1);
    await turn();
    const later = b.add(2);
    h.calls[0]!.end(true);
    await expect(a).rejects.toThrow('flush failed');
    await turn();
    h.calls[1]!.end();
    expect(await later).toBe(20);
  });
});
