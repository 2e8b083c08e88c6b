// Builds the platform in-process for a test: a migrated database, an SQS-like MemoryQueue with
// a DLQ and redrive, the publisher, the enqueue client and workers with short timings. The
// workers are the test kit's (erp-jobs/testing): they can also crash (SIGKILL) or freeze.
import { JobClient, type EnqueueSpec } from '../../runtime/store/client.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import type { JobRegistry } from '../../runtime/handlers/registry.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import type { JobQueue } from '../../runtime/queue/types.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import type { WorkerOptions } from '../../runtime/worker/worker.ts';
import { TestWorker } from 'erp-jobs/testing';
import { createTestDb, type TestDb } from './db.ts';

export const FAST_TIMINGS: JobTimings = {
  leaseSeconds: 2,
  heartbeatSeconds: 0.5,
  visibilityTimeoutSeconds: 3,
  maxAttempts: 3,
  maxReceiveCount: 10,
  backoffBaseSeconds: 0.2,
  backoffMaxSeconds: 1,
  concurrency: 5,
  drainSeconds: 5,
};

export interface Platform {
  db: TestDb;
  queue: MemoryQueue;
  dlq: MemoryQueue;
  registry: JobRegistry;
  publisher: Publisher;
  client: JobClient;
  store: JobStore;
  metrics: CountingMetrics;
  workers: TestWorker[];
  worker(opts?: Partial<Omit<WorkerOptions, 'timings'>> & { timings?: Partial<JobTimings> }): TestWorker;
  close(): Promise<void>;
}

/** `appDir`: the ERP's migrations from this folder instead of migrations/app (see createTestDb). */
export async function createPlatform(
  opts: { timings?: Partial<JobTimings>; registry?: JobRegistry; appDir?: string } = {},
): Promise<Platform> {
  const db = await createTestDb(opts.appDir ? { appDir: opts.appDir } : {});
  const timings = { ...FAST_TIMINGS, ...opts.timings };
  const dlq = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
  const queue = new MemoryQueue({
    visibilityTimeoutSeconds: timings.visibilityTimeoutSeconds,
    maxReceiveCount: timings.maxReceiveCount,
    deadLetterQueue: dlq,
  });
  const registry = opts.registry ?? defaultRegistry();
  const publisher = new Publisher(db.pool, queue, silentLogger);
  const client = new JobClient({ pool: db.pool, registry, publisher, defaultMaxAttempts: timings.maxAttempts });
  const metrics = new CountingMetrics();
  const workers: TestWorker[] = [];
  const platform: Platform = {
    db,
    queue,
    dlq,
    registry,
    publisher,
    client,
    store: new JobStore(db.pool),
    metrics,
    workers,
    worker(o = {}) {
      const pool = db.newPool(timings.concurrency + 2);
      const w = new TestWorker({
        pool,
        queue,
        dlq,
        registry,
        publisher: new Publisher(pool, queue, silentLogger),
        log: silentLogger,
        metrics,
        receiveWaitSeconds: 0.2,
        ...o,
        timings: { ...timings, ...o.timings },
      });
      workers.push(w);
      return w;
    },
    async close() {
      // As killed: a test's workers write nothing more while its database goes away.
      await Promise.all(workers.map((w) => w.crash().catch(() => undefined)));
      queue.close();
      dlq.close();
      await publisher.flush();
      await db.drop();
    },
  };
  return platform;
}

/** Poll `fn` until it returns a truthy value or `timeoutMs` passes (state assertions, not sleeps). */
export async function waitFor<T>(fn: () => Promise<T> | T, timeoutMs = 10_000, what = 'condition'): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last as NonNullable<T>;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value: ${JSON.stringify(last)})`);
}

/**
 * Hold jobs' row locks in a transaction of its own, so a claim of those jobs waits on them.
 * `claimWaiting(n)` resolves once n statements in this database wait on a lock (default 1);
 * `release()` rolls the transaction back.
 */
export async function holdJobRow(
  pool: TestDb['pool'],
  jobIds: string | string[],
): Promise<{ claimWaiting(statements?: number): Promise<unknown>; release(): Promise<void> }> {
  const holder = await pool.connect();
  holder.on('error', () => undefined);
  await holder.query('BEGIN');
  await holder.query('SELECT 1 FROM jobs.job WHERE id = ANY($1::uuid[]) FOR UPDATE', [[jobIds].flat()]);
  return {
    claimWaiting: (statements = 1) =>
      waitFor(
        async () => {
          const r = await pool.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
          );
          return r.rows[0].n >= statements;
        },
        10_000,
        `${statements} claim(s) waiting on the row locks`,
      ),
    async release() {
      await holder.query('ROLLBACK');
      holder.release();
    },
  };
}

/**
 * Enqueue `specs` through a queue of the test's own: the rows exist (and can be locked) before
 * their messages reach `target`, which `deliverNext()` does one at a time, in enqueue order.
 */
export async function stagedJobs(
  pool: TestDb['pool'],
  registry: JobRegistry,
  specs: EnqueueSpec[],
  target: JobQueue,
): Promise<{ ids: string[]; deliverNext(): Promise<void>; close(): void }> {
  const staging = new MemoryQueue({ visibilityTimeoutSeconds: 60 });
  const client = new JobClient({ pool, registry, publisher: new Publisher(pool, staging, silentLogger), defaultMaxAttempts: 3 });
  const jobs = await client.enqueueNow(specs);
  await waitFor(async () => (await staging.approximateCount()) === specs.length, 5_000, `${specs.length} messages published`);
  return {
    ids: jobs.map((j) => j.job.id),
    async deliverNext() {
      const [m] = await staging.receive(1, 0);
      await target.send([{ body: m!.body }]);
    },
    close: () => staging.close(),
  };
}
