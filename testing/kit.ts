// The test kit: the platform in one process around the handlers under test, with nothing
// running by itself. A job runs when the test says so (runOnce), one attempt at a time, and
// stops, crashes or freezes where the test says (start with pauseAt). Leases run out only when
// the test reclaims: no timing in a test depends on the machine's speed.
//
// What is real: the migrated job tables on PostgreSQL, the enqueue path with its outbox, the
// worker's claim, fenced transaction, checkpoints, completion, retry and dead-lettering, and the
// rescuer. What is not: SQS (an in-process queue with its semantics) and the clock of backoffs
// (runOnce runs a retry at once).

import type pg from 'pg';
import type { JobTimings } from '../runtime/config/rules.ts';
import { isTerminal, type AttemptOutcome, type Job } from '../runtime/domain/job.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import type { JobContext, JobDefinition } from '../runtime/handlers/types.ts';
import { Rescuer } from '../runtime/maintenance/rescuer.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { MemoryQueue } from '../runtime/queue/memory.ts';
import { jobMessageBody, parseJobMessage } from '../runtime/queue/message.ts';
import type { ReceivedMessage } from '../runtime/queue/types.ts';
import { JobClient, type EnqueueSpec } from '../runtime/store/client.ts';
import { JobStore } from '../runtime/store/job-store.ts';
import { Publisher } from '../runtime/store/outbox.ts';
import { openKitDatabase, type KitDatabase } from './database.ts';
import { TestWorker } from './worker.ts';

/**
 * Where a handler stops when the test asks it to: `'start'` (before the handler runs), `'end'`
 * (it returned; its transaction is not committed yet) or `{ checkpoint: n }` (it called
 * ctx.saveCheckpoint for the n-th time in this attempt; that checkpoint, and with it the chunk of
 * rows it would commit, is not saved yet).
 */
export type Point = 'start' | 'end' | { checkpoint: number };

export interface TestKitOptions {
  /** The job definitions under test (not the platform's defaults). */
  jobs: JobDefinition<any, any, any>[];
  /** A PostgreSQL admin URL to create the kit's database on; see testing/database.ts for the default. */
  databaseUrl?: string;
  /** maxAttempts is the default cap of a job whose type and enqueue set none. */
  timings?: Partial<JobTimings>;
}

const KIT_TIMINGS: JobTimings = {
  // Leases run out when the test reclaims, not by themselves: long enough for any handler in a test.
  leaseSeconds: 60,
  heartbeatSeconds: 5,
  visibilityTimeoutSeconds: 60,
  maxAttempts: 3,
  maxReceiveCount: 1000,
  backoffBaseSeconds: 1,
  backoffMaxSeconds: 10,
  concurrency: 5,
  drainSeconds: 1,
};

/** What the jobs table held at a moment: the jobs enqueued after it are those not in it. */
export interface Mark {
  readonly jobIds: ReadonlySet<string>;
}

/** One attempt started with `kit.start(job, { pauseAt })`, its handler stopped at the point. */
export interface PausedAttempt {
  /** The job's row while the handler waits at the point. */
  readonly job: Job;
  /** What the handler threw, once resumed (a zombie's refused checkpoint: LeaseLostError). */
  readonly error: unknown;
  /** The worker dies here, as with SIGKILL: it writes nothing more; its lease runs out at kit.reclaim(). */
  crash(): Promise<void>;
  /** The worker freezes here (no heartbeat): at kit.reclaim() its lease runs out and the job goes to another worker. */
  freeze(): void;
  /** The handler goes on. Resolves once this attempt ended (or was fenced out), with the job's row then and what the handler threw. */
  resume(): Promise<AttemptEnd>;
  /** The handler throws `error` at the point (a failure where the test chooses). Resolves once the attempt ended. */
  fail(error: Error): Promise<AttemptEnd>;
}

export interface AttemptEnd {
  /** The job's row once the attempt ended: its outcome, or the row of the attempt that took over from a zombie. */
  job: Job;
  /** What the handler threw, if it threw (a zombie's refused checkpoint: LeaseLostError). */
  error: unknown;
}

interface Pause {
  point: Point;
  /** The attempt that stopped there (only the first to reach the point does). */
  attempt: number | null;
  reached: () => void;
  go: Promise<void>;
  resolveGo: () => void;
  rejectGo: (err: Error) => void;
}

const samePoint = (a: Point, b: Point) => (typeof a === 'string' || typeof b === 'string' ? a === b : a.checkpoint === b.checkpoint);
const describePoint = (p: Point) => (typeof p === 'string' ? `'${p}'` : `checkpoint ${p.checkpoint}`);

