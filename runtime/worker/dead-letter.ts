// The worker's one sender of dead letters (DESIGN 9): a dead job's report (error, attempts, last
// owner) and a message the worker cannot handle at all (poison), each with its reason. A source
// message is deleted only once the DLQ has the reason.

import type { DeadLetterReason } from '../domain/events.ts';
import { attemptsUsed, type Job } from '../domain/job.ts';
import { DEFAULT_LANE, type Lane } from '../domain/lanes.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { ReceivedMessage } from '../queue/types.ts';
import { markDeadJobReported } from '../store/dead-reports.ts';
import { recordPoisonMessage, type PoisonReason } from '../store/poison.ts';
import { sleep, type Held, type WorkerContext } from './held.ts';
import { stoppingSignal, type QueueMessages } from './messages.ts';

export class DeadLetters {
  constructor(
    private readonly ctx: WorkerContext,
    private readonly messages: QueueMessages,
  ) {}

  /** Send a message the worker cannot handle to the DLQ with its reason, then delete it. */
  async deadLetterMessage(m: ReceivedMessage, reason: DeadLetterReason, info: { jobId?: string; detail: string }): Promise<void> {
    const { ctx } = this;
    const sent = await this.send({
      body: m.body,
      lane: m.lane ?? DEFAULT_LANE,
      attributes: {
        Reason: reason,
        Detail: info.detail.slice(0, 1000),
        SourceMessageId: m.messageId,
        ReceiveCount: String(m.receiveCount),
        WorkerId: ctx.workerId,
        ...(info.jobId ? { JobId: info.jobId } : {}),
      },
    });
    ctx.log.error({ messageId: m.messageId, reason, detail: info.detail, body: m.body.slice(0, 500) }, 'message dead-lettered');
    if (sent) {
      ctx.metrics.count(METRIC.messagesDeadLettered);
      // Also kept in the database, raw body included, for on-call's poison list (runtime/store/poison.ts).
      await recordPoisonMessage(ctx.opts.pool, {
        sourceMessageId: m.messageId,
        reason: reason as PoisonReason,
        detail: info.detail,
        body: m.body,
        attributes: m.attributes,
        jobId: info.jobId ?? null,
        workerId: ctx.workerId,
        receiveCount: m.receiveCount,
      }).catch((err: unknown) =>
        ctx.log.warn({ err, messageId: m.messageId }, 'could not record the poison message; its dead letter still has it'),
      );
      ctx.emit('poison-dead-lettered', info.jobId ? { id: info.jobId, type: '?' } : null, `${reason}: ${info.detail}`);
      this.messages.delete(m, `dead-lettered: ${reason}`);
    }
  }

  /** A dead job's message goes to the DLQ carrying the job id and the reason; then the source message is deleted. */
  async deadLetterJob(job: Job, m: ReceivedMessage, reason: DeadLetterReason, h?: Held): Promise<void> {
    const sent = await this.reportDeadJob(job, reason, m.messageId);
    // Delete only once the DLQ has the reason. Otherwise the message returns, finds the job dead
    // (terminal) and is deleted then; the job row keeps the reason either way.
    if (sent && !h?.receiptStale) this.messages.delete(m, `job dead: ${reason}`, h);
  }

  /**
   * Put a dead job on the DLQ with its reason (error, attempts, last owner), and mark its death
   * reported. Also used for jobs that died without a message in hand (the rescuer found them)
   * and for deaths whose report never went out (the sweeper). Returns false if the DLQ could not
   * be reached.
   */
  async reportDeadJob(job: Job, reason: DeadLetterReason, sourceMessageId?: string): Promise<boolean> {
    const last = job.attemptLog.at(-1);
    const body = JSON.stringify({
      jobId: job.id,
      type: job.type,
      reason,
      error: job.lastError ? { name: job.lastError.name, message: job.lastError.message } : null,
      attempts: attemptsUsed(job),
      maxAttempts: job.maxAttempts,
      lastOwner: last?.owner ?? null,
      deadAt: job.finishedAt?.toISOString() ?? new Date().toISOString(),
    });
    const sent = await this.send({
      body,
      lane: job.lane,
      attributes: {
        Reason: reason,
        JobId: job.id,
        JobType: job.type,
        Lane: job.lane,
        Attempts: String(attemptsUsed(job)),
        ErrorMessage: (job.lastError?.message ?? '').slice(0, 1000) || '(none)',
        LastOwner: last?.owner ?? '(unknown)',
        ...(sourceMessageId ? { SourceMessageId: sourceMessageId } : {}),
      },
    });
    // Marked so the sweeper (maintenance/dead-reports.ts) does not send it again. Unmarked — the
    // DLQ refused every try, the database is away, this process dies now — it is sent again.
    if (sent)
      await markDeadJobReported(this.ctx.opts.pool, job).catch((err: unknown) =>
        this.ctx.log.warn({ err, jobId: job.id }, 'could not mark the dead job reported; the sweeper will send its report again'),
      );
    return sent;
  }

  /** To the DLQ of `msg.lane` (the job's lane, or for a poison message the lane it came from). */
  private async send(msg: { body: string; attributes: Record<string, string>; lane: Lane }): Promise<boolean> {
    for (let i = 0; i < 3; i++) {
      try {
        await this.ctx.dlq.send([msg], stoppingSignal(this.ctx));
        return true;
      } catch (err) {
        this.ctx.metrics.count(METRIC.sqsCallsFailed);
        this.ctx.log.warn({ err, try: i + 1 }, 'sending to the dead-letter queue failed');
        await sleep(200 * 2 ** i);
      }
    }
    return false;
  }
}
