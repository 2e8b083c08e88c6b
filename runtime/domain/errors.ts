// Errors with a meaning for the platform. A handler throws NonRetryableError to send its job
// straight to `dead`; the store throws the others so callers can answer people precisely.

/** Thrown by a handler when retrying cannot help (bad data, a closed period): the job goes to dead. */
export class NonRetryableError extends Error {
  override name = 'NonRetryableError';
}

/**
 * A handler sent transaction control (COMMIT, ROLLBACK, BEGIN, SAVEPOINT …) through ctx.db
 * (DESIGN 13). Refused before it reached the database; the attempt goes to dead with this reason.
 */
export class TransactionControlRefusedError extends NonRetryableError {
  override name = 'TransactionControlRefusedError';
  constructor(readonly statement: string) {
    super(
      `ctx.db refuses ${statement}: the job's transaction commits only with its fenced completion (DESIGN 13), ` +
        `so that its effects land exactly once and never after the lease is lost. ` +
        `Write your effects through ctx.db and return (they commit with the job's success, or not at all); ` +
        `use ctx.saveCheckpoint for progress that must survive a retry. Nothing of this attempt was committed.`,
    );
  }
}

/**
 * The job's transaction was no longer the one the worker opened when the job completed: the
 * handler ended it by a way the refusal could not see. The completion was not applied.
 */
export class JobTransactionEndedError extends NonRetryableError {
  override name = 'JobTransactionEndedError';
  constructor(readonly detail: string) {
    super(
      `the handler ended the job's transaction (${detail}): effects written before that may have landed outside the fence (DESIGN 13), ` +
        `so the job is not completed; check them by hand before redriving it. Write effects through ctx.db without transaction control.`,
    );
  }
}

/**
 * A failure whose message says everything a person needs (what, where, and what to do): the
 * `jobs` command prints the message alone, without a stack trace, and exits 1. A migration that
 * cannot apply, a local stack whose API would not start.
 */
export class ReportedError extends Error {
  override name = 'ReportedError';
}

/** Bad input to enqueue: names the field and the rule. The API answers 400 (or 413 for size). */
export class ValidationError extends Error {
  override name = 'ValidationError';
  constructor(
    readonly field: string,
    readonly reason: string,
    readonly status: 400 | 413 | 422 = 400,
  ) {
    super(`${field}: ${reason}`);
  }
}

/** A fenced write matched no row: this worker no longer owns the job (reclaimed, rescued, cancelled). */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
  constructor(
    readonly jobId: string,
    readonly attempt: number,
    readonly during: string,
  ) {
    super(`lease on job ${jobId} attempt ${attempt} lost (${during}): another worker or a cancel took it over`);
  }
}

export function errorToJson(err: unknown, retryable: boolean): { name: string; message: string; retryable: boolean; stack?: string } {
  if (err instanceof Error) {
    return { name: err.name, message: err.message.slice(0, 4000), retryable, ...(err.stack ? { stack: err.stack.slice(0, 8000) } : {}) };
  }
  return { name: 'Error', message: String(err).slice(0, 4000), retryable };
}

/**
 * Jobs without an idempotency key whose insert (or COMMIT) had been sent when the database
 * connection failed: they may exist or not, and enqueuing them again may create them twice. Look
 * them up by id first (the API: GET /v1/jobs/{id}, 404 = not created), or enqueue with an
 * idempotency key, which never creates a job twice. The database is unavailable (the cause):
 * isDatabaseUnavailable holds for it, and the API answers 503 `outcome_unknown` with the ids.
 */
export class EnqueueOutcomeUnknownError extends Error {
  override name = 'EnqueueOutcomeUnknownError';
  constructor(
    readonly jobIds: string[],
    override readonly cause: unknown,
  ) {
    super(
      `the database connection failed after ${jobIds.length === 1 ? 'the job was' : `${jobIds.length} jobs were`} sent to it: ` +
        `${jobIds.length === 1 ? 'it' : 'they'} may have been created (${jobIds.join(', ')}); look ${jobIds.length === 1 ? 'it' : 'them'} up by id ` +
        'before enqueuing again, or enqueue with an idempotency key, which never creates a job twice',
    );
  }
}
