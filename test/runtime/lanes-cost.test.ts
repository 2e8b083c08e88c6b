// SQS calls per job with priority lanes: a bulk-only workload through a worker that also watches an
// (empty) urgent queue costs about what it costs with one queue, and an idle worker long-polls
// instead of spinning. Counted on the in-process queues (every receive is a ReceiveMessage).
import { afterEach, expect, it } from 'vitest';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { LaneQueues } from '../../runtime/queue/lanes.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import type { JobQueue } from '../../runtime/queue/types.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { TestWorker } from 'erp-jobs/testing';
import { createTestDb, type TestDb } from '../support/db.ts';
import { FAST_TIMINGS, waitFor } from '../support/platform.ts';

const registry = new JobRegistry([
  defineJob<Record<string, never>, null>({ type: 'test.noop', description: 'does nothing', parse: () => ({}), run: async () => null }),
]);

/** A queue that counts its receive calls. */
function counted(q: MemoryQueue): { queue: JobQueue; receives: () => number } {
  let n = 0;
  return {
    queue: {
      send: (m) => q.send(m),
      receive: (max, wait, signal) => {
        n++;
        return q.receive(max, wait, signal);
      },
      changeVisibility: (c) => q.changeVisibility(c),
      delete: (r) => q.delete(r),
    },
    receives: () => n,
  };
}

let db: TestDb | null = null;
let worker: TestWorker | null = null;
afterEach(async () => {
  await worker?.crash().catch(() => undefined);
  await db?.drop();
});

async function receivesPerJob(withUrgentQueue: boolean): Promise<{ perJob: number; idlePerSecond: number }> {
  db = await createTestDb();
  const bulk = counted(new MemoryQueue({ visibilityTimeoutSeconds: 30 }));
  const urgent = counted(new MemoryQueue({ visibilityTimeoutSeconds: 30 }));
  const queue = new LaneQueues({ bulk: bulk.queue, urgent: withUrgentQueue ? urgent.queue : null });
  const dlq = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
  const client = new JobClient({ pool: db.pool, registry, publisher: new Publisher(db.pool, queue, silentLogger), defaultMaxAttempts: 3 });
  const total = 400;
  for (let i = 0; i < total; i += 100) await client.enqueueNow(Array.from({ length: 100 }, () => ({ type: 'test.noop', payload: {} })));
  const pool = db.newPool(12);
  worker = new TestWorker({
    pool,
    queue,
    dlq,
    registry,
    publisher: new Publisher(pool, queue, silentLogger),
    log: silentLogger,
    receiveWaitSeconds: 1,
    timings: { ...FAST_TIMINGS, concurrency: 10 },
  });
  worker.start();
  await waitFor(
    async () => (await db!.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE state = 'succeeded'")).rows[0].n === total,
    30_000,
    'all done',
  );
  const busy = bulk.receives() + urgent.receives();
  // Idle for 3 s: long polls (1 s here), not a spin.
  await new Promise((r) => setTimeout(r, 3000));
  const idle = bulk.receives() + urgent.receives() - busy;
  await worker.crash();
  worker = null;
  await db.drop();
  db = null;
  return { perJob: busy / total, idlePerSecond: idle / 3 };
}

it('a bulk-only workload costs about the same receives per job with an urgent queue as with one queue; idle is long polls', async () => {
  const one = await receivesPerJob(false);
  const two = await receivesPerJob(true);
  console.log(
    `receives per job: one queue ${one.perJob.toFixed(3)}, two lanes ${two.perJob.toFixed(3)}; idle per second: ${one.idlePerSecond.toFixed(1)}, ${two.idlePerSecond.toFixed(1)}`,
  );
  expect(two.perJob).toBeLessThanOrEqual(one.perJob * 1.25 + 0.02);
  // Idle: one long poll per lane per wait (1 s here), give or take the pass that ends the work.
  expect(two.idlePerSecond).toBeLessThanOrEqual(3);
}, 90_000);
