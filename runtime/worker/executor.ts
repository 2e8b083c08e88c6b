// Executing one attempt of a held job: find its handler, parse its payload, run the handler with
// its AttemptContext (signal, progress, fenced checkpoint, the fenced transaction) and decide the
// outcome: completed, failed (retryable or not), or nothing at all once the lease is lost or the
// job released. The completer writes the outcome.

import { LeaseLostError, NonRetryableError } from '../domain/errors.ts';
import type { ChildJobSpec, JobContext, JobDefinition } from '../handlers/types.ts';
import { registeredPayloadFields } from '../store/job-types.ts';
import type { EnqueueSpec } from '../store/client.ts';
import type { Logger } from '../observability/log.ts';
import type { Completer } from './completer.ts';
import type { Heartbeat } from './heartbeat.ts';
import { recordProgress, type Held, type WorkerContext } from './held.ts';
import { JobTransaction } from './job-transaction.ts';

export class JobExecutor {
  constructor(
    private readonly ctx: WorkerContext,
    private readonly completer: Completer,
    private readonly heartbeat: Heartbeat,
  ) {}

  async execute(h: Held): Promise<void> {
    const { job } = h;
    if (h.lost || h.released) return;
    h.started = true;
    const { ctx, completer } = this;
    // Log bindings per call rather than a child logger per job: pino serializes a child's
    // bindings when it is made, a cost every job would pay even with logging turned down.
    const log = new JobLog(ctx.log, job);
    const def = ctx.opts.registry.get(job.type);
    // A type this worker lacks: a deploy half done, not the job's fault (completer.ts).
    if (!def) return completer.handOnUnknownType(h, log);
    let payload: unknown;
    try {
      payload = def.parse(job.payload);
    } catch (err) {
      // Fields of a newer image's schema (a deploy half done): handed on, not the job's fault.
      const newer = await fieldsOfNewerImage(ctx, def, job.payload);
      if (newer) return completer.handOnNewerPayload(h, newer, log);
      return completer.fail(h, err, true, log);
    }
    const tx = new JobTransaction(ctx.opts.pool);
    // Aborted (lease lost, cancelled, released): its connection closes at once (job-transaction.ts abandon).
    h.abandon = () => tx.abandon();
    if (h.abortReason !== undefined) tx.abandon();
    const attempt = new AttemptContext(h, this, log, tx);
    log.info('job started');
    let result: unknown;
    try {
      h.inHandler = true;
      result = await def.run(payload, attempt);
    } catch (err) {
      h.inHandler = false;
      // A handler that caught the fence's refusal and threw its own error still ends dead with
      // the fence's reason: a retry could apply effects that already landed outside the fence.
      const cause = tx.violation ?? err;
      await tx.rollback();
      if (h.lost || h.released) return;
      // Its transaction's connection lost (it may have caught that and thrown its own): the outage's fault.
      if (!tx.violation && tx.connectionLost) return completer.releaseInterrupted(h, tx.connectionLost, log);
      return completer.fail(h, cause, cause instanceof NonRetryableError, log);
    }
    h.inHandler = false;
    if (h.lost || h.released) {
      await tx.rollback();
      return;
    }
    let completed: boolean;
    try {
      completed = await completer.commit(h, tx, result ?? null, log);
    } catch (err) {
      // The COMMIT may or may not have happened. The fenced failure below matches no row if it did.
      // A NonRetryableError here is the transaction's own verdict (the handler left the fence).
      await tx.rollback();
      // Given up meanwhile (the batched completion's retries outlived the lease): not ours to fail.
      if (h.lost || h.released) return;
      log.warn({ err }, 'completion did not commit');
      if (!(err instanceof NonRetryableError) && tx.connectionLost) return completer.releaseInterrupted(h, tx.connectionLost, log);
      return completer.fail(h, err, err instanceof NonRetryableError, log);
    }
    if (!completed) {
      // Released meanwhile by this worker's own stop (its drain's deadline came while the batched
      // completion waited for the database): the stop's doing, not a lost lease (LeasesLost pages).
      // A completion that committed and whose answer was lost (its retry matched nothing) is a
      // success after all: loseLease finds the row succeeded by this attempt and counts it.
      if (!h.released) this.heartbeat.loseLease(h, 'completion', false, () => completer.succeeded(h, log));
      return;
    }
    completer.succeeded(h, log);
  }

  /** ctx.enqueue: child jobs in the job's transaction (see JobContext.enqueue). */
  enqueueChildren(h: Held, tx: JobTransaction, specs: ChildJobSpec[]): Promise<{ id: string; type: string; duplicate: boolean }[]> {
    return insertChildren(this.ctx, h, tx, specs);
  }

  /**
   * ctx.saveCheckpoint: fenced; a refusal is a lost lease. With the job's transaction open, the
   * checkpoint commits in it, together with the writes of the chunk it ends (job-transaction.ts).
   */
  async saveCheckpoint(h: Held, tx: JobTransaction, checkpoint: unknown, progress?: { fraction: number; message?: string }): Promise<void> {
    if (h.lost || h.released) throw new LeaseLostError(h.job.id, h.token.attempt, 'checkpoint');
    if (progress) recordProgress(h, progress.fraction, progress.message);
    const { store } = this.ctx;
    const saved = progress ? h.lastProgress : null;
    const ok = tx.opened
      ? await tx.commitChunk((client) => store.checkpoint(h.token, checkpoint, saved, client))
      : await store.checkpoint(h.token, checkpoint, saved).catch((err: unknown) => {
          tx.noteConnectionError(err); // the checkpoint is the attempt's own statement, on the platform's connection
          throw err;
        });
    if (!ok) {
      this.heartbeat.loseLease(h, 'checkpoint');
      throw new LeaseLostError(h.job.id, h.token.attempt, 'checkpoint');
    }
  }
}

