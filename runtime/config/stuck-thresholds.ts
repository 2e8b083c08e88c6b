// When a job counts as stuck (runtime/oncall/stuck.ts): the thresholds' shape, defaults and the
// variables that set them. A module of its own so the CDK app (lib/config.ts, the containers'
// environment) shares them with the runtime without loading the runtime's clients.

export interface StuckThresholds {
  /** A running attempt longer than this is stuck, for a job type without expectedMaxSeconds. */
  runningSeconds: number;
  /** A job due but not picked up for longer than this (pending, or running on an expired lease) is stuck. */
  pendingSeconds: number;
}

export const DEFAULT_STUCK_THRESHOLDS: StuckThresholds = { runningSeconds: 3600, pendingSeconds: 900 };
/** The longest threshold JOBS_STUCK_* accepts (a week). */
export const MAX_STUCK_SECONDS = 7 * 86_400;
/** How often a worker counts stuck jobs and publishes the metric. */
export const DEFAULT_STUCK_CHECK_SECONDS = 60;

export const STUCK_ENV = {
  runningSeconds: 'JOBS_STUCK_RUNNING_SECONDS',
  pendingSeconds: 'JOBS_STUCK_PENDING_SECONDS',
  checkSeconds: 'JOBS_STUCK_CHECK_SECONDS',
} as const;
