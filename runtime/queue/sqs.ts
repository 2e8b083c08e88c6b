// The JobQueue on Amazon SQS (or a local SQS endpoint). Batches of 10, long polling, and
// per-entry failures reported back so the worker can tell a stale receipt handle (the message was
// delivered again) from a transient error.
//
// Two ways to SQS, one rule: the four hot-path operations (ReceiveMessage, DeleteMessageBatch,
// ChangeMessageVisibilityBatch, SendMessageBatch) go over the wire (sqs-wire.ts: the same
// guarantees at a fraction of the SDK's CPU) unless the queue was handed an SQSClient and no wire.
// So `new SqsQueue({ queueUrl, endpoint })` and sqsLanes (the worker, the API, the publisher, the
// bench) speak the wire; `new SqsQueue({ queueUrl, client })` (the jobs command's queues, tests
// that mock the SDK with aws-sdk-client-mock) sends every call through that client. Everything
// else (GetQueueAttributes here, the DLQ tools, the CLI) uses the SDK client.
//
// Retries: the standard retry mode on either path (exponential backoff with jitter) covers
// throttling, 5xx and network errors; JOBS_SQS_MAX_ATTEMPTS (config/sqs.ts) raises or lowers it.
// What still fails reaches the worker, which logs it and tries again on its next pass; nothing is
// lost, because the job row, not the message, is the truth.

import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
  type MessageAttributeValue,
} from '@aws-sdk/client-sqs';
import { type SqsHotPath, SqsWire } from './sqs-wire.ts';
import {
  chunk,
  SQS_BATCH_LIMIT,
  type EntryFailure,
  type JobQueue,
  type OutgoingMessage,
  type ReceivedMessage,
  type VisibilityChange,
} from './types.ts';

export interface SqsQueueOptions {
  queueUrl: string;
  region?: string;
  /** Local endpoint (fauxqs); requests go here instead of the queue URL's host. */
  endpoint?: string;
  /** The SDK client; given without `wire`, every call goes through it (the rule above). */
  client?: SQSClient;
  /** The wire for the hot path (sqsLanes shares one, built on `client`, across its queues). */
  wire?: SqsWire;
  maxAttempts?: number;
}

/** Error codes that mean "this receipt handle is no longer the message's newest, or the message is gone". */
const STALE_CODES = new Set([
  'ReceiptHandleIsInvalid',
  'AWS.SimpleQueueService.ReceiptHandleIsInvalid',
  'MessageNotInflight',
  'AWS.SimpleQueueService.MessageNotInflight',
  'InvalidReceiptHandle',
]);

export class SqsBatchError extends Error {
  override name = 'SqsBatchError';
  constructor(
    readonly operation: string,
    readonly failures: { code: string; message: string }[],
  ) {
    super(
      `${operation}: ${failures.length} entr${failures.length === 1 ? 'y' : 'ies'} failed: ${failures.map((f) => `${f.code} (${f.message})`).join('; ')}`,
    );
  }
}

/** The SDK client for these settings; the wire (SqsWire.forClient) takes its credentials, region, attempt cap and endpoint. */
export function createSqsClient(opts: { region?: string; endpoint?: string; maxAttempts?: number }): SQSClient {
  return new SQSClient({
    region: opts.region ?? process.env.AWS_REGION ?? 'us-east-1',
    maxAttempts: opts.maxAttempts ?? 5,
    ...(opts.endpoint
      ? {
          endpoint: opts.endpoint,
          useQueueUrlAsEndpoint: false,
          // A local endpoint accepts any credentials; real AWS never takes this branch.
          credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
        }
      : {}),
  });
}

export class SqsQueue implements JobQueue {
  readonly queueUrl: string;
  readonly client: SQSClient;
  /** Where the four hot-path operations go: an SqsWire, or the SDK client. */
  readonly hotPath: SqsHotPath;

  constructor(opts: SqsQueueOptions) {
    this.queueUrl = opts.queueUrl;
    this.client = opts.client ?? createSqsClient(opts);
    this.hotPath = opts.wire ?? (opts.client ? sdkHotPath(opts.client) : SqsWire.forClient(this.client));
  }

  /**
   * Messages the queue holds: ready, in flight and delayed (GetQueueAttributes; SQS calls them
   * approximate). The reconciler compares this with the jobs that need a message.
   */
  async approximateCount(signal?: AbortSignal): Promise<number> {
    const out = await this.client.send(
      new GetQueueAttributesCommand({
        QueueUrl: this.queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
      }),
      signal ? { abortSignal: signal } : {},
    );
    const a = out.Attributes ?? {};
    return (
      Number(a.ApproximateNumberOfMessages ?? 0) +
      Number(a.ApproximateNumberOfMessagesNotVisible ?? 0) +
      Number(a.ApproximateNumberOfMessagesDelayed ?? 0)
    );
  }

