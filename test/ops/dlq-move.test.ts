// The AWS path of a DLQ redrive (StartMessageMoveTask), with aws-sdk-client-mock (the local
// endpoint has no such action): it scans first and starts SQS's server-side move only when no
// dead letter must stay; it refuses, naming why, when one must; it reports the move tasks; it
// cancels one by its handle, recorded, and says what to do when SQS knows no such running task;
// `jobs dlq move-cancel` prints either outcome.
import {
  CancelMessageMoveTaskCommand,
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  ReceiveMessageCommand,
  SQSClient,
  ResourceNotFoundException,
  StartMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { JobClient } from '../../runtime/store/client.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { opsCommand } from '../../runtime/cli/oncall.ts';
import { DeadLetterService, MoveCancelError, SqsDeadLetterQueue } from '../../runtime/oncall/dlq.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

const sqsMock = mockClient(SQSClient);
const DLQ_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/erp-jobs-dlq';
const QUEUE_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/erp-jobs';
const DLQ_ARN = 'arn:aws:sqs:eu-west-1:123456789012:erp-jobs-dlq';
const QUEUE_ARN = 'arn:aws:sqs:eu-west-1:123456789012:erp-jobs';

let db: TestDb;
let client: JobClient;
let service: DeadLetterService;
beforeAll(async () => {
  db = await createTestDb();
  const queue = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
  client = new JobClient({
    pool: db.pool,
    registry: defaultRegistry(),
    publisher: new Publisher(db.pool, queue, silentLogger),
    defaultMaxAttempts: 3,
  });
  const dlq = new SqsDeadLetterQueue({
    dlqUrl: DLQ_URL,
    queueUrl: QUEUE_URL,
    client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }),
    local: false,
  });
  service = new DeadLetterService({ pool: db.pool, dlq, queue, log: silentLogger });
});
afterAll(() => db.drop());
beforeEach(() => {
  sqsMock.reset();
  sqsMock.on(GetQueueAttributesCommand, { QueueUrl: DLQ_URL }).resolves({ Attributes: { QueueArn: DLQ_ARN } });
  sqsMock.on(GetQueueAttributesCommand, { QueueUrl: QUEUE_URL }).resolves({ Attributes: { QueueArn: QUEUE_ARN } });
  sqsMock.on(ChangeMessageVisibilityBatchCommand).resolves({ Successful: [], Failed: [] });
  sqsMock.on(DeleteMessageBatchCommand).resolves({ Successful: [], Failed: [] });
  sqsMock.on(StartMessageMoveTaskCommand).resolves({ TaskHandle: 'task-handle-1' });
});

const letter = (i: number, body: string, attrs: Record<string, string> = {}) => ({
  MessageId: `m-${i}`,
  ReceiptHandle: `r-${i}`,
  Body: body,
  Attributes: { SentTimestamp: String(Date.now()), ApproximateReceiveCount: '1', SenderId: 'AROAEXAMPLE:worker' },
  MessageAttributes: Object.fromEntries(Object.entries(attrs).map(([k, v]) => [k, { DataType: 'String', StringValue: v }])),
});
const enqueue = async () => (await client.enqueueNow({ type: 'ledger.post', payload: { batch: 'M', entries: 1 } }))[0]!.job;

