// The worker's writes to the job queue, shared by its units: batched deletes, visibility changes
// in batches of ten, a message hidden until its job is due, and the durable re-publish through
// the outbox for a job whose message could not be repositioned.

import { MAX_WAITING_MESSAGE_AGE_SECONDS } from '../config/rules.ts';
import type { Job } from '../domain/job.ts';
import { jobMessageBody } from '../queue/message.ts';
import { METRIC } from '../observability/metric-names.ts';
import {
  chunk,
  messageAgeSeconds,
  SQS_BATCH_LIMIT,
  SQS_MAX_DELAY_SECONDS,
  type EntryFailure,
  type ReceivedMessage,
} from '../queue/types.ts';
import { Batcher } from './batcher.ts';
import { outboxInsert } from '../store/outbox.ts';
import type { Held, WorkerContext } from './held.ts';

/** A message to delete, and why (for the log line if the delete fails). */
interface PendingDelete {
  message: ReceivedMessage;
  why: string;
  jobId: string | undefined;
}

/** The longest one SQS call of a stopping worker may take (stoppingSignal). */
export const STOPPING_SQS_CALL_MS = 2_000;

/**
 * While the worker stops, each of its SQS calls gives up after STOPPING_SQS_CALL_MS: the releases
 * are the database's, and a message left hidden comes back at its visibility timeout (or its job
 * gets a fresh one through the outbox; a dead job's report, the sweeper's). An SQS that did not
 * answer during a deploy held the stop for the wire's retries, 30 s a try, past ECS's stop
 * timeout: the running jobs were never released, and each lost an attempt (worker SQS review).
 */
export function stoppingSignal(ctx: { stopping: boolean }): AbortSignal | undefined {
  return ctx.stopping ? AbortSignal.timeout(STOPPING_SQS_CALL_MS) : undefined;
}

export class QueueMessages {
  private readonly deletes: Batcher<PendingDelete, void>;

  constructor(private readonly ctx: WorkerContext) {
    this.deletes = new Batcher<PendingDelete, void>(
      async (items) => {
        const failures = await ctx.queue.delete(
          items.map((d) => d.message.receipt),
          stoppingSignal(ctx),
        );
        for (const f of failures) {
          const d = items.find((i) => i.message.receipt === f.receipt);
          this.ctx.log.warn(
            { messageId: d?.message.messageId, why: d?.why, jobId: d?.jobId, code: f.code },
            'message delete failed; it will return and be settled again',
          );
        }
        return [];
      },
      // One DeleteMessageBatch per 10 deletes: a full batch goes at once, a partial one waits up to
      // 50 ms for more (jobs that commit one by one, like ledger.post, finish a few per 5 ms). A
      // message whose job ended but is not yet deleted is harmless: if it comes back, its settlement
      // is "job terminal: delete".
      {
        maxItems: SQS_BATCH_LIMIT,
        delayMs: 50,
        onError: (err, items) => {
          this.ctx.metrics.count(METRIC.sqsCallsFailed);
          this.ctx.log.warn(
            { err, messages: items.length, why: [...new Set(items.map((d) => d.why))] },
            'message delete failed; the messages will return and be settled again',
          );
        },
      },
    );
  }

  delete(m: ReceivedMessage, why: string, h?: Held): void {
    this.deletes.push({ message: m, why, jobId: h?.job.id });
  }

  /** Batches of 10, sent side by side (a heartbeat of 50 jobs waits one round trip, not five). */
  async changeVisibility(changes: { receipt: string; seconds: number }[]): Promise<EntryFailure[]> {
    const batches = await Promise.all(
      chunk(changes, SQS_BATCH_LIMIT).map(async (batch): Promise<EntryFailure[]> => {
        try {
          return await this.ctx.queue.changeVisibility(batch, stoppingSignal(this.ctx));
        } catch (err) {
          this.ctx.metrics.count(METRIC.sqsCallsFailed);
          this.ctx.log.warn({ err, count: batch.length }, 'visibility change failed');
          return batch.map((c) => ({ receipt: c.receipt, code: 'RequestFailed', message: String(err), stale: false }));
        }
      }),
    );
    return batches.flat();
  }

  /** Durable re-publish for jobs whose message we could not reposition: via the outbox. */
  async republish(jobIds: string[], runAfter?: Date): Promise<boolean> {
    if (jobIds.length === 0) return true;
    try {
      const rows = await outboxInsert(this.ctx.opts.pool, jobIds);
      // Durable from here: the relay publishes what this send does not.
      await this.ctx.opts.publisher.publish(rows.map((r) => ({ ...r, ...(runAfter ? { runAfter } : {}) })));
      return true;
    } catch (err) {
      this.ctx.log.error({ err, jobIds }, 're-publish failed; the rescuer or the returning message will pick the jobs up');
      return false;
    }
  }

