// The API an ERP developer uses to enqueue jobs: inside their own transaction, with an
// optional idempotency key, published only after their COMMIT.
//
//   const { jobs, afterCommit } = await jobs.enqueue(tx, { type: 'ledger.post', payload });
//   await tx.query('COMMIT');
//   await afterCommit();            // or let the outbox relay publish within seconds
//
// afterCommit publishes only the jobs whose rows exist (a COMMIT can end in a rollback) and waits
// for SQS at most PUBLISH_WAIT_MS (outbox.ts).
//
// or, when the enqueue is the whole transaction: `await jobs.enqueueNow(spec)`.

import { withTransaction } from '../db/transaction.ts';
import { inheritQueryTimeout, releaseClient } from '../db/pool.ts';
import { isAnswerLost, isDatabaseUnavailable } from '../db/unavailable.ts';
import { EnqueueOutcomeUnknownError } from '../domain/errors.ts';
import { uuidv7 } from '../domain/uuid7.ts';
import type pg from 'pg';
import type { JobRegistry } from '../handlers/registry.ts';
import type { Job } from '../domain/job.ts';
import type { Lane } from '../domain/lanes.ts';
import { enqueueRequest, issueToValidationError, type EnqueueRequest, type EnqueueRequestSchema } from './enqueue-request.ts';
import { DEFAULT_KEEP_FINISHED_DAYS } from './idempotency.ts';
import { JobStore, type NewJob, type Queryable } from './job-store.ts';
import type { Publisher } from './outbox.ts';

export { MAX_PAYLOAD_BYTES } from './enqueue-request.ts';

export interface EnqueueSpec {
  type: string;
  payload: unknown;
  idempotencyKey?: string | null;
  maxAttempts?: number | null;
  /** Do not start before this time. */
  runAt?: Date | string | null;
  /** Jobs with one key (e.g. `ledger:company-7`) run at most concurrencyLimit at a time, in enqueue order. */
  concurrencyKey?: string | null;
  /** Default: the job type's, else 1. */
  concurrencyLimit?: number | null;
  /** `urgent` overtakes `bulk` (the default): its own queue, taken first by the workers. Default: the job type's. */
  lane?: Lane | null;
}

export interface EnqueueResult {
  job: Job;
  /**
   * True when the (type, idempotency key) already named a job: an active one, or for a type whose
   * keys outlive their jobs (defineJob's `idempotency`) one that ended within the key's window.
   * That job is returned as it is (its state and result), and no other is made.
   */
  duplicate: boolean;
  /**
   * On a duplicate, true when this enqueue's payload differs from that job's: the key names other
   * work than the caller meant (a key reused by mistake, e.g. one without the period in it), and
   * nothing was enqueued for this payload. Absent when the payloads are the same, or not a duplicate.
   */
  payloadDiffers?: true;
}

export interface JobClientOptions {
  pool: pg.Pool;
  registry: JobRegistry;
  publisher: Publisher;
  defaultMaxAttempts: number;
  /** Days a finished job is kept when its type does not say (JOBS_KEEP_FINISHED_DAYS); default 30. */
  defaultKeepFinishedDays?: number;
  /**
   * Called after a cancel committed, with the cancelled job: the API and `jobs cancel` announce it
   * on the live view's event bus (runtime/live/events.ts announceCancel), which a cancel would
   * otherwise never reach. Awaited, so a short command's notice leaves before it exits; must not throw.
   */
  onCancelled?: (job: Job) => Promise<void>;
}

export class JobClient {
  readonly store: JobStore;
  private readonly schema: EnqueueRequestSchema;

  constructor(private readonly opts: JobClientOptions) {
    this.store = new JobStore(opts.pool);
    this.schema = enqueueRequest(opts.registry);
  }

  /**
   * Check a spec with the enqueue request's rules (enqueue-request.ts: the same schema as the
   * body of POST /v1/jobs); throws ValidationError naming the field.
   */
  validate(spec: EnqueueSpec): NewJob {
    // A Date is checked as the ISO text the API would receive for it: one rule for both.
    const runAt =
      spec?.runAt instanceof Date ? (Number.isNaN(spec.runAt.getTime()) ? 'Invalid Date' : spec.runAt.toISOString()) : spec?.runAt;
    const parsed = this.schema.safeParse(spec && typeof spec === 'object' ? { ...spec, ...(runAt !== undefined ? { runAt } : {}) } : spec);
    if (!parsed.success) throw issueToValidationError(parsed.error);
    return this.newJob(parsed.data);
  }

  /** A request the schema has passed (the API's parsed body) as the job to insert: the attempt cap defaulted. */
  newJob(r: EnqueueRequest): NewJob {
    const def = this.opts.registry.get(r.type)!;
    const maxAttempts = r.maxAttempts ?? def.maxAttempts ?? this.opts.defaultMaxAttempts;
    return {
      type: r.type,
      payload: r.payload,
      idempotencyKey: r.idempotencyKey,
      maxAttempts,
      runAt: r.runAt,
      concurrencyKey: r.concurrencyKey,
      concurrencyLimit: r.concurrencyLimit,
      // Retention is the type's to decide, never the enqueuer's: no request field sets it.
      keepDays: def.keepFinishedDays ?? this.opts.defaultKeepFinishedDays ?? DEFAULT_KEEP_FINISHED_DAYS,
      keyKeepDays: r.idempotencyKey ? this.opts.registry.keyKeepDays(r.type) : null,
      lane: r.lane,
    };
  }

