// What a dead letter is, judged by its job row. The job row decides (DESIGN: PostgreSQL decides,
// SQS delivers), so every dead letter is judged by its job, by the rules the worker settles its
// messages with (runtime/domain/settlement.ts):
//
//   job pending                         → resend: it still needs a message (e.g. SQS redrove it
//                                         after a crash loop, or the job was redriven)
//   job running, lease expired          → resend: a worker reclaims it
//   job running, live lease             → drop: its owner holds its own message; never re-run
//   job succeeded or cancelled          → drop: nothing to run; never re-run
//   job dead, discarded                 → drop: on-call decided not to run it
//   job dead again since this report    → drop: the newer report (and the job row) has it
//   job dead                            → keep: redrive the job (jobs dead redrive) or discard it
//   no such job / body names no job     → keep: poison, reported, never resent

import { isJobId } from '../domain/ids.ts';
import type { JobState } from '../domain/job.ts';
import { DEFAULT_LANE, type Lane } from '../domain/lanes.ts';
import { DEAD_JOB_REASONS, judgeDeadLetter, POISON_REASONS, type Verdict } from '../domain/settlement.ts';
import { parseJobMessage } from '../queue/message.ts';
import type { OpsJob } from './db.ts';
import type { DeadLetter } from './dlq-queue.ts';

export type { Verdict } from '../domain/settlement.ts';
/** dead-job: the worker's report of a dead job; poison: a message the worker could not handle; sqs-redrive: moved by the queue's redrive policy after maxReceiveCount receives (a crash loop). */
export type LetterKind = 'dead-job' | 'poison' | 'sqs-redrive';

export interface ReconciledLetter {
  messageId: string;
  sentAt: Date | null;
  senderId: string | null;
  receiveCount: number;
  kind: LetterKind;
  /** The worker's Reason attribute, or `sqs-redrive`. */
  reason: string;
  /** The error or detail the dead letter carries. */
  detail: string | null;
  jobId: string | null;
  jobType: string | null;
  jobState: JobState | null;
  /** The lane whose DLQ holds it (a lane sharing the bulk DLQ reads as bulk). */
  lane: Lane;
  /** The job's own lane, when the job exists: a resend goes to its queue. */
  jobLane: Lane | null;
  verdict: Verdict;
  why: string;
  body: string;
  attributes: Record<string, string>;
  /** What this pass did with it (redrive, discard); absent on a look or a dry run. */
  done?: 'resent' | 'dropped' | 'kept' | 'discarded' | 'moved';
}

/** Judge one dead letter by its job row (see the table at the top of this file). */
export function reconcile(letter: DeadLetter, job: OpsJob | undefined, dbNow: Date, lane: Lane = DEFAULT_LANE): ReconciledLetter {
  const reasonAttr = letter.attributes.Reason;
  const kind: LetterKind =
    reasonAttr && DEAD_JOB_REASONS.has(reasonAttr) ? 'dead-job' : reasonAttr && POISON_REASONS.has(reasonAttr) ? 'poison' : 'sqs-redrive';
  const parsed = parseJobMessage(letter.body);
  const jobId = reconcileJobId(letter);
  const base = {
    messageId: letter.messageId,
    sentAt: letter.sentAt,
    senderId: letter.senderId,
    receiveCount: letter.receiveCount,
    kind,
    reason: reasonAttr ?? 'sqs-redrive',
    detail: letter.attributes.ErrorMessage ?? letter.attributes.Detail ?? null,
    jobId,
    jobType: job?.type ?? letter.attributes.JobType ?? (parsed.ok ? (parsed.message.type ?? null) : null),
    jobState: job?.state ?? null,
    lane,
    jobLane: job?.lane ?? null,
    body: letter.body,
    attributes: letter.attributes,
  };
  // The rules and their reasons live once, beside the worker's (runtime/domain/settlement.ts).
  return {
    ...base,
    ...judgeDeadLetter(
      jobId,
      job,
      dbNow,
      parsed.ok ? 'no job id' : parsed.reason,
      kind === 'dead-job' ? reportedDeadAt(letter.body) : null,
    ),
  };
}

/** When the death a worker's dead-job report tells of happened (its body's deadAt), if it says. */
function reportedDeadAt(body: string): Date | null {
  try {
    const deadAt = (JSON.parse(body) as { deadAt?: unknown }).deadAt;
    const at = typeof deadAt === 'string' ? new Date(deadAt) : null;
    return at && !Number.isNaN(at.getTime()) ? at : null;
  } catch {
    return null;
  }
}

/** The job a dead letter names, if any (its JobId attribute, else its body). */
export function reconcileJobId(m: DeadLetter): string | null {
  const attr = m.attributes.JobId?.toLowerCase();
  if (attr && isJobId(attr)) return attr;
  const parsed = parseJobMessage(m.body);
  return parsed.ok ? parsed.message.jobId : null;
}
