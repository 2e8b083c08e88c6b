// Recurring jobs, declared in code next to the handlers (README "Schedules"): a cron expression
// read in a time zone, the job it enqueues, a payload built from the occurrence, and what to do
// with occurrences missed while no task of the platform was running. The cron arithmetic is
// croner's (daylight saving included); this file adds what the platform needs around it: the
// occurrence as an ERP reads it (its local date, its month as a period), the key that names it,
// and which of the occurrences due since the last one settled are to be enqueued (planOccurrences).
// Who enqueues them, exactly once however many tasks race, is the store's (store/schedules.ts).

import { Cron } from 'croner';
import type * as z from 'zod';
import { ConfigError, type RuleViolation } from '../config/rules.ts';
import type { JobRegistry } from './registry.ts';
import { defaultConcurrencyKey, type JobDefinition } from './types.ts';

/**
 * What to do with occurrences whose time passed while no task was running (or the database was
 * unreachable): `latest` enqueues only the most recent one, `all` each of them in order (at most
 * MAX_CATCH_UP, the most recent), `skip` none of them (the next occurrence runs as usual).
 */
export type MissedPolicy = 'latest' | 'all' | 'skip';
export const MISSED_POLICIES: readonly MissedPolicy[] = ['latest', 'all', 'skip'];

/** At most this many missed occurrences are caught up under `all`: the most recent ones; older ones are not run (logged). */
export const MAX_CATCH_UP = 100;

/**
 * An occurrence is late (missed) when it is first handled more than this after its time. Under
 * `skip` a late occurrence is not run; an occurrence handled within it is on time (the
 * schedulers look every few seconds).
 */
export const LATE_AFTER_MS = 60_000;

/**
 * Under `skip`, an occurrence a task tried in its time but could not enqueue (a failover: the
 * database refused or dropped connections) is not missed: it still runs if enqueued within this
 * long of its time. A failover of a minute, plus the connect timeout and a pass interval, would
 * otherwise make it late by the time the database answers again.
 */
export const SKIP_GRACE_AFTER_FAILED_TRY_MS = 5 * 60_000;

/** One occurrence of a schedule, as its payload function sees it. */
export interface Occurrence {
  /** The instant. */
  at: Date;
  timeZone: string;
  /** The wall-clock time in the schedule's zone with its offset, e.g. `2026-12-01T02:00:00+01:00` (unique: a repeated hour differs by offset). */
  label: string;
  /** The local calendar date and time in the schedule's zone. */
  local: { year: number; month: number; day: number; hour: number; minute: number; second: number };
  /** True when an operator triggered it (`jobs schedules trigger`), not the cron expression. */
  manual: boolean;
  /** The local month as a period, `2026-11`; `month(-1)` the month before (a close that runs on the 1st). */
  month(offset?: number): string;
  /** The local date, `2026-12-01`; `day(-1)` the day before (a nightly run after midnight). */
  day(offset?: number): string;
}

/** The payload a job definition accepts (the z.input of its schema), as store/create-client.ts types it. */
type PayloadOf<D> = D extends { schema: infer S extends z.ZodType } ? z.input<S> : unknown;

export interface ScheduleDefinition<D extends JobDefinition<any, any, any> = JobDefinition<any, any, any>> {
  /** Lower-case words joined by hyphens, e.g. `month-end-close`; part of each job's idempotency key. */
  name: string;
  description?: string;
  /** A cron expression (5 fields, or 6 with seconds; croner's syntax: `L`, `#`, `W`, names). */
  cron: string;
  /** An IANA time zone, e.g. `Europe/Berlin`: the cron expression is read in its local time, daylight saving included. */
  timeZone: string;
  /** The job definition it enqueues (its type must be registered); the payload is typed by its schema. */
  job: D;
  payload: (occurrence: Occurrence) => PayloadOf<D>;
  missed: MissedPolicy;
  /** The attempt cap of its jobs; default the job type's, else the platform's. */
  maxAttempts?: number;
  /**
   * The work an occurrence does, named: `(o) => 'close-S01-' + o.month(-1)`. An occurrence whose
   * key another occurrence already enqueued (of any schedule, at any time, or a trigger) enqueues
   * nothing, and the job that did the work is named: a schedule moved to another day or hour on a
   * deploy day, renamed, removed and declared again, or triggered twice does the month once
   * (jobs.schedule_work, migration 0022; kept 400 days). Without it each occurrence is its own
   * work. A trigger with --again runs the work anyway.
   */
  key?: (occurrence: Occurrence) => string;
}

/** The longest work key (a schedule's `key`). */
export const MAX_WORK_KEY_LENGTH = 200;

const NAME = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/;

/**
 * Declare a schedule. Its name, cron expression, time zone and policy are checked here, so a
 * broken declaration stops the process that loads it, naming the schedule and the rule;
 * checkSchedules adds what needs the registry (the type is known, the payload is valid).
 */
