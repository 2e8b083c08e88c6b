// The schedules this deployment runs, declared next to the job types they enqueue (README
// "Schedules"). ERP developers add theirs to SCHEDULES. Every API and worker task runs them
// (maintenance/scheduler.ts); the database makes each occurrence one job however many run.
import { inventoryCost } from './inventory-cost.ts';
import { ledgerPost } from './ledger-post.ts';
import { defineSchedule, type ScheduleDefinition } from './schedule.ts';

/** The example month-end close: cost store S01's month at 02:00 on the 1st, Berlin time, for the month that just ended. */
export const monthEndClose = defineSchedule({
  name: 'month-end-close',
  description: "Cost store S01's inventory for the month that just ended",
  cron: '0 2 1 * *',
  timeZone: 'Europe/Berlin',
  job: inventoryCost,
  payload: (o) => ({ store: 'S01', period: o.month(-1) }),
  // A close missed while the platform was down still has to happen, once: the latest month.
  missed: 'latest',
  // The work, named: moved, renamed or triggered again, the schedule closes a month once.
  key: (o) => `inventory-cost:S01:${o.month(-1)}`,
});

/** Every schedule of this deployment. */
export const SCHEDULES: readonly ScheduleDefinition[] = [monthEndClose];

/**
 * The local stack's demo (`npm start`): a small ledger posting every minute, so the live view
 * shows a schedule firing. Only with JOBS_DEMO_SCHEDULES=1, which `jobs local` sets and nothing
 * else does: tests, the chaos run and the benchmarks count their own jobs.
 */
export const everyMinuteDemo = defineSchedule({
  name: 'every-minute-demo',
  description: 'A small ledger posting every minute (local stack only)',
  cron: '* * * * *',
  timeZone: 'Europe/Berlin',
  job: ledgerPost,
  payload: (o) => ({ batch: `tick-${o.label.slice(0, 16)}`, entries: 3 }),
  missed: 'skip',
});

export const DEMO_SCHEDULES_ENV = 'JOBS_DEMO_SCHEDULES';

/** The schedules a process runs: SCHEDULES, plus the demo when JOBS_DEMO_SCHEDULES=1. */
export function defaultSchedules(env: Record<string, string | undefined> = process.env): ScheduleDefinition[] {
  return env[DEMO_SCHEDULES_ENV] === '1' ? [...SCHEDULES, everyMinuteDemo] : [...SCHEDULES];
}