  /**
   * Enqueue in the caller's transaction `tx` (a client inside BEGIN, READ COMMITTED). Nothing is
   * published until the caller calls `afterCommit()` after its COMMIT; if it rolls back, the jobs
   * and their outbox rows vanish with it and nothing is ever published.
   */
  async enqueue(tx: Queryable, specs: EnqueueSpec | EnqueueSpec[]): Promise<{ jobs: EnqueueResult[]; afterCommit: () => Promise<void> }> {
    return this.insert(
      tx,
      (Array.isArray(specs) ? specs : [specs]).map((s) => this.validate(s)),
      // The caller commits: its COMMIT may have rolled back (Publisher.publishCommitted).
      true,
    );
  }

  /**
   * Insert checked jobs (validate, newJob) in the caller's transaction `tx`; `afterCommit` as for
   * enqueue. `callerCommits`: afterCommit checks that the rows exist first, as the caller's
   * COMMIT may have ended in a rollback; false where the platform itself committed.
   */
  async insert(tx: Queryable, rows: NewJob[], callerCommits = false): Promise<{ jobs: EnqueueResult[]; afterCommit: () => Promise<void> }> {
    const inserted = await this.store.insertMany(tx, rows);
    const toPublish = inserted
      .filter((i) => i.outboxId)
      .map((i) => ({ outboxId: i.outboxId!, jobId: i.job.id, type: i.job.type, lane: i.job.lane, runAfter: i.job.runAfter }));
    return {
      jobs: inserted.map((i, n) =>
        i.duplicate && !sameJson(JSON.parse(JSON.stringify(rows[n]!.payload ?? {})), i.job.payload)
          ? { job: i.job, duplicate: true, payloadDiffers: true }
          : { job: i.job, duplicate: i.duplicate },
      ),
      afterCommit: () => (callerCommits ? this.opts.publisher.publishCommitted(toPublish) : this.opts.publisher.publish(toPublish)),
    };
  }

  /** Enqueue in a transaction of its own, then publish. */
  async enqueueNow(specs: EnqueueSpec | EnqueueSpec[]): Promise<EnqueueResult[]> {
    // Validate before taking a connection: bad input never reaches the database.
    return this.insertNow((Array.isArray(specs) ? specs : [specs]).map((s) => this.validate(s)));
  }

  /**
   * Insert checked jobs (validate, newJob) in a transaction of their own, then publish.
   *
   * Without idempotency keys the insert is one statement (jobInsertMany: the jobs and their outbox
   * rows; no row can conflict, so nothing follows it), and one statement is its own transaction:
   * sent alone it is all-or-nothing without BEGIN and COMMIT around it, two round trips fewer.
   * Measured (enqueue → start at 200 jobs/s, 6 runs each): steady p99 through the local SQS
   * endpoint 13.0 against 15.7 ms (median), in-process 8.0 against 11.1. With keys, a conflict
   * is resolved by more statements in the same transaction (JobStore.insertMany).
   */
  async insertNow(rows: NewJob[]): Promise<EnqueueResult[]> {
    // Every job's id is chosen here, in request order (UUIDv7: a concurrency key's jobs start in
    // the order they came), so that a failure after a keyless job's insert (or its COMMIT) was
    // sent can name it: the caller must look it up before enqueuing again, as a blind retry may
    // create it twice (EnqueueOutcomeUnknownError). A keyed job's retry is safe.
    if (rows.length === 0) return [];
    const named = rows.map((r) => (r.id ? r : { ...r, id: uuidv7() }));
    const keyless = named.filter((r) => !r.idempotencyKey).map((r) => r.id!);
    const unknown = (err: unknown) => (keyless.length > 0 && isAnswerLost(err) ? new EnqueueOutcomeUnknownError(keyless, err) : err);
    const result =
      keyless.length === named.length
        ? await this.insertAlone(named, unknown)
        : await withTransaction(this.opts.pool, (client) => this.insert(client, named), { commitError: unknown });
    await result.afterCommit();
    return result.jobs;
  }

  /** The insert as one statement on a connection of its own: a failure to connect sent nothing; one after, maybe everything. */
  private async insertAlone(rows: NewJob[], unknown: (err: unknown) => unknown) {
    const client = await this.opts.pool.connect();
    inheritQueryTimeout(this.opts.pool, client);
    let broken: Error | undefined;
    try {
      return await this.insert(client, rows);
    } catch (err) {
      // A connection that failed, or a statement that got no answer, goes (the pool replaces it).
      if (isDatabaseUnavailable(err)) broken = err as Error;
      throw unknown(err);
    } finally {
      releaseClient(client, broken);
    }
  }

  /** Cancel a pending or running job. Returns the job (cancelled, or as it already ended), or null if unknown. */
  async cancel(id: string, by: string): Promise<{ job: Job; cancelled: boolean } | null> {
    const job = await this.store.cancel(id, by);
    if (job) {
      await this.opts.onCancelled?.(job);
      return { job, cancelled: true };
    }
    const current = await this.store.get(id);
    return current ? { job: current, cancelled: false } : null;
  }
}

/** Equal as JSON values (key order aside, as jsonb stores them). */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object')
    return `{${Object.keys(v)
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v ?? null);
}
