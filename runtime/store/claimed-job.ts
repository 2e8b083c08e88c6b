// What a claim returns, and how a claim's row becomes one (runtime/store/job-store.ts claims).

import { DEFAULT_LANE, type Lane } from '../domain/lanes.ts';
import type { Job, Progress } from '../domain/job.ts';

/** What a claim returns: what the worker needs to run the attempt, nothing more. */
export interface ClaimedJob
  extends Pick<Job, 'id' | 'type' | 'payload' | 'attempt' | 'releases' | 'maxAttempts' | 'checkpoint' | 'progress' | 'createdAt'> {
  /** Due (created or run_after) to claimed, by the database clock. */
  queueLagMs: number;
  /** Taken over from an owner whose lease expired (directly or via the rescuer). */
  reclaimed: boolean;
  /** Its concurrency key: when it ends, the key's next job may be published (worker/key-wake.ts). */
  concurrencyKey: string | null;
  /** It holds a slot of its type's fleet limit: when it ends, the type's next job may be published. */
  typeSlot: boolean;
  /** Its priority lane (the worker's slots prefer urgent, worker/lane-choice.ts). */
  lane: Lane;
}

export function toClaimed(r: Record<string, unknown>): ClaimedJob {
  return {
    id: r.id as string,
    type: r.type as string,
    payload: r.payload,
    attempt: r.attempt as number,
    releases: r.releases as number,
    maxAttempts: r.max_attempts as number,
    checkpoint: r.checkpoint ?? null,
    progress: (r.progress as Progress | null) ?? null,
    createdAt: new Date(r.created_at_ms as number),
    queueLagMs: Math.max(0, r.queue_lag_ms as number),
    reclaimed: r.reclaimed as boolean,
    concurrencyKey: (r.concurrency_key as string | null) ?? null,
    typeSlot: r.type_slot === true,
    lane: (r.lane as Lane | undefined) ?? DEFAULT_LANE,
  };
}
