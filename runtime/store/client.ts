// The API an ERP developer uses to enqueue jobs: inside their own transaction, with an
// optional idempotency key, published only after their COMMIT.
//
//   const { jobs, afterCommit } = await jobs.enqueue(tx, { type: 'ledger.post', payload });
//   await tx.query('COMMIT');
//   await afterCommit();            // or let the outbox relay publish within seconds
//
// or, when the enqueue is the whole transaction: `await jobs.enqueueNow(spec)`.

import { ISO_TIME_PATTERN } from '../domain/ids.ts';
import { withTransaction } from '../db/transaction.ts';
import type pg from 'pg';
import { ValidationError } from '../domain/errors.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import type { Job } from '../domain/job.ts';
import { JobStore, type NewJob, type Queryable } from './job-store.ts';
import type { Publisher } from './outbox.ts';

/** Largest payload accepted, as JSON text. The API answers 413 above it. */
export const MAX_PAYLOAD_BYTES = 256 * 1024;

/** A due time: a Date, or an ISO 8601 string with an offset (new Date('1') parses too, so check the shape). */
export function parseRunAt(value: unknown): Date {
  const example = 'e.g. 2026-12-01T06:00:00Z';
  let at: Date;
  if (value instanceof Date) at = value;
  else if (typeof value === 'string' && ISO_TIME_PATTERN.test(value)) at = new Date(value);
  else
    throw new ValidationError(
      'runAt',
      `must be an ISO 8601 timestamp with an offset, ${example} (got ${JSON.stringify(value)?.slice(0, 80)})`,
    );
  if (Number.isNaN(at.getTime()) || at.getUTCFullYear() < 1970 || at.getUTCFullYear() > 9999) {
    throw new ValidationError('runAt', `must be a real date between 1970 and 9999, ${example}`);
  }
  return at;
}

export interface EnqueueSpec {
  type: string;
  payload: unknown;
  idempotencyKey?: string | null;
  maxAttempts?: number | null;
  /** Do not start before this time. */
  runAt?: Date | string | null;
}

export interface EnqueueResult {
  job: Job;
  /** True when an active job with the same (type, idempotency key) already existed: that job is returned. */
  duplicate: boolean;
}

export interface JobClientOptions {
  pool: pg.Pool;
  registry: JobRegistry;
  publisher: Publisher;
  defaultMaxAttempts: number;
}

export class JobClient {
  readonly store: JobStore;

  constructor(private readonly opts: JobClientOptions) {
    this.store = new JobStore(opts.pool);
  }

  /** Validate a spec against the registry; throws ValidationError naming the field. */
  validate(spec: EnqueueSpec): NewJob {
    if (!spec || typeof spec !== 'object') throw new ValidationError('body', 'must be a JSON object');
    const def = this.opts.registry.require(spec.type);
    let size: number;
    try {
      size = Buffer.byteLength(JSON.stringify(spec.payload ?? {}));
    } catch {
      throw new ValidationError('payload', 'must be JSON-serializable');
    }
    if (size > MAX_PAYLOAD_BYTES) {
      throw new ValidationError(
        'payload',
        `is ${size} bytes; the limit is ${MAX_PAYLOAD_BYTES} bytes (store large inputs in a table and pass their id)`,
        413,
      );
    }
    const payload = def.parse(spec.payload ?? {});
    const key = spec.idempotencyKey;
    if (key !== undefined && key !== null && (typeof key !== 'string' || key.length < 1 || key.length > 200)) {
      throw new ValidationError('idempotencyKey', 'must be a string of 1 to 200 characters');
    }
    const maxAttempts = spec.maxAttempts ?? def.maxAttempts ?? this.opts.defaultMaxAttempts;
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 100) {
      throw new ValidationError('maxAttempts', `must be a whole number from 1 to 100 (got ${String(maxAttempts)})`);
    }
    const runAt = spec.runAt === undefined || spec.runAt === null ? null : parseRunAt(spec.runAt);
    return { type: def.type, payload, idempotencyKey: key ?? null, maxAttempts, runAt };
  }

  /**
   * Enqueue in the caller's transaction `tx` (a client inside BEGIN, READ COMMITTED). Nothing is
   * published until the caller calls `afterCommit()` after its COMMIT; if it rolls back, the jobs
   * and their outbox rows vanish with it and nothing is ever published.
   */
  async enqueue(tx: Queryable, specs: EnqueueSpec | EnqueueSpec[]): Promise<{ jobs: EnqueueResult[]; afterCommit: () => Promise<void> }> {
    const list = Array.isArray(specs) ? specs : [specs];
    const rows = list.map((s) => this.validate(s));
    const inserted = await this.store.insertMany(tx, rows);
    const toPublish = inserted
      .filter((i) => i.outboxId)
      .map((i) => ({ outboxId: i.outboxId!, jobId: i.job.id, type: i.job.type, runAfter: i.job.runAfter }));
    return {
      jobs: inserted.map((i) => ({ job: i.job, duplicate: i.duplicate })),
      afterCommit: () => this.opts.publisher.publish(toPublish),
    };
  }

  /** Enqueue in a transaction of its own, then publish. */
  async enqueueNow(specs: EnqueueSpec | EnqueueSpec[]): Promise<EnqueueResult[]> {
    const list = Array.isArray(specs) ? specs : [specs];
    // Validate before taking a connection: bad input never reaches the database.
    for (const s of list) this.validate(s);
    const result = await withTransaction(this.opts.pool, (client) => this.enqueue(client, list));
    await result.afterCommit();
    return result.jobs;
  }

  /** Cancel a pending or running job. Returns the job (cancelled, or as it already ended), or null if unknown. */
  async cancel(id: string, by: string): Promise<{ job: Job; cancelled: boolean } | null> {
    const job = await this.store.cancel(id, by);
    if (job) return { job, cancelled: true };
    const current = await this.store.get(id);
    return current ? { job: current, cancelled: false } : null;
  }
}
