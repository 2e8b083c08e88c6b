// The handler contract: what an ERP developer writes to define a job type (DESIGN "Handler
// contract"). A handler gets its parsed payload and a context; it returns a result (stored on
// the job) or throws (the attempt fails; NonRetryableError sends the job straight to dead).

import type { Logger } from '../observability/log.ts';

/** The job's fenced transaction: opened at the first query, committed with the job's completion. */
export interface JobDb {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]): Promise<{ rows: R[]; rowCount: number | null }>;
}

export interface JobContext<C = unknown> {
  job: {
    id: string;
    type: string;
    /** This claim's attempt number (the fencing token); 1 on the first run. */
    attempt: number;
    maxAttempts: number;
    createdAt: Date;
  };
  /** The checkpoint the last attempt saved, or null on a fresh start. */
  checkpoint: C | null;
  /** Aborted when the lease is lost (reclaimed, cancelled) or the worker stops: stop promptly. */
  signal: AbortSignal;
  /** Report progress (0..1 and a message); written with the next heartbeat, not one write per call. */
  progress(fraction: number, message?: string): void;
  /**
   * Save a checkpoint now (fenced by the lease) so a reclaimed attempt resumes here.
   * Throws LeaseLostError when this worker no longer owns the job.
   */
  saveCheckpoint(checkpoint: C, progress?: { fraction: number; message?: string }): Promise<void>;
  /**
   * The job's database transaction. Writes here commit together with the job's completion, or
   * not at all: a worker that lost its lease has them rolled back. Opened on first use, so do
   * long computation before the first query.
   */
  db: JobDb;
  log: Logger;
}

export interface JobDefinition<P = unknown, R = unknown, C = unknown> {
  /** Lower-case dotted name, e.g. `ledger.post`. */
  type: string;
  description: string;
  /** Validate and normalize a payload; throw ValidationError naming the field and the rule. */
  parse(payload: unknown): P;
  run(payload: P, ctx: JobContext<C>): Promise<R>;
  /** Attempt cap for this type when the enqueuer does not set one. */
  maxAttempts?: number;
  /** Longest a healthy run takes; longer is reported as stuck. */
  expectedMaxSeconds?: number;
}

export function defineJob<P, R, C = unknown>(def: JobDefinition<P, R, C>): JobDefinition<P, R, C> {
  return def;
}
