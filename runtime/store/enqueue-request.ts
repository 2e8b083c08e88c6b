// The rules of an enqueue request, written once: the body of POST /v1/jobs (the HTTP kernel parses
// it with this schema and the OpenAPI document is generated from it) and what JobClient.enqueue
// checks for a library caller are the same zod schema, so the two cannot drift apart. Each rule's
// message is the one the API has always answered: the field, the rule, and the value given.
//
// The envelope's fields are checked first, each on its own (all of them, in declaration order);
// only a well-formed envelope has its payload checked, by the job type's own parse (its schema,
// declared with defineJob), after its size: the payload's fields are named `payload.<field>`.

import * as z from 'zod';
import { ValidationError } from '../domain/errors.ts';
import { ISO_TIME_PATTERN, parseIsoTime } from '../domain/ids.ts';
import { issueField, issueStatus } from '../domain/issues.ts';
import { keyProblem } from '../domain/keys.ts';
import { DEFAULT_LANE, isLane, LANES, type Lane } from '../domain/lanes.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { defaultConcurrencyKey } from '../handlers/types.ts';

/** Largest payload accepted, as JSON text. The API answers 413 above it. */
export const MAX_PAYLOAD_BYTES = 256 * 1024;

/** What a size issue carries so that the API answers 413, not 400 (domain/issues.ts). */
const TOO_LARGE = { status: 413 } as const;

const text1to200 = 'must be a string of 1 to 200 characters';
/** A key: 1 to 200 characters (code points, as PostgreSQL counts), no control characters (domain/keys.ts). */
const key = () =>
  z
    .string({ error: text1to200 })
    .refine((k) => keyProblem(k) === undefined, { error: (iss) => keyProblem(String(iss.input))! })
    .meta({ minLength: 1, maxLength: 200 });
const attemptsError = (iss: { input?: unknown }) => `must be a whole number from 1 to 100 (got ${String(iss.input)})`;
const limitError = (iss: { input?: unknown }) => `must be a whole number from 1 to 1000 (got ${String(iss.input)})`;
const laneError = (iss: { input?: unknown }) => `must be one of ${LANES.join(', ')} (got ${JSON.stringify(iss.input)?.slice(0, 80)})`;
const runAtError = (iss: { input?: unknown }) =>
  `must be an ISO 8601 timestamp with an offset, e.g. 2026-12-01T06:00:00Z (got ${JSON.stringify(iss.input)?.slice(0, 80)})`;

/**
 * The schema of one enqueue request against `registry`. Its output has the payload as the job
 * type's parse returns it (defaults applied) and runAt as a Date; an absent payload is `{}`.
 */
