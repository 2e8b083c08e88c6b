// The handler contract: what an ERP developer writes to define a job type (DESIGN "Handler
// contract"). A handler gets its parsed payload and a context; it returns a result (stored on
// the job) or throws (the attempt fails; NonRetryableError sends the job straight to dead).
// A handler declares its payload as a zod schema (`defineJob({ schema, … })`): its TypeScript
// type, the parse that refuses bad input naming `payload.<field>`, `jobs types --describe`,
// GET /v1/job-types and the OpenAPI payload shapes all come from it.

import * as z from 'zod';
import { ValidationError } from '../domain/errors.ts';
import { characters, controlCharacterProblem, keyProblem, keyText, MAX_KEY_LENGTH } from '../domain/keys.ts';
import type { Lane } from '../domain/lanes.ts';
import type { Logger } from '../observability/log.ts';

/** The job's fenced transaction: opened at the first query, committed with the job's completion. */
export interface JobDb {
  query<R extends Record<string, unknown> = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

export interface JobContext<C = unknown> {
  job: {
    id: string;
    type: string;
    /** This claim's attempt number (the fencing token); 1 on the first run. */
    attempt: number;
    maxAttempts: number;
    createdAt: Date;
  };
  /** The checkpoint the last attempt saved, or null on a fresh start. */
  checkpoint: C | null;
  /** Aborted when the lease is lost (reclaimed, cancelled) or the worker stops: stop promptly. */
  signal: AbortSignal;
  /** Report progress (0..1 and a message); written with the next heartbeat, not one write per call. */
  progress(fraction: number, message?: string): void;
  /**
   * Save a checkpoint now (fenced by the lease) so a reclaimed attempt resumes here.
   * Throws LeaseLostError when this worker no longer owns the job.
   */
  saveCheckpoint(checkpoint: C, progress?: { fraction: number; message?: string }): Promise<void>;
  /**
   * The job's database transaction. Writes here commit together with the job's completion, or
   * not at all: a worker that lost its lease has them rolled back. Opened on first use, so do
   * long computation before the first query.
   */
  db: JobDb;
  log: Logger;
  /**
   * Enqueue child jobs inside this job's transaction: they exist only if this attempt commits
   * (with its completion, or with the chunk of a checkpoint saved after it), never for an attempt
   * that lost its lease; each records this job as its parent and is published after the commit.
   * Checked like any enqueue (a ValidationError naming the field); a child whose idempotency key
   * names an existing job comes back as that job with `duplicate: true`.
   */
  enqueue(jobs: ChildJobSpec | ChildJobSpec[]): Promise<{ id: string; type: string; duplicate: boolean }[]>;
}

/** A child job: the fields of an enqueue (POST /v1/jobs): idempotencyKey, maxAttempts, runAt, concurrencyKey, … */
export interface ChildJobSpec {
  type: string;
  payload: unknown;
  [option: string]: unknown;
}

export interface JobDefinition<P = unknown, R = unknown, C = unknown> {
  /** Lower-case dotted name, e.g. `ledger.post`. */
  type: string;
  description: string;
  /** Validate and normalize a payload; throw ValidationError naming the field and the rule. */
  parse(payload: unknown): P;
  /** The payload's schema, when the type declares one (defineJob({ schema })): parse comes from it. */
  schema?: z.ZodObject;
  run(payload: P, ctx: JobContext<C>): Promise<R>;
  /**
   * The type's default concurrency key, from the payload: jobs with one key run at most `limit`
   * (default 1) at a time, in enqueue order. The enqueuer's concurrencyKey / concurrencyLimit win.
   * Prefer a template over payload fields, `'costing:{store}'`: the database applies it too, to
   * jobs enqueued in SQL (jobs.enqueue); a function (`(p) => \`ledger:${p.ledger}\``, null for a
   * job that needs none) runs only here, so SQL callers must then pass the key.
   */
  concurrency?: { key: string | KeyOf<P>; limit?: number };
  /**
   * The most jobs of this type running at once across the fleet, however many worker tasks run
   * (e.g. 4 for a costing run that loads the database). Enforced by the database in the claim,
   * like a concurrency key; each worker writes it at start. A job may have a key as well.
   */
  maxRunning?: number;
  /** Attempt cap for this type when the enqueuer does not set one. */
  maxAttempts?: number;
  /**
   * Idempotency keys that outlive the job: after the job ends (succeeded, dead or cancelled) its
   * key is kept `keepDays` days, or forever, and an enqueue with the same key returns that job
   * (duplicate: true) instead of making another. The type decides; an enqueue cannot shorten it.
   * Absent: a key is unique among active jobs only, and free again once its job has ended.
   */
  idempotency?: IdempotencyRetention;
  /** Days a finished job is kept before the workers prune it; default JOBS_KEEP_FINISHED_DAYS (30). */
  keepFinishedDays?: number;
  /** The type's priority lane when the enqueuer names none (default bulk): `urgent` work overtakes `bulk` work. */
  lane?: Lane;
  /** Longest a healthy run takes; longer is reported as stuck. */
  expectedMaxSeconds?: number;
}

/** How long a type's idempotency keys outlive their jobs. */
export type IdempotencyRetention = { keep: 'forever' } | { keepDays: number };

/** The longest retention in days a type or a setting may ask for (100 years); longer is `forever`. */
export const MAX_KEEP_DAYS = 36_500;

/** A job type whose payload is a schema: `parse` and the payload's type come from it. */
export interface SchemaJobDefinition<S extends z.ZodObject, R, C> extends Omit<JobDefinition<z.output<S>, R, C>, 'parse' | 'schema'> {
  /** The payload: a z.strictObject of the fields (an unknown field is refused). */
  schema: S;
}

// The returned definition keeps its type's name and schema as types (`type: 'ledger.post'`,
// `schema: typeof payload`): a typed enqueue (createJobClient) takes each registered type's
// z.input as the payload it accepts.
export function defineJob<S extends z.ZodObject, R, C = unknown, const T extends string = string>(
  def: SchemaJobDefinition<S, R, C> & { type: T },
): Omit<JobDefinition<z.output<S>, R, C>, 'type' | 'schema'> & { type: T; schema: S };
export function defineJob<P, R, C = unknown, const T extends string = string>(
  def: JobDefinition<P, R, C> & { type: T },
): Omit<JobDefinition<P, R, C>, 'type'> & { type: T };
export function defineJob(def: JobDefinition | SchemaJobDefinition<z.ZodObject, unknown, unknown>): JobDefinition {
  if (!('schema' in def) || !def.schema) return def as JobDefinition;
  const schema = def.schema;
  return { ...def, schema, parse: (payload: unknown) => parsePayload(schema, payload) };
}

/**
 * Parse a payload with its schema. Failures name the field as the API and the dead job show it,
 * `payload.<field>: <rule>`: not an object first, then an unknown field (a misspelt optional one
 * would otherwise be dropped silently), then the first field in declaration order.
 */
export function parsePayload<S extends z.ZodObject>(schema: S, payload: unknown): z.output<S> {
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) throw new ValidationError('payload', 'must be a JSON object');
  const allowed = Object.keys(schema.shape);
  const extra = Object.keys(payload).find((k) => !allowed.includes(k));
  if (extra !== undefined)
    throw new ValidationError(`payload.${extra}`, `is not a field of this job type (allowed: ${allowed.join(', ')})`);
  const r = schema.safeParse(payload);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new ValidationError(['payload', ...issue.path.map(String)].join('.'), issue.message);
}

