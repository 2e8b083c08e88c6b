// The job types the deployed code registers, in the database (jobs.job_type, migration 0012):
// what jobs.enqueue — the SQL function an ERP in another language calls — accepts, and the
// defaults it applies as the TypeScript client would: the attempt cap, the lane, the default
// concurrency key's template, how long the type's idempotency keys and finished jobs are kept.
// Every API and worker task writes them at its start; the last to start decides.

import type { JobRegistry } from '../handlers/registry.ts';
import { DEFAULT_KEEP_FINISHED_DAYS } from './idempotency.ts';
import { timed } from '../db/pool.ts';
import type { Queryable } from './job-store.ts';

const REGISTER = `
  INSERT INTO jobs.job_type (type, default_max_attempts, concurrency_key_template, concurrency_limit, key_from_code,
                             default_lane, key_keep_days, keep_finished_days, payload_fields, registered_by)
  SELECT t.*, by.name
    FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::boolean[], $6::text[], $7::float8[], $8::float8[], $10::jsonb[]) AS t,
         (VALUES ($9::text)) AS by(name)
  ON CONFLICT (type) DO UPDATE
     SET default_max_attempts = excluded.default_max_attempts, concurrency_key_template = excluded.concurrency_key_template,
         concurrency_limit = excluded.concurrency_limit, key_from_code = excluded.key_from_code, default_lane = excluded.default_lane,
         key_keep_days = excluded.key_keep_days, keep_finished_days = excluded.keep_finished_days,
         payload_fields = excluded.payload_fields, registered_at = now(), registered_by = excluded.registered_by`;

export interface JobTypeDefaults {
  /** JOBS_MAX_ATTEMPTS: the cap of a type that sets none. */
  maxAttempts: number;
  /** JOBS_KEEP_FINISHED_DAYS: how long a type that says nothing keeps its finished jobs. */
  keepFinishedDays?: number;
}

/** Record `registry`'s types with the defaults jobs.enqueue applies to each. */
export async function registerJobTypes(db: Queryable, registry: JobRegistry, defaults: JobTypeDefaults, by: string): Promise<void> {
  const types = registry.types();
  const defs = types.map((t) => registry.get(t)!);
  await db.query({
    name: 'jobTypesRegister',
    text: REGISTER,
    values: [
      types,
      defs.map((d) => d.maxAttempts ?? defaults.maxAttempts),
      defs.map((d) => (typeof d.concurrency?.key === 'string' ? d.concurrency.key : null)),
      defs.map((d) => d.concurrency?.limit ?? null),
      defs.map((d) => typeof d.concurrency?.key === 'function'),
      defs.map((d) => d.lane ?? 'bulk'),
      types.map((t) => registry.keyKeepDays(t)),
      defs.map((d) => d.keepFinishedDays ?? defaults.keepFinishedDays ?? DEFAULT_KEEP_FINISHED_DAYS),
      by,
      // The payload's fields (migration 0020): a worker on an older image hands on a job with a field it lacks.
      defs.map((d) => (d.schema ? JSON.stringify(Object.keys(d.schema.shape)) : null)),
    ],
  });
}

/** The payload fields of `type`'s latest registration; null when it did not say (no schema, an older image) or the type is unknown. */
export async function registeredPayloadFields(db: Queryable, type: string): Promise<string[] | null> {
  // With the pool's read timeout (the worker's): a silent primary must not hold a handler slot for TCP's 15 minutes.
  const { rows } = await db.query(
    timed(db, { name: 'jobTypePayloadFields', text: 'SELECT payload_fields FROM jobs.job_type WHERE type = $1', values: [type] }),
  );
  const fields = rows[0]?.payload_fields;
  return Array.isArray(fields) ? fields.map(String) : null;
}

/** Whether an API or worker of this database has registered `type` (at its start): a job of a type none has waits for one that does. */
export async function isTypeRegistered(db: Queryable, type: string): Promise<boolean> {
  const { rows } = await db.query({ name: 'jobTypeRegistered', text: 'SELECT 1 FROM jobs.job_type WHERE type = $1', values: [type] });
  return rows.length > 0;
}
