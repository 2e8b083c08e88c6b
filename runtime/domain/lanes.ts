// Priority lanes (issue 14): urgent work overtakes bulk work. Each lane is its own SQS queue with
// its own DLQ (JOBS_URGENT_QUEUE_URL / JOBS_URGENT_DLQ_URL beside the bulk lane's JOBS_QUEUE_URL /
// JOBS_DLQ_URL); a job's lane is stored on its row and never changes, and every message of the
// job goes to its lane's queue. How a worker chooses between them is in runtime/worker/lane-choice.ts.

/** The lanes, highest first. */
export const LANES = ['urgent', 'bulk'] as const;
export type Lane = (typeof LANES)[number];

/** A job's lane when neither its enqueuer nor its type names one. */
export const DEFAULT_LANE: Lane = 'bulk';

export function isLane(x: unknown): x is Lane {
  return typeof x === 'string' && (LANES as readonly string[]).includes(x);
}
