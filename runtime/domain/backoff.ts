// Retry delay after a failed attempt: exponential, capped, with "equal jitter" — half the
// delay is fixed and half random — so retries of many jobs failing together spread out while
// each still waits at least half its exponential step.

export interface BackoffPolicy {
  baseSeconds: number;
  maxSeconds: number;
}

/** Delay before the retry that follows `attemptsUsed` failed attempts (1 = after the first). */
export function backoffSeconds(policy: BackoffPolicy, attemptsUsed: number, random: () => number = Math.random): number {
  const exp = Math.min(policy.maxSeconds, policy.baseSeconds * 2 ** Math.max(0, attemptsUsed - 1));
  return exp / 2 + random() * (exp / 2);
}
