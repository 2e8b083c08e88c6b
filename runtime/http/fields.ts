// The field schemas of the HTTP routes (zod), with the messages the API has always given: each
// names its rule and the value given, which the kernel answers as a 400 naming the field. The
// job routes, the on-call routes and the live view's use them; kernel.ts re-exports them.

import * as z from 'zod';
import { ISO_TIME_PATTERN, JOB_ID_PATTERN, parseIsoTime } from '../domain/ids.ts';
import { LANES } from '../domain/lanes.ts';

const got = (v: unknown) => JSON.stringify(typeof v === 'string' ? v.slice(0, 40) : v);

/** A trimmed string of 1 to `max` characters. */
export const text = (max: number) => {
  const error = `must be a string of 1 to ${max} characters`;
  return z
    .string({ error: (iss) => (iss.input === undefined ? `is required: a string of 1 to ${max} characters` : error) })
    .trim()
    .min(1, { error })
    .max(max, { error });
};

/** A whole number from `min` to `max` in a JSON body. */
export const wholeNumber = (min: number, max: number) => {
  const error = `must be a whole number from ${min} to ${max}`;
  return z.int({ error }).min(min, { error }).max(max, { error });
};

/** A whole number from `min` to `max` in a query string. */
export const wholeNumberParam = (min: number, max: number) => {
  const error = (iss: { input?: unknown }) => `must be a whole number from ${min} to ${max} (got ${got(iss.input)})`;
  return z
    .string()
    .regex(/^\d{1,15}$/, { error })
    .refine((s) => Number(s) >= min && Number(s) <= max, { error })
    .transform(Number);
};

/** true or false: a JSON boolean in a body, the words in a query string. */
export const flag = () => z.boolean({ error: 'must be true or false' });
export const flagParam = () => z.enum(['true', 'false'], { error: 'must be true or false' }).transform((v) => v === 'true');

/** An ISO 8601 time with an offset, as a Date. */
export const isoTime = () => {
  const error = 'must be an ISO 8601 time with an offset, e.g. 2026-10-31T06:00:00Z';
  return z
    .string({ error })
    .regex(ISO_TIME_PATTERN, { error })
    .refine((s) => parseIsoTime(s) !== null, { error })
    .transform((s) => parseIsoTime(s)!);
};

/** A job id in a path or a body, lower-cased; `error` replaces the message (an array's, for one bad element). */
export const jobId = (error?: string) =>
  z
    .string(error ? { error } : {})
    .regex(JOB_ID_PATTERN, {
      error: error ?? ((iss) => `must be a job id (a UUID), got ${JSON.stringify(String(iss.input).slice(0, 60))}`),
    })
    .transform((s) => s.toLowerCase());

/** Optional: an absent or null value reads as undefined (JSON clients send null for "none"). */
export const optional = <S extends z.ZodType>(s: S) => s.nullish().transform((v) => v ?? undefined);

/** A lane filter, absent or null for every lane (the on-call routes': dead jobs, the DLQ). */
export const laneFilter = (description: string) =>
  optional(
    z
      .enum(LANES, { error: (iss) => `must be one of ${LANES.join(', ')} (got ${JSON.stringify(iss.input)?.slice(0, 40)})` })
      .meta({ description }),
  );

/** Who asks, in an on-call body: recorded with the caller's address (a shared token names no person). */
export const by = (max: number) => optional(text(max)).meta({ description: 'who asks (recorded with the caller address)' });

/** A listing's page size in a query string, 1 to `max`; `dflt` is the route's default, for the OpenAPI description. */
export const listLimit = (max: number, dflt: number) =>
  optional(wholeNumberParam(1, max)).meta({ description: `1 to ${max}; default ${dflt}` });
