// SDK error paths of SqsQueue, with aws-sdk-client-mock: partial batch failures, stale
// handles, throttling, and a worker that keeps going through a failing SQS.
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { SqsBatchError, SqsQueue } from '../../runtime/queue/sqs.ts';

const sqsMock = mockClient(SQSClient);
afterEach(() => sqsMock.reset());
const queue = () =>
  new SqsQueue({
    queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs',
    client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }),
  });

const throttled = () => Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException', $metadata: { httpStatusCode: 400 } });

describe('SqsQueue error paths', () => {
  it('send throws naming the failed entries, so the caller keeps its outbox row', async () => {
    sqsMock.on(SendMessageBatchCommand).resolves({
      Successful: [{ Id: '0', MessageId: 'a', MD5OfMessageBody: '' }],
      Failed: [{ Id: '1', Code: 'InternalError', SenderFault: false, Message: 'try again' }],
    });
    const err = await queue()
      .send([{ body: 'a' }, { body: 'b' }])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqsBatchError);
    expect((err as Error).message).toMatch(/SendMessageBatch: 1 entry failed: InternalError \(try again\)/);
  });

  it('send splits into batches of 10 and caps delays at 900 s', async () => {
    sqsMock.on(SendMessageBatchCommand).resolves({ Successful: [], Failed: [] });
    await queue().send(Array.from({ length: 25 }, (_, i) => ({ body: `m${i}`, delaySeconds: 5000 })));
    const calls = sqsMock.commandCalls(SendMessageBatchCommand);
    expect(calls.map((c) => c.args[0].input.Entries!.length)).toEqual([10, 10, 5]);
    expect(calls[0]!.args[0].input.Entries![0]!.DelaySeconds).toBe(900);
  });

  it('reports a stale receipt handle per entry on visibility changes and deletes', async () => {
    sqsMock.on(ChangeMessageVisibilityBatchCommand).resolves({
      Successful: [{ Id: '0' }],
      Failed: [
        { Id: '1', Code: 'ReceiptHandleIsInvalid', SenderFault: true, Message: 'The receipt handle has expired' },
        { Id: '2', Code: 'InternalError', SenderFault: false, Message: 'x' },
      ],
    });
    const failures = await queue().changeVisibility([
      { receipt: 'r0', seconds: 10 },
      { receipt: 'r1', seconds: 10 },
      { receipt: 'r2', seconds: 10 },
    ]);
    expect(failures).toEqual([
      { receipt: 'r1', code: 'ReceiptHandleIsInvalid', message: 'The receipt handle has expired', stale: true },
      { receipt: 'r2', code: 'InternalError', message: 'x', stale: false },
    ]);
    sqsMock
      .on(DeleteMessageBatchCommand)
      .resolves({ Successful: [], Failed: [{ Id: '0', Code: 'ReceiptHandleIsInvalid', SenderFault: true }] });
    expect((await queue().delete(['gone']))[0]).toMatchObject({ receipt: 'gone', stale: true });
  });

  it('clamps visibility to SQS limits and asks for the receive count', async () => {
    sqsMock.on(ChangeMessageVisibilityBatchCommand).resolves({ Successful: [], Failed: [] });
    sqsMock.on(ReceiveMessageCommand).resolves({
      Messages: [
        {
          MessageId: 'm',
          ReceiptHandle: 'r',
          Body: '{}',
          Attributes: { ApproximateReceiveCount: '3' },
          MessageAttributes: { Reason: { DataType: 'String', StringValue: 'x' } },
        },
      ],
    });
    const q = queue();
    await q.changeVisibility([{ receipt: 'r', seconds: 99_999 }]);
    expect(sqsMock.commandCalls(ChangeMessageVisibilityBatchCommand)[0]!.args[0].input.Entries![0]!.VisibilityTimeout).toBe(43_200);
    const [m] = await q.receive(50, 60);
    expect(m).toMatchObject({ receiveCount: 3, attributes: { Reason: 'x' } });
    const input = sqsMock.commandCalls(ReceiveMessageCommand)[0]!.args[0].input;
    expect(input).toMatchObject({ MaxNumberOfMessages: 10, WaitTimeSeconds: 20 });
    expect(input.MessageSystemAttributeNames).toContain('ApproximateReceiveCount');
  });

  it('a throttled receive rejects with the SDK error for the worker to back off on', async () => {
    sqsMock.on(ReceiveMessageCommand).rejects(throttled());
    await expect(queue().receive(10, 1)).rejects.toThrow(/Rate exceeded/);
  });
});
