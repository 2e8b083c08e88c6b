// The reconciler: the job table heals the queue (DESIGN 11). SQS can lose a pending job's
// message — a PurgeQueue, a stray consumer that deletes what it receives, retention running out,
// a redrive to the wrong queue — and nothing else would ever run that job: the rescuer looks
// only at running jobs and the relay only at outbox rows. Every worker task runs one; a pass at
// a time runs across all of them (an advisory lock).
//
// Telling lost messages from a healthy backlog. 100,000 due jobs waiting behind busy workers
// look exactly like 100,000 jobs whose messages are gone, job by job: neither has been claimed.
// What tells them apart is the queue's own count. Every active job should have one message
// (pending: waiting, delayed or hidden until due; running: in flight with its owner), and every
// outbox row becomes one, as does every deferred publish of a job due beyond the publish
// horizon (jobs.outbox_deferred: no message until it is due within 15 minutes). So
//
//     deficit = pending + running − outbox rows − deferred publishes − messages in the queue
//
// is how many jobs have lost their message. A healthy backlog of any size has a deficit of ~0,
// so it causes no re-publishes at all. Only the count is known, not which jobs; the reconciler
// re-publishes `deficit` pending jobs, those due the longest: SQS hands out messages roughly in
// order, so as a backlog drains, the jobs left waiting longest are the ones whose message is gone
// (after a purge, all of them, which is the usual case). A guess that hit a job that still had
// its message makes a duplicate, which is harmless by design (the claim decides; a message for a
// job that needs none is deleted), and is not repeated for a while (republished_at), so a wrong
// guess turns into another pick on a later pass, never into a storm.
//
// Keeping false alarms out: the queue is counted before and after the job table and the larger
// count is used (a job that completes or is enqueued between the readings then counts on the
// message side, the safe one); jobs younger than the relay's reach are never picked; and a
// deficit must be seen on two consecutive passes, only the smaller of the two is acted on, less
// what the outbox shrank by since the last pass or within the minute SQS's count takes to settle
// (an outage's backlog, published in seconds, would otherwise read as lost while the count lags).
// Duplicates (a message published twice, a leftover of a finished job) inflate the message
// count and can hide a loss for as long as they sit in the queue; they are received and deleted
// in turn, and the loss shows then. Running jobs whose message a duplicate delivery deleted count
// as a deficit while they run: at most that many extra publishes per window.
//
// The bound: a message lost at t is re-published by the second pass that sees it, within
// 2 × interval + minimum age; interval is the lease (2 to 60 s). With the chaos run's lease of
// 3 s that is ~9 s; in production (lease 60 s) about 3 minutes. A loss within a minute of a burst
// of publishes waits for that minute to pass when the interval is shorter (the count may lag
// them, below); a local endpoint counts exactly and has no such wait.
//
// Priority lanes: each lane's queue is compared with its own lane's jobs, and a shortfall is
// re-published from that lane (a purged urgent queue is healed with urgent jobs, not with the
// bulk backlog). Lanes that share one queue (no JOBS_URGENT_QUEUE_URL) are counted together.

import type pg from 'pg';
import type { JobTimings } from '../config/rules.ts';
import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Logger } from '../observability/log.ts';
import type { Metrics } from '../observability/metrics.ts';
import { LANES, type Lane } from '../domain/lanes.ts';
import { chunk } from '../queue/types.ts';
import { timed } from '../db/pool.ts';
import { withTransaction } from '../db/transaction.ts';
import { ACTIVE_JOBS_PLAN } from '../store/active-jobs.ts';
import { run } from '../store/job-store.ts';
import type { Publisher, PublishEntry } from '../store/outbox.ts';
import { DEFAULT_RELAY } from '../store/outbox-relay.ts';

/** pg_try_advisory_xact_lock key of the reconciler: "jobsrec\0" as a bigint. */
export const RECONCILER_LOCK_KEY = '7669456938415252224';

export interface ReconcilerTimings {
  /** Between passes. */
  intervalMs: number;
  /** A job younger than this is never picked (its own publish may still be under way). */
  minAgeSeconds: number;
  /** A job re-published in this window is not picked again. */
  republishWindowSeconds: number;
  /** How long SQS's approximate count may lag a send (default COUNT_SETTLE_MS; tests shorten it). */
  countSettleMs?: number;
  /** How long a count of the queue's messages may take before the pass gives up (default COUNT_TIMEOUT_MS); tests shorten it. */
  countTimeoutMs?: number;
}

/** SQS's ApproximateNumberOfMessages settles within about a minute of a change (AWS's documentation). */
export const COUNT_SETTLE_MS = 60_000;
/** The longest a count of a queue's messages (GetQueueAttributes) may take: a healthy one takes milliseconds, the SDK retries within it. */
export const COUNT_TIMEOUT_MS = 10_000;