/** One payload field as people read it: `jobs types --describe` and GET /v1/job-types. */
export interface PayloadField {
  name: string;
  type: string;
  required: boolean;
  default?: unknown;
  /** The rule: bounds, pattern. */
  rule?: string;
  description?: string;
}

/** The payload's fields, from its schema (empty for a type without one). */
export function payloadFields(def: JobDefinition<any, any, any>): PayloadField[] {
  if (!def.schema) return [];
  const json = z.toJSONSchema(def.schema, { io: 'input', unrepresentable: 'any' }) as {
    properties?: Record<string, Record<string, any>>;
    required?: string[];
  };
  return Object.entries(json.properties ?? {}).map(([name, p]) => {
    // An optional field with a default reads as `T | null`: describe T.
    const s = (p.anyOf as Record<string, any>[] | undefined)?.find((x) => x.type !== 'null') ?? p;
    const rule = [
      s.minimum !== undefined && s.maximum !== undefined ? `${s.minimum} to ${s.maximum}` : '',
      s.minLength !== undefined || s.maxLength !== undefined ? `${s.minLength ?? 0} to ${s.maxLength ?? '∞'} characters` : '',
      s.pattern ? `matches ${s.format ?? s.pattern}` : '',
      s.minItems !== undefined || s.maxItems !== undefined ? `${s.minItems ?? 0} to ${s.maxItems ?? '∞'} items` : '',
    ]
      .filter(Boolean)
      .join(', ');
    const dflt = p.default ?? s.default;
    return {
      name,
      type: s.type ?? 'any',
      required: json.required?.includes(name) ?? false,
      ...(dflt !== undefined ? { default: dflt } : {}),
      ...(rule ? { rule } : {}),
      ...((p.description ?? s.description) ? { description: p.description ?? s.description } : {}),
    };
  });
}

