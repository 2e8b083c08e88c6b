// Publishing job messages, after COMMIT only, and never losing one (DESIGN 7).
//
// Publisher: the enqueuing process calls publish() right after its transaction commits. It
// sends the messages and then deletes their outbox rows, in batches (one DELETE for many
// publishes), so the happy path costs a fraction of a commit per job. If the send fails, or the
// process dies first, the rows stay and the relay publishes them.
//
// OutboxRelay (outbox-relay.ts): every process with a database connection runs one. It publishes
// outbox rows older than a few seconds — left by a process that died between COMMIT and publish,
// or by a failed send — under a lease (no transaction held across the send), and deletes them
// once sent.
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
import type { Lane } from '../domain/lanes.ts';
import type { Logger } from '../observability/log.ts';
import { jobMessageBody } from '../queue/message.ts';
import { chunk, SQS_BATCH_LIMIT, SQS_MAX_DELAY_SECONDS, type JobQueue } from '../queue/types.ts';
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
/**
 * The longest a publish's send goes on, the wire's retries included (30 s a call, 5 tries): the
 * outbox is its retry, so a silent SQS under a burst of enqueues holds sends and their sockets for
 * seconds, not minutes (API review).
 */
export const PUBLISH_SEND_DEADLINE_MS = 10_000;
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
    private readonly opts: { deleteBatchDelayMs?: number; waitMs?: number; drainWaitMs?: number; sendDeadlineMs?: number } = {},
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
    const deadlineMs = this.opts.sendDeadlineMs ?? PUBLISH_SEND_DEADLINE_MS;
    const sends = Promise.all(
      chunkPerLane(due, (e) => e.lane).map(async (batch) => {
        try {
          await this.queue.send(
            batch.map((e) => ({ body: jobMessageBody(e.jobId, e.type), delaySeconds: delayFor(e.runAfter), lane: e.lane })),
            AbortSignal.timeout(deadlineMs),
          );
          // Each batch's rows as soon as it is sent: a batch of both lanes kept its sent bulk rows
          // while the urgent send hung, and every relay sent them again (API review).
          this.pendingDeletes.push(...batch.map((e) => e.outboxId));
          this.scheduleFlush();
        } catch (err) {
          this.log.warn({ err, lane: batch[0]!.lane, jobIds: batch.map((e) => e.jobId) }, 'publish failed; the outbox relay will retry');
        }
      }),
    ).then(() => undefined);
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
    let rows: { outbox_id: string; committed: boolean; queued: boolean }[];
    try {
      ({ rows } = await run(this.pool, 'outboxCommitted', [entries.map((e) => e.outboxId), entries.map((e) => e.jobId)]));
    } catch (err) {
      this.log.warn({ err, count: entries.length }, 'could not check the outbox after COMMIT; the outbox relay will publish');
      return;
    }
    const by = new Map(rows.map((r) => [r.outbox_id, r]));
    const gone = entries.filter((e) => !by.get(e.outboxId)?.committed);
    if (gone.length > 0)
      this.log.warn(
        { jobIds: gone.map((e) => e.jobId) },
        'afterCommit: these jobs are not in the database (the transaction rolled back: a COMMIT after an error, or a ROLLBACK TO SAVEPOINT); nothing published for them',
      );
    // A committed job whose row is gone was published by a relay already (a long transaction).
    await this.publish(entries.filter((e) => by.get(e.outboxId)?.committed && by.get(e.outboxId)?.queued));
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

/** Batches of at most SQS_BATCH_LIMIT, each of one lane: a lane's failing send does not take the other's messages with it. */
export function chunkPerLane<T>(items: T[], laneOf: (t: T) => Lane): T[][] {
  const byLane = new Map<Lane, T[]>();
  for (const t of items) {
    const lane = laneOf(t) ?? 'bulk';
    const group = byLane.get(lane);
    if (group) group.push(t);
    else byLane.set(lane, [t]);
  }
  return [...byLane.values()].flatMap((group) => chunk(group, SQS_BATCH_LIMIT));
}