/**
 * The reconciler's timings from the job timings: a pass per lease (2 to 60 s). `exactCount`: the
 * queue counts its messages exactly and at once (a local endpoint, the emulator), so no lag is
 * allowed for; SQS's own count lags a send by up to COUNT_SETTLE_MS.
 */
export function reconcilerTimings(
  t: Pick<JobTimings, 'leaseSeconds' | 'visibilityTimeoutSeconds'>,
  o: { exactCount?: boolean } = {},
): ReconcilerTimings {
  const interval = Math.min(60, Math.max(2, t.leaseSeconds));
  return {
    intervalMs: interval * 1000,
    minAgeSeconds: Math.max(interval, DEFAULT_RELAY.minAgeSeconds + 1),
    republishWindowSeconds: Math.max(4 * interval, t.visibilityTimeoutSeconds + interval),
    countSettleMs: o.exactCount ? 0 : COUNT_SETTLE_MS,
  };
}

/** Most jobs one pass re-publishes (a purge of more heals over several passes). */
const MAX_PER_PASS = 20_000;
const PICK_BATCH = 1_000;
/** Messages published at a time (SendMessageBatch calls in flight: this / 10). */
const PUBLISH_SLICE = 500;

export interface ReconcilePass {
  /** Another task held the reconciler's lock: nothing read, nothing done. */
  skipped: boolean;
  messages: number;
  pending: number;
  running: number;
  /** Publishes owed: outbox rows and deferred publishes of active jobs. */
  outbox: number;
  /** Jobs without a message on this pass's reading. */
  deficit: number;
  /** Jobs published again (at most the smaller deficit of this pass and the last). */
  republished: number;
}

export interface ReconcilerOptions {
  pool: pg.Pool;
  publisher: Publisher;
  /**
   * Messages the job queue holds (SqsQueue.approximateCount), when every lane shares one queue;
   * else `queues`: each queue with the lanes it carries.
   */
  countMessages?: (signal: AbortSignal) => Promise<number>;
  queues?: { lanes: readonly Lane[]; countMessages: (signal: AbortSignal) => Promise<number> }[];
  log: Logger;
  metrics?: Metrics;
  timings: ReconcilerTimings;
}

export class Reconciler {
  private readonly loop: MaintenanceLoop<ReconcilePass>;
  /** The deficit the last pass saw, per queue: a loss must show on two passes in a row. */
  private readonly lastDeficit: number[];
  /** The publishes owed per queue (outbox and deferred) as recent passes read them (published). */
  private readonly owedHistory: { at: number; owed: number }[][];
  private readonly queues: { lanes: readonly Lane[]; countMessages: (signal: AbortSignal) => Promise<number> }[];