/**
 * What a job type's definition decides, as people read it: GET /v1/job-types and `jobs types
 * --json` give exactly this, `jobs types --describe` prints it. The lane is the type's default
 * (bulk unless it says); a concurrency key given as a function reads as computed from the payload.
 */
export function describeJobType(d: JobDefinition<any, any, any>) {
  const key = d.concurrency?.key;
  return {
    type: d.type,
    description: d.description,
    lane: d.lane ?? 'bulk',
    ...(d.maxAttempts !== undefined ? { maxAttempts: d.maxAttempts } : {}),
    ...(d.expectedMaxSeconds !== undefined ? { expectedMaxSeconds: d.expectedMaxSeconds } : {}),
    // Keys that outlive the job (README "Idempotency keys that outlive the job"), and the type's own retention.
    ...(d.idempotency ? { idempotency: d.idempotency } : {}),
    ...(d.keepFinishedDays !== undefined ? { keepFinishedDays: d.keepFinishedDays } : {}),
    ...(d.concurrency
      ? {
          concurrency: {
            key: typeof key === 'string' ? key : '(computed from the payload by the handler code; SQL callers pass it)',
            limit: d.concurrency.limit ?? 1,
          },
        }
      : {}),
    ...(d.maxRunning !== undefined ? { maxRunning: d.maxRunning } : {}),
    payload: { fields: payloadFields(d) },
  };
}

/** A default key's function (method syntax: checked bivariantly, as the definition's other functions are). */
type KeyOf<P> = { key(payload: P): string | null | undefined }['key'];

/** The payload fields a concurrency key template names: `['store']` for `'costing:{store}'`. */
export function templateFields(template: string): string[] {
  return [...new Set([...template.matchAll(/\{([A-Za-z0-9_]+)\}/g)].map((m) => m[1]!))];
}

/**
 * A type's default concurrency key for a payload: its template filled from the payload's fields,
 * or its function's answer. A payload without a field the template names is refused, as
 * jobs.enqueue refuses it in SQL: an empty part would put every such job under one shared key.
 * The key made is held to a key's rules (domain/keys.ts), the payload field named that broke one.
 */
export function defaultConcurrencyKey(def: JobDefinition<any, any, any>, payload: unknown): string | null {
  const key = def.concurrency?.key;
  if (key === undefined) return null;
  if (typeof key === 'function') {
    const made = key(payload) ?? null;
    if (made === null) return null;
    if (typeof made !== 'string') {
      throw new TypeError(
        `job type ${def.type}: its concurrency.key function returned ${typeof made}; it must return a string, or null for no key`,
      );
    }
    const problem = keyProblem(made);
    if (problem)
      throw new ValidationError(
        'payload',
        `makes the key ${JSON.stringify(made.slice(0, 80))} of job type ${def.type}, which ${problem}; give a concurrencyKey`,
      );
    return made;
  }
  const fields = (payload ?? {}) as Record<string, unknown>;
  const names = templateFields(key);
  const missing = names.filter((f) => fields[f] === undefined || fields[f] === null);
  if (missing.length > 0) {
    throw new ValidationError(
      'payload',
      `has no ${missing.join(', ')}, which job type ${def.type} keys its jobs on (${key}); give it, or a concurrencyKey`,
    );
  }
  // An object or a list has no one text a key could be made of (it would read "[object Object]").
  const nested = names.find((f) => typeof fields[f] === 'object');
  if (nested) {
    throw new ValidationError(
      `payload.${nested}`,
      `is ${Array.isArray(fields[nested]) ? 'a list' : 'an object'}, and job type ${def.type} keys its jobs on it (${key}): it must be a string, number or boolean`,
    );
  }
  const texts = new Map(names.map((f) => [f, keyText(fields[f] as string | number | boolean)]));
  for (const [f, text] of texts) {
    const problem = controlCharacterProblem(text);
    if (problem) throw new ValidationError(`payload.${f}`, `${problem}, and job type ${def.type} keys its jobs on it (${key})`);
  }
  const made = key.replace(/\{([A-Za-z0-9_]+)\}/g, (_, f: string) => texts.get(f)!);
  if (characters(made) > MAX_KEY_LENGTH) {
    throw new ValidationError(
      'payload',
      `makes the key of job type ${def.type} (${key}) ${characters(made)} characters long; the limit is ${MAX_KEY_LENGTH}: give a concurrencyKey`,
    );
  }
  return made;
}
