// The queue as the runtime needs it: a delivery mechanism with SQS's semantics, never a source
// of truth. Two implementations: MemoryQueue (in-process, tests and benchmarks) and SqsQueue
// (production and the local stack: its hot path over sqs-wire.ts, the rest through
// @aws-sdk/client-sqs).
//
// SQS semantics both keep:
//  - at-least-once: a message can be delivered twice, even concurrently;
//  - a received message is hidden for its visibility timeout, then delivered again;
//  - every receive returns a new receipt handle, and only the newest one can change the
//    message's visibility; deleting with an older one succeeds without deleting anything;
//  - a message received more than maxReceiveCount times moves to the DLQ (redrive policy).
//
// Priority lanes (lanes.ts): LaneQueues is a JobQueue over one queue per lane. A message names its
// lane; a plain queue ignores it (every lane shares that queue).

import type { Lane } from '../domain/lanes.ts';

export interface OutgoingMessage {
  body: string;
  /** Hide the message for this long after sending (SQS: at most 900). */
  delaySeconds?: number;
  /** String attributes, e.g. the reason a message was dead-lettered. */
  attributes?: Record<string, string>;
  /** The job's lane: LaneQueues sends the message to that lane's queue (default bulk). */
  lane?: Lane;
}

export interface ReceivedMessage {
  messageId: string;
  /** Valid until the message is received again. */
  receipt: string;
  body: string;
  /** How many times SQS has delivered this message, this delivery included. */
  receiveCount: number;
  attributes: Record<string, string>;
  /**
   * When it was sent (ms since the epoch, the queue's clock; SQS's SentTimestamp), if the queue
   * says. A queue's oldest-message age counts from here, across every receive.
   */
  sentAt?: number;
  /** The lane whose queue it came from, when received through LaneQueues. */
  lane?: Lane;
}

export interface VisibilityChange {
  receipt: string;
  seconds: number;
}

export interface EntryFailure {
  receipt: string;
  code: string;
  message: string;
  /** True when the failure means the handle is no longer the message's newest (or the message is gone). */
  stale: boolean;
}

export interface JobQueue {
  /**
   * Send messages; throws if any could not be sent (callers keep their outbox row and retry), or
   * once `signal` aborts (what was sent by then stays sent: a second message later, harmless).
   */
  send(messages: OutgoingMessage[], signal?: AbortSignal): Promise<void>;
  /** Long-poll for up to `max` (≤ 10) messages. Resolves early with [] when `signal` aborts. */
  /** Up to `max` messages, each a new object the caller owns (LaneQueues marks them in place). */
  receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]>;
  /** Batch visibility change; returns the entries that failed; throws once `signal` aborts. */
  changeVisibility(changes: VisibilityChange[], signal?: AbortSignal): Promise<EntryFailure[]>;
  /** Batch delete; returns the entries that failed; throws once `signal` aborts. */
  delete(receipts: string[], signal?: AbortSignal): Promise<EntryFailure[]>;
}

/** SQS's batch limit for SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch. */
export const SQS_BATCH_LIMIT = 10;
/** SQS's limit on DelaySeconds. */
export const SQS_MAX_DELAY_SECONDS = 900;

/** How old `m` is (s) by this process's clock; 0 when the queue did not say. */
export function messageAgeSeconds(m: Pick<ReceivedMessage, 'sentAt'>, now = Date.now()): number {
  return m.sentAt === undefined ? 0 : Math.max(0, (now - m.sentAt) / 1000);
}

export function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