export function defineSchedule<D extends JobDefinition<any, any, any>>(def: ScheduleDefinition<D>): ScheduleDefinition<D> {
  const problems = scheduleProblems(def);
  if (problems.length > 0) throw new ConfigError(`schedule "${def.name}"`, problems);
  return def;
}

function scheduleProblems(def: ScheduleDefinition): RuleViolation[] {
  const out: RuleViolation[] = [];
  const at = (rule: string, message: string) => out.push({ rule, message: `schedule "${def.name}": ${message}` });
  if (typeof def.name !== 'string' || !NAME.test(def.name) || def.name.length > 100)
    at('schedule-name', 'name must be lower-case words (a-z, 0-9) joined by hyphens, at most 100 characters, e.g. month-end-close');
  if (!MISSED_POLICIES.includes(def.missed)) at('schedule-missed', `missed = "${String(def.missed)}" must be latest, all or skip`);
  if (typeof def.timeZone !== 'string' || !isTimeZone(def.timeZone)) {
    at('schedule-time-zone', `timeZone = "${String(def.timeZone)}" is not an IANA time zone (e.g. Europe/Berlin, UTC)`);
    return out;
  }
  try {
    if (!cronOf(def).nextRun(new Date())) at('schedule-cron', `cron = "${def.cron}" has no future occurrence`);
  } catch (err) {
    at('schedule-cron', `cron = "${String(def.cron)}" is not a cron expression: ${(err as Error).message}`);
  }
  return out;
}

/**
 * What a process needs before it runs `schedules` against `registry`: unique names, a registered
 * job type for each, and a payload its type accepts for the next occurrence. Throws ConfigError
 * listing every problem (the services refuse to start with it).
 */
export function checkSchedules(schedules: readonly ScheduleDefinition[], registry: JobRegistry, now = new Date()): void {
  const out: RuleViolation[] = [];
  const seen = new Set<string>();
  for (const s of schedules) {
    if (seen.has(s.name)) out.push({ rule: 'schedule-unique', message: `schedule "${s.name}" is declared twice` });
    seen.add(s.name);
    const problems = scheduleProblems(s);
    out.push(...problems);
    const def = registry.get(s.job.type);
    if (!def) {
      out.push({
        rule: 'schedule-type',
        message: `schedule "${s.name}": job type "${s.job.type}" is not registered (known: ${registry.types().join(', ')})`,
      });
      continue;
    }
    if (problems.length > 0) continue;
    const next = nextOccurrence(s, now);
    if (!next) continue;
    try {
      // Parsed as an enqueue would: its schema, then the key its type's template makes of it.
      const parsed = def.parse(s.payload(occurrence(s, next)));
      defaultConcurrencyKey(def, parsed);
    } catch (err) {
      out.push({
        rule: 'schedule-payload',
        message: `schedule "${s.name}": its payload for ${occurrence(s, next).label} is refused: ${(err as Error).message}`,
      });
    }
    if (s.key) {
      try {
        workKeyOf(s, occurrence(s, next));
      } catch (err) {
        out.push({ rule: 'schedule-key', message: `schedule "${s.name}": ${(err as Error).message}` });
      }
    }
  }
  // Two schedules naming one work with different payloads: the first to fire would do it and the
  // other would be skipped every time (a schedule copied for another store, its key left as it was).
  const byKey = new Map<string, { name: string; payload: string }>();
  for (const s of schedules) {
    if (!s.key || scheduleProblems(s).length > 0) continue;
    try {
      const next = nextOccurrence(s, now);
      if (!next) continue;
      const o = occurrence(s, next);
      const key = workKeyOf(s, o);
      const payload = JSON.stringify(s.payload(o));
      const other = byKey.get(key);
      if (other && other.payload !== payload)
        out.push({
          rule: 'schedule-key',
          message: `schedules "${other.name}" and "${s.name}" name the same work (${key}) with different payloads: whichever fires first does it, and the other is skipped; give each its own key`,
        });
      else byKey.set(key, { name: s.name, payload });
    } catch {
      // Reported above (schedule-payload, schedule-key).
    }
  }
  if (out.length > 0) throw new ConfigError('schedules', out);
}

function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

const crons = new WeakMap<ScheduleDefinition, Cron>();
function cronOf(def: ScheduleDefinition): Cron {
  let c = crons.get(def);
  if (!c) {
    // No function: croner only computes times here, it never starts a timer.
    c = new Cron(def.cron, { timezone: def.timeZone, mode: '5-or-6-parts' });
    crons.set(def, c);
  }
  return c;
}

/** The first occurrence strictly after `after`, or null when there is none. */
export function nextOccurrence(def: ScheduleDefinition, after: Date): Date | null {
  return cronOf(def).nextRun(after);
}

/** The next `n` occurrences strictly after `after`. */
export function nextOccurrences(def: ScheduleDefinition, after: Date, n: number): Date[] {
  return cronOf(def).nextRuns(n, after);
}

