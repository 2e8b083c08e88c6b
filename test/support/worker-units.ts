// The worker's units (runtime/worker/) wired by hand over a test platform, the way worker.ts
// wires them, so each unit's test drives it alone against the real PostgreSQL and MemoryQueue.
import { Completer } from '../../runtime/worker/completer.ts';
import { DeadLetters } from '../../runtime/worker/dead-letter.ts';
import { JobExecutor } from '../../runtime/worker/executor.ts';
import { Fetcher, type Slots } from '../../runtime/worker/fetcher.ts';
import { Heartbeat } from '../../runtime/worker/heartbeat.ts';
import { WorkerContext, type Held, type WorkerOptions } from '../../runtime/worker/held.ts';
import { QueueMessages } from '../../runtime/worker/messages.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import type { ReceivedMessage } from '../../runtime/queue/types.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import type { ClaimedJob } from '../../runtime/store/job-store.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { FAST_TIMINGS, type Platform } from './platform.ts';

export interface Units {
  ctx: WorkerContext;
  messages: QueueMessages;
  deadLetters: DeadLetters;
  heartbeat: Heartbeat;
  completer: Completer;
  executor: JobExecutor;
  fetcher: Fetcher;
  /** What the fetcher handed to the coordinator. */
  started: Held[];
  freed: Held[];
  databaseDown: unknown[];
  /** What the heartbeat gave up unstarted (claimed ahead, its lease run out): the coordinator's to release. */
  givenUpUnstarted: Held[];
}

export function workerUnits(p: Platform, over: Partial<WorkerOptions> = {}, workerId = 'unit-worker'): Units {
  const pool = p.db.newPool(6);
  const opts: WorkerOptions = {
    pool,
    queue: p.queue,
    dlq: p.dlq,
    registry: p.registry,
    publisher: new Publisher(pool, p.queue, silentLogger),
    timings: FAST_TIMINGS,
    log: silentLogger,
    metrics: p.metrics,
    receiveWaitSeconds: 0.1,
    ...over,
  };
  const ctx = new WorkerContext(opts, workerId);
  const messages = new QueueMessages(ctx);
  const deadLetters = new DeadLetters(ctx, messages);
  const databaseDown: unknown[] = [];
  const givenUpUnstarted: Held[] = [];
  const heartbeat = new Heartbeat(
    ctx,
    messages,
    (err) => databaseDown.push(err),
    (hs) => givenUpUnstarted.push(...hs),
  );
  const freed: Held[] = [];
  // Shares its lost-claims list with the fetcher, as in worker.ts.
  const completer = new Completer(ctx, messages, deadLetters, heartbeat, (h) => freed.push(h));
  const executor = new JobExecutor(ctx, completer, heartbeat);
  const started: Held[] = [];
  const slots: Slots = {
    inHand: () => 0,
    waitForSlot: () => new Promise<void>((r) => setTimeout(r, 10)),
    start: (job, message, claimSentAt) => started.push(hold(ctx, job, message, claimSentAt)),
    finished: () => 0,
  };
  const fetcher = new Fetcher(ctx, messages, deadLetters, slots, undefined, completer.lost);
  return { ctx, messages, deadLetters, heartbeat, completer, executor, fetcher, started, freed, databaseDown, givenUpUnstarted };
}

/** A held job as the coordinator makes one (worker.ts startJob). */
export function hold(ctx: WorkerContext, job: ClaimedJob, message: ReceivedMessage, claimSentAt = performance.now()): Held {
  const h: Held = {
    job,
    token: { id: job.id, attempt: job.attempt },
    message,
    receiptStale: false,
    ac: null,
    abortReason: undefined,
    unsentProgress: null,
    lastProgress: job.progress,
    lost: false,
    released: false,
    lastRenewedAt: claimSentAt,
    claimedAt: Date.now(),
    slotFreed: false,
    started: true, // as if its handler runs: the units' tests drive it by hand
  };
  ctx.held.set(job.id, h);
  return h;
}

/** Enqueue a job (its message goes to the platform queue), receive that message and claim the job as `u`'s worker. */
export async function claimOne(p: Platform, u: Units, type: string, payload: unknown, maxAttempts?: number): Promise<Held> {
  const [r] = await p.client.enqueueNow({ type, payload, ...(maxAttempts ? { maxAttempts } : {}) });
  const id = r!.job.id;
  const m = await receiveFor(p, id);
  const [job] = await u.ctx.store.claim([id], u.ctx.workerId, u.ctx.opts.timings.leaseSeconds);
  return hold(u.ctx, job!, m);
}

/** Receive until the message of job `id` arrives (others go back at once). */
export async function receiveFor(p: Platform, id: string): Promise<ReceivedMessage> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const got = await p.queue.receive(10, 0.2);
    const mine = got.find((m) => m.body.includes(id));
    const others = got.filter((m) => m !== mine);
    if (others.length > 0) await p.queue.changeVisibility(others.map((m) => ({ receipt: m.receipt, seconds: 0 })));
    if (mine) return mine;
  }
  throw new Error(`no message for job ${id}`);
}

/** Send a message for a job id and receive it (its receipt is the newest). */
export async function deliver(p: Platform, jobId: string, type = 'ledger.post'): Promise<ReceivedMessage> {
  await p.queue.send([{ body: jobMessageBody(jobId, type) }]);
  return receiveFor(p, jobId);
}

/** Pretend the lease ran out (or has `seconds` left), without waiting. */
export const setLease = (p: Platform, id: string, seconds: number) =>
  p.db.pool.query(`UPDATE jobs.job SET lease_expires_at = statement_timestamp() + make_interval(secs => $2) WHERE id = $1`, [id, seconds]);