  async send(messages: OutgoingMessage[], signal?: AbortSignal): Promise<void> {
    for (const batch of chunk(messages, SQS_BATCH_LIMIT)) {
      const out = await this.hotPath.sendMessageBatch(
        {
          QueueUrl: this.queueUrl,
          Entries: batch.map((m, i) => ({
            Id: String(i),
            MessageBody: m.body,
            ...(m.delaySeconds ? { DelaySeconds: Math.min(900, Math.max(0, Math.round(m.delaySeconds))) } : {}),
            ...(m.attributes && Object.keys(m.attributes).length > 0 ? { MessageAttributes: toAttributes(m.attributes) } : {}),
          })),
        },
        signal,
      );
      if (out.Failed && out.Failed.length > 0) {
        throw new SqsBatchError(
          'SendMessageBatch',
          out.Failed.map((f) => ({ code: f.Code ?? 'Unknown', message: f.Message ?? '' })),
        );
      }
    }
  }

  async receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    if (signal?.aborted) return [];
    try {
      const out = await this.hotPath.receiveMessage(
        {
          QueueUrl: this.queueUrl,
          MaxNumberOfMessages: Math.max(1, Math.min(SQS_BATCH_LIMIT, max)),
          WaitTimeSeconds: Math.max(0, Math.min(20, Math.ceil(waitSeconds))),
          MessageSystemAttributeNames: ['ApproximateReceiveCount', 'SentTimestamp'],
          MessageAttributeNames: ['All'],
        },
        signal,
      );
      const received: ReceivedMessage[] = [];
      for (const m of out.Messages ?? []) {
        const attributes: Record<string, string> = {};
        const given = m.MessageAttributes;
        if (given) for (const k in given) attributes[k] = given[k]!.StringValue ?? '';
        const r: ReceivedMessage = {
          messageId: m.MessageId ?? '',
          receipt: m.ReceiptHandle ?? '',
          body: m.Body ?? '',
          receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? 1),
          attributes,
        };
        const sent = m.Attributes?.SentTimestamp;
        if (sent) r.sentAt = Number(sent);
        received.push(r);
      }
      return received;
    } catch (err) {
      if (signal?.aborted) return [];
      throw err;
    }
  }

  async changeVisibility(changes: VisibilityChange[], signal?: AbortSignal): Promise<EntryFailure[]> {
    const failures: EntryFailure[] = [];
    for (const batch of chunk(changes, SQS_BATCH_LIMIT)) {
      const out = await this.hotPath.changeMessageVisibilityBatch(
        {
          QueueUrl: this.queueUrl,
          Entries: batch.map((c, i) => ({
            Id: String(i),
            ReceiptHandle: c.receipt,
            VisibilityTimeout: Math.max(0, Math.min(43_200, Math.round(c.seconds))),
          })),
        },
        signal,
      );
      for (const f of out.Failed ?? []) failures.push(toFailure(batch[Number(f.Id)]!.receipt, f.Code, f.Message));
    }
    return failures;
  }

  async delete(receipts: string[], signal?: AbortSignal): Promise<EntryFailure[]> {
    const failures: EntryFailure[] = [];
    for (const batch of chunk(receipts, SQS_BATCH_LIMIT)) {
      const out = await this.hotPath.deleteMessageBatch(
        {
          QueueUrl: this.queueUrl,
          Entries: batch.map((r, i) => ({ Id: String(i), ReceiptHandle: r })),
        },
        signal,
      );
      for (const f of out.Failed ?? []) failures.push(toFailure(batch[Number(f.Id)]!, f.Code, f.Message));
    }
    return failures;
  }
}

/** The hot path through the SDK client: the same four operations as SqsWire, as commands. */
function sdkHotPath(client: SQSClient): SqsHotPath {
  return {
    receiveMessage: (input, signal) => client.send(new ReceiveMessageCommand(input), signal ? { abortSignal: signal } : {}),
    deleteMessageBatch: (input, signal) => client.send(new DeleteMessageBatchCommand(input), signal ? { abortSignal: signal } : {}),
    changeMessageVisibilityBatch: (input, signal) =>
      client.send(new ChangeMessageVisibilityBatchCommand(input), signal ? { abortSignal: signal } : {}),
    sendMessageBatch: (input, signal) => client.send(new SendMessageBatchCommand(input), signal ? { abortSignal: signal } : {}),
  };
}

function toFailure(receipt: string, code: string | undefined, message: string | undefined): EntryFailure {
  const c = code ?? 'Unknown';
  return { receipt, code: c, message: message ?? '', stale: STALE_CODES.has(c) || /receipt handle|not.*inflight/i.test(message ?? '') };
}

function toAttributes(attrs: Record<string, string>): Record<string, MessageAttributeValue> {
  // SQS allows 10 attributes per message; values must be non-empty.
  return Object.fromEntries(
    Object.entries(attrs)
      .filter(([, v]) => v !== '')
      .slice(0, 10)
      .map(([k, v]) => [k, { DataType: 'String', StringValue: v }]),
  );
}
