// The registry of job types a process knows. Enqueue refuses a type it does not know (so a
// typo is a 4xx, not a dead job), and the worker looks handlers up here.

import { ValidationError } from '../domain/errors.ts';
import { MAX_KEEP_DAYS, type JobDefinition, templateFields } from './types.ts';

export class JobRegistry {
  private readonly defs = new Map<string, JobDefinition<any, any, any>>();

  constructor(defs: JobDefinition<any, any, any>[] = []) {
    for (const d of defs) this.register(d);
  }

  register(def: JobDefinition<any, any, any>): this {
    if (!/^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/.test(def.type) || def.type.length > 100) {
      throw new Error(`job type "${def.type}" must be lower-case dotted words (a-z, 0-9, _), at most 100 characters`);
    }
    if (this.defs.has(def.type)) throw new Error(`job type "${def.type}" is registered twice`);
    if (def.maxRunning !== undefined && !(Number.isInteger(def.maxRunning) && def.maxRunning >= 1 && def.maxRunning <= 10_000)) {
      throw new Error(
        `job type "${def.type}": maxRunning ${def.maxRunning} must be an integer from 1 to 10000 (jobs running at once across the fleet)`,
      );
    }
    // A template naming a field the payload's schema does not have would key every job alike.
    const template = def.concurrency?.key;
    if (typeof template === 'string' && def.schema) {
      const fields = Object.keys(def.schema.shape);
      const unknown = templateFields(template).filter((f) => !fields.includes(f));
      if (unknown.length > 0)
        throw new Error(
          `job type "${def.type}": concurrency.key '${template}' names ${unknown.join(', ')}, which its payload schema does not have (fields: ${fields.join(', ')})`,
        );
    }
    const keyLimit = def.concurrency?.limit;
    if (keyLimit !== undefined && !(Number.isInteger(keyLimit) && keyLimit >= 1 && keyLimit <= 1000)) {
      throw new Error(
        `job type "${def.type}": concurrency.limit ${keyLimit} must be an integer from 1 to 1000 (jobs of one key running at once)`,
      );
    }
    const days = (field: string, v: unknown) => {
      if (v !== undefined && (!Number.isInteger(v) || (v as number) < 1 || (v as number) > MAX_KEEP_DAYS))
        throw new Error(`job type "${def.type}": ${field} must be a whole number of days from 1 to ${MAX_KEEP_DAYS} (got ${String(v)})`);
    };
    days('keepFinishedDays', def.keepFinishedDays);
    const idem = def.idempotency as Record<string, unknown> | undefined;
    if (idem !== undefined) {
      if (!idem || typeof idem !== 'object' || (idem.keep !== 'forever' && !('keepDays' in idem)))
        throw new Error(`job type "${def.type}": idempotency must be { keep: 'forever' } or { keepDays: N } (got ${JSON.stringify(idem)})`);
      if ('keepDays' in idem) days('idempotency.keepDays', idem.keepDays);
    }
    this.defs.set(def.type, def);
    return this;
  }

  get(type: string): JobDefinition<any, any, any> | undefined {
    return this.defs.get(type);
  }

  /**
   * How long `type`'s idempotency keys outlive their jobs, in days (Infinity: forever); null for a
   * type whose keys are unique among active jobs only.
   */
  keyKeepDays(type: string): number | null {
    const idem = this.defs.get(type)?.idempotency;
    if (!idem) return null;
    return 'keep' in idem ? Infinity : idem.keepDays;
  }

  types(): string[] {
    return [...this.defs.keys()].sort();
  }

  /** The definition for `type`, or a ValidationError listing the known types. */
  require(type: unknown): JobDefinition<any, any, any> {
    if (typeof type !== 'string' || type === '') throw new ValidationError('type', 'is required and must be a string');
    const def = this.defs.get(type);
    if (!def) throw new ValidationError('type', `unknown job type "${type}"; known types: ${this.types().join(', ')}`);
    return def;
  }
}