export class TestKit {
  readonly registry: JobRegistry;
  /** The platform's enqueue client, for the ERP code under test: `kit.client.enqueue(tx, spec)`. */
  readonly client: JobClient;
  readonly store: JobStore;
  /** A pool on the kit's database (the ERP's tables are there too: the platform's migrations made them). */
  readonly pool: pg.Pool;
  /** The job queue (in-process, SQS's semantics) and the dead-letter queue, for assertions. */
  readonly queue: MemoryQueue;
  readonly dlq: MemoryQueue;
  readonly timings: JobTimings;
  /** The kit's database (psql it while a test waits at a point), dropped on close. */
  readonly databaseUrl: string;
  private readonly publisher: Publisher;
  private readonly rescuer: Rescuer;
  private readonly workers: TestWorker[] = [];
  private readonly publishers: Publisher[] = [];
  private runner: TestWorker | null = null;
  private readonly pauses = new Map<string, Pause>();
  private readonly errors = new Map<string, unknown>();

  constructor(
    private readonly db: KitDatabase,
    opts: TestKitOptions,
  ) {
    this.timings = { ...KIT_TIMINGS, ...opts.timings };
    this.databaseUrl = db.url;
    this.registry = new JobRegistry(opts.jobs.map((d) => this.instrument(d)));
    this.pool = db.newPool(10);
    this.queue = new MemoryQueue({ visibilityTimeoutSeconds: this.timings.visibilityTimeoutSeconds });
    this.dlq = new MemoryQueue({ visibilityTimeoutSeconds: 60 });
    this.publisher = new Publisher(this.pool, this.queue, silentLogger);
    this.client = new JobClient({
      pool: this.pool,
      registry: this.registry,
      publisher: this.publisher,
      defaultMaxAttempts: this.timings.maxAttempts,
    });
    this.store = new JobStore(this.pool);
    this.rescuer = new Rescuer(this.store, this.publisher, silentLogger, {
      graceSeconds: 0,
      intervalMs: 60_000, // never started: kit.reclaim() runs it
      batchSize: 1000,
      onDead: async (job) => {
        await this.runnerWorker().reportDeadJob(job, 'lease-expired-final-attempt');
      },
    });
  }

  /** Enqueue through the platform's transactional path (and publish). Returns the job (an active duplicate of its key, if any). */
  async enqueue(type: string, payload: unknown, opts: Omit<EnqueueSpec, 'type' | 'payload'> = {}): Promise<Job> {
    const [r] = await this.client.enqueueNow({ ...opts, type, payload });
    return r!.job;
  }

  /**
   * Run one attempt of the job to its end, now (a retry's backoff or a runAt is skipped), and
   * return its row: succeeded, pending with a retry in its attempt log, or dead. A job held by a
   * crashed or frozen worker needs kit.reclaim() first, as its lease must run out.
   */
  async runOnce(job: Job | string): Promise<Job> {
    const id = typeof job === 'string' ? job : job.id;
    const w = this.runnerWorker();
    if (!(await this.begin(id, w))) return this.job(id);
    await w.settled(id);
    return this.job(id);
  }

  /**
   * Start one attempt and stop its handler at `pauseAt`, on a worker of its own (so it can crash
   * or freeze there). Resolves once the handler waits at the point.
   */
  async start(job: Job | string, { pauseAt }: { pauseAt: Point }): Promise<PausedAttempt> {
    const id = typeof job === 'string' ? job : job.id;
    if (this.pauses.has(id)) throw new Error(`job ${id} already has an attempt paused; resume, crash or freeze it first`);
    let reached!: () => void;
    const reachedP = new Promise<void>((r) => (reached = r));
    let resolveGo!: () => void;
    let rejectGo!: (err: Error) => void;
    const go = new Promise<void>((res, rej) => {
      resolveGo = res;
      rejectGo = rej;
    });
    go.catch(() => undefined);
    const pause: Pause = { point: pauseAt, attempt: null, reached, go, resolveGo, rejectGo };
    this.pauses.set(id, pause);
    const w = this.newWorker();
    try {
      if (!(await this.begin(id, w))) throw new Error(`job ${id} could not start: it is ${(await this.job(id)).state}`);
      const ended = w.settled(id).then(() => 'ended' as const);
      if ((await Promise.race([reachedP.then(() => 'paused' as const), ended])) === 'ended') {
        const after = await this.job(id);
        throw new Error(
          `job ${id}'s attempt ended (${after.state}) without reaching ${describePoint(pauseAt)}` +
            (this.errors.has(id) ? `: ${String(this.errors.get(id))}` : ''),
        );
      }
    } catch (err) {
      this.pauses.delete(id);
      throw err;
    }
    const kit = this;
    const attempt = pause.attempt!;
    const key = `${id}#${attempt}`;
    return {
      job: await this.job(id),
      get error() {
        return kit.errors.get(key);
      },
      async crash() {
        const crashing = w.crash();
        // The handler wakes up to an error, as if its process were gone; whatever it does next is discarded.
        pause.rejectGo(new Error('worker crashed (test kit)'));
        await crashing;
        kit.pauses.delete(id);
      },
      freeze() {
        w.freeze();
      },
      async resume() {
        kit.pauses.delete(id);
        pause.resolveGo();
        await w.settled(id);
        return { job: await kit.job(id), error: kit.errors.get(key) };
      },
      async fail(error: Error) {
        kit.pauses.delete(id);
        pause.rejectGo(error);
        await w.settled(id);
        return { job: await kit.job(id), error: kit.errors.get(key) };
      },
    };
  }

