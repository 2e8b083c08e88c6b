// Publishing job messages, after COMMIT only, and never losing one (DESIGN 7).
//
// Publisher: the enqueuing process calls publish() right after its transaction commits. It
// sends the messages and then deletes their outbox rows, in batches (one DELETE for many
// publishes), so the happy path costs a fraction of a commit per job. If the send fails, or the
// process dies first, the rows stay and the relay publishes them.
//
// OutboxRelay: every process with a database connection runs one. It publishes outbox rows
// older than a few seconds — left by a process that died between COMMIT and publish, or by a
// failed send — under a lease (no transaction held across the send), and deletes them once sent.
// Publishing twice is harmless: the worker's claim decides, and a message for a job that needs
// none is deleted.
//
// Both send each message to its job's lane (runtime/queue/lanes.ts): the entry carries it, the
// relay reads it from the job row.
//
// A job due beyond the publish horizon (SQS's longest delay, 900 s) gets no message yet: a
// message would only come back every 15 minutes until the job is due, and age meanwhile. Its
// publish waits in jobs.outbox_deferred (migration 0018): an enqueue puts it there directly, the
// publisher leaves any other such row to the relay, and the relay defers what it finds and
// publishes each deferred row once its job is due within the horizon.

import type pg from 'pg';
import { LANES, type Lane } from '../domain/lanes.ts';
import type { Logger } from '../observability/log.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Metrics } from '../observability/metrics.ts';
import { jobMessageBody } from '../queue/message.ts';
import { chunk, SQS_BATCH_LIMIT, SQS_MAX_DELAY_SECONDS, type JobQueue } from '../queue/types.ts';
import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import { settledWithin } from '../support/settled.ts';
import { run, type Queryable } from './job-store.ts';

export interface PublishEntry {
  outboxId: string;
  jobId: string;
  type?: string;
  /** The job's lane: its message goes to that lane's queue. */
  lane: Lane;
  /** When the job is due; a future time becomes the message's delay (capped at SQS's 900 s). */
  runAfter?: Date;
}

/**
 * Queue a (re-)publish of existing jobs in `db`'s transaction (a message the worker could not
 * reposition): their outbox rows, as entries to publish after COMMIT, each with its job's lane.
 */
export async function outboxInsert(db: Queryable, jobIds: string[]): Promise<PublishEntry[]> {
  if (jobIds.length === 0) return [];
  const { rows } = await run(db, 'outboxInsert', [jobIds]);
  return rows.map((r) => ({ outboxId: String(r.outbox_id), jobId: r.job_id as string, type: r.type ?? undefined, lane: r.lane ?? 'bulk' }));
}

/** Whether a job due at `runAfter` is too far ahead for a message (SQS's longest delay): its publish is deferred. */
export function beyondHorizon(runAfter: Date | undefined, now = Date.now()): boolean {
  return runAfter !== undefined && runAfter.getTime() - now > SQS_MAX_DELAY_SECONDS * 1000;
}

export function delayFor(runAfter: Date | undefined, now = Date.now()): number {
  if (!runAfter) return 0;
  return Math.max(0, Math.min(SQS_MAX_DELAY_SECONDS, Math.ceil((runAfter.getTime() - now) / 1000)));
}

/**
 * How long publish() waits for SQS before it returns (the send goes on; what it cannot send stays
 * in the outbox for the relay). A committed job is safe in its outbox row: a request that enqueued
 * it must not hang on SQS's retries (30 s a call, 5 tries) and answer with a gateway timeout, so
 * that its caller, retrying, makes a second job.
 */
export const PUBLISH_WAIT_MS = 1000;
/** How long drain() waits for sends still in flight (a stopping process): what is not sent by then is the relay's. */
export const DRAIN_WAIT_MS = 3000;