describe('DLQ redrive with StartMessageMoveTask (AWS)', () => {
  it('scans, drops what needs no message, hands back the rest and starts the move to the job queue; recorded', async () => {
    const a = await enqueue();
    const b = await enqueue();
    await client.cancel(b.id, 'ops');
    sqsMock
      .on(ReceiveMessageCommand)
      .resolvesOnce({ Messages: [letter(1, jobMessageBody(a.id)), letter(2, jobMessageBody(b.id))] })
      .resolves({ Messages: [] });
    const r = await service.redrive({ by: 'oncall', move: true, maxPerSecond: 50 });
    expect(r.refused).toBeUndefined();
    expect(r.moveTask).toEqual({ taskHandle: 'task-handle-1', dlqArn: DLQ_ARN, queueArn: QUEUE_ARN });
    expect(sqsMock.commandCalls(StartMessageMoveTaskCommand)[0]!.args[0].input).toEqual({
      SourceArn: DLQ_ARN,
      DestinationArn: QUEUE_ARN,
      MaxNumberOfMessagesPerSecond: 50,
    });
    // The cancelled job's letter is deleted (never moved), the pending one's handed back for the move.
    expect(sqsMock.commandCalls(DeleteMessageBatchCommand)[0]!.args[0].input.Entries).toEqual([{ Id: '0', ReceiptHandle: 'r-2' }]);
    const released = sqsMock.commandCalls(ChangeMessageVisibilityBatchCommand).flatMap((c) => c.args[0].input.Entries!);
    expect(released).toEqual([{ Id: '0', ReceiptHandle: 'r-1', VisibilityTimeout: 0 }]);
    // The scan holds messages while it decides.
    expect(sqsMock.commandCalls(ReceiveMessageCommand)[0]!.args[0].input).toMatchObject({
      QueueUrl: DLQ_URL,
      VisibilityTimeout: 60,
      MessageSystemAttributeNames: ['All'],
    });
    const actions = await db.pool.query("SELECT action, detail FROM jobs.operator_action WHERE by = 'oncall' ORDER BY id");
    expect(actions.rows.map((x) => x.action)).toEqual(['dlq-drop', 'dlq-move']);
    expect(actions.rows[1].detail).toMatchObject({ taskHandle: 'task-handle-1', scanned: 2, complete: true });
  });

  it('refuses to start a move when a dead letter must stay (poison, a dead job): nothing moved, everything handed back', async () => {
    const a = await enqueue();
    sqsMock
      .on(ReceiveMessageCommand)
      .resolvesOnce({
        Messages: [letter(1, jobMessageBody(a.id)), letter(2, 'garbage', { Reason: 'unparseable-body', Detail: 'body is not JSON' })],
      })
      .resolves({ Messages: [] });
    const r = await service.redrive({ by: 'oncall', move: true });
    expect(r.refused).toMatch(/1 dead letter\(s\) must stay .*a move would resend them/);
    expect(sqsMock.commandCalls(StartMessageMoveTaskCommand)).toHaveLength(0);
    expect(sqsMock.commandCalls(DeleteMessageBatchCommand)).toHaveLength(0);
    const released = sqsMock
      .commandCalls(ChangeMessageVisibilityBatchCommand)
      .flatMap((c) => c.args[0].input.Entries!.map((e) => e.ReceiptHandle));
    expect(released.sort()).toEqual(['r-1', 'r-2']);
  });

  it('lists the move tasks of the DLQ', async () => {
    sqsMock.on(ListMessageMoveTasksCommand).resolves({
      Results: [
        {
          TaskHandle: 'task-handle-1',
          Status: 'RUNNING',
          SourceArn: DLQ_ARN,
          DestinationArn: QUEUE_ARN,
          ApproximateNumberOfMessagesMoved: 7,
          ApproximateNumberOfMessagesToMove: 20,
          StartedTimestamp: 1_700_000_000_000,
        },
      ],
    });
    expect(await service.moveTasks()).toEqual([
      {
        taskHandle: 'task-handle-1',
        status: 'RUNNING',
        sourceArn: DLQ_ARN,
        destinationArn: QUEUE_ARN,
        moved: 7,
        toMove: 20,
        startedAt: new Date(1_700_000_000_000),
        failureReason: null,
      },
    ]);
    expect(sqsMock.commandCalls(ListMessageMoveTasksCommand)[0]!.args[0].input).toEqual({ SourceArn: DLQ_ARN, MaxResults: 10 });
  });

  it('cancels a move task by its handle: CancelMessageMoveTask with that handle, the count SQS moved, recorded with who asked', async () => {
    sqsMock.on(CancelMessageMoveTaskCommand).resolves({ ApproximateNumberOfMessagesMoved: 42 });
    const r = await service.cancelMove({ taskHandle: '  task-handle-1 ', by: 'oncall-cancel' });
    expect(r).toEqual({ taskHandle: 'task-handle-1', moved: 42, by: 'oncall-cancel' });
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand).map((c) => c.args[0].input)).toEqual([{ TaskHandle: 'task-handle-1' }]);
    const actions = await db.pool.query("SELECT action, detail FROM jobs.operator_action WHERE by = 'oncall-cancel'");
    expect(actions.rows).toEqual([{ action: 'dlq-move-cancel', detail: { taskHandle: 'task-handle-1', moved: 42 } }]);
  });

  it('an unknown or finished task handle is an error naming the handle and `jobs dlq move-status`, not an SDK exception; nothing recorded', async () => {
    sqsMock.on(CancelMessageMoveTaskCommand).rejects(new ResourceNotFoundException({ message: 'Task does not exist.', $metadata: {} }));
    const err = await service.cancelMove({ taskHandle: 'task-handle-gone', by: 'oncall-missing' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MoveCancelError);
    expect(err).toMatchObject({ reason: 'not-found', taskHandle: 'task-handle-gone' });
    expect((err as Error).message).toMatch(
      /^no running move task task-handle-gone: .*already finished, failed or been cancelled .*ResourceNotFoundException: Task does not exist\..*`jobs dlq move-status`/,
    );
    expect((await db.pool.query("SELECT count(*)::int AS n FROM jobs.operator_action WHERE by = 'oncall-missing'")).rows[0].n).toBe(0);
  });

  it('refuses on the local endpoint without calling SQS, and asks for a handle', async () => {
    const local = new DeadLetterService({
      pool: db.pool,
      dlq: new SqsDeadLetterQueue({
        dlqUrl: DLQ_URL,
        queueUrl: QUEUE_URL,
        client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }),
        local: true,
      }),
      queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }),
      log: silentLogger,
    });
    await expect(local.cancelMove({ taskHandle: 'task-handle-1', by: 'oncall' })).rejects.toMatchObject({
      reason: 'local',
      message: expect.stringMatching(/local SQS endpoint has no message move tasks/),
    });
    await expect(service.cancelMove({ taskHandle: ' ', by: 'oncall' })).rejects.toMatchObject({ field: 'taskHandle' });
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand)).toHaveLength(0);
  });
});

