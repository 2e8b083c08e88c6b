// The live view's event bus between processes: workers (and the local stack's fault injector)
// publish what happens to jobs on a PostgreSQL NOTIFY channel; the API LISTENs (feed.ts) and
// streams the events to the page at `/`.
//
// Off unless JOBS_EVENTS=notify (the local stack sets it): production and the benchmarks pay
// nothing. When on, a worker pays one statement per flush interval, not one per event: events
// are buffered and sent every 250 ms as `SELECT pg_notify(channel, chunk) FROM unnest(chunks)`,
// each chunk a JSON array kept under PostgreSQL's 8000-byte payload limit. The statement runs on
// the pool in autocommit, never inside a job's transaction, so a rolled-back handler cannot take
// its events with it and a slow listener cannot hold a lock a job needs. Events are best effort:
// a failed flush keeps them for the next try within a bounded buffer, and past the bound the
// oldest are dropped and counted. Nothing in job processing waits for them.

import type pg from 'pg';
import { ConfigError } from '../config/rules.ts';
import type { Logger } from '../observability/log.ts';
import type { WorkerEvent, WorkerEventKind } from '../domain/events.ts';
import type { Job } from '../domain/job.ts';
import { LIVE_SQL } from './sql.ts';

/** The NOTIFY channel. */
export const LIVE_CHANNEL = 'jobs_events';
/** The variable that turns the event bus on (`notify`) or off (unset, `off`). */
export const EVENTS_ENV = 'JOBS_EVENTS';
/** PostgreSQL refuses NOTIFY payloads of 8000 bytes or more; stay well below. */
export const MAX_PAYLOAD_BYTES = 7500;
/** Longest `detail` carried: an error message is enough to read, a stack is not. */
export const MAX_DETAIL_CHARS = 400;

/** What the fault injector did (local stack only). */
export type FaultKind =
  | 'kill'
  | 'restart'
  | 'pause'
  | 'resume'
  | 'duplicate'
  | 'rollback'
  | 'unpublished'
  | 'publisher-killed'
  | 'db-connections-dropped'
  | 'db-failover'
  | 'db-failover-over'
  | 'queue-purged'
  | 'sqs-error'
  | 'enqueue';

/**
 * One event on the bus. Worker events keep their WorkerEvent fields; `worker-up`,
 * `worker-alive` (every few seconds, with `running` jobs) and `worker-down` tell the page which
 * workers exist even when idle, and a silent one (killed, paused) stands out; `fault` is an
 * injected fault, with `fault` naming it; `cancelled` is a cancel by the API or `jobs cancel`,
 * with `by` naming who asked (the job row's cancelled_by); `scheduled` is a schedule's occurrence
 * enqueued by the task that emits it, with `schedule` naming it.
 */
export interface LiveEvent extends Omit<WorkerEvent, 'kind'> {
  kind: WorkerEventKind | 'worker-up' | 'worker-alive' | 'worker-down' | 'fault' | 'cancelled' | 'scheduled';
  /** Who emitted it: a worker id, `faults` for the fault injector, `api` or `cli` for a cancel. */
  workerId: string;
  fault?: FaultKind;
  /** cancelled: who asked, as recorded on the job. */
  by?: string;
  /** scheduled: the schedule whose occurrence this is. */
  schedule?: string;
  /** worker-alive: jobs the worker holds. */
  running?: number;
  /** worker-up: the worker's process id (the local stack's fault controls act on it). */
  pid?: number;
}

export interface EventSink {
  push(e: LiveEvent | WorkerEvent): void;
  stop(): Promise<void>;
}

export interface NotifySinkOptions {
  channel?: string;
  flushMs?: number;
  /** Events kept while flushes fail; beyond it the oldest are dropped. */
  maxBuffered?: number;
  log?: Logger;
}

/** Split events into JSON arrays of at most `maxBytes` each (an event too large alone loses its detail). */
export function packEvents(events: LiveEvent[], maxBytes = MAX_PAYLOAD_BYTES): string[] {
  const chunks: string[] = [];
  let parts: string[] = [];
  let size = 2; // []
  for (const e of events) {
    let s = JSON.stringify(e);
    if (Buffer.byteLength(s) + 2 > maxBytes) s = JSON.stringify({ ...e, detail: '(detail too large for the event bus)' });
    const bytes = Buffer.byteLength(s);
    if (parts.length > 0 && size + 1 + bytes > maxBytes) {
      chunks.push(`[${parts.join(',')}]`);
      parts = [];
      size = 2;
    }
    size += bytes + (parts.length > 0 ? 1 : 0);
    parts.push(s);
  }
  if (parts.length > 0) chunks.push(`[${parts.join(',')}]`);
  return chunks;
}

/** Normalize what the worker emits: bounded detail, nothing that is not JSON. */
export function toLiveEvent(e: LiveEvent | WorkerEvent): LiveEvent {
  const out: LiveEvent = { ...e };
  if (out.detail !== undefined) out.detail = String(out.detail).slice(0, MAX_DETAIL_CHARS);
  return out;
}