  /**
   * Whether `m` must be replaced by a fresh message rather than hidden `seconds` to wait for its
   * job: 'near-redrive' when SQS would dead-letter it at its next receive (duplicates spend
   * receives too), 'too-old' when the wait or the message's age exceeds
   * MAX_WAITING_MESSAGE_AGE_SECONDS (the queue-age alarm counts a message from its sending);
   * null: hide it. `seconds` 0: only its age counts (it is to be shown now).
   */
  replaceBeforeWaiting(m: ReceivedMessage, seconds: number): 'near-redrive' | 'too-old' | null {
    if (m.receiveCount >= this.ctx.opts.timings.maxReceiveCount - 1) return 'near-redrive';
    return seconds > MAX_WAITING_MESSAGE_AGE_SECONDS || messageAgeSeconds(m) > MAX_WAITING_MESSAGE_AGE_SECONDS ? 'too-old' : null;
  }

  /**
   * Make the jobs of `held` claimable again now (released, or their lease ended): each message
   * visible at once, or, when the message is older than MAX_WAITING_MESSAGE_AGE_SECONDS (a long
   * part-run: the queue-age alarm would count it into the next run too) or its receipt no longer
   * works, a fresh message through the outbox (the old one deleted). An old message whose
   * re-publish fails is made visible as before.
   */
  async showNow(held: Held[]): Promise<void> {
    const old = held.filter((h) => !h.receiptStale && messageAgeSeconds(h.message) > MAX_WAITING_MESSAGE_AGE_SECONDS);
    const stale = held.filter((h) => h.receiptStale);
    const replaced = old.length > 0 && (await this.republish(old.map((h) => h.job.id)));
    if (replaced) for (const h of old) this.delete(h.message, 'replaced by a fresh message: too old to run again on', h);
    const visible = held.filter((h) => !h.receiptStale && (!replaced || !old.includes(h)));
    const failures = await this.changeVisibility(visible.map((h) => ({ receipt: h.message.receipt, seconds: 0 })));
    const again = [...stale, ...visible.filter((h) => failures.some((f) => f.receipt === h.message.receipt))];
    await this.republish(again.map((h) => h.job.id));
  }

  /**
   * Bring `m` back in `seconds` for its job `jobId` to be tried again (a claim that missed: the row
   * locked, the lease about to run out): hidden, or, when SQS would dead-letter it at its next
   * receive, replaced by a fresh message due then (the old one deleted). Contention is not the
   * job's fault; without this, a job whose claims keep missing went to the DLQ and paged.
   */
  async retryLater(m: ReceivedMessage, jobId: string, seconds: number): Promise<void> {
    if (
      this.replaceBeforeWaiting(m, seconds) === 'near-redrive' &&
      (await this.republish([jobId], new Date(Date.now() + seconds * 1000)))
    ) {
      this.delete(m, 'replaced by a fresh message before SQS would redrive it');
      return;
    }
    await this.changeVisibility([{ receipt: m.receipt, seconds }]);
  }

  /**
   * Hide a message until its job is due. Each early arrival costs a receive against
   * maxReceiveCount, and the queue-age alarm counts a message's age across its hides
   * (MAX_WAITING_MESSAGE_AGE_SECONDS). A job due beyond the publish horizon (SQS's longest
   * delay, 15 min) should have no message yet (jobs.outbox_deferred; this one is a re-publish
   * or a message from before migration 0018): its publish is deferred through the outbox and the
   * message deleted once that is durable. When the message is older than that age or near its
   * receive limit, send a fresh message (receive count 0, delayed to the due time) and delete
   * this one — in that order, so a failure leaves the old message in place.
   */
  async hideUntilDue(m: ReceivedMessage, job: Job, seconds: number): Promise<void> {
    if (!this.replaceBeforeWaiting(m, seconds)) {
      const [failure] = await this.changeVisibility([{ receipt: m.receipt, seconds }]);
      if (!failure) return;
    }
    if (seconds > SQS_MAX_DELAY_SECONDS) {
      if (await this.republish([job.id], job.runAfter)) this.delete(m, 'deferred: due beyond the publish horizon');
      return;
    }
    try {
      await this.ctx.queue.send(
        [{ body: jobMessageBody(job.id, job.type), delaySeconds: seconds, lane: job.lane }],
        stoppingSignal(this.ctx),
      );
      this.delete(m, 're-published for a later due time');
    } catch (err) {
      this.ctx.metrics.count(METRIC.sqsCallsFailed);
      this.ctx.log.warn({ err, jobId: job.id }, 're-publish for a later due time failed; the message will return');
    }
  }

  /** Send the deletes still queued. */
  drain(): Promise<void> {
    return this.deletes.drain();
  }
}