export class Publisher {
  private pendingDeletes: string[] = [];
  private flushing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Sends that publish() stopped waiting for. */
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly queue: JobQueue,
    private readonly log: Logger,
    private readonly opts: { deleteBatchDelayMs?: number; waitMs?: number; drainWaitMs?: number } = {},
  ) {}

  /**
   * Send after COMMIT. Never throws: what it cannot send stays in the outbox for the relay, and
   * so does a job due beyond the publish horizon, which the relay defers. Returns once the sends
   * are done or after PUBLISH_WAIT_MS, whichever is first; a send still under way then goes on,
   * and its rows are cleaned up when it ends (drain waits for it at a stop).
   */
  async publish(entries: PublishEntry[]): Promise<void> {
    const now = Date.now();
    const due = entries.filter((e) => !beyondHorizon(e.runAfter, now));
    if (due.length === 0) return;
    const sent: string[] = [];
    const sends = Promise.all(
      chunkPerLane(due, (e) => e.lane).map(async (batch) => {
        try {
          await this.queue.send(
            batch.map((e) => ({ body: jobMessageBody(e.jobId, e.type), delaySeconds: delayFor(e.runAfter), lane: e.lane })),
          );
          for (const e of batch) sent.push(e.outboxId);
        } catch (err) {
          this.log.warn({ err, jobIds: batch.map((e) => e.jobId) }, 'publish failed; the outbox relay will retry');
        }
      }),
    ).then(() => {
      this.pendingDeletes.push(...sent);
      this.scheduleFlush();
    });
    this.sending.add(sends);
    void sends.finally(() => this.sending.delete(sends));
    await settledWithin([sends], this.opts.waitMs ?? PUBLISH_WAIT_MS);
  }

  /**
   * After a caller's own COMMIT (JobClient.enqueue's afterCommit): publish the entries whose outbox
   * rows exist. A COMMIT can end in a rollback without an error (PostgreSQL answers an aborted
   * transaction's COMMIT with ROLLBACK; a ROLLBACK TO SAVEPOINT can undo the enqueue): then the
   * rows and their jobs do not exist, and a message would name no job (dead-lettered as
   * unknown-job, a page). Outbox ids come from a sequence and are never reused.
   */
  async publishCommitted(entries: PublishEntry[]): Promise<void> {
    if (entries.length === 0) return;
    let live: Set<string>;
    try {
      const { rows } = await run(this.pool, 'outboxExisting', [entries.map((e) => e.outboxId)]);
      live = new Set(rows.map((r) => String(r.id)));
    } catch (err) {
      this.log.warn({ err, count: entries.length }, 'could not check the outbox after COMMIT; the outbox relay will publish');
      return;
    }
    const committed = entries.filter((e) => live.has(e.outboxId));
    if (committed.length < entries.length)
      this.log.warn(
        { jobIds: entries.filter((e) => !live.has(e.outboxId)).map((e) => e.jobId) },
        'afterCommit: these jobs are not in the database (the transaction rolled back: a COMMIT after an error, or a ROLLBACK TO SAVEPOINT); nothing published for them',
      );
    await this.publish(committed);
  }

  /**
   * A stopping process: wait for the sends still in flight (at most `maxMs`), then flush. What is
   * not sent by then stays in the outbox for another process's relay.
   */
  async drain(maxMs = this.opts.drainWaitMs ?? DRAIN_WAIT_MS): Promise<void> {
    if (this.sending.size > 0) await settledWithin([...this.sending], maxMs);
    await this.flush();
  }

  /**
   * Delete the outbox rows of what was sent. A failure only means a harmless re-publish later.
   * It does not wait for sends in flight (drain does): one send stuck on a lane must not hold back
   * the cleanup of the others, which the relays would otherwise re-send (review finding).
   */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.flushing) await this.flushing;
    if (this.pendingDeletes.length === 0) return;
    const ids = this.pendingDeletes;
    this.pendingDeletes = [];
    this.flushing = run(this.pool, 'outboxDelete', [ids])
      .then(() => undefined)
      .catch((err: unknown) =>
        this.log.warn({ err, count: ids.length }, 'outbox cleanup failed; the relay will re-publish those jobs (harmless)'),
      )
      .finally(() => {
        this.flushing = null;
      });
    await this.flushing;
  }

  private scheduleFlush(): void {
    if (this.timer || this.pendingDeletes.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush();
    }, this.opts.deleteBatchDelayMs ?? 20);
  }
}

export interface RelayOptions {
  /** Rows younger than this are left to their enqueuer's own publish. */
  minAgeSeconds: number;
  intervalMs: number;
  batchSize: number;
  /** Log each pass that published something (default): a publish that had not happened is news. */
  quiet?: boolean;
  /** Leave deferred publishes, and the rows brought back from deferral, to the other relays (the concurrency keys' wake-up, on the hot path). */
  skipDeferred?: boolean;
  /** How long a relay's lease on the rows it is sending lasts (default RELAY_LEASE_SECONDS). */
  leaseSeconds?: number;
}

/**
 * How long the relay's rows stay leased (migration 0021): what a relay that died (SIGKILL, out of
 * memory) leaves waits this long for another, a concurrency key's next job included. A send is
 * milliseconds; one that outlives the lease (SQS slow, waiting out its retries) may be sent again
 * by another relay meanwhile (a duplicate message, harmless), and its release touches only rows
 * still under its own lease.
 */
