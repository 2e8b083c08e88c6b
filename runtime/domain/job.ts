// The job as the runtime sees it, mapped once from its row.

import type { Lane } from './lanes.ts';

export type JobState = 'pending' | 'running' | 'succeeded' | 'dead' | 'cancelled';
export const JOB_STATES: readonly JobState[] = ['pending', 'running', 'succeeded', 'dead', 'cancelled'];
export const TERMINAL_STATES: readonly JobState[] = ['succeeded', 'dead', 'cancelled'];
export const isTerminal = (s: JobState): boolean => TERMINAL_STATES.includes(s);

export interface JobError {
  name: string;
  message: string;
  retryable: boolean;
  stack?: string;
}

export interface AttemptOutcome {
  attempt: number;
  owner: string | null;
  at: string;
  /** redriven, discarded: an operator's action on a dead job (runtime/oncall), recorded in the log with who asked. */
  /** rescued: the rescuer re-queued it, its lease expired; reclaimed: a worker's claim took it over, its lease expired. */
  outcome: 'retry' | 'dead' | 'released' | 'rescued' | 'reclaimed' | 'redriven' | 'discarded';
  name?: string;
  message?: string;
  /** Who asked, for an operator's action. */
  by?: string;
  /** A release of an attempt whose own connection was lost (counted toward INTERRUPTED_RELEASE_LIMIT). */
  interrupted?: true;
}

export interface Progress {
  /** 0..1 */
  fraction: number;
  message?: string;
}

export interface Job<P = unknown> {
  id: string;
  type: string;
  payload: P;
  state: JobState;
  idempotencyKey: string | null;
  /** The fencing token's second half: incremented by every claim. */
  attempt: number;
  /** Claims handed back by a graceful stop; they do not count against maxAttempts. */
  releases: number;
  maxAttempts: number;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  runAfter: Date;
  progress: Progress | null;
  checkpoint: unknown;
  lastError: JobError | null;
  attemptLog: AttemptOutcome[];
  result: unknown;
  cancelledBy: string | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  /** Jobs with one key run at most `concurrencyLimit` at a time, in enqueue order (migration 0006). */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  /** Since when the job waits for room under its key, with no message (published when there is room). */
  blockedSince: Date | null;
  /** It holds one of its type's running slots (a type with a fleet limit, migration 0007). */
  typeSlot: boolean;
  /** The job whose handler enqueued it (ctx.enqueue), or null. */
  parentId: string | null;
  /** Its priority lane: the queue its messages go to (migration 0008). */
  lane: Lane;
}

/** The database's clock at the moment a statement ran, when the statement returns it. */
export interface WithDbNow {
  dbNow: Date;
}

export type JobRow = Record<string, unknown>;

export function rowToJob<P = unknown>(r: JobRow): Job<P> {
  return {
    id: r.id as string,
    type: r.type as string,
    payload: r.payload as P,
    state: r.state as JobState,
    idempotencyKey: (r.idempotency_key as string | null) ?? null,
    attempt: r.attempt as number,
    releases: r.releases as number,
    maxAttempts: r.max_attempts as number,
    leaseOwner: (r.lease_owner as string | null) ?? null,
    leaseExpiresAt: (r.lease_expires_at as Date | null) ?? null,
    runAfter: r.run_after as Date,
    progress: (r.progress as Progress | null) ?? null,
    checkpoint: r.checkpoint ?? null,
    lastError: (r.last_error as JobError | null) ?? null,
    attemptLog: (r.attempt_log as AttemptOutcome[] | undefined) ?? [],
    result: r.result ?? null,
    cancelledBy: (r.cancelled_by as string | null) ?? null,
    createdAt: r.created_at as Date,
    startedAt: (r.started_at as Date | null) ?? null,
    finishedAt: (r.finished_at as Date | null) ?? null,
    concurrencyKey: (r.concurrency_key as string | null) ?? null,
    concurrencyLimit: (r.concurrency_limit as number | null) ?? null,
    blockedSince: (r.blocked_since as Date | null) ?? null,
    typeSlot: r.type_slot === true,
    parentId: (r.parent_id as string | null) ?? null,
    lane: (r.lane as Lane | undefined) ?? 'bulk',
  };
}

/** Attempts that count against maxAttempts. */
export const attemptsUsed = (j: Pick<Job, 'attempt' | 'releases'>): number => j.attempt - j.releases;
