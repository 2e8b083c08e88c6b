// What both services do as a process: start, refuse a bad configuration (or a database that lacks
// their migrations) with exit 1 and its message, and on SIGTERM or SIGINT shut down gracefully,
// then exit 0 (1 if the shutdown failed).

import type pg from 'pg';
import { ConfigError } from '../config/rules.ts';
import { requireMigrated, SchemaBehindError } from '../db/migrate.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { Logger } from '../observability/log.ts';

/**
 * Refuse to start against a database that lacks a migration this build carries (a service image
 * deployed without its schema bootstrap, or `jobs worker` pointed at a database nobody migrated).
 * A database that does not answer is not a reason to refuse: the service starts and waits for it,
 * as it does for a failover, and the check is skipped with a warning.
 */
export async function checkSchema(pool: pg.Pool, service: string, log: Logger): Promise<void> {
  try {
    await requireMigrated(pool, service);
  } catch (err) {
    if (!isDatabaseUnavailable(err)) throw err;
    log.warn({ err }, "could not check the database for this build's migrations: it did not answer; starting without the check");
  }
}

export async function runService<S extends { shutdown(reason: string): Promise<void> }>(name: string, start: () => Promise<S>): Promise<S> {
  let svc: S;
  try {
    svc = await start();
  } catch (err) {
    if (err instanceof ConfigError || err instanceof SchemaBehindError) {
      process.stderr.write(`${name}: refusing to start.\n${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      svc.shutdown(sig).then(
        () => process.exit(0),
        (err: unknown) => {
          process.stderr.write(`${name}: shutdown failed: ${String(err)}\n`);
          process.exit(1);
        },
      );
    });
  }
  return svc;
}
