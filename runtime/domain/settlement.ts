// What a job row says about a message that names it (DESIGN 8: the job row decides, the queue
// delivers). Pure: no I/O, the database's clock passed in. Two readers ask it:
//
//   the worker, about a delivery it could not claim (settleMessage):
//     no job                                  → poison: dead-letter the message (unknown-job)
//     job terminal                            → delete: a leftover copy
//     pending, not due (backoff, runAt)       → hide until due
//     pending, due (another claimer has it)   → retry shortly
//     running, more than a heartbeat of lease → delete: a duplicate of a live lease
//     running, lease about to run out         → reclaim just after the lease ends
//     running, expired on its final attempt   → dead-letter the job (lease-expired-final-attempt)
//     running, expired, attempts left         → retry shortly (the next claim reclaims it)
//
//   the DLQ reconciliation (runtime/oncall/dlq-reconcile.ts), about a dead letter (judgeDeadLetter):
//     job pending                         → resend: it still needs a message
//     job running, lease expired          → resend: a worker reclaims it
//     job running, live lease             → drop: its owner holds its own message; never re-run
//     job succeeded or cancelled          → drop: nothing to run; never re-run
//     job dead, discarded                 → drop: on-call decided not to run it
//     job dead again since this report    → drop: the newer report (and the job row) has it
//     job dead                            → keep: redrive the job or discard it
//     no such job / body names no job     → keep: poison, reported, never resent
//
// The worker counts a lease as live only with more than a heartbeat left (a live owner renews
// every heartbeat); the DLQ, which never claims, drops any letter of a job whose lease has not
// run out. The reasons the worker writes on dead letters live here too, so the DLQ reads them
// by the same names.

import type { DeadLetterReason } from './events.ts';
import { attemptsUsed, isTerminal, type Job } from './job.ts';

/** The reasons the worker writes on dead letters of dead jobs. */
export const DEAD_JOB_REASONS: ReadonlySet<string> = new Set<DeadLetterReason>([
  'attempts-exhausted',
  'non-retryable',
  'lease-expired-final-attempt',
]);
/**
 * Why a dead job died, as its dead letter names it, read from the row alone (for a report sent
 * after the fact, runtime/maintenance/dead-reports.ts): its lease ran out on the final attempt,
 * its handler said not to retry, or it used its attempts.
 */
export function deadJobReason(job: Pick<Job, 'lastError'>): 'attempts-exhausted' | 'non-retryable' | 'lease-expired-final-attempt' {
  if (job.lastError?.name === 'LeaseExpired') return 'lease-expired-final-attempt';
  return job.lastError?.retryable === false ? 'non-retryable' : 'attempts-exhausted';
}

/**
 * A job that died because its handler's schema refused its payload (the worker's parse, before
 * the handler ran): a redrive runs the same payload and dies the same way.
 */
export function payloadRefused(job: Pick<Job, 'lastError'>): boolean {
  const e = job.lastError;
  // Non-retryable: the worker's own parse (a child job refused in ctx.enqueue is a retryable error of the handler's code).
  return e?.name === 'ValidationError' && e.retryable === false && /^payload\b/.test(e.message);
}

/** The advice for a job whose payload was refused; the discard command follows it. */
export const PAYLOAD_REFUSED_ADVICE =
  'its payload was refused, and a redrive runs the same payload: enqueue a corrected job (under a new idempotency key if its type keeps keys: this job keeps its own), then';

/** What on-call does with a dead job: redrive it once the cause is fixed, or, if its payload was refused, enqueue a corrected one. */
export function deadJobAdvice(job: Pick<Job, 'id' | 'lastError'>): string {
  return payloadRefused(job)
    ? `${PAYLOAD_REFUSED_ADVICE} discard this one (jobs dead discard ${job.id} --reason "<why>")`
    : `redrive it (jobs dead redrive ${job.id} --reason "<what was fixed>" --by <you>) to run it again, or discard it (jobs dead discard ${job.id} --reason …)`;
}

/** The reasons the worker writes on messages it could not handle at all. */
export const POISON_REASONS: ReadonlySet<string> = new Set<DeadLetterReason>(['unparseable-body', 'unknown-job']);

/** The part of a job row these rules read (a Job, or on-call's OpsJob with its dead-job triage). */
export type JobRowView = Pick<
  Job,
  | 'id'
  | 'state'
  | 'attempt'
  | 'releases'
  | 'maxAttempts'
  | 'runAfter'
  | 'leaseExpiresAt'
  | 'leaseOwner'
  | 'finishedAt'
  | 'cancelledBy'
  | 'lastError'
> & {
  dead?: { discardedAt: Date | null; discardedBy: string | null; discardReason: string | null } | null;
};

/** A message naming a job the table does not have. */
export const noJobDetail = (jobId: string): string => `no job ${jobId} in the job table`;

