// The claim race of the concurrency-key and type-limit tests: many claimers on real concurrent
// connections take random batches of job ids from an inbox that stands for the queue (the plain
// claim, then the keyed one, as the worker's fetcher does), run each job a moment and complete
// it, while a relay turns woken jobs' outbox rows back into inbox entries and a sampler reads the
// database in a tight loop. Only the database decides who runs.
import type pg from 'pg';
import { expect } from 'vitest';
import type { JobStore } from '../../runtime/store/job-store.ts';

export interface ClaimRace {
  /** How many times each job started (every one should have started once). */
  starts: Map<string, number>;
  /** How many samples the sampler took while the claimers ran. */
  samples: number;
}

export async function raceClaimers(o: {
  pool: pg.Pool;
  store: JobStore;
  ids: string[];
  claimers: number;
  /** One sample of the database; called in a loop for as long as the claimers run. */
  sample: () => Promise<void>;
}): Promise<ClaimRace> {
  const { pool, store, ids } = o;
  const inbox = new Set(ids);
  const starts = new Map<string, number>();
  let done = 0;
  let stop = false;
  let samples = 0;
  const sampler = (async () => {
    while (!stop) {
      await o.sample();
      samples++;
    }
  })();
  // The relay: a woken job's outbox row becomes a message again.
  const relay = (async () => {
    while (!stop) {
      const { rows } = await pool.query('DELETE FROM jobs.outbox RETURNING job_id');
      for (const r of rows) inbox.add(r.job_id);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  const claimer = async (n: number) => {
    while (done < ids.length) {
      const batch = [...inbox].sort(() => Math.random() - 0.5).slice(0, 1 + (n % 3));
      for (const id of batch) inbox.delete(id);
      if (batch.length === 0) {
        await new Promise((r) => setTimeout(r, 2));
        continue;
      }
      const plain = await store.claim(batch, `w${n}`, 30);
      const left = batch.filter((id) => !plain.some((j) => j.id === id));
      const keyed = await store.claimKeyed(left, `w${n}`, 30);
      for (const job of [...plain, ...keyed.claimed]) {
        starts.set(job.id, (starts.get(job.id) ?? 0) + 1);
        await new Promise((r) => setTimeout(r, Math.random() * 4));
        expect(await store.complete(pool, { id: job.id, attempt: job.attempt }, { ok: true })).toBe(true);
        done++;
      }
      // Neither started nor blocked (a copy of a message for a job that already ran): gone.
      // Blocked: its message is deleted; the key's or type's wake publishes it again.
    }
  };
  await Promise.all(Array.from({ length: o.claimers }, (_, n) => claimer(n)));
  stop = true;
  await Promise.all([sampler, relay]);
  return { starts, samples };
}
