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

/** "45 s", "12 min 5 s", "1 h 57 min", "3 d 4 h". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3600)} h`;
}

/** How far ahead a job gets its SQS message: SQS's longest delay (queue/types.ts SQS_MAX_DELAY_SECONDS, a layer above; a test keeps them equal). */
export const MESSAGE_AHEAD_SECONDS = 900;

/**
 * When a pending job is due, if later than `nowMs`: "2026-12-02T18:27:25.000Z, in 1 h 57 min", and
 * for a job due beyond 15 minutes that its SQS message is sent only 15 minutes before (by the
 * outbox relay, runtime/store/outbox.ts), so nobody takes it for a lost one. Null when due, or not
 * pending.
 */
export function dueReading(j: Pick<Job, 'state' | 'runAfter'>, nowMs = Date.now()): string | null {
  const inSeconds = (j.runAfter.getTime() - nowMs) / 1000;
  if (j.state !== 'pending' || inSeconds <= 0) return null;
  const message = inSeconds > MESSAGE_AHEAD_SECONDS ? ' (its SQS message is sent 15 min before)' : '';
  return `${j.runAfter.toISOString()}, in ${formatDuration(inSeconds)}${message}`;
}
