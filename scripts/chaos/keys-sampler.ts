// Samples the running jobs per concurrency key (and per type with a fleet limit) while the chaos run goes on (keys.ts says why the
// job rows alone are not enough): one statement per sample, so each sample is one consistent
// snapshot of the job table. The harness's connection goes straight to PostgreSQL, not through
// the failover proxy, so it keeps sampling while the services are cut off.

import type pg from 'pg';
import { type KeySamples, SAMPLE_MS } from './keys.ts';

export class KeySampler {
  private readonly seen: KeySamples = { samples: 0, most: {}, over: [] };
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(private readonly db: Pick<pg.Pool, 'query'>) {}

  start(): void {
    this.timer = setInterval(() => void this.sample(), SAMPLE_MS);
  }

  private async sample(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const { rows } = await this.db.query<{ k: string; n: number; lim: number }>(
        `SELECT concurrency_key AS k, count(*)::int AS n, max(concurrency_limit) AS lim
           FROM jobs.job WHERE state = 'running' AND concurrency_key IS NOT NULL GROUP BY 1
         UNION ALL
         -- A type's fleet limit (inventory.cost: at most 4) is sampled as a key of its own.
         SELECT 'fleet:' || j.type, count(*)::int, max(tl.max_running)
           FROM jobs.job j JOIN jobs.type_limit tl ON tl.type = j.type WHERE j.state = 'running' GROUP BY j.type`,
      );
      const at = new Date().toISOString();
      this.seen.samples++;
      for (const r of rows) {
        this.seen.most[r.k] = Math.max(this.seen.most[r.k] ?? 0, r.n);
        if (r.n > r.lim) this.seen.over.push({ at, key: r.k, running: r.n, limit: r.lim });
      }
    } catch {
      /* the next sample tries again */
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    while (this.busy) await new Promise((r) => setTimeout(r, 10));
  }

  result(): KeySamples {
    return this.seen;
  }
}
