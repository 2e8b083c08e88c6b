// What the worker's units share: its options, the jobs it holds, and the few things every unit
// does to a held job (emit an event, abort its handler). The coordinator (worker.ts) makes one
// WorkerContext per worker and hands it to the fetcher, executor, completer and heartbeat.

import { setMaxListeners } from 'node:events';
import { KeyWake } from './key-wake.ts';
import type pg from 'pg';
import type { JobTimings } from '../config/rules.ts';
import type { WorkerEvent, WorkerEventKind } from '../domain/events.ts';
import type { Progress } from '../domain/job.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { JobClient } from '../store/client.ts';
import type { Logger } from '../observability/log.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Metrics } from '../observability/metrics.ts';
import { asLanes, type LaneQueues } from '../queue/lanes.ts';
import type { JobQueue, ReceivedMessage } from '../queue/types.ts';
import { JobStore, type ClaimedJob, type LeaseToken } from '../store/job-store.ts';
import type { Publisher } from '../store/outbox.ts';

export interface WorkerOptions {
  pool: pg.Pool;
  /**
   * Where the concurrency keys' wake-up relay (key-wake.ts, an SQS send inside a transaction)
   * takes its connection: the worker service gives its maintenance loops' pool, so a slow SQS
   * holds none of `pool`'s. Default: `pool`.
   */
  maintenancePool?: pg.Pool;
  /** The job queue: a LaneQueues (one queue per priority lane), or one queue every lane shares. */
  queue: JobQueue;
  /** Where the worker sends what it cannot handle and dead jobs, with the reason: each lane's DLQ (LaneQueues), or one. */
  dlq: JobQueue;
  registry: JobRegistry;
  publisher: Publisher;
  timings: JobTimings;
  workerId?: string;
  log: Logger;
  metrics?: Metrics;
  /** Long-poll wait per receive (SQS allows up to 20 s; default longPollSeconds(drainSeconds)). */
  receiveWaitSeconds?: number;
  /**
   * Jobs claimed ahead of a free handler slot (default: concurrency). The worker holds at most
   * concurrency + prefetch jobs; prefetched jobs are leased and heartbeated like running ones,
   * and released at once on a graceful stop.
   */
  prefetch?: number;
  /** Most jobs claimed in one statement (received in parallel batches of 10); default: the whole capacity, at most 500. */
  maxClaimBatch?: number;
  random?: () => number;
  /**
   * The handler slots bulk jobs keep while urgent work waits (worker/lane-choice.ts); default a
   * fifth of the concurrency, at least 1.
   */
  bulkSlots?: number;
  /** Called when the worker starts and stops holding jobs (ECS task scale-in protection). */
  onBusyChange?: (busy: boolean) => void;
  /** Observer of job events (live view); must not throw. */
  onEvent?: (e: WorkerEvent) => void;
  /** Days a child job (ctx.enqueue) is kept after it finishes when its type does not say (JOBS_KEEP_FINISHED_DAYS; default 30). */
  keepFinishedDays?: number;
}

/** One job this worker holds. */
export interface Held {
  job: ClaimedJob;
  token: LeaseToken;
  message: ReceivedMessage;
  /** Set when SQS refused our handle: someone received the message after us. */
  receiptStale: boolean;
  /** Created when the handler first reads ctx.signal (most short handlers never do). */
  ac: AbortController | null;
  /** Closes the attempt's transaction once it is aborted (executor.ts: JobTransaction.abandon). */
  abandon?: () => void;
  /** Why the handler must stop, once it must (the signal carries it when created later). */
  abortReason: unknown;
  /** Progress reported since the last heartbeat (written with the next one). */
  unsentProgress: Progress | null;
  lastProgress: Progress | null;
  lost: boolean;
  released: boolean;
  /**
   * Its row left `running` through this worker (succeeded, failed, dead, handed on) and the rest
   * is bookkeeping (the message deleted, hidden or dead-lettered): the heartbeat neither renews it
   * nor counts its absence from a renewal as a lost lease.
   */
  settled?: boolean;
  /**
   * When the lease was last renewed (or claimed), on the monotonic clock (performance.now()): a
   * step of the wall clock (NTP, a VM resumed) must neither self-fence a healthy lease nor keep a
   * lease this worker believes alive past its end.
   */
  lastRenewedAt: number;
  claimedAt: number;
  /** Its handler slot went to the next job (when the handler ended, before the batched completion). */
  slotFreed: boolean;
  /**
   * Its handler returned having written nothing, and its batched completion is under way
   * (completer.ts): a lease that runs out meanwhile (a failover) does not make it lost. The
   * completion is fenced by attempt and lands once the database answers, unless another worker
   * has reclaimed the job by then.
   */
  completing?: boolean;
  done?: Promise<void>;
  /** It got a handler slot (executor.ts): false while a job claimed ahead waits in line. */
  started?: boolean;
  /** Its handler's run() is under way (executor.ts): what an abort must end. */
  inHandler?: boolean;
}

const noopMetrics: Metrics = { count: () => undefined, timing: () => undefined };

export class WorkerContext {
  readonly store: JobStore;
  readonly log: Logger;
  readonly metrics: Metrics;
  /** The jobs this worker holds, running, waiting for a slot or waiting for their batched completion. */
  readonly held = new Map<string, Held>();
  /** Handlers still running, counted apart from `held`: a lost attempt may still be unwinding when this worker holds the job's next one. */
  running = 0;