export const RELAY_LEASE_SECONDS = 30;

/** The longest a relay leaves a lane whose sends fail before it tries again (the backoff doubles from 1 s). */
export const RELAY_LANE_BACKOFF_MAX_MS = 30_000;

export const DEFAULT_RELAY: RelayOptions = { minAgeSeconds: 2, intervalMs: 1000, batchSize: 100 };

export class OutboxRelay {
  private readonly loop: MaintenanceLoop<number>;
  private stopped = false;
  /** Lanes whose send failed: not leased nor sent to until `until` (performance.now(); their failures in a row, the last error). */
  private readonly backoff = new Map<Lane, { failures: number; err: unknown; until: number }>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly queue: JobQueue,
    private readonly log: Logger,
    private readonly opts: RelayOptions = DEFAULT_RELAY,
    /** Counts the jobs a pass could not publish (OutboxPublishesFailed: the *publishing failing* alarm). */
    private readonly metrics?: Metrics,
  ) {
    this.loop = new MaintenanceLoop('outbox relay', () => this.pass(), log, opts.intervalMs);
  }

  start(): void {
    this.stopped = false;
    this.loop.start();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop.stop();
  }

  /** One pass: publish every due outbox row. Returns how many messages it sent; what it could not send it logs and counts (OutboxPublishesFailed), and the next pass tries again. */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  private async pass(): Promise<number> {
    // Deferred publishes now due within the horizon come back as rows to publish at once.
    while (!this.opts.skipDeferred) {
      const { rowCount } = await run(this.pool, 'outboxUndefer', [this.opts.batchSize]);
      if ((rowCount ?? 0) < this.opts.batchSize || this.stopped) break;
    }
    let total = 0;
    // Rows whose send failed in this pass: left for the next pass, and not locked again in this
    // one, so that the rows behind them (another lane's) are reached.
    const failed: RelayFailure[] = [];
    const skip: string[] = [];
    // A lane whose send failed is not sent to again in this pass, nor its rows leased (each send
    // to an SQS that does not answer waits out its retries, minutes: maintenance review), and the
    // next passes leave it alone for a backoff (1 s doubling to RELAY_LANE_BACKOFF_MAX_MS): its
    // rows would otherwise be leased and released every second, in every task.
    const now = performance.now();
    const down = new Map<Lane, unknown>();
    for (const [lane, b] of this.backoff) if (b.until > now) down.set(lane, b.err);
    const skipped = new Set(down.keys());
    // Every lane backed off: no lease query at all (with one lane down it walks that lane's rows to
    // reach the other's: 12,000 waiting rows cost 14 ms a pass).
    for (; !LANES.every((lane) => down.has(lane)); ) {
      const n = await this.batch(skip, down);
      total += n.sent;
      failed.push(...n.failed);
      skip.push(...n.unsent);
      if (n.locked < this.opts.batchSize || this.stopped) break;
    }
    const failedLanes = new Set(failed.map((f) => f.lane));
    for (const lane of failedLanes) {
      const n = (this.backoff.get(lane)?.failures ?? 0) + 1;
      const err = failed.find((f) => f.lane === lane)!.err;
      this.backoff.set(lane, { failures: n, err, until: performance.now() + Math.min(RELAY_LANE_BACKOFF_MAX_MS, 1000 * 2 ** (n - 1)) });
    }
    // A lane this pass could try and whose sends did not fail: no more backoff.
    for (const lane of [...this.backoff.keys()]) if (!skipped.has(lane) && !failedLanes.has(lane)) this.backoff.delete(lane);
    if (failed.length > 0) {
      const jobIds = failed.flatMap((f) => f.jobIds);
      this.metrics?.count(METRIC.outboxPublishesFailed, jobIds.length);
      // One line a pass, what on-call filters for (runbook *publishing failing*): each lane's count
      // and SQS's error code, the first job ids; the rows stay, and the next pass tries again.
      const lanes: Record<string, { jobs: number; error: string }> = {};
      for (const f of failed) lanes[f.lane] = { jobs: (lanes[f.lane]?.jobs ?? 0) + f.jobIds.length, error: errorCode(f.err) };
      this.log.warn(
        { lanes, published: total, jobIds: jobIds.slice(0, 20), err: failed[0]!.err },
        `outbox relay could not publish ${Object.entries(lanes)
          .map(([lane, l]) => `${l.jobs} job(s) to the ${lane} lane's queue (${l.error})`)
          .join(
            ', ',
          )}; published ${total}; trying that lane again in ${Math.round(Math.min(...failed.map((f) => this.backoff.get(f.lane)!.until - performance.now())) / 1000)} s`,
      );
    }
    return total;
  }

  /**
   * Lease due rows (less `skip`; one statement, committed at once), send them lane by lane holding
   * no connection, then delete what was sent and release the rest. A lane whose send fails (its
   * queue deleted, its permission revoked, SQS down for it) keeps its rows; the other lane's go
   * out and are deleted. Before, the rows were locked in a transaction held across the sends: an
   * SQS that did not answer held a maintenance connection idle in transaction for the SDK's
   * retries, minutes (migration 0021).
   */
  private async batch(
    skip: string[],
    down: Map<Lane, unknown>,
  ): Promise<{ locked: number; sent: number; unsent: string[]; failed: RelayFailure[] }> {
    const failed: RelayFailure[] = [];
    const leaseSeconds = this.opts.leaseSeconds ?? RELAY_LEASE_SECONDS;
    const { rows } = await run(this.pool, 'outboxLeaseDue', [
      this.opts.minAgeSeconds,
      this.opts.batchSize,
      !this.opts.skipDeferred,
      skip,
      leaseSeconds,
      [...down.keys()],
    ]);
    if (rows.length === 0) return { locked: 0, sent: 0, unsent: [], failed };
    // A job that is gone or already terminal needs no message; one due beyond the horizon, none yet.
    const later = rows.filter((r) => r.later && r.state === 'pending');
    const live = rows.filter((r) => (r.state === 'pending' && !r.later) || r.state === 'running');
    const unsent = new Set<(typeof live)[number]>();
    const sent: typeof live = [];
    try {
      if (later.length > 0) await run(this.pool, 'outboxDefer', [later.map((r) => r.outbox_id as string)]);
      for (const batch of chunkPerLane(live, (r) => r.lane as Lane)) {
        const lane = batch[0]!.lane as Lane;
        if (down.has(lane)) {
          failed.push({ err: down.get(lane), lane, jobIds: batch.map((r) => r.job_id as string) });
          for (const r of batch) unsent.add(r);
          continue;
        }
        try {
          await this.queue.send(
            batch.map((r) => ({
              body: jobMessageBody(r.job_id as string, r.type as string),
              delaySeconds: r.delay_seconds as number,
              lane: r.lane as Lane,
            })),
          );
          sent.push(...batch);
        } catch (err) {
          failed.push({ err, lane, jobIds: batch.map((r) => r.job_id as string) });
          down.set(lane, err);
          for (const r of batch) unsent.add(r);
        }
      }
    } finally {
      // What was sent, and what needs no message, goes; every other row is released for the next
      // pass (a deferred one is gone already, unless its job was cancelled since the lease or the
      // deferral failed). If this fails, the rows come back when their lease ends: a second
      // message at worst, harmless.
      const done = new Set([...rows.filter((r) => !later.includes(r) && !live.includes(r)), ...sent]);
      const ids = (keep: boolean) => rows.filter((r) => done.has(r) === keep).map((r) => r.outbox_id as string);
      await run(this.pool, 'outboxSettle', [ids(true), ids(false), rows[0]!.lease]);
    }
    // A deferred publish come due is by design, not a publish that had gone missing.
    const news = sent.filter((r) => !r.from_deferred);
    if (news.length > 0 && !this.opts.quiet)
      this.log.info(
        { count: news.length, jobIds: news.map((r) => r.job_id).slice(0, 20) },
        'relay published jobs whose publish had not happened',
      );
    return { locked: rows.length, sent: sent.length, unsent: [...unsent].map((r) => String(r.outbox_id)), failed };
  }
}

interface RelayFailure {
  err: unknown;
  lane: Lane;
  jobIds: string[];
}

/** What names an SQS failure in a log line: its code (QueueDoesNotExist, AccessDenied) or, without one, its message. */
function errorCode(err: unknown): string {
  const e = err as { code?: unknown; name?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' && e.name !== 'Error' ? e.name : null;
  return code ?? String(e?.message ?? err).slice(0, 200);
}

/** Batches of at most SQS_BATCH_LIMIT, each of one lane: a lane's failing send does not take the other's messages with it. */
function chunkPerLane<T>(items: T[], laneOf: (t: T) => Lane): T[][] {
  const byLane = new Map<Lane, T[]>();
  for (const t of items) {
    const lane = laneOf(t) ?? 'bulk';
    const group = byLane.get(lane);
    if (group) group.push(t);
    else byLane.set(lane, [t]);
  }
  return [...byLane.values()].flatMap((group) => chunk(group, SQS_BATCH_LIMIT));
}
