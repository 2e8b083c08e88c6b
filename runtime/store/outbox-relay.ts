// The outbox relay (runtime/store/outbox.ts has the publisher and the rules both keep): every
// process with a database connection runs one. It publishes outbox rows older than a few seconds
// (left by a process that died between COMMIT and publish, or by a failed send) under a lease (no
// transaction held across the send, migration 0021), and deletes them once sent; a job due beyond
// the publish horizon has its publish deferred (jobs.outbox_deferred) until it is due within it.

import type pg from 'pg';
import { LANES, type Lane } from '../domain/lanes.ts';
import type { Logger } from '../observability/log.ts';
import { METRIC } from '../observability/metric-names.ts';
import type { Metrics } from '../observability/metrics.ts';
import { jobMessageBody } from '../queue/message.ts';
import type { JobQueue } from '../queue/types.ts';
import { MaintenanceLoop } from '../support/maintenance-loop.ts';
import { run } from './job-store.ts';
import { chunkPerLane } from './outbox.ts';

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
  /** The longest a lane's sends of one lease may take, retries included (default RELAY_SEND_DEADLINE_MS). */
  sendDeadlineMs?: number;
}

/**
 * How long the relay's rows stay leased (migration 0021): what a relay that died (SIGKILL, out of
 * memory) leaves waits this long for another, a concurrency key's next job included. A send is
 * milliseconds; one that outlives the lease (SQS slow, waiting out its retries) may be sent again
 * by another relay meanwhile (a duplicate message, harmless), and its release touches only rows
 * still under its own lease.
 */
export const RELAY_LEASE_SECONDS = 30;

/**
 * The longest a relay's sends to one lane of one lease may take, the wire's retries included (30
 * s a call, 5 tries): past it the lane counts as failing and backs off, well inside the rows'
 * lease. A send that SQS accepted after all makes a second message later, harmless.
 */
export const RELAY_SEND_DEADLINE_MS = 10_000;

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
   * Lease due rows (less `skip`; one statement, committed at once), send them, the lanes side by side, holding
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
      // Each lane's batches in turn, the lanes side by side, and each send within its deadline: an
      // urgent queue that does not answer held the bulk lane's rows behind it for the wire's whole
      // retry budget, minutes, pass after pass (API review).
      const perLane = new Map<Lane, (typeof live)[]>();
      for (const batch of chunkPerLane(live, (r) => r.lane as Lane)) {
        const lane = batch[0]!.lane as Lane;
        const batches = perLane.get(lane);
        if (batches) batches.push(batch);
        else perLane.set(lane, [batch]);
      }
      const deadlineMs = this.opts.sendDeadlineMs ?? RELAY_SEND_DEADLINE_MS;
      await Promise.all(
        [...perLane].map(async ([lane, batches]) => {
          // One deadline for the lane's sends of this lease, well inside it (a lane slow but
          // answering took 10 s a batch, past the lease, and other relays sent its rows again).
          const signal = AbortSignal.timeout(deadlineMs);
          for (const batch of batches) {
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
                  lane,
                })),
                signal,
              );
              sent.push(...batch);
            } catch (err) {
              failed.push({ err, lane, jobIds: batch.map((r) => r.job_id as string) });
              down.set(lane, err);
              for (const r of batch) unsent.add(r);
            }
          }
        }),
      );
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

/** What names an SQS failure in a log line: its code (QueueDoesNotExist, AccessDenied; a batch's entries' codes) or, without one, its message. */
function errorCode(err: unknown): string {
  const e = err as { code?: unknown; name?: unknown; message?: unknown; failures?: { code?: unknown }[] } | null;
  if (Array.isArray(e?.failures) && e.failures.length > 0) return [...new Set(e.failures.map((f) => String(f.code)))].join(', ');
  const code = typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' && e.name !== 'Error' ? e.name : null;
  return code ?? String(e?.message ?? err).slice(0, 200);
}