  /** `h` is no longer held: removed unless the job's entry is already a later attempt of it (reclaimed by this worker). */
  forget(h: Held): void {
    if (this.held.get(h.job.id) === h) this.held.delete(h.job.id);
  }
  /**
   * The message of a job this worker is completing (its handler done, the completion waiting for
   * the database: completer.ts), back after its visibility ran out in a failover: the fetcher does
   * not claim it (the lease may have run out in the database too, and a claim would take the job
   * from its own completion and run it again); it becomes the job's message, the newest receipt.
   */
  adoptReturned(jobId: string, m: ReceivedMessage): boolean {
    const h = this.held.get(jobId);
    if (!h?.completing || h.lost || h.released || h.settled) return false;
    h.message = m;
    h.receiptStale = false;
    return true;
  }
  /** Aborted when the worker stops: its sleeps and slot waits end at once. */
  readonly stopAc = new AbortController();
  /**
   * Aborts the worker's receives. On a graceful stop only after an open long poll had its chance
   * to return (Worker.stop): SQS hands messages to a long poll whose client has gone away, and
   * they stay hidden for the visibility timeout.
   */
  readonly receiveAc = new AbortController();
  stopping = false;
  /** Publishes a concurrency key's next job when a job of the key ends or is blocked here. */
  readonly keyWake: KeyWake;
  private children: JobClient | null = null;
  /** The job queue and the DLQ by lane (every receipt the worker holds is marked with its queue). */
  readonly queue: LaneQueues;
  readonly dlq: LaneQueues;

  constructor(
    readonly opts: WorkerOptions,
    readonly workerId: string,
  ) {
    // Every receive in flight listens on these (up to the ask-ahead's 64 capacities / 10 at
    // once, fetcher.ts): without a higher limit Node warns of a listener leak past 10.
    setMaxListeners(1000, this.stopAc.signal, this.receiveAc.signal);
    this.store = new JobStore(opts.pool);
    this.log = opts.log.child({ workerId });
    this.metrics = opts.metrics ?? noopMetrics;
    this.queue = asLanes(opts.queue);
    this.dlq = asLanes(opts.dlq);
    this.keyWake = new KeyWake(opts.maintenancePool ?? opts.pool, this.queue, this.log);
  }

  /** The enqueue rules and publisher for handlers' child jobs (ctx.enqueue), made on first use. */
  get childClient(): JobClient {
    const o = this.opts;
    return (this.children ??= new JobClient({
      pool: o.pool,
      registry: o.registry,
      publisher: o.publisher,
      defaultMaxAttempts: o.timings.maxAttempts,
      ...(o.keepFinishedDays ? { defaultKeepFinishedDays: o.keepFinishedDays } : {}),
    }));
  }

  abortHandler(h: Held, reason: unknown): void {
    if (h.abortReason === undefined) {
      h.abortReason = reason;
      if (h.inHandler && !this.stopping) this.watchAbort(h, reason);
    }
    h.ac?.abort(reason);
    h.abandon?.();
  }

  /**
   * A handler still running ABANDON_GRACE_MS after its attempt was given up (lease lost,
   * cancelled) does not watch ctx.signal: it keeps its handler slot until it returns, and enough
   * of them leave the worker taking no jobs. Say so, once per attempt, with the metric on-call
   * can graph by worker. (A stopping worker says it of all of them at once: worker.ts stop.)
   */
  private watchAbort(h: Held, reason: unknown): void {
    const timer = setTimeout(() => {
      if (!h.inHandler || this.stopping) return;
      this.metrics.count(METRIC.handlersIgnoringAbort, 1);
      this.log.warn(
        {
          jobId: h.job.id,
          type: h.job.type,
          attempt: h.token.attempt,
          abortedBecause: reason instanceof Error ? reason.message : String(reason),
          graceMs: ABANDON_GRACE_MS,
        },
        'handler still running after its abort signal (it does not watch ctx.signal): it keeps its worker slot until it returns; its ctx.db transaction is closed, but what it writes elsewhere can still land',
      );
    }, ABANDON_GRACE_MS);
    timer.unref();
  }

  emit(kind: WorkerEventKind, job?: { id: string; type: string; attempt?: number } | null, detail?: string): void {
    if (!this.opts.onEvent) return;
    try {
      this.opts.onEvent({
        kind,
        workerId: this.workerId,
        at: new Date().toISOString(),
        ...(job ? { jobId: job.id, type: job.type, ...(job.attempt !== undefined ? { attempt: job.attempt } : {}) } : {}),
        ...(detail ? { detail } : {}),
      });
    } catch {
      /* observers never break job processing */
    }
  }
}

export function recordProgress(h: Held, fraction: number, message?: string): void {
  const p: Progress = {
    fraction: Math.min(1, Math.max(0, Number(fraction) || 0)),
    ...(message ? { message: String(message).slice(0, 500) } : {}),
  };
  h.unsentProgress = p;
  h.lastProgress = p;
}

/**
 * How long an aborted handler has to return before a stopping worker leaves it behind: one that
 * ignores its signal (a loop that never looks, a call with no timeout) must not hold the stop,
 * and the task's shutdown, past ECS's stop timeout. Half of the 10 s after the drain deadline
 * (RELEASE_MARGIN_SECONDS); the release before it and the flushes after it share the rest.
 */
export const ABANDON_GRACE_MS = 5_000;

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * An idle worker's long poll: SQS's longest (20 s), but a second under the drain, so that a
 * stopping idle worker's open poll returns by itself within it. A poll aborted at the drain
 * deadline is still answered by SQS, and what it takes stays hidden for the visibility timeout:
 * with the local stack's 10 s drain, the first job enqueued after a `jobs local restart` ran
 * 15 s late. Deployed (a 30 s drain) it is 20 s.
 */
export function longPollSeconds(drainSeconds: number): number {
  return Math.max(1, Math.min(20, Math.floor(drainSeconds) - 1));
}
