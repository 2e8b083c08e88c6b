// What a route threw, as the answer the caller gets: bad input a 4xx naming the field; a database
// that cannot answer a 503 with Retry-After (unavailable, or too busy to answer in time); an
// enqueue the database may or may not have written a 503 with the job ids to look up; anything
// else a 500 with a request id and no details (they go to the log).

import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { EnqueueOutcomeUnknownError, ValidationError } from '../domain/errors.ts';
import { HttpError } from './kernel.ts';

/**
 * PostgreSQL's answers for a database too busy to serve the statement in time, each of which
 * rolls the statement back: a statement timeout (57014, a slow database or a long lock wait),
 * a lock not available (55P03), a deadlock (40P01), a serialization failure (40001).
 */
const BUSY: Record<string, string> = {
  '57014': 'a statement cancelled, by its statement timeout or an operator',
  '55P03': 'a lock was not available',
  '40P01': 'a deadlock',
  '40001': 'a serialization failure',
};

export function toHttpError(err: unknown, requestId: string): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof ValidationError) {
    const code = err.status === 413 ? 'payload_too_large' : 'invalid_field';
    return new HttpError(err.status, code, err.message, err.field);
  }
  // Before the plain outage: a blind retry of these may create the jobs twice (JobClient.insertNow).
  if (err instanceof EnqueueOutcomeUnknownError) {
    const one = err.jobIds.length === 1;
    return new HttpError(
      503,
      'outcome_unknown',
      `the database connection failed after ${one ? 'the job was' : `${err.jobIds.length} jobs were`} sent to it: ${one ? 'it' : 'they'} may have been created. ` +
        `GET /v1/jobs/{id} for ${one ? 'its id' : 'each id'} in jobIds tells (404: not created, enqueue again); ` +
        `an enqueue with an idempotencyKey never creates a job twice and can simply be retried (request id ${requestId})`,
      undefined,
      { 'retry-after': '2', ...(one ? { location: `/v1/jobs/${err.jobIds[0]}` } : {}) },
      { jobIds: err.jobIds },
    );
  }
  if (isDatabaseUnavailable(err)) {
    return new HttpError(503, 'unavailable', `the job database is unavailable; retry shortly (request id ${requestId})`, undefined, {
      'retry-after': '2',
    });
  }
  const busy = BUSY[(err as { code?: unknown } | null)?.code as string];
  if (busy) {
    return new HttpError(
      503,
      'busy',
      `the job database was too busy (${busy}): the statement was rolled back; retry shortly (request id ${requestId})`,
      undefined,
      {
        'retry-after': '2',
      },
    );
  }
  return new HttpError(500, 'internal', `internal error; report request id ${requestId}`);
}
