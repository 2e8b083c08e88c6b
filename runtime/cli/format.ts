// What the jobs commands share: the usage error (exit 2, the field and the rule) and how a job
// reads in a terminal.

import type { Job } from '../domain/job.ts';
import { attemptReading, dueReading, errorReading, waitingFor } from '../domain/reading.ts';
import type { JobStore } from '../store/job-store.ts';

/** Bad usage of a jobs command: exit 2 with the message. */
export class UsageError extends Error {}

/** What `jobs show` reads beside the job (a list or a one-line reading does without). */
export interface JobSurroundings {
  /** The jobs of its concurrency key running now. */
  keyHolders?: string[];
  /** Its type's fleet limit and the jobs holding its slots. */
  typeSlots?: { limit: number; holders: string[] } | null;
  /** The jobs its handler enqueued (ctx.enqueue), oldest first, and how many there are in all. */
  children?: { jobs: { id: string; type: string; state: string }[]; total: number };
}

/**
 * What a job waits on, read from the database: the running jobs of its concurrency key and its
 * type's fleet limit with the jobs holding its slots. The holders only while it is blocked (a
 * pending job with blockedSince); the limit always (`jobs show` prints it). `jobs show` prints
 * this in its `waiting` line and `jobs show --watch` in its status line, both with waitingFor.
 */
export async function blockers(
  store: Pick<JobStore, 'typeLimit' | 'runningWithKey' | 'runningWithType'>,
  j: Pick<Job, 'type' | 'state' | 'blockedSince' | 'concurrencyKey'>,
): Promise<Required<Pick<JobSurroundings, 'keyHolders' | 'typeSlots'>>> {
  const waiting = j.blockedSince !== null && j.state === 'pending';
  const [limit, keyHolders] = await Promise.all([
    store.typeLimit(j.type),
    waiting && j.concurrencyKey ? store.runningWithKey(j.concurrencyKey) : [],
  ]);
  return { keyHolders, typeSlots: limit === null ? null : { limit, holders: waiting ? await store.runningWithType(j.type) : [] } };
}

export function formatJob(j: Job, around: JobSurroundings = {}): string {
  const { keyHolders, typeSlots, children } = around;
  const lines = [
    `job       ${j.id}`,
    `type      ${j.type}`,
    `state     ${j.state}`,
    `lane      ${j.lane}`,
    `attempt   ${attemptReading(j)}`,
    `created   ${j.createdAt.toISOString()}`,
  ];
  if (j.idempotencyKey) lines.push(`key       ${j.idempotencyKey}`);
  if (j.concurrencyKey) lines.push(`concurrency ${j.concurrencyKey} (at most ${j.concurrencyLimit} at a time)`);
  if (typeSlots) lines.push(`limit     ${j.type} runs at most ${typeSlots.limit} at a time across the fleet`);
  if (j.blockedSince && j.state === 'pending') lines.push(`waiting   ${waitingFor(j, keyHolders, typeSlots)}`);
  if (j.parentId) lines.push(`parent    ${j.parentId}`);
  if (children && children.total > 0) {
    const states = new Map<string, number>();
    for (const c of children.jobs) states.set(c.state, (states.get(c.state) ?? 0) + 1);
    const shown = children.jobs.length < children.total ? ` (first ${children.jobs.length})` : '';
    lines.push(`children  ${children.total}${shown}: ${[...states].map(([state, n]) => `${n} ${state}`).join(', ')}`);
    for (const c of children.jobs) lines.push(`  child   ${c.id} ${c.type} ${c.state}`);
  }
  if (j.startedAt) lines.push(`started   ${j.startedAt.toISOString()}`);
  if (j.finishedAt) lines.push(`finished  ${j.finishedAt.toISOString()}`);
  const due = dueReading(j);
  if (due) lines.push(`due       ${due}`);
  if (j.leaseOwner) lines.push(`lease     ${j.leaseOwner} until ${j.leaseExpiresAt?.toISOString()}${leaseExpired(j)}`);
  if (j.progress) lines.push(`progress  ${Math.round(j.progress.fraction * 100)}%${j.progress.message ? ` ${j.progress.message}` : ''}`);
  if (j.checkpoint !== null && j.checkpoint !== undefined) {
    const cp = JSON.stringify(j.checkpoint);
    lines.push(`checkpoint ${cp.length > 300 ? `${cp.slice(0, 300)}… (jobs show --json has it whole)` : cp}`);
  }
  if (j.cancelledBy) lines.push(`cancelled by ${j.cancelledBy}`);
  // The error is the job's state only when it ended dead; otherwise it is history (domain/reading.ts).
  const error = errorReading(j.state, j.lastError);
  if (error) lines.push(`${error.kind === 'state' ? 'error  ' : 'earlier'}   ${error.text}`);
  for (const a of j.attemptLog) {
    // An operator's entry says who in its message too ("redriven by alice (cli): …"): once is enough.
    const said = a.by ? `${a.outcome} by ${a.by}` : null;
    const message = said && a.message?.startsWith(said) ? a.message.slice(said.length).replace(/^:\s*/, '').trim() : a.message;
    lines.push(`  attempt ${a.attempt} ${a.outcome} at ${isoTime(a.at)} by ${a.by ?? a.owner ?? '?'}${message ? `: ${message}` : ''}`);
  }
  lines.push(`payload   ${JSON.stringify(j.payload)}`);
  if (j.result !== null) lines.push(`result    ${JSON.stringify(j.result)}`);
  return lines.join('\n');
}

/** A running job's lease in the past (by this machine's clock): its worker stopped heartbeating, and nobody has taken it over yet. */
function leaseExpired(j: Pick<Job, 'state' | 'leaseExpiresAt'>): string {
  const ago = j.leaseExpiresAt ? Math.round((Date.now() - j.leaseExpiresAt.getTime()) / 1000) : 0;
  return j.state === 'running' && ago > 0
    ? ` (expired ${ago} s ago: its worker stopped heartbeating; the rescuer, or the next worker to receive its message, takes it over)`
    : '';
}

/** The attempt log's times come as PostgreSQL writes them (…48.490545+00:00): shown like every other time here (…48.490Z). */
function isoTime(at: string): string {
  const t = Date.parse(at);
  return Number.isNaN(t) ? at : new Date(t).toISOString();
}
