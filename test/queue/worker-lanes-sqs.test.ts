// The worker over both priority lanes' queues through @aws-sdk/client-sqs against a local SQS
// endpoint (fauxqs, the queues `jobs local` creates): urgent and bulk jobs each run once and leave
// both queues empty (every delete and visibility change went back to the queue its message came
// from), a poison message on the urgent queue and a dead urgent job land on the urgent DLQ, a dead
// bulk job on the bulk DLQ, and a retried urgent job's message stays on the urgent queue.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { sqsLanes } from '../../runtime/queue/lanes.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { NonRetryableError } from '../../runtime/domain/errors.ts';
import { Worker } from '../../runtime/worker/worker.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const timings: JobTimings = {
  leaseSeconds: 2,
  heartbeatSeconds: 0.5,
  visibilityTimeoutSeconds: 2,
  maxAttempts: 2,
  maxReceiveCount: 6,
  backoffBaseSeconds: 0.2,
  backoffMaxSeconds: 0.5,
  concurrency: 4,
  drainSeconds: 2,
};
let tries = 0;
const registry = new JobRegistry([
  defineJob<Record<string, never>, null>({ type: 'test.noop', description: 'does nothing', parse: () => ({}), run: async () => null }),
  defineJob<Record<string, never>, null>({
    type: 'test.flaky',
    description: 'fails its first attempt',
    parse: () => ({}),
    async run() {
      if (++tries === 1) throw new Error('first try fails');
      return null;
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.fatal',
    description: 'fails for good',
    parse: () => ({}),
    async run() {
      throw new NonRetryableError('period closed');
    },
  }),
]);

let db: TestDb;
let sqs: LocalSqs;
let lanes: ReturnType<typeof sqsLanes>;
let client: JobClient;
let worker: Worker;
beforeAll(async () => {
  db = await createTestDb();
  sqs = await startLocalSqs({ timings, prefix: 'worker-lanes' });
  lanes = sqsLanes({
    queueUrl: sqs.queueUrl,
    dlqUrl: sqs.dlqUrl,
    urgentQueueUrl: sqs.urgentQueueUrl,
    urgentDlqUrl: sqs.urgentDlqUrl,
    endpoint: sqs.endpoint,
    region: 'us-east-1',
  });
  client = new JobClient({ pool: db.pool, registry, publisher: new Publisher(db.pool, lanes.queue, silentLogger), defaultMaxAttempts: 2 });
});
afterAll(async () => {
  await worker?.stop(0);
  lanes.client.destroy();
  await sqs.stop();
  await db.drop();
});

it('urgent and bulk jobs over their own SQS queues: each runs once, dead letters on their lane’s DLQ, both queues left empty', async () => {
  const jobs = await client.enqueueNow([
    ...Array.from({ length: 6 }, () => ({ type: 'test.noop', payload: {}, lane: 'urgent' as const })),
    ...Array.from({ length: 6 }, () => ({ type: 'test.noop', payload: {} })),
    { type: 'test.flaky', payload: {}, lane: 'urgent' },
    { type: 'test.fatal', payload: {}, lane: 'urgent' },
    { type: 'test.fatal', payload: {} },
  ]);
  expect(sqs.inspect(sqs.urgentQueueName).ready).toBe(8);
  expect(sqs.inspect(sqs.queueName).ready).toBe(7);
  await lanes.queue.send([{ body: 'not json', lane: 'urgent' }]);

  const pool = db.newPool(timings.concurrency + 2);
  worker = new Worker({
    pool,
    queue: lanes.queue,
    dlq: lanes.dlq!,
    registry,
    publisher: new Publisher(pool, lanes.queue, silentLogger),
    timings,
    log: silentLogger,
    receiveWaitSeconds: 1,
  });
  worker.start();
  const [urgentFatal, bulkFatal] = jobs.slice(-2).map((r) => r.job.id);
  await waitFor(
    async () =>
      (await db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE state IN ('succeeded', 'dead')")).rows[0].n === jobs.length,
    20_000,
    'every job ended',
  );
  const { rows } = await db.pool.query(
    'SELECT state, count(*)::int AS n, max(attempt) AS most FROM jobs.job GROUP BY state ORDER BY state',
  );
  // In the state enum's order.
  expect(rows).toEqual([
    { state: 'succeeded', n: 13, most: 2 },
    { state: 'dead', n: 2, most: 1 },
  ]);
  await waitFor(
    () => sqs.inspect(sqs.urgentDlqName).ready === 2 && sqs.inspect(sqs.dlqName).ready === 1,
    10_000,
    'dead letters on their lanes’ DLQs',
  );
  const urgentDead = sqs.inspect(sqs.urgentDlqName).bodies;
  expect(urgentDead.some((b) => b === 'not json')).toBe(true);
  expect(urgentDead.some((b) => b.includes(urgentFatal!))).toBe(true);
  expect(sqs.inspect(sqs.dlqName).bodies.map((b) => JSON.parse(b).jobId)).toEqual([bulkFatal]);
  // Every message deleted from the queue it came from: nothing left, nothing in flight.
  await waitFor(
    () => {
      const u = sqs.inspect(sqs.urgentQueueName);
      const b = sqs.inspect(sqs.queueName);
      return u.ready + u.inflight + u.delayed + b.ready + b.inflight + b.delayed === 0;
    },
    10_000,
    'both queues empty',
  );
}, 60_000);

it('the local stack’s urgent queue has the bulk queue’s redrive policy, toward its own DLQ', async () => {
  const { GetQueueAttributesCommand } = await import('@aws-sdk/client-sqs');
  const attrs = async (url: string) =>
    (await lanes.client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['All'] }))).Attributes ?? {};
  const [urgent, bulk, urgentDlq] = await Promise.all([attrs(sqs.urgentQueueUrl), attrs(sqs.queueUrl), attrs(sqs.urgentDlqUrl)]);
  const policy = (a: Record<string, string>) =>
    JSON.parse(a.RedrivePolicy ?? '{}') as { deadLetterTargetArn?: string; maxReceiveCount?: number };
  expect(policy(urgent)).toEqual({ deadLetterTargetArn: urgentDlq.QueueArn, maxReceiveCount: policy(bulk).maxReceiveCount });
  expect(Number(policy(urgent).maxReceiveCount)).toBe(timings.maxReceiveCount);
  expect(urgent.VisibilityTimeout).toBe(bulk.VisibilityTimeout);
});