describe('jobs dlq move-cancel (AWS)', () => {
  /** The command in-process, as an operator's shell runs it against AWS (SQS mocked). */
  const run = async (args: string[]) => {
    const lines: string[] = [];
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      const env = { DATABASE_URL: db.url, JOBS_QUEUE_URL: QUEUE_URL, JOBS_DLQ_URL: DLQ_URL, AWS_REGION: 'eu-west-1' };
      const code = await opsCommand('dlq', ['move-cancel', ...args], env, (l) => lines.push(l));
      return { code, stdout: lines.join('\n'), stderr: stderr.mock.calls.map((c) => String(c[0])).join('') };
    } finally {
      stderr.mockRestore();
    }
  };

  it('prints the task cancelled, by whom and how many dead letters it had moved; exit 0', async () => {
    sqsMock.on(CancelMessageMoveTaskCommand).resolves({ ApproximateNumberOfMessagesMoved: 3 });
    const r = await run(['task-handle-7', '--by', 'oncall-cli']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^cancelled by oncall-cli \(cli\): move task task-handle-7, after 3 dead letter\(s\) had been moved\nnote: what it moved stays in the job queue/,
    );
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand).map((c) => c.args[0].input)).toEqual([{ TaskHandle: 'task-handle-7' }]);
  });

  it('an unknown or finished handle: exit 1, the reason and `jobs dlq move-status` on stderr, no stack trace', async () => {
    sqsMock.on(CancelMessageMoveTaskCommand).rejects(new ResourceNotFoundException({ message: 'Task does not exist.', $metadata: {} }));
    const r = await run(['task-handle-gone']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^not cancelled: no running move task task-handle-gone: .*`jobs dlq move-status`.*\n$/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
