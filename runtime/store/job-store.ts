// The job store: one method per state transition, each a named statement from sql.ts run as a
// prepared statement. Callers that need a transaction (enqueue, complete) pass the client they
// hold; the rest run on the pool.

import { onActiveJobs } from './active-jobs.ts';
import type pg from 'pg';
import { type ClaimedJob, toClaimed } from './claimed-job.ts';
import { insertOrder, keepDaysOf, keyHolder, type KeyedJob } from './idempotency.ts';
import { byId, deadlockRetried, jsonOrNull, pgArray, run, type Queryable } from './statements.ts';
import { withTransaction } from '../db/transaction.ts';
import { uuidv7 } from '../domain/uuid7.ts';
import { DEFAULT_LANE, type Lane } from '../domain/lanes.ts';
import { rowToJob, type Job, type JobError, type JobState, type Progress, type WithDbNow } from '../domain/job.ts';

export { namedStatements, run, type Queryable } from './statements.ts';
export type { ClaimedJob } from './claimed-job.ts';

/** A job to insert; its retention and its key's (KeyedJob: keepDays, keyKeepDays) the client decides (client.ts). */
export interface NewJob extends KeyedJob {
  /** Its id, when the caller chose it (JobClient.insertNow, to name the jobs of an enqueue whose outcome is unknown); else a new UUIDv7. */
  id?: string;
  type: string;
  payload: unknown;
  idempotencyKey?: string | null;
  maxAttempts: number;
  runAt?: Date | null;
  /** At most `concurrencyLimit` (default 1) jobs with this key run at once, in enqueue order. */
  concurrencyKey?: string | null;
  concurrencyLimit?: number | null;
  /** The job whose handler enqueued this one (ctx.enqueue). */
  parentId?: string | null;
  lane?: Lane | null; // its priority lane (default bulk): the queue its messages go to
}

export interface Inserted {
  job: Job;
  duplicate: boolean;
  /** The outbox row to publish after COMMIT (absent for a duplicate, and for a job due beyond the publish horizon: deferred). */
  outboxId?: string;
}

/** A job left running under a worker with no handler, and the attempt it ran under (null: not known): releaseLostClaims. */
export type NotedToken = { id: string; attempt: number | null };
/** A job releaseLostClaims released, with the outbox row that publishes it. */
export type ReleasedJob = Pick<ClaimedJob, 'id' | 'type' | 'lane' | 'attempt' | 'concurrencyKey'> & { outboxId: string };

/** Blocked jobs of one key and type: what they wait for ("key ledger:company-7", "a slot of inventory.cost") and who holds it. */
export interface WaitingGroup {
  waitsFor: string;
  concurrencyKey: string | null;
  type: string;
  jobs: number;
  /** When the longest-waiting of them was blocked. */
  since: Date;
  /** The running jobs holding the key or the type's slots (at most 5). */
  heldBy: string[];
  /** The key's or the type's limit. */
  limit: number;
}

export interface LeaseToken {
  id: string;
  attempt: number;
}

export interface ListFilter {
  state?: JobState;
  type?: string;
  lane?: Lane;
  limit: number;
  /** Keyset cursor: the last job of the previous page (ids sort by creation time). */
  after?: { id: string; createdAt?: Date };
}

export class JobStore {
  constructor(readonly pool: pg.Pool) {}

  /**
   * Insert jobs and their outbox rows in the caller's transaction (`db`). A job whose
   * (type, idempotency key) already has an active job, or a lasting key still in its window
   * (keyKeepDays), comes back as that job with duplicate: true. Requires READ COMMITTED (the
   * default): the lookup after a conflict must see the row the conflicting transaction committed.
   */
  async insertMany(db: Queryable, jobs: NewJob[]): Promise<Inserted[]> {
    if (jobs.length === 0) return [];
    const ids = jobs.map((j) => j.id ?? uuidv7());
    // In key order, against deadlocks (idempotency.ts insertOrder); the ids keep the request's order.
    const at = insertOrder(jobs);
    const sorted = at.map((i) => jobs[i]!);
    const { rows } = await run(db, 'jobInsertMany', [
      at.map((i) => ids[i]!),
      sorted.map((j) => j.type),
      sorted.map((j) => JSON.stringify(j.payload ?? {})),
      sorted.map((j) => j.idempotencyKey ?? null),
      sorted.map((j) => j.maxAttempts),
      sorted.map((j) => j.runAt ?? null),
      sorted.map((j) => j.concurrencyKey ?? null),
      sorted.map((j) => (j.concurrencyKey ? (j.concurrencyLimit ?? 1) : null)),
      sorted.map((j) => j.parentId ?? null),
      // float8 text: Infinity (forever) is PostgreSQL's 'Infinity' too.
      sorted.map((j) => keepDaysOf(j)),
      sorted.map((j) => (j.idempotencyKey ? (j.keyKeepDays ?? null) : null)),
      sorted.map((j) => j.lane ?? DEFAULT_LANE),
    ]);
    const byId = new Map(rows.map((r) => [r.id as string, r]));
    const out: Inserted[] = [];
    for (let i = 0; i < jobs.length; i++) {
      const row = byId.get(ids[i]!);
      if (row) {
        out.push({ job: rowToJob(row), duplicate: false, ...(row.outbox_id == null ? {} : { outboxId: String(row.outbox_id) }) });
        continue;
      }
      const spec = jobs[i]!;
      // Our row lost to an active job with the same key, or to a lasting key: in this batch, or committed by
      // another transaction. An active-only key's job may finish between our INSERT and the lookup (then the
      // key is free again), so retry the insert alone a few times rather than report a phantom duplicate.
      const sameBatch = out.find((o) => o.job.type === spec.type && o.job.idempotencyKey === spec.idempotencyKey && spec.idempotencyKey);
      if (sameBatch) {
        out.push({ job: sameBatch.job, duplicate: true });
        continue;
      }
      out.push(await this.insertOrGetExisting(db, spec));
    }
    return out;
  }

