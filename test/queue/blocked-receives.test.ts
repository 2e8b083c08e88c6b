// Issue 14: a job blocked by its concurrency key waits without burning SQS receives. Through the
// local SQS endpoint with a redrive policy of maxReceiveCount 3 and real workers: while another
// job holds the key for many visibility timeouts, the blocked job's messages are received a small
// bounded number of times (not once per visibility timeout), nothing reaches the DLQ, and the
// blocked job runs once, after the holder ended.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import type { JobQueue, ReceivedMessage } from '../../runtime/queue/types.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { Worker } from '../../runtime/worker/worker.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

// maxReceiveCount 3 is below the production rule (attempts + 3) on purpose: the tighter the net,
// the sooner a message received over and over lands on the DLQ. A visibility timeout of 1 s
// against a holder of 6 s: a blocked message left to reappear would be received about six times.
const timings: JobTimings = {
  leaseSeconds: 1,
  heartbeatSeconds: 0.3,
  visibilityTimeoutSeconds: 1,
  maxAttempts: 1,
  maxReceiveCount: 3,
  backoffBaseSeconds: 0.5,
  backoffMaxSeconds: 1,
  concurrency: 4,
  drainSeconds: 2,
};
const HOLD_MS = 6000;

/** The queue as the workers see it, counting every message received per job (ApproximateReceiveCount too). */
class CountingQueue implements JobQueue {
  readonly receives = new Map<string, { received: number; highestReceiveCount: number }>();
  constructor(private readonly inner: JobQueue) {}
  send: JobQueue['send'] = (m) => this.inner.send(m);
  changeVisibility: JobQueue['changeVisibility'] = (c) => this.inner.changeVisibility(c);
  delete: JobQueue['delete'] = (r) => this.inner.delete(r);
  async receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    const got = await this.inner.receive(max, waitSeconds, signal);
    for (const m of got) {
      const parsed = parseJobMessage(m.body);
      if (!parsed.ok) continue;
      const r = this.receives.get(parsed.message.jobId) ?? { received: 0, highestReceiveCount: 0 };
      r.received++;
      r.highestReceiveCount = Math.max(r.highestReceiveCount, m.receiveCount);
      this.receives.set(parsed.message.jobId, r);
    }
    return got;
  }
}

let db: TestDb;
let sqs: LocalSqs;
let queue: CountingQueue;
let client: JobClient;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDb();
  sqs = await startLocalSqs({ timings, prefix: 'blocked-receives' });
  queue = new CountingQueue(new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint }));
  client = new JobClient({
    pool: db.pool,
    registry: defaultRegistry(),
    publisher: new Publisher(db.pool, queue, silentLogger),
    defaultMaxAttempts: timings.maxAttempts,
  });
});
afterAll(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop(0)));
  await sqs.stop();
  await db.drop();
});

function startWorker(): Worker {
  const pool = db.newPool(timings.concurrency + 2);
  const w = new Worker({
    pool,
    queue,
    dlq: new SqsQueue({ queueUrl: sqs.dlqUrl, endpoint: sqs.endpoint }),
    registry: defaultRegistry(),
    publisher: new Publisher(pool, queue, silentLogger),
    timings,
    log: silentLogger,
    metrics: new CountingMetrics(),
    receiveWaitSeconds: 1,
  });
  workers.push(w);
  w.start();
  return w;
}

describe('a job blocked by its concurrency key, over SQS', () => {
  it('is received a bounded number of times while the key is held for many visibility timeouts, never reaches the DLQ, and runs once after the holder', async () => {
    startWorker();
    startWorker();
    const key = { concurrencyKey: 'ledger:company-7' };
    const [holder] = await client.enqueueNow({ type: 'ledger.post', payload: { batch: 'HOLD', entries: 2, workMs: HOLD_MS }, ...key });
    await waitFor(async () => ((await client.store.get(holder!.job.id))!.state === 'running' ? true : null), 10_000, 'holder running');
    const [blocked] = await client.enqueueNow({ type: 'ledger.post', payload: { batch: 'WAIT', entries: 3 }, ...key });

    const done = await waitFor(
      async () => {
        const j = (await client.store.get(blocked!.job.id))!;
        return j.state === 'succeeded' || j.state === 'dead' ? j : null;
      },
      HOLD_MS + 15_000,
      'blocked job ended',
    );
    expect(done.state).toBe('succeeded');
    expect(done.attempt).toBe(1);

    const { rows } = await db.pool.query(
      `SELECT (SELECT claimed_at FROM jobs.job WHERE id = $2) >= (SELECT finished_at FROM jobs.job WHERE id = $1) AS after_holder,
              (SELECT count(*)::int FROM ledger_entries WHERE batch = 'WAIT') AS posted`,
      [holder!.job.id, blocked!.job.id],
    );
    expect(rows[0]).toEqual({ after_holder: true, posted: 3 });

    // Received when it was first published (blocked: message deleted) and when the key woke it
    // (claimed): two, and at most one more for a copy; never once per visibility timeout.
    const r = queue.receives.get(blocked!.job.id)!;
    expect(r.received).toBeGreaterThanOrEqual(1);
    expect(r.received).toBeLessThanOrEqual(3);
    expect(r.highestReceiveCount).toBeLessThan(timings.maxReceiveCount);
    // Nothing on the DLQ: neither redriven by SQS nor dead-lettered by a worker.
    await waitFor(() => sqs.inspect(sqs.queueName).inflight === 0 || null, 5000, 'queue settled');
    const dlq = sqs.inspect(sqs.dlqName);
    expect(dlq.ready + dlq.inflight + dlq.delayed).toBe(0);
  });
});