  /**
   * Let the leases of crashed and frozen workers run out, then run the rescuer now: their jobs
   * go back to pending with a fresh message (or to dead, and the DLQ, on their final attempt).
   * Returns the jobs it moved.
   */
  async reclaim(): Promise<Job[]> {
    const tokens = this.workers.flatMap((w) => w.unrenewedLeases);
    if (tokens.length > 0) {
      // The one write the kit makes to the job table itself: time passing past these leases.
      await this.pool.query(
        `UPDATE jobs.job j SET lease_expires_at = statement_timestamp() - interval '1 second'
           FROM unnest($1::uuid[], $2::int[]) AS t(id, attempt)
          WHERE j.id = t.id AND j.attempt = t.attempt AND j.state = 'running'`,
        [tokens.map((t) => t.id), tokens.map((t) => t.attempt)],
      );
    }
    return this.rescuer.runOnce();
  }

  /** The job's row now. */
  async job(id: string): Promise<Job> {
    const row = await this.store.get(id);
    if (!row) throw new Error(`no job ${id}`);
    return row;
  }

  /** How each attempt before the current one ended (retry, dead, released, rescued, …). */
  async attemptLog(job: Job | string): Promise<AttemptOutcome[]> {
    return (await this.job(typeof job === 'string' ? job : job.id)).attemptLog;
  }

  /** Remember which jobs exist now, to ask later what was enqueued since. */
  async mark(): Promise<Mark> {
    const { rows } = await this.pool.query<{ id: string }>('SELECT id FROM jobs.job');
    return { jobIds: new Set(rows.map((r) => r.id)) };
  }

  /** The jobs enqueued (committed) since the mark, oldest first, each with whether its message still waits in the outbox. */
  async enqueuedSince(mark: Mark): Promise<(Job & { inOutbox: boolean })[]> {
    const { rows } = await this.pool.query<{ id: string; in_outbox: boolean }>(
      `SELECT j.id, EXISTS (SELECT 1 FROM jobs.outbox o WHERE o.job_id = j.id) AS in_outbox
         FROM jobs.job j ORDER BY j.created_at, j.id`,
    );
    const fresh = rows.filter((r) => !mark.jobIds.has(r.id));
    const jobs = await this.store.getMany(fresh.map((r) => r.id));
    return fresh.map((r) => ({ ...jobs.get(r.id)!, inOutbox: r.in_outbox }));
  }

  /** Stop every worker (as killed: nothing is written), drop the database, stop what the kit started. */
  async close(): Promise<void> {
    for (const p of this.pauses.values()) p.rejectGo(new Error('test kit closed'));
    await Promise.all(this.workers.map((w) => w.crash().catch(() => undefined)));
    this.queue.close();
    this.dlq.close();
    // Their pending outbox deletes, and the timers that would run them against a dropped database.
    await Promise.all([this.publisher, ...this.publishers].map((p) => p.flush()));
    await this.db.drop();
  }

  // ------------------------------------------------------------------------------------------

