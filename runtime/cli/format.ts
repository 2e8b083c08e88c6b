// What the jobs commands share: the usage error (exit 2, the field and the rule) and how a job
// reads in a terminal.

import type { Job } from '../domain/job.ts';
import { attemptReading, errorReading, waitingFor } from '../domain/reading.ts';

/** Bad usage of a jobs command: exit 2 with the message. */
export class UsageError extends Error {}

/**
 * `keyHolders`: the jobs of its concurrency key running now; `typeSlots`: its type's fleet limit
 * and the jobs holding its slots (jobs show asks; a list does not).
 */
export function formatJob(j: Job, keyHolders?: string[], typeSlots?: { limit: number; holders: string[] } | null): string {
  const lines = [
    `job       ${j.id}`,
    `type      ${j.type}`,
    `state     ${j.state}`,
    `attempt   ${attemptReading(j)}`,
    `created   ${j.createdAt.toISOString()}`,
  ];
  if (j.idempotencyKey) lines.push(`key       ${j.idempotencyKey}`);
  if (j.concurrencyKey) lines.push(`concurrency ${j.concurrencyKey} (at most ${j.concurrencyLimit} at a time)`);
  if (typeSlots) lines.push(`limit     ${j.type} runs at most ${typeSlots.limit} at a time across the fleet`);
  if (j.blockedSince && j.state === 'pending') lines.push(`waiting   ${waitingFor(j, keyHolders, typeSlots)}`);
  if (j.startedAt) lines.push(`started   ${j.startedAt.toISOString()}`);
  if (j.finishedAt) lines.push(`finished  ${j.finishedAt.toISOString()}`);
  if (j.state === 'pending' && j.runAfter > new Date()) lines.push(`due       ${j.runAfter.toISOString()}`);
  if (j.leaseOwner) lines.push(`lease     ${j.leaseOwner} until ${j.leaseExpiresAt?.toISOString()}`);
  if (j.progress) lines.push(`progress  ${Math.round(j.progress.fraction * 100)}%${j.progress.message ? ` ${j.progress.message}` : ''}`);
  if (j.cancelledBy) lines.push(`cancelled by ${j.cancelledBy}`);
  // The error is the job's state only when it ended dead; otherwise it is history (domain/reading.ts).
  const error = errorReading(j.state, j.lastError);
  if (error) lines.push(`${error.kind === 'state' ? 'error  ' : 'earlier'}   ${error.text}`);
  for (const a of j.attemptLog)
    lines.push(`  attempt ${a.attempt} ${a.outcome} at ${a.at} by ${a.by ?? a.owner ?? '?'}${a.message ? `: ${a.message}` : ''}`);
  lines.push(`payload   ${JSON.stringify(j.payload)}`);
  if (j.result !== null) lines.push(`result    ${JSON.stringify(j.result)}`);
  return lines.join('\n');
}
