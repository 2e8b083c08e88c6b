// Publishing a concurrency key's next job at once. When a job with a key stops running, the
// transaction that ends it also queues the key's next blocked job in the outbox (the trigger
// jobs.job_left_key, migration 0006), marked relay_now. The outbox relay of every service would
// publish it within its interval (a second); a worker that just ended a keyed job, or blocked
// one, publishes it itself right away, so a key's jobs follow each other in milliseconds, not
// one a second. Passes coalesce: a burst of endings costs one or two passes.

import type { Logger } from '../observability/log.ts';
import type { JobQueue } from '../queue/types.ts';
import { OutboxRelay } from '../store/outbox-relay.ts';
import type pg from 'pg';

export class KeyWake {
  private readonly relay: OutboxRelay;
  private running: Promise<void> | null = null;
  private again = false;

  constructor(
    pool: pg.Pool,
    queue: JobQueue,
    private readonly log: Logger,
  ) {
    // Only rows marked relay_now: an age no row reaches leaves the enqueuers' rows to them, and
    // skipDeferred the deferred publishes (and those come due) to the maintenance relay.
    this.relay = new OutboxRelay(pool, queue, log, {
      minAgeSeconds: 1e9,
      intervalMs: 1000,
      batchSize: 100,
      quiet: true,
      skipDeferred: true,
    });
  }

  /** A keyed job ended or was blocked here: publish what its key woke. */
  nudge(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.drain();
  }

  /** Resolves when no pass is running (the worker's stop waits for it). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      do {
        this.again = false;
        await this.relay.runOnce().catch((err: unknown) => {
          this.log.warn({ err }, "publishing a concurrency key's next job failed; the outbox relay will publish it");
        });
      } while (this.again);
    } finally {
      this.running = null;
    }
  }
}