  private async insertOrGetExisting(db: Queryable, spec: NewJob): Promise<Inserted> {
    for (let tries = 0; tries < 5; tries++) {
      const found = await keyHolder(db, spec);
      if (found) return { job: found, duplicate: true };
      const again = await this.insertMany(db, [spec]);
      if (!again[0]!.duplicate) return again[0]!;
    }
    throw new Error(`idempotency key ${spec.idempotencyKey} of type ${spec.type} kept changing hands; try again`);
  }

  /**
   * Claim the claimable jobs among `ids` for `owner`, leasing them for `leaseSeconds`.
   * Returns the jobs this owner now holds; the other ids were not claimable (or are being
   * claimed by someone else right now).
   */
  async claim(ids: string[], owner: string, leaseSeconds: number): Promise<ClaimedJob[]> {
    if (ids.length === 0) return [];
    const { rows } = await run(this.pool, 'jobClaim', [pgArray([...ids].sort()), owner, leaseSeconds]);
    return rows.map(toClaimed);
  }

  /**
   * Claim jobs with a concurrency key among `ids` (the plain claim leaves them): those their key
   * has room for start, in enqueue order; the due ones it has no room for are blocked (their
   * messages can go: they are published again when the key has room). See sql-keys.ts.
   */
  async claimKeyed(ids: string[], owner: string, leaseSeconds: number): Promise<{ claimed: ClaimedJob[]; blocked: string[] }> {
    if (ids.length === 0) return { claimed: [], blocked: [] };
    const sorted = pgArray([...ids].sort());
    return withTransaction(this.pool, async (c) => {
      await run(c, 'keyLockClaim', [sorted]);
      const claimed = (await run(c, 'jobClaimKeyed', [sorted, owner, leaseSeconds])).rows.map(toClaimed);
      const { rows } = await run(c, 'jobBlockKeyed', [sorted]);
      const keyed = rows.filter((r) => r.concurrency_key !== null);
      if (keyed.length > 0) {
        await run(c, 'keyWake', [keyed.map((r) => r.concurrency_key), keyed.map((r) => r.concurrency_limit)]);
      }
      // Keys first, then types (the lock order; both are held already by keyLockClaim).
      const types = [...new Set(rows.map((r) => r.limited_type as string | null).filter((t) => t !== null))].sort();
      if (types.length > 0) await run(c, 'typeWake', [types]);
      return { claimed, blocked: rows.map((r) => r.id as string) };
    });
  }

  /**
   * A worker's start: make the fleet limits in force those of its definitions (`maxRunning`;
   * null: the type has none). Returns the types whose limit changed; their blocked jobs that
   * now have room are published.
   */
  async syncTypeLimits(limits: { type: string; maxRunning: number | null }[], by: string): Promise<string[]> {
    if (limits.length === 0) return [];
    const sorted = [...limits].sort((a, b) => (a.type < b.type ? -1 : a.type > b.type ? 1 : 0));
    return withTransaction(this.pool, async (c) => {
      // The types' locks first, in type order: no claim of these types decides meanwhile.
      await run(c, 'typeLock', [sorted.map((l) => l.type)]);
      const changed = (await run(c, 'typeLimitsSync', [sorted.map((l) => l.type), sorted.map((l) => l.maxRunning), by])).rows.map(
        (r) => r.type as string,
      );
      if (changed.length > 0) await run(c, 'typeWake', [changed]);
      return changed;
    });
  }