  /** The definition as the worker runs it: the same handler, with the kit's points around it. */
  private instrument(def: JobDefinition<any, any, any>): JobDefinition<any, any, any> {
    const run = async (payload: unknown, ctx: JobContext<unknown>) => {
      const key = `${ctx.job.id}#${ctx.job.attempt}`;
      let checkpoints = 0;
      const at = (point: Point) => this.reach(ctx.job.id, ctx.job.attempt, point);
      const seen: JobContext<unknown> = {
        job: ctx.job,
        checkpoint: ctx.checkpoint,
        get signal() {
          return ctx.signal;
        },
        get log() {
          return ctx.log;
        },
        db: ctx.db,
        progress: (fraction, message) => ctx.progress(fraction, message),
        saveCheckpoint: async (checkpoint, progress) => {
          await at({ checkpoint: ++checkpoints });
          return ctx.saveCheckpoint(checkpoint, progress);
        },
        enqueue: (jobs) => ctx.enqueue(jobs),
      };
      try {
        await at('start');
        const result = await def.run(payload, seen);
        await at('end');
        return result;
      } catch (err) {
        this.errors.set(key, err);
        this.errors.set(ctx.job.id, err);
        throw err;
      }
    };
    return { ...def, run };
  }

  /** A handler at a point: it waits there if the test paused its job there. */
  private async reach(jobId: string, attempt: number, point: Point): Promise<void> {
    const p = this.pauses.get(jobId);
    if (!p || !samePoint(p.point, point) || (p.attempt !== null && p.attempt !== attempt)) return;
    p.attempt = attempt;
    p.reached();
    await p.go;
  }

  /** Hand the job's message to the worker, which claims the job. False when the claim ended the job instead (dead on an expired final attempt). */
  private async begin(id: string, w: TestWorker): Promise<boolean> {
    const before = await this.job(id);
    if (isTerminal(before.state)) throw new Error(`job ${id} is ${before.state}: it has no attempt left to run`);
    // A retry's backoff or a runAt in the future: the test does not wait for it.
    if (before.state === 'pending')
      await this.pool.query(`UPDATE jobs.job SET run_after = statement_timestamp() WHERE id = $1 AND state = 'pending'`, [id]);
    const message = await this.takeMessage(id, before.type);
    await w.handleBatch([message]);
    if (w.holds(id)) return true;
    const after = await this.job(id);
    if (after.state === 'dead') return false;
    const lease =
      after.state === 'running'
        ? ` with a live lease held by ${after.leaseOwner} (crash or freeze that attempt, then kit.reclaim(), to take it over)`
        : '';
    throw new Error(`job ${id} could not be claimed: it is ${after.state}${lease}`);
  }

  /**
   * The job's message from the queue (a fresh one when the queue has none visible, e.g. while a
   * retry's message is hidden for its backoff); other jobs' messages go back, surplus copies of
   * this one are deleted.
   */
  private async takeMessage(id: string, type: string): Promise<ReceivedMessage> {
    const others: ReceivedMessage[] = [];
    const surplus: ReceivedMessage[] = [];
    let mine: ReceivedMessage | undefined;
    for (let round = 0; round < 2 && !mine; round++) {
      if (round === 1) await this.queue.send([{ body: jobMessageBody(id, type) }]);
      for (let got = await this.queue.receive(10, 0); got.length > 0; got = await this.queue.receive(10, 0)) {
        for (const m of got) {
          const parsed = parseJobMessage(m.body);
          if (!parsed.ok || parsed.message.jobId !== id) others.push(m);
          else if (!mine) mine = m;
          else surplus.push(m);
        }
      }
    }
    await this.queue.delete(surplus.map((m) => m.receipt));
    await this.queue.changeVisibility(others.map((m) => ({ receipt: m.receipt, seconds: 0 })));
    return mine!;
  }

  private newWorker(): TestWorker {
    // As the services connect when deployed: row access only (testing/database.ts newAppPool).
    const pool = this.db.newAppPool(this.timings.concurrency + 2);
    const publisher = new Publisher(pool, this.queue, silentLogger);
    this.publishers.push(publisher);
    const w = new TestWorker({
      pool,
      queue: this.queue,
      dlq: this.dlq,
      registry: this.registry,
      publisher,
      log: silentLogger,
      timings: this.timings,
    });
    w.startHeartbeat();
    this.workers.push(w);
    return w;
  }

  /** The worker runOnce uses (a fresh one after it crashed or froze). */
  private runnerWorker(): TestWorker {
    if (!this.runner || this.runner.dead) this.runner = this.newWorker();
    return this.runner;
  }
}

/** Start a kit: a fresh migrated database (see testing/database.ts) and the platform around `jobs`. Call close() when done. */
export async function createTestKit(opts: TestKitOptions): Promise<TestKit> {
  const db = await openKitDatabase(opts.databaseUrl);
  try {
    return new TestKit(db, opts);
  } catch (err) {
    await db.drop();
    throw err;
  }
}