/** Validate, then insert in the job's transaction; published once it commits (job-transaction.ts afterCommit). */
async function insertChildren(
  ctx: WorkerContext,
  h: Held,
  tx: JobTransaction,
  specs: ChildJobSpec[],
): Promise<{ id: string; type: string; duplicate: boolean }[]> {
  if (h.lost || h.released) throw new LeaseLostError(h.job.id, h.token.attempt, 'enqueue');
  const client = ctx.childClient;
  // Checked before the transaction opens: a bad child never reaches the database.
  const rows = specs.map((s) => ({ ...client.validate(s as EnqueueSpec), parentId: h.job.id }));
  const { jobs, afterCommit } = await client.insert(await tx.platformClient(), rows);
  tx.afterCommit(() => {
    afterCommit().catch((err) =>
      ctx.log.warn({ err, jobId: h.job.id }, 'publishing child jobs failed; the outbox relay will publish them'),
    );
  });
  return jobs.map((j) => ({ id: j.job.id, type: j.job.type, duplicate: j.duplicate }));
}

/**
 * A logger for one job's lines that makes a pino child (for the handler) only when asked for
 * one. A class, like AttemptContext below: a worker making thousands of these a second should not
 * also make a handful of closures for each.
 */
export class JobLog {
  private made: Logger | null = null;
  private bound: Record<string, unknown> | null = null;
  constructor(
    private readonly base: Logger,
    private readonly job: { id: string; type: string; attempt: number },
  ) {}
  private get bindings(): Record<string, unknown> {
    return (this.bound ??= { jobId: this.job.id, type: this.job.type, attempt: this.job.attempt });
  }
  info(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('info')) return;
    if (typeof a === 'string') this.base.info(this.bindings, a);
    else this.base.info({ ...this.bindings, ...a }, b);
  }
  warn(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('warn')) return;
    if (typeof a === 'string') this.base.warn(this.bindings, a);
    else this.base.warn({ ...this.bindings, ...a }, b);
  }
  error(a: string | Record<string, unknown>, b?: string): void {
    if (!this.base.isLevelEnabled('error')) return;
    if (typeof a === 'string') this.base.error(this.bindings, a);
    else this.base.error({ ...this.bindings, ...a }, b);
  }
  child(): Logger {
    return (this.made ??= this.base.child(this.bindings));
  }
}

/** The handler's view of one attempt (the JobContext contract). Call its functions as methods. */
class AttemptContext implements JobContext {
  readonly job: JobContext['job'];
  readonly checkpoint: unknown;

  constructor(
    private readonly h: Held,
    private readonly executor: JobExecutor,
    private readonly jobLog: JobLog,
    readonly db: JobTransaction,
  ) {
    const j = h.job;
    this.job = { id: j.id, type: j.type, attempt: j.attempt, maxAttempts: j.maxAttempts, createdAt: j.createdAt };
    this.checkpoint = j.checkpoint ?? null;
    // Handlers destructure their context (`const { progress, saveCheckpoint } = ctx`).
    this.progress = this.progress.bind(this);
    this.saveCheckpoint = this.saveCheckpoint.bind(this);
  }

  get signal(): AbortSignal {
    const h = this.h;
    if (!h.ac) {
      h.ac = new AbortController();
      if (h.abortReason !== undefined) h.ac.abort(h.abortReason);
    }
    return h.ac.signal;
  }

  get log(): Logger {
    return this.jobLog.child();
  }

  progress(fraction: number, message?: string): void {
    recordProgress(this.h, fraction, message);
  }

  saveCheckpoint(checkpoint: unknown, progress?: { fraction: number; message?: string }): Promise<void> {
    return this.executor.saveCheckpoint(this.h, this.db, checkpoint, progress);
  }

  enqueue(jobs: ChildJobSpec | ChildJobSpec[]): Promise<{ id: string; type: string; duplicate: boolean }[]> {
    return this.executor.enqueueChildren(this.h, this.db, Array.isArray(jobs) ? jobs : [jobs]);
  }
}

/**
 * The payload's fields this worker's schema lacks, when the rest parses and the type's latest
 * registration (migration 0020) has every one of them: the job was enqueued by a newer image, and
 * a worker of it can run the job. Null otherwise (a field no registration has is a mistake: the
 * job ends dead at once, the field named), and when the database cannot say.
 */
async function fieldsOfNewerImage(ctx: WorkerContext, def: JobDefinition<any, any, any>, payload: unknown): Promise<string[] | null> {
  if (!def.schema || !payload || typeof payload !== 'object' || Array.isArray(payload)) return null;
  const known = Object.keys(def.schema.shape);
  const extra = Object.keys(payload).filter((k) => !known.includes(k));
  if (extra.length === 0) return null;
  if (!def.schema.safeParse(Object.fromEntries(Object.entries(payload).filter(([k]) => known.includes(k)))).success) return null;
  const registered = await registeredPayloadFields(ctx.opts.pool, def.type).catch(() => null);
  return registered && extra.every((k) => registered.includes(k)) ? extra : null;
}