  /** A job's children (ctx.enqueue), oldest first, at most `limit`. */
  async children(parentId: string, limit = 100): Promise<{ id: string; type: string; state: JobState }[]> {
    return (await run(this.pool, 'jobChildren', [parentId, limit])).rows as { id: string; type: string; state: JobState }[];
  }

  /** How many children a job has. */
  async childCount(parentId: string): Promise<number> {
    return (await run(this.pool, 'jobChildCount', [parentId])).rows[0]!.n as number;
  }

  /** What blocked jobs wait for, longest waiting first, at most `limit` groups (see WaitingGroup). */
  async waiting(limit: number): Promise<WaitingGroup[]> {
    const { rows } = await onActiveJobs(this.pool, (c) => run(c, 'waitingGroups', [limit]));
    return rows.map((r) => {
      const byKey = r.k !== null && ((r.key_holders as string[]).length >= (r.kl as number) || r.tl === null);
      return {
        waitsFor: byKey ? `key ${r.k}` : `a slot of ${r.t}`,
        concurrencyKey: r.k,
        type: r.t,
        jobs: r.jobs,
        since: r.since,
        heldBy: byKey ? r.key_holders : r.type_holders,
        limit: byKey ? r.kl : r.tl,
      };
    });
  }

  /** The fleet limit in force for `type`, or null. */
  async typeLimit(type: string): Promise<number | null> {
    const { rows } = await run(this.pool, 'typeLimit', [type]);
    return rows.length > 0 ? (rows[0]!.max_running as number) : null;
  }

  /** The ids of the jobs of `type` holding its slots now. */
  async runningWithType(type: string): Promise<string[]> {
    return (await run(this.pool, 'typeRunning', [type])).rows.map((r) => r.id as string);
  }

  /** The ids of the jobs of `key` running now. */
  async runningWithKey(key: string): Promise<string[]> {
    return (await run(this.pool, 'keyRunning', [key])).rows.map((r) => r.id as string);
  }

  /** Renew leases; returns the ids still held (the others are lost). */
  async renewLeases(tokens: (LeaseToken & { progress?: Progress | null })[], leaseSeconds: number): Promise<Set<string>> {
    if (tokens.length === 0) return new Set();
    const sorted = byId(tokens);
    const { rows } = await deadlockRetried(() =>
      run(this.pool, 'jobRenewLeases', [
        sorted.map((t) => t.id),
        sorted.map((t) => t.attempt),
        sorted.map((t) => (t.progress ? JSON.stringify(t.progress) : null)),
        leaseSeconds,
      ]),
    );
    return new Set(rows.map((r) => r.id as string));
  }

  /** Save a checkpoint; false when the lease is lost. `tx`: the job transaction a chunk commits in (executor.ts). */
  async checkpoint(token: LeaseToken, checkpoint: unknown, progress?: Progress | null, tx: Queryable = this.pool): Promise<boolean> {
    const r = await run(tx, 'jobCheckpoint', [
      token.id,
      token.attempt,
      JSON.stringify(checkpoint ?? null),
      progress ? JSON.stringify(progress) : null,
    ]);
    return r.rowCount === 1;
  }

  /** Mark succeeded inside the caller's transaction `tx`; false when the lease is lost (caller must ROLLBACK). */
  async complete(tx: Queryable, token: LeaseToken, result: unknown, progress?: Progress | null): Promise<boolean> {
    const r = await run(tx, 'jobComplete', [token.id, token.attempt, jsonOrNull(result), progress ? JSON.stringify(progress) : null]);
    return r.rowCount === 1;
  }

  /**
   * Mark many succeeded in one autocommit statement, each fenced by its own token. Returns the
   * ids that did not complete because their lease is lost (usually none).
   */
  async completeMany(items: (LeaseToken & { result: unknown; progress?: Progress | null })[]): Promise<Set<string>> {
    if (items.length === 0) return new Set();
    // The statement finds each job's token by its position among the ids.
    if (new Set(items.map((i) => i.id)).size !== items.length) throw new Error('completeMany: a job appears twice in one batch');
    const attempt = items[0]!.attempt;
    const sameAttempt = items.every((i) => i.attempt === attempt);
    const results = items.some((i) => i.result !== null && i.result !== undefined) ? items.map((i) => jsonOrNull(i.result)) : null;
    const progress = items.some((i) => i.progress) ? items.map((i) => (i.progress ? JSON.stringify(i.progress) : null)) : null;
    const { rows } = await deadlockRetried(() =>
      run(this.pool, 'jobCompleteMany', [
        pgArray(items.map((i) => i.id)),
        sameAttempt ? null : pgArray(items.map((i) => i.attempt)),
        sameAttempt ? attempt : null,
        results,
        progress,
      ]),
    );
    return new Set(rows.map((r) => r.id as string));
  }