/** What a pass does for one schedule: the occurrences to enqueue, and the instant through which every occurrence is settled. */
export interface OccurrencePlan {
  /** Oldest first; each with whether it is late (handled more than LATE_AFTER_MS after its time). */
  fire: { at: Date; late: boolean }[];
  /** Occurrences due but not enqueued by the policy (missed ones under latest or skip, the oldest beyond MAX_CATCH_UP under all). */
  notRun: number;
  /** True when more occurrences were due than MAX_CATCH_UP + 1 (not all counted). */
  moreNotRun: boolean;
  /** The newest due occurrence: everything up to it is settled. Null when nothing is due. */
  through: Date | null;
}

/**
 * Which occurrences in (settledThrough, now] to enqueue under the schedule's missed policy. The
 * newest due occurrence is the current one; any before it was missed (nobody enqueued it in its
 * time). `latest` enqueues the newest; `all` every one, oldest first, at most MAX_CATCH_UP; `skip`
 * the newest only if it is on time, or if `triedInTime` says a pass tried it in its time
 * (SKIP_GRACE_AFTER_FAILED_TRY_MS).
 */
export function planOccurrences(
  def: ScheduleDefinition,
  settledThrough: Date,
  now: Date,
  maxCatchUp = MAX_CATCH_UP,
  triedInTime?: Date,
): OccurrencePlan {
  // previousRuns walks back from `now` (exclusive, hence +1 ms): bounded however long the platform was down.
  const recent = cronOf(def)
    .previousRuns(maxCatchUp + 1, new Date(now.getTime() + 1))
    .filter((d) => d > settledThrough && d <= now)
    .reverse();
  const through = recent.at(-1) ?? null;
  if (!through) return { fire: [], notRun: 0, moreNotRun: false, through: null };
  const late = (d: Date) => now.getTime() - d.getTime() > LATE_AFTER_MS;
  const tried = triedInTime?.getTime() === through.getTime() && now.getTime() - through.getTime() <= SKIP_GRACE_AFTER_FAILED_TRY_MS;
  const chosen = def.missed === 'all' ? recent.slice(-maxCatchUp) : def.missed === 'latest' || !late(through) || tried ? [through] : [];
  return {
    fire: chosen.map((at) => ({ at, late: late(at) })),
    notRun: recent.length - chosen.length,
    moreNotRun: recent.length > maxCatchUp,
    through,
  };
}

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** One formatter per time zone: making one costs about seven uses (48 µs against 6; a history of 100,000 occurrences read at once took seconds). */
const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

/** The occurrence at instant `at` of a schedule, as its payload function and its key see it. */
export function occurrence(def: Pick<ScheduleDefinition, 'timeZone'>, at: Date, manual = false): Occurrence {
  const parts = Object.fromEntries(
    formatter(def.timeZone)
      .formatToParts(at)
      .filter((p) => p.type !== 'literal')
      .map((p) => [p.type, Number(p.value)]),
  ) as Record<'year' | 'month' | 'day' | 'hour' | 'minute' | 'second', number>;
  const local = { year: parts.year, month: parts.month, day: parts.day, hour: parts.hour, minute: parts.minute, second: parts.second };
  const wall = Date.UTC(local.year, local.month - 1, local.day, local.hour, local.minute, local.second);
  const offsetMin = Math.round((wall - Math.floor(at.getTime() / 1000) * 1000) / 60_000);
  const sign = offsetMin < 0 ? '-' : '+';
  const offset = `${sign}${pad(Math.floor(Math.abs(offsetMin) / 60))}:${pad(Math.abs(offsetMin) % 60)}`;
  const date = (y: number, m: number, d: number) => {
    const u = new Date(Date.UTC(y, m - 1, d));
    return `${pad(u.getUTCFullYear(), 4)}-${pad(u.getUTCMonth() + 1)}-${pad(u.getUTCDate())}`;
  };
  return {
    at,
    timeZone: def.timeZone,
    label: `${date(local.year, local.month, local.day)}T${pad(local.hour)}:${pad(local.minute)}:${pad(local.second)}${offset}`,
    local,
    manual,
    month: (n = 0) => date(local.year, local.month + n, 1).slice(0, 7),
    day: (n = 0) => date(local.year, local.month, local.day + n),
  };
}

/** The idempotency key of an occurrence's job: `schedule:month-end-close:2026-12-01T02:00:00+01:00`. */
export function occurrenceKey(name: string, o: Occurrence): string {
  return o.manual ? `schedule:${name}:manual:${o.at.toISOString()}` : `schedule:${name}:${o.label}`;
}

/** The work key of occurrence `o` of `def` (its `key`), checked: a non-empty string of at most MAX_WORK_KEY_LENGTH characters. */
export function workKeyOf(def: Pick<ScheduleDefinition, 'key'>, o: Occurrence): string {
  const k = def.key?.(o);
  if (typeof k !== 'string' || k.trim() === '' || k.length > MAX_WORK_KEY_LENGTH)
    throw new Error(
      `its key for ${o.label} must be a non-empty string of at most ${MAX_WORK_KEY_LENGTH} characters (got ${JSON.stringify(k)?.slice(0, 80)})`,
    );
  return k;
}
