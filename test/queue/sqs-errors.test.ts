// SqsQueue's SDK path, with aws-sdk-client-mock: a queue handed an SQSClient (the jobs command's)
// sends every call through it, and a queue built from settings (the services', through sqsLanes)
// sends only GetQueueAttributes through the SDK, its hot path over the wire. What SqsQueue makes
// of SQS's answers on the hot path (batch failures, clamping, stale handles, throttling) is
// tested over the wire, in sqs-wire.test.ts.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { sqsLanes } from '../../runtime/queue/lanes.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { SqsWire } from '../../runtime/queue/sqs-wire.ts';

const sqsMock = mockClient(SQSClient);
afterEach(() => sqsMock.reset());
const QUEUE_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs';
const queue = () => new SqsQueue({ queueUrl: QUEUE_URL, client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }) });

const throttled = () => Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException', $metadata: { httpStatusCode: 400 } });
/** The commands the mocked clients were sent, by name. */
const sent = () => sqsMock.calls().map((c) => (c.args[0] as object).constructor.name);

describe('SqsQueue through the SDK', () => {
  it('a queue handed a client sends the hot path through it, and maps its answers', async () => {
    sqsMock.on(SendMessageBatchCommand).resolves({ Successful: [{ Id: '0', MessageId: 'a', MD5OfMessageBody: '' }], Failed: [] });
    sqsMock.on(ReceiveMessageCommand).resolves({
      Messages: [{ MessageId: 'm', ReceiptHandle: 'r', Body: '{}', Attributes: { ApproximateReceiveCount: '2' } }],
    });
    sqsMock
      .on(ChangeMessageVisibilityBatchCommand)
      .resolves({ Successful: [], Failed: [{ Id: '0', Code: 'ReceiptHandleIsInvalid', SenderFault: true, Message: 'expired' }] });
    sqsMock.on(DeleteMessageBatchCommand).resolves({ Successful: [{ Id: '0' }], Failed: [] });
    const q = queue();
    expect(q.hotPath).not.toBeInstanceOf(SqsWire);
    await q.send([{ body: 'a' }]);
    expect(await q.receive(10, 1)).toMatchObject([{ messageId: 'm', receipt: 'r', receiveCount: 2 }]);
    expect(await q.changeVisibility([{ receipt: 'r', seconds: 5 }])).toEqual([
      { receipt: 'r', code: 'ReceiptHandleIsInvalid', message: 'expired', stale: true },
    ]);
    expect(await q.delete(['r'])).toEqual([]);
    expect(sent()).toEqual([
      'SendMessageBatchCommand',
      'ReceiveMessageCommand',
      'ChangeMessageVisibilityBatchCommand',
      'DeleteMessageBatchCommand',
    ]);
  });

  it('a throttled receive rejects with the SDK error for the worker to back off on', async () => {
    sqsMock.on(ReceiveMessageCommand).rejects(throttled());
    await expect(queue().receive(10, 1)).rejects.toThrow(/Rate exceeded/);
  });

  it('counts the messages a queue holds with GetQueueAttributes', async () => {
    sqsMock.on(GetQueueAttributesCommand).resolves({
      Attributes: { ApproximateNumberOfMessages: '3', ApproximateNumberOfMessagesNotVisible: '2', ApproximateNumberOfMessagesDelayed: '1' },
    });
    expect(await queue().approximateCount()).toBe(6);
  });

  it('the queues sqsLanes builds (the services) send only GetQueueAttributes through the SDK, the hot path over the wire', async () => {
    sqsMock.on(GetQueueAttributesCommand).resolves({ Attributes: { ApproximateNumberOfMessages: '4' } });
    const targets: string[] = [];
    const server = http.createServer((req, res) => {
      targets.push(String(req.headers['x-amz-target']));
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' }).end('{"Messages":[]}'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const lanes = sqsLanes({ queueUrl: `${endpoint}/000000000000/jobs`, endpoint, region: 'eu-west-1' });
      expect(await lanes.queue.receive(10, 0)).toEqual([]);
      expect(await lanes.queue.approximateCount()).toBe(4);
      expect(targets).toEqual(['AmazonSQS.ReceiveMessage']);
      expect(sent()).toEqual(['GetQueueAttributesCommand']);
      for (const w of lanes.wires) w.destroy();
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