/** What the worker does with a message whose job it did not claim. */
export type MessageSettlement =
  | { action: 'dead-letter-message'; reason: 'unknown-job'; detail: string }
  | { action: 'delete'; why: string; duplicate: boolean }
  | { action: 'hide-until-due'; seconds: number }
  | { action: 'retry-shortly'; seconds: number }
  | { action: 'reclaim-after-lease'; seconds: number }
  | { action: 'dead-letter-job'; reason: 'lease-expired-final-attempt'; why: string };

const RETRY_SHORTLY: MessageSettlement = { action: 'retry-shortly', seconds: 1 };

const leaseLeftMs = (job: JobRowView, nowMs: number): number => (job.leaseExpiresAt?.getTime() ?? 0) - nowMs;

/** The worker's rule for a message it could not claim (see the table at the top). `nowMs`: the database's clock. */
export function settleMessage(jobId: string, job: JobRowView | undefined, nowMs: number, heartbeatSeconds: number): MessageSettlement {
  if (!job) return { action: 'dead-letter-message', reason: 'unknown-job', detail: noJobDetail(jobId) };
  if (isTerminal(job.state)) return { action: 'delete', why: `job is ${job.state}`, duplicate: false };
  if (job.state === 'pending') {
    const dueInMs = job.runAfter.getTime() - nowMs;
    // Due but locked by another claimer right now: try again shortly.
    return dueInMs > 0 ? { action: 'hide-until-due', seconds: Math.ceil(dueInMs / 1000) } : RETRY_SHORTLY;
  }
  // running
  const left = leaseLeftMs(job, nowMs);
  // A live owner renews every heartbeat, so it keeps more than one heartbeat of lease.
  if (left > heartbeatSeconds * 1000) return { action: 'delete', why: 'duplicate delivery of a job with a live lease', duplicate: true };
  // The owner has missed heartbeats: come back just after its lease ends and reclaim.
  if (left > 0) return { action: 'reclaim-after-lease', seconds: Math.max(1, Math.ceil(left / 1000)) };
  if (attemptsUsed(job) >= job.maxAttempts)
    return { action: 'dead-letter-job', reason: 'lease-expired-final-attempt', why: 'lease expired on the final attempt' };
  return RETRY_SHORTLY;
}

export type Verdict = 'resend' | 'drop' | 'keep';

/**
 * The DLQ reconciliation's rule for a dead letter (see the table at the top). `jobId`: the job the
 * letter names, null when it names none (`bodyProblem` says why). `reportedDeadAt`: when the death
 * a worker's dead-job report tells of happened (its body's deadAt, the job row's finished_at then).
 */
export function judgeDeadLetter(
  jobId: string | null,
  job: JobRowView | undefined,
  dbNow: Date,
  bodyProblem: string,
  reportedDeadAt?: Date | null,
): { verdict: Verdict; why: string } {
  const v = (verdict: Verdict, why: string) => ({ verdict, why });
  if (!jobId) return v('keep', `poison: the body names no job (${bodyProblem}); read it to find the sender, then discard it`);
  if (!job) return v('keep', `poison: ${noJobDetail(jobId)}; never resent`);
  switch (job.state) {
    case 'succeeded':
      return v('drop', `job succeeded at ${job.finishedAt?.toISOString()}: nothing to run, never re-run`);
    case 'cancelled':
      return v('drop', `job was cancelled${job.cancelledBy ? ` by ${job.cancelledBy}` : ''}: nothing to run`);
    case 'running': {
      const leaseLeft = leaseLeftMs(job, dbNow.getTime());
      return leaseLeft > 0
        ? v('drop', `job is running (attempt ${job.attempt}, ${job.leaseOwner} holds a live lease): never re-run`)
        : v('resend', `job is running with a lease that expired ${Math.round(-leaseLeft / 1000)} s ago: resent so a worker reclaims it`);
    }
    case 'pending':
      return v('resend', 'job is pending: resent so a worker claims it');
    case 'dead':
      if (job.dead?.discardedAt) return v('drop', `job was discarded by ${job.dead.discardedBy}: ${job.dead.discardReason}`);
      // Redriven, then dead again: this letter tells of the earlier death, with its error. The
      // later death has a letter of its own (or the sweeper sends it), and the job row has both.
      if (reportedDeadAt && job.finishedAt && reportedDeadAt.getTime() < job.finishedAt.getTime())
        return v(
          'drop',
          `an earlier death's report (${reportedDeadAt.toISOString()}): the job was redriven and died again at ${job.finishedAt.toISOString()}; the newer letter and jobs dead show ${job.id} have that death`,
        );
      return v('keep', `job is dead (${job.lastError?.message ?? 'no error recorded'}): ${deadJobAdvice(job)}`);
  }
}