export class NotifyEventSink implements EventSink {
  private buffer: LiveEvent[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private stopped = false;
  /** Events dropped because the buffer was full (the database was unreachable for a while). */
  dropped = 0;
  /** Statements sent (for tests: one per flush, not one per event). */
  flushes = 0;
  private readonly channel: string;
  private readonly maxBuffered: number;

  constructor(
    private readonly pool: Pick<pg.Pool, 'query'>,
    private readonly opts: NotifySinkOptions = {},
  ) {
    this.channel = opts.channel ?? LIVE_CHANNEL;
    this.maxBuffered = opts.maxBuffered ?? 5000;
  }

  push(e: LiveEvent | WorkerEvent): void {
    if (this.stopped) return;
    this.buffer.push(toLiveEvent(e));
    if (this.buffer.length > this.maxBuffered) {
      const over = this.buffer.length - this.maxBuffered;
      this.buffer.splice(0, over);
      this.dropped += over;
    }
    this.timer ??= setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, this.opts.flushMs ?? 250);
  }

  /** Send what is buffered, in one statement. Never throws. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.buffer.length === 0) return;
    const events = this.buffer;
    this.buffer = [];
    this.flushing = (async () => {
      try {
        this.flushes++;
        await this.pool.query(LIVE_SQL.notify, [this.channel, packEvents(events)]);
      } catch (err) {
        // Keep them for the next flush (bounded by push); the page shows them late, not never.
        this.buffer = [...events, ...this.buffer].slice(-this.maxBuffered);
        this.opts.log?.debug({ err, events: events.length }, 'live events not sent; retrying with the next flush');
        if (!this.stopped)
          this.timer ??= setTimeout(() => {
            this.timer = null;
            void this.flush();
          }, 1000);
      }
    })().finally(() => {
      this.flushing = null;
    });
    await this.flushing;
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.flush();
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }
}

/** `JOBS_EVENTS`: `notify` turns the bus on; unset or `off` leaves it off. Anything else is a mistake worth stopping for. */
export function eventsEnabled(env: Record<string, string | undefined>): boolean {
  const v = env[EVENTS_ENV]?.trim().toLowerCase();
  if (!v || v === 'off') return false;
  if (v === 'notify') return true;
  throw new ConfigError('environment', [
    {
      rule: 'events-mode',
      message: `${EVENTS_ENV} = "${env[EVENTS_ENV]}" must be "notify" (publish live events on PostgreSQL NOTIFY) or "off" (the default)`,
    },
  ]);
}

/**
 * A worker's event sink when JOBS_EVENTS=notify, else null. Announces the worker (with its pid,
 * for the local stack's fault controls) and keeps announcing it every `aliveMs`, so the live view
 * lists idle workers and shows a killed or paused one falling silent.
 */
export function workerEventSink(
  env: Record<string, string | undefined>,
  pool: Pick<pg.Pool, 'query'>,
  workerId: string,
  opts: { log?: Logger; running?: () => number; aliveMs?: number } = {},
): EventSink | null {
  if (!eventsEnabled(env)) return null;
  const sink = new NotifyEventSink(pool, opts.log ? { log: opts.log } : {});
  const at = () => new Date().toISOString();
  sink.push({ kind: 'worker-up', workerId, at: at(), pid: process.pid });
  const alive = setInterval(
    () => sink.push({ kind: 'worker-alive', workerId, at: at(), pid: process.pid, running: opts.running?.() ?? 0 }),
    opts.aliveMs ?? 2000,
  );
  alive.unref();
  return {
    push: (e) => sink.push(e),
    async stop() {
      clearInterval(alive);
      sink.push({ kind: 'worker-down', workerId, at: at(), pid: process.pid });
      await sink.stop();
    },
  };
}

/**
 * Tell the live view that a job was cancelled (JobClient's onCancelled, when the event bus is on):
 * one NOTIFY on the caller's pool, after the cancel committed. A cancel is otherwise invisible on
 * the bus: the worker that held the job only sees its lease gone at the next heartbeat, and a
 * pending job has no worker at all. Best effort like every event: a failure is logged, never thrown.
 */
export async function announceCancel(
  pool: Pick<pg.Pool, 'query'>,
  job: Pick<Job, 'id' | 'type' | 'attempt' | 'cancelledBy'>,
  from: 'api' | 'cli',
  log?: Logger,
): Promise<void> {
  const by = job.cancelledBy ?? from;
  const event: LiveEvent = {
    kind: 'cancelled',
    workerId: from,
    jobId: job.id,
    type: job.type,
    ...(job.attempt > 0 ? { attempt: job.attempt } : {}),
    at: new Date().toISOString(),
    by,
    detail: `by ${by}`,
  };
  try {
    await pool.query(LIVE_SQL.notify, [LIVE_CHANNEL, packEvents([toLiveEvent(event)])]);
  } catch (err) {
    log?.debug({ err, jobId: job.id }, 'live event for a cancel not sent');
  }
}

/**
 * Tell the live view that a task enqueued a schedule's occurrence (the scheduler's onFired, when
 * the event bus is on): one NOTIFY after the pass committed. Best effort, never thrown.
 */
export async function announceScheduled(
  pool: Pick<pg.Pool, 'query'>,
  fired: { schedule: string; occurrence: string; job: Pick<Job, 'id' | 'type'>; late: boolean },
  from: string,
  log?: Logger,
): Promise<void> {
  const event: LiveEvent = {
    kind: 'scheduled',
    workerId: from,
    jobId: fired.job.id,
    type: fired.job.type,
    at: new Date().toISOString(),
    schedule: fired.schedule,
    detail: `${fired.schedule} ${fired.occurrence}${fired.late ? ' (late: caught up)' : ''}`,
  };
  try {
    await pool.query(LIVE_SQL.notify, [LIVE_CHANNEL, packEvents([toLiveEvent(event)])]);
  } catch (err) {
    log?.debug({ err, jobId: fired.job.id }, 'live event for a scheduled job not sent');
  }
}
