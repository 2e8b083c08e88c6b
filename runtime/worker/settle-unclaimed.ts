// What a worker does with a received message whose job it did not claim (fetcher.ts
// settleMisses): what the job row says (runtime/domain/settlement.ts) — delete a leftover or a
// duplicate of a live lease, hide it until the job is due, try again shortly or just after a
// lease ends, dead-letter an unknown job's message, or dead-letter a job whose lease ran out on
// its final attempt.

import { settleMessage } from '../domain/settlement.ts';
import type { Job, WithDbNow } from '../domain/job.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { ReceivedMessage } from '../queue/types.ts';
import type { DeadLetters } from './dead-letter.ts';
import type { WorkerContext } from './held.ts';
import type { QueueMessages } from './messages.ts';

/** Settle the messages (`byJob`) of jobs `ids`, as read (`jobs`; missing: no such job). */
export async function settleUnclaimed(
  ctx: WorkerContext,
  messages: QueueMessages,
  deadLetters: DeadLetters,
  ids: string[],
  jobs: Map<string, Job & WithDbNow>,
  byJob: Map<string, ReceivedMessage[]>,
): Promise<void> {
  const heartbeatSeconds = ctx.opts.timings.heartbeatSeconds;
  for (const id of ids) {
    const job = jobs.get(id);
    for (const m of byJob.get(id)!) {
      const s = settleMessage(id, job, job ? job.dbNow.getTime() : 0, heartbeatSeconds);
      switch (s.action) {
        case 'dead-letter-message':
          await deadLetters.deadLetterMessage(m, s.reason, { jobId: id, detail: s.detail });
          break;
        case 'delete':
          if (s.duplicate) {
            ctx.metrics.count(METRIC.duplicateDeliveries);
            ctx.emit('duplicate-ignored', job, `held by ${job!.leaseOwner}`);
            ctx.log.info(
              { jobId: id, type: job!.type, attempt: job!.attempt, receiveCount: m.receiveCount, owner: job!.leaseOwner },
              'duplicate delivery ignored: another worker holds a live lease',
            );
          }
          messages.delete(m, s.why);
          break;
        case 'hide-until-due':
          await messages.hideUntilDue(m, job!, s.seconds);
          break;
        case 'retry-shortly':
        case 'reclaim-after-lease':
          ctx.metrics.count(METRIC.claimMisses);
          await messages.retryLater(m, id, s.seconds);
          break;
        case 'dead-letter-job': {
          const [dead] = await ctx.store.deadLetterExpired([id]);
          if (dead) {
            ctx.metrics.count(METRIC.jobsDeadLettered);
            ctx.emit('dead-lettered', dead, s.why);
            ctx.log.error(
              { jobId: id, type: job!.type, attempt: job!.attempt, receiveCount: m.receiveCount, lastOwner: job!.leaseOwner },
              'job dead: lease expired on its final attempt',
            );
            await deadLetters.deadLetterJob(dead, m, s.reason);
          } else {
            await messages.changeVisibility([{ receipt: m.receipt, seconds: 1 }]);
          }
          break;
        }
      }
    }
  }
}
