// Whether the database has every migration this build carries: a service refuses to start
// without (runtime/apps/entry.ts).

import type pg from 'pg';
import { ReportedError } from '../domain/errors.ts';
import { pendingMigrations } from './migrate.ts';

/**
 * A service started against a database that lacks migrations its build carries: its statements
 * would fail one by one (a column or function missing), and a worker's failed claims would spend
 * every message's receives toward the DLQ. The start refuses instead (runtime/apps/entry.ts).
 */
export class SchemaBehindError extends ReportedError {
  override name = 'SchemaBehindError';
}

/** Refuse to start (SchemaBehindError) when the database lacks a migration this build carries. */
export async function requireMigrated(pool: pg.Pool, service: string, opts: { dir?: string; appDir?: string } = {}): Promise<void> {
  // Applied ones this build does not know are fine: migrations only add, so the previous release
  // runs on a newer schema (a rollback).
  const missing = await pendingMigrations(pool, opts.dir, opts.appDir);
  if (missing.length === 0) return;
  throw new SchemaBehindError(
    `the database lacks ${missing.length === 1 ? 'a migration' : `${missing.length} migrations`} this ${service} was built with: ` +
      `${missing.join(', ')}. Apply ${missing.length === 1 ? 'it' : 'them'} before starting the ${service}: \`cdk deploy\` runs the schema bootstrap before it updates the ` +
      'services; against another database, `jobs migrate` (the local stack, `npm start`, runs it)',
  );
}