  constructor(private readonly o: ReconcilerOptions) {
    this.loop = new MaintenanceLoop('reconciler', () => this.pass(), o.log, o.timings.intervalMs);
    this.queues = o.queues ?? [{ lanes: LANES, countMessages: o.countMessages! }];
    this.lastDeficit = this.queues.map(() => 0);
    this.owedHistory = this.queues.map(() => []);
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  runOnce(): Promise<ReconcilePass> {
    return this.loop.runOnce();
  }

  private async pass(): Promise<ReconcilePass> {
    const entries: PublishEntry[] = [];
    const reading: ReconcilePass = { skipped: false, messages: 0, pending: 0, running: 0, outbox: 0, deficit: 0, republished: 0 };
    // With the pool's read timeout on every statement (a silent failover must not hold a pass,
    // nor the task's stop behind it, for TCP's 15 minutes).
    const skipped = await withTransaction(this.o.pool, async (client) => {
      // Its reads of the active jobs go through job_active, not the whole table (store/active-jobs.ts).
      await client.query(timed(client, { text: ACTIVE_JOBS_PLAN }));
      // Every queue read first (SQS calls, no row locked yet), then the picks, whose row locks
      // last until the COMMIT right after them: a worker claiming a picked job waits for a few
      // statements, never for an SQS call (which a throttled or silent SQS can stretch to seconds).
      const confirmed: number[] = [];
      for (const [i, q] of this.queues.entries()) {
        const one = await this.countQueue(client, i, q);
        if (one.skipped) return one;
        confirmed.push(one.confirmed);
        for (const k of ['messages', 'pending', 'running', 'outbox', 'deficit'] as const) reading[k] += one[k];
      }
      for (const [i, q] of this.queues.entries()) await this.pick(client, [...q.lanes], confirmed[i]!, entries);
      return null;
    });
    if (skipped) return skipped;
    reading.republished = entries.length;
    // Durable from the COMMIT: what this send does not publish, the outbox relay does.
    for (const slice of chunk(entries, PUBLISH_SLICE)) await this.o.publisher.publish(slice);
    if (entries.length > 0) {
      this.o.metrics?.count(METRIC.jobsRepublished, entries.length);
      this.o.log.warn(
        {
          republished: entries.length,
          deficit: reading.deficit,
          messages: reading.messages,
          pending: reading.pending,
          running: reading.running,
          outbox: reading.outbox,
          jobIds: entries.slice(0, 20).map((e) => e.jobId),
        },
        `reconciler: the queue holds fewer messages than the jobs need; re-published ${entries.length} pending job(s) (a job that still had its message gets a harmless duplicate)`,
      );
    } else if (reading.deficit > 0) {
      this.o.log.info(
        {
          deficit: reading.deficit,
          messages: reading.messages,
          pending: reading.pending,
          running: reading.running,
          outbox: reading.outbox,
        },
        'reconciler: fewer messages than jobs on this reading; re-publishing if the next pass sees it too',
      );
    }
    return reading;
  }

  /** One queue against its lanes' jobs, in the pass's transaction: the deficit, and how much of it two passes in a row confirm. */
  private async countQueue(
    client: pg.PoolClient,
    i: number,
    q: { lanes: readonly Lane[]; countMessages: (signal: AbortSignal) => Promise<number> },
  ): Promise<ReconcilePass & { confirmed: number }> {
    // Each count within its deadline: the second is made holding the fleet's reconciler lock, and
    // an SQS that stops answering (the SDK waits up to 15 minutes a try) held it, and every other
    // task's pass was skipped, while a purge went unhealed (maintenance review).
    const count = () => q.countMessages(AbortSignal.timeout(this.o.timings.countTimeoutMs ?? COUNT_TIMEOUT_MS));
    const before = await count();
    const { rows } = await run<{ locked: boolean; pending: number; running: number; outbox: number; deferred: number }>(
      client,
      'reconcileCount',
      [RECONCILER_LOCK_KEY, [...q.lanes]],
    );
    const c = rows[0]!;
    if (!c.locked) return { skipped: true, messages: before, pending: 0, running: 0, outbox: 0, deficit: 0, republished: 0, confirmed: 0 };
    const messages = Math.max(before, await count());
    const owed = c.outbox + c.deferred;
    const deficit = Math.max(0, c.pending + c.running - owed - messages);
    // SQS's count settles up to a minute after a send: what the relays published since the last
    // pass, or within that minute (the outbox shrank), may not show yet, and reads as lost.
    const shrink = this.published(i, owed);
    const confirmed = Math.max(0, Math.min(deficit, this.lastDeficit[i]!, MAX_PER_PASS) - shrink);
    this.lastDeficit[i] = deficit;
    return { skipped: false, messages, pending: c.pending, running: c.running, outbox: owed, deficit, republished: 0, confirmed };
  }

  /**
   * How far the publishes owed to queue `i` fell since the last pass or within COUNT_SETTLE_MS,
   * whichever reaches further back: sent since, perhaps not counted yet (SQS's count is
   * approximate and lags a send by up to a minute). Before, after an outage the relays emptied
   * the outbox in seconds, the count lagged, two passes saw the same shortfall, and the backlog
   * was re-published: its messages doubled. A purge shrinks no outbox and is healed as before.
   */
  private published(i: number, owed: number): number {
    const now = Date.now();
    const history = this.owedHistory[i]!;
    const last = history.at(-1);
    const recent = history.filter((h) => now - h.at <= (this.o.timings.countSettleMs ?? COUNT_SETTLE_MS) || h === last);
    const shrink = Math.max(0, ...recent.map((h) => h.owed - owed));
    this.owedHistory[i] = [...recent, { at: now, owed }];
    return shrink;
  }

  /** Pick `count` pending jobs of `lanes` to re-publish into `entries` (marked, with their outbox rows, in the pass's transaction). */
  private async pick(client: pg.PoolClient, lanes: Lane[], count: number, entries: PublishEntry[]): Promise<void> {
    const t = this.o.timings;
    for (let left = count; left > 0; ) {
      const want = Math.min(PICK_BATCH, left);
      const { rows: picked } = await run<{ id: string; type: string; run_after: Date; lane: Lane; outbox_id: string }>(
        client,
        'jobRepublishLost',
        [t.minAgeSeconds, t.republishWindowSeconds, want, lanes],
      );
      entries.push(...picked.map((r) => ({ outboxId: r.outbox_id, jobId: r.id, type: r.type, lane: r.lane, runAfter: r.run_after })));
      left -= picked.length;
      if (picked.length < want) break;
    }
  }
}
