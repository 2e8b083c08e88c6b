// The SQS side of the dead-letter queue, as on-call reads it: receive with a hold, hand back,
// delete, and SQS's server-side move (StartMessageMoveTask, its cancel and its listing). It knows
// nothing of jobs: the DLQ reconciliation (dlq.ts) judges each dead letter by its job row and
// decides what to call here.
//
// Reading a queue means receiving: a scan holds each message invisible for a short while
// (HOLD_SECONDS in dlq.ts) so it sees each once, then hands back what it keeps (visibility 0).
// Receiving raises a dead letter's receive count, which is harmless: the DLQ has no redrive policy.
// The local endpoint (fauxqs) has no move tasks; the callers check `local` before they ask.

import {
  CancelMessageMoveTaskCommand,
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ListMessageMoveTasksCommand,
  ReceiveMessageCommand,
  StartMessageMoveTaskCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { chunk, SQS_BATCH_LIMIT } from '../queue/types.ts';

export interface DeadLetter {
  messageId: string;
  receipt: string;
  body: string;
  /** The message attributes (Reason, JobId, ErrorMessage, …). */
  attributes: Record<string, string>;
  sentAt: Date | null;
  /** The principal that sent it (SQS's SenderId): the worker's role for its own dead letters, the original sender after an SQS redrive. */
  senderId: string | null;
  receiveCount: number;
}

/**
 * A move task cancel that did not happen, in words on-call can act on: the task handle, why, and
 * what to do. `local`: the local endpoint has no move tasks; `not-found`: SQS knows no running
 * task by that handle (unknown, mistyped, or already finished, failed or cancelled); `denied`:
 * the caller's credentials may not cancel it (the grant covers the DLQ's own move tasks only).
 */
export class MoveCancelError extends Error {
  override name = 'MoveCancelError';
  constructor(
    readonly reason: 'local' | 'not-found' | 'denied',
    readonly taskHandle: string,
    message: string,
  ) {
    super(message);
  }
}

/** What a cancel did: SQS's count of the messages the task had moved before it stopped. */
export interface MoveCancelled {
  taskHandle: string;
  moved: number | null;
  by: string;
}

/** Where on-call finds the move tasks and their handles: the hint every cancel refusal ends with. */
export const MOVE_STATUS_HINT = "list the DLQ's move tasks and their handles with `jobs dlq move-status` (GET /v1/dlq/move-tasks)";

export interface MoveTask {
  taskHandle: string | null;
  status: string;
  sourceArn: string;
  destinationArn: string | null;
  moved: number;
  toMove: number | null;
  startedAt: Date | null;
  failureReason: string | null;
}

/** The DLQ as on-call reads it: receive with a hold, hand back, delete, and SQS's server-side move. */
export class SqsDeadLetterQueue {
  private arnCache: Promise<{ dlqArn: string; queueArn: string }> | null = null;

  constructor(
    readonly opts: {
      dlqUrl: string;
      /** The job queue the DLQ's messages came from (the move's destination). */
      queueUrl: string;
      client: SQSClient;
      /** A local endpoint (fauxqs): it has no StartMessageMoveTask. */
      local: boolean;
    },
  ) {}

  async receive(max: number, waitSeconds: number, holdSeconds: number): Promise<DeadLetter[]> {
    const out = await this.opts.client.send(
      new ReceiveMessageCommand({
        QueueUrl: this.opts.dlqUrl,
        MaxNumberOfMessages: Math.max(1, Math.min(SQS_BATCH_LIMIT, max)),
        WaitTimeSeconds: waitSeconds,
        VisibilityTimeout: holdSeconds,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
    );
    return (out.Messages ?? []).map((m) => ({
      messageId: m.MessageId ?? '',
      receipt: m.ReceiptHandle ?? '',
      body: m.Body ?? '',
      attributes: Object.fromEntries(Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.StringValue ?? ''])),
      sentAt: m.Attributes?.SentTimestamp ? new Date(Number(m.Attributes.SentTimestamp)) : null,
      senderId: m.Attributes?.SenderId ?? null,
      receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? 1),
    }));
  }

  /** Hand messages back (visibility 0). A stale handle means someone else has it now: nothing to do. */
  async release(receipts: string[]): Promise<void> {
    for (const batch of chunk(receipts, SQS_BATCH_LIMIT)) {
      await this.opts.client.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.opts.dlqUrl,
          Entries: batch.map((r, i) => ({ Id: String(i), ReceiptHandle: r, VisibilityTimeout: 0 })),
        }),
      );
    }
  }

  /** Delete messages; returns the receipts that failed. */
  async delete(receipts: string[]): Promise<{ receipt: string; message: string }[]> {
    const failed: { receipt: string; message: string }[] = [];
    for (const batch of chunk(receipts, SQS_BATCH_LIMIT)) {
      const out = await this.opts.client.send(
        new DeleteMessageBatchCommand({ QueueUrl: this.opts.dlqUrl, Entries: batch.map((r, i) => ({ Id: String(i), ReceiptHandle: r })) }),
      );
      for (const f of out.Failed ?? [])
        failed.push({ receipt: batch[Number(f.Id)]!, message: `${f.Code ?? 'Unknown'}: ${f.Message ?? ''}` });
    }
    return failed;
  }

  arns(): Promise<{ dlqArn: string; queueArn: string }> {
    this.arnCache ??= (async () => {
      const arn = async (url: string) => {
        const out = await this.opts.client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }));
        const a = out.Attributes?.QueueArn;
        if (!a) throw new Error(`SQS returned no QueueArn for ${url}`);
        return a;
      };
      const [dlqArn, queueArn] = await Promise.all([arn(this.opts.dlqUrl), arn(this.opts.queueUrl)]);
      return { dlqArn, queueArn };
    })();
    this.arnCache.catch(() => {
      this.arnCache = null;
    });
    return this.arnCache;
  }

  /** StartMessageMoveTask: SQS moves every message of the DLQ to the job queue, server-side. */
  async startMove(maxPerSecond?: number): Promise<{ taskHandle: string; dlqArn: string; queueArn: string }> {
    const { dlqArn, queueArn } = await this.arns();
    const out = await this.opts.client.send(
      new StartMessageMoveTaskCommand({
        SourceArn: dlqArn,
        DestinationArn: queueArn,
        ...(maxPerSecond ? { MaxNumberOfMessagesPerSecond: maxPerSecond } : {}),
      }),
    );
    if (!out.TaskHandle) throw new Error('StartMessageMoveTask returned no task handle');
    return { taskHandle: out.TaskHandle, dlqArn, queueArn };
  }

  /**
   * CancelMessageMoveTask: stops a RUNNING move; what it already moved stays moved. SQS's refusals
   * become a MoveCancelError naming the handle; anything else (throttling, the network) is thrown
   * as it came.
   */
  async cancelMove(taskHandle: string): Promise<{ moved: number | null }> {
    try {
      const out = await this.opts.client.send(new CancelMessageMoveTaskCommand({ TaskHandle: taskHandle }));
      return { moved: out.ApproximateNumberOfMessagesMoved ?? null };
    } catch (err) {
      const name = (err as { name?: unknown }).name;
      const said = `${String(name)}: ${(err as Error).message ?? ''}`.slice(0, 300);
      if (name === 'ResourceNotFoundException' || name === 'InvalidAddress' || name === 'InvalidParameterValue') {
        throw new MoveCancelError(
          'not-found',
          taskHandle,
          `no running move task ${taskHandle}: SQS does not know it, or it has already finished, failed or been cancelled (only a RUNNING task can be cancelled; SQS said ${said}). Check the handle: ${MOVE_STATUS_HINT}`,
        );
      }
      if (typeof name === 'string' && /^AccessDenied/.test(name)) {
        throw new MoveCancelError(
          'denied',
          taskHandle,
          `not allowed to cancel move task ${taskHandle} (SQS said ${said}): sqs:CancelMessageMoveTask is granted on this environment's DLQ only, so the handle may belong to another queue or environment; ${MOVE_STATUS_HINT}`,
        );
      }
      throw err;
    }
  }

  async listMoves(): Promise<MoveTask[]> {
    const { dlqArn } = await this.arns();
    const out = await this.opts.client.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn, MaxResults: 10 }));
    return (out.Results ?? []).map((r) => ({
      taskHandle: r.TaskHandle ?? null,
      status: r.Status ?? 'UNKNOWN',
      sourceArn: r.SourceArn ?? dlqArn,
      destinationArn: r.DestinationArn ?? null,
      moved: r.ApproximateNumberOfMessagesMoved ?? 0,
      toMove: r.ApproximateNumberOfMessagesToMove ?? null,
      startedAt: r.StartedTimestamp ? new Date(r.StartedTimestamp) : null,
      failureReason: r.FailureReason ?? null,
    }));
  }
}
