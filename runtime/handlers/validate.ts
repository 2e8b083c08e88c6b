// Payload field schemas for handlers (zod), with the messages the API has always given: each
// failure names the rule, which defineJob's parse reports as `payload.<field>: <rule>`, the API
// returns as a 400 and the worker records as a non-retryable error.
import * as z from 'zod';

/** A string of `min` (default 1) to `max` (default 200) characters, matching `pattern` when given (`hint` names it). */
export function text(opts: { min?: number; max?: number; pattern?: RegExp; hint?: string } = {}) {
  const min = opts.min ?? 1;
  const max = opts.max ?? 200;
  const length = (iss: { input?: unknown }) => `must be ${min} to ${max} characters (got ${String(iss.input).length})`;
  // Absent: required. Present but not a string: say what came, as the number rules do.
  const notString = (iss: { input?: unknown }) =>
    iss.input === undefined || iss.input === null
      ? 'is required and must be a string'
      : `must be a string (got ${JSON.stringify(iss.input)?.slice(0, 80)})`;
  const s = z.string({ error: notString }).min(min, { error: length }).max(max, { error: length });
  return opts.pattern
    ? s
        .regex(opts.pattern, { error: (iss) => `must match ${opts.hint ?? opts.pattern!.source} (got "${String(iss.input)}")` })
        .meta({ format: opts.hint })
    : s;
}

/** A whole number from `min` to `max`: required, or `dflt` when absent or null. */
export function wholeNumber(min: number, max: number): z.ZodInt;
export function wholeNumber(
  min: number,
  max: number,
  dflt: number,
): z.ZodPipe<z.ZodOptional<z.ZodNullable<z.ZodInt>>, z.ZodTransform<number, number | null | undefined>>;
export function wholeNumber(min: number, max: number, dflt?: number) {
  const error = (iss: { input?: unknown }) =>
    iss.input === undefined || iss.input === null
      ? `is required: a whole number from ${min} to ${max}`
      : `must be a whole number from ${min} to ${max} (got ${JSON.stringify(iss.input)})`;
  const n = z.int({ error }).min(min, { error }).max(max, { error });
  if (dflt === undefined) return n;
  return n
    .meta({ default: dflt })
    .nullish()
    .transform((v) => v ?? dflt);
}

/**
 * A list of `item`s, `min` (default 1) to `max` (default 1000) of them. A bad item is named by its
 * index, as `payload.ids.3: must be …` (the item's own rule), so the sender can find it.
 */
export function list<T extends z.ZodType>(item: T, opts: { min?: number; max?: number } = {}) {
  const min = opts.min ?? 1;
  const max = opts.max ?? 1000;
  const size = (iss: { input?: unknown }) =>
    `must be a list of ${min} to ${max} items (got ${Array.isArray(iss.input) ? iss.input.length : 'not a list'})`;
  return z
    .array(item, {
      error: (iss) =>
        iss.input === undefined || iss.input === null
          ? `is required: a list of ${min} to ${max} items`
          : `must be a list of ${min} to ${max} items (got ${JSON.stringify(iss.input)})`,
    })
    .min(min, { error: size })
    .max(max, { error: size });
}

/**
 * A list of ids for a handler to fetch (invoice numbers, document keys): `list()` of `text()`
 * items, refusing a repeated id by its index (`payload.ids.4: repeats item 1 ("INV-7")`), since a
 * batch that names a document twice is almost always the sender's mistake.
 */
export function idList(opts: { min?: number; max?: number; maxLength?: number; pattern?: RegExp; hint?: string } = {}) {
  const item = text({
    max: opts.maxLength ?? 100,
    ...(opts.pattern ? { pattern: opts.pattern } : {}),
    ...(opts.hint ? { hint: opts.hint } : {}),
  });
  return list(item, opts).check((ctx) => {
    const first = new Map<string, number>();
    ctx.value.forEach((id, i) => {
      const seen = first.get(id);
      if (seen === undefined) first.set(id, i);
      else ctx.issues.push({ code: 'custom', input: id, path: [i], message: `repeats item ${seen} (${JSON.stringify(id)})` });
    });
  });
}

/** Wait `ms`, rejecting with the signal's reason as soon as it aborts. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
