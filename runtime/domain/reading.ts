// How a job's attempts and its last error read to a person, in one wording for every place that
// shows them: `jobs show` and `jobs show --watch` (runtime/cli, runtime/oncall) and the live view
// (runtime/http/live-routes.ts computes these strings into its snapshot; the page only prints them).
//
// The attempt number alone misleads: it counts every claim, and a graceful release or a redrive
// hands claims back (releases), so a redriven job that then succeeded is on attempt 6 with 1 of its
// 3 attempts used. "6 / 3" reads as a job over its cap; "6 (1 of 3 used, 5 released)" does not.
// Likewise the last error is the job's state only when the job ended dead; on any other job it
// is history (a retry under way, a redriven job that then succeeded) and reads as such.

import type { Job, JobError, JobState } from './job.ts';

type Attempts = Pick<Job, 'attempt' | 'releases' | 'maxAttempts'>;

/** "6 (1 of 3 used, 5 released)", or "2 (2 of 3 used)" when nothing was handed back. */
export function attemptReading(j: Attempts): string {
  return `${j.attempt} (${j.attempt - j.releases} of ${j.maxAttempts} used${j.releases ? `, ${j.releases} released` : ''})`;
}

/**
 * A warning when the job is at its attempt cap, else null: a running job on its final attempt
 * dead-letters on its next failure (a handler error, or a lease lost to a kill or a pause), and a
 * pending one with a single attempt left will run that last attempt next.
 */
export function capWarning(j: Attempts & Pick<Job, 'state'>): string | null {
  const used = j.attempt - j.releases;
  if (j.state === 'running' && used >= j.maxAttempts) return `attempt ${used} of ${j.maxAttempts} — next failure dead-letters`;
  if (j.state === 'pending' && used > 0 && used === j.maxAttempts - 1)
    return `${used} of ${j.maxAttempts} attempts used — the next one is the last`;
  return null;
}

/**
 * The last error as a person should read it: `state` when the job ended dead (it is why), else
 * `history` ("an earlier attempt failed: …") — the job is retrying, or succeeded or was
 * cancelled after a failed attempt. Null when there is none.
 */
export function errorReading(
  state: JobState,
  e: Pick<JobError, 'name' | 'message'> | null,
): { kind: 'state' | 'history'; text: string } | null {
  if (!e) return null;
  const what = `${e.name}: ${e.message}`;
  return state === 'dead' ? { kind: 'state', text: what } : { kind: 'history', text: `an earlier attempt failed: ${what}` };
}

/** What a blocked job waits for: its key when the key is full (or nothing else is known), else its type's slots. */
export function waitingFor(
  j: Pick<Job, 'type' | 'concurrencyKey' | 'concurrencyLimit' | 'blockedSince'>,
  keyHolders?: string[],
  typeSlots?: { limit: number; holders: string[] } | null,
): string {
  const since = j.blockedSince ? ` since ${j.blockedSince.toISOString()}` : '';
  const held = (ids: string[] | undefined) => (ids?.length ? `, held by job ${ids.join(', ')}` : '');
  const keyFull = j.concurrencyKey !== null && (keyHolders === undefined || keyHolders.length >= (j.concurrencyLimit ?? 1));
  if (j.concurrencyKey && (keyFull || !typeSlots))
    return `for key ${j.concurrencyKey}${since}${held(keyHolders)} (starts when the key has room)`;
  return `for a slot of ${j.type}${since}${held(typeSlots?.holders)}${typeSlots ? ` (at most ${typeSlots.limit} running at once)` : ''}`;
}
