// Small payload validators for handlers: each failure names the field and the rule, which the
// API returns as a 400 and the worker records as a non-retryable error.
import { ValidationError } from '../domain/errors.ts';

export function object(payload: unknown): Record<string, unknown> {
  if (!payload || typeof payload !== 'object' || Array.isArray(payload)) throw new ValidationError('payload', 'must be a JSON object');
  return payload as Record<string, unknown>;
}

export function str(o: Record<string, unknown>, key: string, opts: { min?: number; max?: number; pattern?: RegExp; hint?: string } = {}): string {
  const v = o[key];
  if (typeof v !== 'string') throw new ValidationError(`payload.${key}`, 'is required and must be a string');
  if (v.length < (opts.min ?? 1) || v.length > (opts.max ?? 200)) {
    throw new ValidationError(`payload.${key}`, `must be ${opts.min ?? 1} to ${opts.max ?? 200} characters (got ${v.length})`);
  }
  if (opts.pattern && !opts.pattern.test(v)) throw new ValidationError(`payload.${key}`, `must match ${opts.hint ?? opts.pattern.source} (got "${v}")`);
  return v;
}

export function int(o: Record<string, unknown>, key: string, opts: { min: number; max: number; default?: number }): number {
  const v = o[key];
  if (v === undefined || v === null) {
    if (opts.default !== undefined) return opts.default;
    throw new ValidationError(`payload.${key}`, `is required: a whole number from ${opts.min} to ${opts.max}`);
  }
  if (typeof v !== 'number' || !Number.isInteger(v) || v < opts.min || v > opts.max) {
    throw new ValidationError(`payload.${key}`, `must be a whole number from ${opts.min} to ${opts.max} (got ${JSON.stringify(v)})`);
  }
  return v;
}

export function noExtraKeys(o: Record<string, unknown>, allowed: string[]): void {
  const extra = Object.keys(o).filter((k) => !allowed.includes(k));
  if (extra.length > 0) throw new ValidationError(`payload.${extra[0]}`, `is not a field of this job type (allowed: ${allowed.join(', ')})`);
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