  /**
   * Fail an attempt: back to pending after `backoffSeconds`, or dead at the cap or when
   * `nonRetryable`. Returns the job after the transition, or null when the lease is lost.
   */
  async fail(token: LeaseToken, error: JobError, backoffSeconds: number, nonRetryable: boolean): Promise<Job | null> {
    const { rows } = await run(this.pool, 'jobFail', [token.id, token.attempt, backoffSeconds, nonRetryable, JSON.stringify(error)]);
    return rows[0] ? rowToJob(rows[0]) : null;
  }

  /** Hand claims back (graceful stop; `keepDue`: due when they were, not now); returns the ids released. */
  async release(tokens: LeaseToken[], reason: string, o: { keepDue?: boolean } = {}): Promise<Set<string>> {
    if (tokens.length === 0) return new Set();
    const sorted = byId(tokens);
    const ids = sorted.map((t) => t.id);
    const { rows } = await deadlockRetried(() =>
      run(this.pool, 'jobRelease', [ids, sorted.map((t) => t.attempt), reason, o.keepDue === true]),
    );
    return new Set(rows.map((r) => r.id as string));
  }

  /** Release the jobs among `tokens` (attempt null: unknown) still running under `owner` with no handler, each with an outbox row (sql-lost-claims.ts; `interruptedLimit` for interrupted attempts). */
  async releaseLostClaims(
    tokens: NotedToken[],
    owner: string,
    reason: string,
    interruptedLimit: number | null = null,
  ): Promise<ReleasedJob[]> {
    const sorted = byId(tokens);
    const values = [sorted.map((t) => t.id), owner, reason, sorted.map((t) => t.attempt), interruptedLimit];
    const { rows } = tokens.length > 0 ? await deadlockRetried(() => run(this.pool, 'jobReleaseLostClaims', values)) : { rows: [] };
    // biome-ignore format: one line a job
    return rows.map((r) => ({ id: r.id, type: r.type, lane: r.lane, attempt: r.attempt, concurrencyKey: r.concurrency_key ?? null, outboxId: String(r.outbox_id) }));
  }

  /** Cancel a pending or running job; null when it does not exist or has already ended. */
  async cancel(id: string, by: string): Promise<Job | null> {
    const { rows } = await run(this.pool, 'jobCancel', [id, by]);
    return rows[0] ? rowToJob(rows[0]) : null;
  }

  /** Dead-letter the jobs among `ids` whose owner died on their final attempt. */
  async deadLetterExpired(ids: string[]): Promise<Job[]> {
    if (ids.length === 0) return [];
    const { rows } = await run(this.pool, 'jobDeadLetterExpired', [ids]);
    return rows.map((r) => rowToJob(r));
  }

  /** The rescuer's transition (see sql.ts): returns the jobs moved, with their outbox row when re-queued. */
  async rescueExpired(graceSeconds: number, limit: number): Promise<{ job: Job; outboxId: string | null }[]> {
    const { rows } = await onActiveJobs(this.pool, (c) => run(c, 'jobRescueExpired', [graceSeconds, limit]));
    return rows.map((r) => ({ job: rowToJob(r), outboxId: r.outbox_id == null ? null : String(r.outbox_id) }));
  }

  async get(id: string, db: Queryable = this.pool): Promise<Job | null> {
    const { rows } = await run(db, 'jobGet', [id]);
    return rows[0] ? rowToJob(rows[0]) : null;
  }

  async getMany(ids: string[]): Promise<Map<string, Job & WithDbNow>> {
    if (ids.length === 0) return new Map();
    const { rows } = await run(this.pool, 'jobGetMany', [ids]);
    return new Map(rows.map((r) => [r.id as string, { ...rowToJob(r), dbNow: r.db_now as Date }]));
  }

  async list(f: ListFilter): Promise<Job[]> {
    const { rows } = await run(this.pool, 'jobList', [f.state ?? null, f.type ?? null, f.after?.id ?? null, f.limit, f.lane ?? null]);
    return rows.map((r) => rowToJob(r));
  }

  /** Pending and running jobs only, from job_active (active-jobs.ts): cheap however many jobs have ever run. */
  async countActive(): Promise<{ pending: number; running: number }> {
    const { rows } = await onActiveJobs(this.pool, (c) => run(c, 'jobCountActive', []));
    const out = { pending: 0, running: 0 };
    for (const r of rows) out[r.state as 'pending' | 'running'] = r.count as number;
    return out;
  }

  /** Every state: a count of the whole table, which grows with it (the live view spaces these out). */
  async countByState(): Promise<Record<JobState, number>> {
    const { rows } = await run(this.pool, 'jobCountByState', []);
    const out: Record<JobState, number> = { pending: 0, running: 0, succeeded: 0, dead: 0, cancelled: 0 };
    for (const r of rows) out[r.state as JobState] = r.count as number;
    return out;
  }
}
