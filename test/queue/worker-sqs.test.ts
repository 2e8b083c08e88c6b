// The worker through @aws-sdk/client-sqs against a local SQS endpoint: completion and delete,
// visibility extension of a long job, duplicate deliveries, explicit dead-lettering with the
// reason, a worker that keeps working through SQS and database faults, and a graceful stop that
// leaves no message to a long poll nobody reads.
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JobClient } from '../../runtime/store/client.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import type { JobQueue } from '../../runtime/queue/types.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { Worker } from '../../runtime/worker/worker.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const timings: JobTimings = {
  leaseSeconds: 2,
  heartbeatSeconds: 0.5,
  visibilityTimeoutSeconds: 2,
  maxAttempts: 2,
  maxReceiveCount: 6,
  backoffBaseSeconds: 0.5,
  backoffMaxSeconds: 1,
  concurrency: 4,
  drainSeconds: 2,
};

let db: TestDb;
let sqs: LocalSqs;
let queue: SqsQueue;
let dlq: SqsQueue;
let client: JobClient;
let metrics: CountingMetrics;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDb();
  sqs = await startLocalSqs({ timings, prefix: 'worker-sqs' });
  queue = new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint });
  dlq = new SqsQueue({ queueUrl: sqs.dlqUrl, endpoint: sqs.endpoint });
  client = new JobClient({
    pool: db.pool,
    registry: defaultRegistry(),
    publisher: new Publisher(db.pool, queue, silentLogger),
    defaultMaxAttempts: timings.maxAttempts,
  });
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
});
afterAll(async () => {
  await sqs.stop();
  await db.drop();
});

function startWorker(q: JobQueue = queue, pool: pg.Pool = db.newPool(timings.concurrency + 2)): Worker {
  metrics ??= new CountingMetrics();
  const w = new Worker({
    pool,
    queue: q,
    dlq,
    registry: defaultRegistry(),
    publisher: new Publisher(pool, q, silentLogger),
    timings,
    log: silentLogger,
    metrics,
    receiveWaitSeconds: 1,
  });
  workers.push(w);
  w.start();
  return w;
}
const enqueue = async (payload: Record<string, unknown>, maxAttempts?: number) =>
  (await client.enqueueNow({ type: 'ledger.post', payload, ...(maxAttempts ? { maxAttempts } : {}) }))[0]!.job;
const state = async (id: string) => (await client.store.get(id))!;
const until = (id: string, s: string, ms = 15_000) =>
  waitFor(async () => ((await state(id)).state === s ? state(id) : null), ms, `job ${s}`);
