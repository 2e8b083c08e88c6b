// On call over both priority lanes, on a local SQS endpoint (fauxqs, with the urgent queue and its
// DLQ beside the bulk ones, as `jobs local` creates them) and a real PostgreSQL: a dead urgent job's
// report lands on the urgent DLQ, `jobs dlq list` shows it with its lane (and only it with
// --lane urgent), a redrive of the job and of its dead letter sends it back to the urgent queue,
// never to the bulk one; the API refuses a bad lane naming the field.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { createOpsServices, type OpsServices } from '../../runtime/oncall/services.ts';
import { sqsLanes } from '../../runtime/queue/lanes.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import type { SqsQueue } from '../../runtime/queue/sqs.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { Worker } from '../../runtime/worker/worker.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { FAST_TIMINGS } from '../support/platform.ts';

const registry = new JobRegistry([
  defineJob<Record<string, never>, null>({ type: 'test.noop', description: 'does nothing', parse: () => ({}), run: async () => null }),
]);

let db: TestDb;
let sqs: LocalSqs;
let lanes: ReturnType<typeof sqsLanes>;
let ops: OpsServices;
let client: JobClient;
let reporter: Worker;
beforeAll(async () => {
  db = await createTestDb();
  sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 30, maxReceiveCount: 10 }, prefix: 'ops-lanes' });
  const settings = {
    queueUrl: sqs.queueUrl,
    dlqUrl: sqs.dlqUrl,
    urgentQueueUrl: sqs.urgentQueueUrl,
    urgentDlqUrl: sqs.urgentDlqUrl,
    endpoint: sqs.endpoint,
    region: 'us-east-1',
  };
  lanes = sqsLanes(settings);
  const publisher = new Publisher(db.pool, lanes.queue, silentLogger);
  client = new JobClient({ pool: db.pool, registry, publisher, defaultMaxAttempts: 3 });
  ops = createOpsServices({ pool: db.pool, registry, publisher, queue: lanes.queue, log: silentLogger, ...settings });
  // A worker only to write dead letters exactly as the worker does (reportDeadJob), to each lane's DLQ.
  reporter = new Worker({
    pool: db.pool,
    queue: lanes.queue,
    dlq: lanes.dlq!,
    registry,
    publisher,
    timings: FAST_TIMINGS,
    log: silentLogger,
    workerId: 'worker-x',
  });
});
afterAll(async () => {
  lanes.client.destroy();
  await sqs.stop();
  await db.drop();
});

/** Every job id a queue holds now (received and handed back). */
async function jobIdsIn(q: SqsQueue): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    const got = await q.receive(10, 0);
    if (got.length === 0) return out;
    out.push(...got.map((m) => (parseJobMessage(m.body) as { ok: true; message: { jobId: string } }).message.jobId));
    await q.delete(got.map((m) => m.receipt));
  }
}
const [urgentQueue, bulkQueue] = [() => lanes.sqsQueues[0]!, () => lanes.sqsQueues[1]!];

it('a dead urgent job is on the urgent DLQ, listed with its lane, and redriven back to the urgent queue', async () => {
  const [r] = await client.enqueueNow({ type: 'test.noop', payload: {}, lane: 'urgent' });
  const id = r!.job.id;
  expect(await jobIdsIn(urgentQueue())).toEqual([id]);
  const claimed = await client.store.claim([id], 'worker-x', 30);
  const dead = await client.store.fail(
    { id, attempt: claimed[0]!.attempt },
    { name: 'Error', message: 'ERP said 500', retryable: false },
    0,
    true,
  );
  expect(await reporter.reportDeadJob(dead!, 'non-retryable')).toBe(true);

  // Listed from the urgent DLQ, with its lane; the bulk DLQ has nothing.
  const all = await ops.deadLetters!.look();
  expect(all.letters.map((l) => [l.jobId, l.lane, l.verdict])).toEqual([[id, 'urgent', 'keep']]);
  expect((await ops.deadLetters!.look(100, 'bulk')).letters).toHaveLength(0);
  expect((await ops.deadLetters!.look(100, 'urgent')).letters.map((l) => l.jobId)).toEqual([id]);

  // jobs dead redrive: pending again, its message on the urgent queue.
  const redriven = await ops.deadJobs.redrive({ ids: [id], by: 'on-call', reason: 'ERP fixed' });
  expect(redriven.jobs.map((j) => j.id)).toEqual([id]);
  // jobs dlq redrive: the dead letter's job now needs a message, so it is resent, to the job's lane.
  const report = await ops.deadLetters!.redrive({ by: 'on-call' });
  expect(report.letters.map((l) => [l.jobId, l.lane, l.done])).toEqual([[id, 'urgent', 'resent']]);
  expect(await jobIdsIn(urgentQueue())).toEqual([id, id]);
  expect(await jobIdsIn(bulkQueue())).toEqual([]);
  expect((await ops.deadLetters!.look()).letters).toHaveLength(0);
});

it('a lane without a DLQ of its own is refused naming the field', async () => {
  const shared = createOpsServices({
    pool: db.pool,
    registry,
    publisher: new Publisher(db.pool, lanes.queue, silentLogger),
    queue: lanes.queue,
    log: silentLogger,
    queueUrl: sqs.queueUrl,
    dlqUrl: sqs.dlqUrl,
    endpoint: sqs.endpoint,
    region: 'us-east-1',
  });
  await expect(shared.deadLetters!.look(10, 'urgent')).rejects.toMatchObject({ field: 'lane' });
  expect((await shared.deadLetters!.look(10)).letters).toHaveLength(0);
});
