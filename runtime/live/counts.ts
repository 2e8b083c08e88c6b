// Jobs by state for the live view's snapshots (one a second while a page is open). The active
// states are counted every time, from job_active (pending and running rows only, however many
// jobs have ever run). The finished states need a count of the whole table, which grows with it
// (measured: 14 ms at 24,000 jobs, 68 ms at 100,000, every second), so that count runs again only
// once the time since the last one is FINISHED_COUNT_SPACING times what it took: on a small table
// every snapshot, on a large one every few seconds, and never more than ~2 % of a core.
import type { JobState } from '../domain/job.ts';

/** Time between two counts of the whole table, as a multiple of the last count's duration. */
export const FINISHED_COUNT_SPACING = 50;

export interface StateCountSource {
  countByState(): Promise<Record<JobState, number>>;
  countActive(): Promise<{ pending: number; running: number }>;
}

export function liveStateCounts(
  store: StateCountSource,
  clock: () => number = () => performance.now(),
): () => Promise<Record<JobState, number>> {
  let last: Record<JobState, number> | null = null;
  let nextFullAt = 0;
  return async () => {
    const t0 = clock();
    if (last === null || t0 >= nextFullAt) {
      last = await store.countByState();
      nextFullAt = t0 + (clock() - t0) * FINISHED_COUNT_SPACING;
      return { ...last };
    }
    return { ...last, ...(await store.countActive()) };
  };
}