const rows = async (batch: string) =>
  (await db.pool.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch = $1', [batch])).rows[0].n as number;
const queueEmpty = () =>
  waitFor(
    () => {
      const q = sqs.inspect(sqs.queueName);
      return q.ready + q.delayed + q.inflight === 0;
    },
    5000,
    'queue empty',
  );
async function dlqMessages() {
  const got = await dlq.receive(10, 1);
  await dlq.delete(got.map((m) => m.receipt));
  return got;
}

describe('worker over SQS (local endpoint)', () => {
  it('completes a job and deletes its message', async () => {
    metrics = new CountingMetrics();
    const job = await enqueue({ batch: 'S-1', entries: 5 });
    startWorker();
    await until(job.id, 'succeeded');
    expect(await rows('S-1')).toBe(5);
    await queueEmpty();
  });

  it('a job longer than the visibility timeout keeps its message hidden through heartbeats: one attempt, no duplicate', async () => {
    metrics = new CountingMetrics();
    const job = await enqueue({ batch: 'S-LONG', entries: 3, workMs: 4500 });
    startWorker();
    startWorker();
    const done = await until(job.id, 'succeeded');
    expect(done.attempt).toBe(1);
    expect(metrics.get(METRIC.duplicateDeliveries)).toBe(0);
    expect(metrics.get(METRIC.leasesLost)).toBe(0);
    expect(await rows('S-LONG')).toBe(3);
    await queueEmpty();
  });

  it('a duplicate delivery of a running job is ignored and deleted; the job completes once', async () => {
    metrics = new CountingMetrics();
    const job = await enqueue({ batch: 'S-DUP', entries: 4, workMs: 2000 });
    startWorker();
    await until(job.id, 'running');
    startWorker();
    await queue.send([{ body: jobMessageBody(job.id, 'ledger.post') }]);
    const done = await until(job.id, 'succeeded');
    expect(done.attempt).toBe(1);
    expect(await rows('S-DUP')).toBe(4);
    expect(metrics.get(METRIC.duplicateDeliveries)).toBe(1);
    await queueEmpty();
  });

  it('dead-letters explicitly, with the reason in message attributes: a poison body, an unknown job, a job past its cap', async () => {
    metrics = new CountingMetrics();
    await dlqMessages();
    const job = await enqueue({ batch: 'S-DEAD', entries: 2, failAttempts: 5 }, 2);
    await queue.send([{ body: '{"oops":' }, { body: jobMessageBody('11111111-2222-4333-8444-555555555555') }]);
    startWorker();
    const dead = await until(job.id, 'dead');
    expect(dead.lastError!.message).toMatch(/attempt 2/);
    const got: Awaited<ReturnType<typeof dlqMessages>> = [];
    await waitFor(
      async () => {
        got.push(...(await dlqMessages()));
        return got.length >= 3;
      },
      10_000,
      'three DLQ messages',
    );
    const byReason = Object.fromEntries(got.map((m) => [m.attributes.Reason, m]));
    expect(Object.keys(byReason).sort()).toEqual(['attempts-exhausted', 'unknown-job', 'unparseable-body']);
    expect(byReason['unparseable-body']!.body).toBe('{"oops":');
    expect(byReason['unknown-job']!.attributes.JobId).toBe('11111111-2222-4333-8444-555555555555');
    expect(byReason['attempts-exhausted']!.attributes).toMatchObject({ JobId: job.id, Attempts: '2' });
    expect(JSON.parse(byReason['attempts-exhausted']!.body)).toMatchObject({
      jobId: job.id,
      error: { message: expect.stringMatching(/simulated failure/) },
    });
    await queueEmpty();
  });

  it('a graceful stop lets the open long poll return and hands back what it brought: no message hidden for a visibility timeout', async () => {
    // An aborted long poll is still answered by SQS (and the local endpoint): the next message
    // goes to a client that has gone away and stays hidden for the visibility timeout. Measured
    // before this: a stopped worker's last poll took the next backlog's first 10 messages.
    // The earlier tests' workers were stopped with stop(0), which aborts at once: their last polls
    // (1 s) are still open at the endpoint and would take the message. Let them run out.
    await new Promise((r) => setTimeout(r, 1200));
    let pollOpen!: () => void;
    const polling = new Promise<void>((r) => (pollOpen = r));
    class Watched extends SqsQueue {
      override receive(max: number, waitSeconds: number, signal?: AbortSignal) {
        if (waitSeconds > 0) pollOpen();
        return super.receive(max, waitSeconds, signal);
      }
    }
    const watched = new Watched({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint });
    const pool = db.newPool(timings.concurrency + 2);
    const w = new Worker({
      pool,
      queue: watched,
      dlq,
      registry: defaultRegistry(),
      publisher: new Publisher(pool, watched, silentLogger),
      timings: { ...timings, visibilityTimeoutSeconds: 60, drainSeconds: 10 },
      log: silentLogger,
      receiveWaitSeconds: 3,
    });
    w.start();
    await polling;
    await new Promise((r) => setTimeout(r, 200)); // the request is at the endpoint
    const t0 = Date.now();
    const stopped = w.stop();
    const job = await enqueue({ batch: 'S-STOP', entries: 1 });
    await stopped;
    await pool.end();
    // Within one poll's wait, not the drain deadline; and the message is back in the queue, visible.
    expect(Date.now() - t0).toBeLessThan(3500);
    const q = sqs.inspect(sqs.queueName);
    expect({ ready: q.ready, inflight: q.inflight }).toEqual({ ready: 1, inflight: 0 });
    expect((await state(job.id)).state).toBe('pending');
    startWorker();
    await until(job.id, 'succeeded', 5000);
    await queueEmpty();
  });

  it('keeps working through SQS errors and a dropped database connection, and loses nothing', async () => {
    metrics = new CountingMetrics();
    // A queue that fails one call in three, across every operation.
    let calls = 0;
    const flaky: JobQueue = {
      send: (m) => (++calls % 3 === 0 ? Promise.reject(new Error('ServiceUnavailable')) : queue.send(m)),
      receive: (n, w, s) => (++calls % 3 === 0 ? Promise.reject(new Error('socket hang up')) : queue.receive(n, w, s)),
      changeVisibility: (c) => (++calls % 3 === 0 ? Promise.reject(new Error('ThrottlingException')) : queue.changeVisibility(c)),
      delete: (r) => (++calls % 3 === 0 ? Promise.reject(new Error('ThrottlingException')) : queue.delete(r)),
    };
    const pool = db.newPool(timings.concurrency + 2);
    const ids = [] as string[];
    for (let i = 0; i < 8; i++) ids.push((await enqueue({ batch: `S-FLAKY-${i}`, entries: 2, workMs: 300 })).id);
    startWorker(flaky, pool);
    // Drop the worker's database connections mid-run.
    await new Promise((r) => setTimeout(r, 400));
    await db.pool.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jobs-test' AND pid <> pg_backend_pid() AND datname = current_database() AND state = 'idle'",
    );
    for (const id of ids) await until(id, 'succeeded', 30_000);
    for (let i = 0; i < 8; i++) expect(await rows(`S-FLAKY-${i}`)).toBe(2);
  });
});