export function enqueueRequest(registry: JobRegistry) {
  const known = () => registry.types().join(', ');
  const fields = {
    type: z
      .string({ error: 'is required and must be a string' })
      .min(1, { error: 'is required and must be a string' })
      .refine((t) => registry.get(t) !== undefined, {
        error: (iss) => `unknown job type ${JSON.stringify(iss.input)}; known types: ${known()}`,
      })
      .meta({ description: 'the job type', enum: registry.types() }),
    payload: z
      .unknown()
      .optional()
      .meta({
        description: "the job type's payload (components.schemas[type]); default {}",
        anyOf: registry
          .types()
          .filter((t) => registry.get(t)!.schema)
          .map((t) => ({ $ref: `#/components/schemas/${t}` })),
      }),
    idempotencyKey: key().nullish().meta({
      description:
        "a second enqueue with the same (type, key) returns the key's job with duplicate: true: while it is active, or, for a type that keeps its keys (ledger.post: forever), after it ended too",
    }),
    maxAttempts: z
      .int({ error: attemptsError })
      .min(1, { error: attemptsError })
      .max(100, { error: attemptsError })
      .nullish()
      .meta({ description: "the attempt cap; default the job type's, else the platform's (JOBS_MAX_ATTEMPTS)" }),
    runAt: z
      .string({ error: runAtError })
      .regex(ISO_TIME_PATTERN, { error: runAtError })
      .refine(
        (s) => {
          const year = parseIsoTime(s)?.getUTCFullYear();
          return year !== undefined && year >= 1970 && year <= 9999;
        },
        {
          error: (iss) =>
            `must be a real date between 1970 and 9999, e.g. 2026-12-01T06:00:00Z (got ${JSON.stringify(iss.input)?.slice(0, 80)})`,
        },
      )
      .nullish()
      .meta({ description: 'do not start before this time (ISO 8601 with an offset)' }),
    concurrencyKey: key().nullish().meta({
      description:
        "jobs with one key (e.g. ledger:company-7) run at most concurrencyLimit at a time, in enqueue order; default the job type's",
    }),
    concurrencyLimit: z
      .int({ error: limitError })
      .min(1, { error: limitError })
      .max(1000, { error: limitError })
      .nullish()
      .meta({ description: "how many jobs of the concurrencyKey may run at once; default the job type's, else 1" }),
    lane: z
      .string({ error: laneError })
      .refine(isLane, { error: laneError })
      .nullish()
      .meta({
        description: "the priority lane: urgent jobs have their own queue and workers take them first; default the job type's, else bulk",
        enum: [...LANES],
      }),
  };
  return z
    .strictObject(fields, {
      error: (iss) =>
        iss.code === 'unrecognized_keys' ? `is not a field of a job (allowed: ${Object.keys(fields).join(', ')})` : 'must be a JSON object',
    })
    .transform((spec, ctx) => {
      const def = registry.get(spec.type)!;
      if (spec.concurrencyLimit != null && spec.concurrencyKey == null && !def.concurrency) {
        ctx.addIssue({
          code: 'custom',
          path: ['concurrencyLimit'],
          message: `limits the jobs of a concurrencyKey: give one too (job type ${def.type} has no default key)`,
          input: spec.concurrencyLimit,
        });
        return z.NEVER;
      }
      const raw = spec.payload ?? {};
      let size: number;
      try {
        size = Buffer.byteLength(JSON.stringify(raw));
      } catch {
        ctx.addIssue({ code: 'custom', path: ['payload'], message: 'must be JSON-serializable', input: raw });
        return z.NEVER;
      }
      if (size > MAX_PAYLOAD_BYTES) {
        ctx.addIssue({
          code: 'custom',
          path: ['payload'],
          message: `is ${size} bytes; the limit is ${MAX_PAYLOAD_BYTES} bytes (store large inputs in a table and pass their id)`,
          params: TOO_LARGE,
          input: raw,
        });
        return z.NEVER;
      }
      let payload: unknown;
      try {
        payload = def.parse(raw);
      } catch (err) {
        // A type's parse names the field as `payload.<field>` (defineJob's parse does); anything
        // else it throws is not a verdict on the input and goes up as it is.
        if (!(err instanceof ValidationError)) throw err;
        ctx.addIssue({
          code: 'custom',
          path: err.field.split('.'),
          message: err.reason,
          ...(err.status !== 400 ? { params: { status: err.status } } : {}),
          input: raw,
        });
        return z.NEVER;
      }
      // The key: the enqueuer's, else the type's default from the payload (a ledger's postings).
      let concurrencyKey: string | null;
      try {
        concurrencyKey = spec.concurrencyKey ?? defaultConcurrencyKey(def, payload);
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        ctx.addIssue({ code: 'custom', path: err.field.split('.'), message: err.reason, input: raw });
        return z.NEVER;
      }
      return {
        type: def.type,
        payload,
        idempotencyKey: spec.idempotencyKey ?? null,
        maxAttempts: spec.maxAttempts ?? null,
        runAt: spec.runAt ? parseIsoTime(spec.runAt) : null,
        concurrencyKey,
        concurrencyLimit: concurrencyKey ? (spec.concurrencyLimit ?? def.concurrency?.limit ?? 1) : null,
        // The enqueuer's lane, else the type's (defineJob({ lane })), else bulk.
        lane: (spec.lane as Lane | null | undefined) ?? def.lane ?? DEFAULT_LANE,
      };
    });
}

export type EnqueueRequestSchema = ReturnType<typeof enqueueRequest>;
/** An enqueue request the schema has passed. */
export type EnqueueRequest = z.output<EnqueueRequestSchema>;

/** A failed enqueue request as the library caller's ValidationError: the first issue, its field, its rule. */
export function issueToValidationError(error: z.ZodError): ValidationError {
  const issue = error.issues.find((i) => i.code === 'unrecognized_keys') ?? error.issues[0]!;
  const field = issue.code === 'unrecognized_keys' ? issue.keys[0]! : issueField(issue, 'body');
  return new ValidationError(field, issue.message, issueStatus(issue));
}
