// A worker's own statements over many rows at once: the heartbeat's renewal of every lease it
// holds and the batched completion of the jobs whose handlers wrote nothing run side by side, on
// rows they share (a job awaiting its batched completion is still renewed). Real PostgreSQL, real
// concurrent connections.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobStore } from '../../runtime/store/job-store.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

describe('renewal beside batched completion', () => {
  let p: Platform;
  let renewer: JobStore;
  let completer: JobStore;
  beforeAll(async () => {
    p = await createPlatform();
    renewer = new JobStore(p.db.newPool(1));
    completer = new JobStore(p.db.newPool(1));
  });
  afterAll(() => p.close());

  it('over the same rows in any order, at once: never a deadlock (20 rounds of 200 jobs)', async () => {
    const shuffled = <T>(xs: T[]) =>
      xs
        .map((x) => [Math.random(), x] as const)
        .sort((a, b) => a[0] - b[0])
        .map(([, x]) => x);
    const errors: string[] = [];
    for (let round = 0; round < 20; round++) {
      const made = await p.client.enqueueNow(
        Array.from({ length: 200 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `LO-${round}-${i}`, entries: 1 } })),
      );
      const claimed = await p.store.claim(shuffled(made.map((m) => m.job.id)), 'w', 60);
      const tokens = claimed.map((c) => ({ id: c.id, attempt: c.attempt }));
      const [renewed, completed] = await Promise.allSettled([
        renewer.renewLeases(shuffled(tokens), 60),
        completer.completeMany(shuffled(tokens).map((t) => ({ ...t, result: null }))),
      ]);
      for (const r of [renewed, completed])
        if (r.status === 'rejected') errors.push(String((r.reason as { code?: string }).code ?? r.reason));
    }
    expect(errors).toEqual([]);
  }, 120_000);
});
