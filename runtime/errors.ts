// Errors with a meaning for the platform. A handler throws NonRetryableError to send its job
// straight to `dead`; the store throws the others so callers can answer people precisely.

/** Thrown by a handler when retrying cannot help (bad data, a closed period): the job goes to dead. */
export class NonRetryableError extends Error {
  override name = 'NonRetryableError';
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
