// What both services do as a process: start, refuse a bad configuration (or a database that lacks
// their migrations) with exit 1 and its message, stop with exit 1 when a check the start could not
// make finds the database behind later, and on SIGTERM or SIGINT shut down gracefully, then exit
// 0 (1 if the shutdown failed).

import type pg from 'pg';
import { ConfigError } from '../config/rules.ts';
import { requireMigrated, SchemaBehindError } from '../db/schema-check.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { Logger } from '../observability/log.ts';

/** What a later check found, when the one at start could not be made. */
export interface SchemaWatch {
  /**
   * Settles only with what would have refused the start: the database lacks a migration of this
   * build (SchemaBehindError), or the check itself is refused (no access to the bookkeeping).
   */
  readonly behind: Promise<Error>;
  stop(): void;
}

/** How often a check skipped at start is tried again until the database answers. */
export const SCHEMA_RECHECK_MS = 5_000;

/**
 * Refuse to start against a database that lacks a migration this build carries (a service image
 * deployed without its schema bootstrap, or `jobs worker` pointed at a database nobody migrated).
 * A database that does not answer is not a reason to refuse: the service starts and waits for it,
 * as it does for a failover, and the check is made again every `recheckMs` until it answers; a
 * database found behind then settles the watch's `behind`, and runService stops the service and
 * exits 1 as a refused start would (ECS replaces the task; the new one refuses at start, and the
 * deployment's circuit breaker rolls back). Before, a task that started during an outage never
 * checked, and its failing claims spent every message's receives toward the DLQ.
 */
export async function checkSchema(pool: pg.Pool, service: string, log: Logger, recheckMs = SCHEMA_RECHECK_MS): Promise<SchemaWatch> {
  try {
    await requireMigrated(pool, service);
    return { behind: new Promise(() => undefined), stop: () => undefined };
  } catch (err) {
    if (!isDatabaseUnavailable(err)) throw err;
    log.warn(
      { err },
      "could not check the database for this build's migrations: it did not answer; starting, and checking again once it answers",
    );
  }
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const behind = new Promise<Error>((found) => {
    const again = () => {
      timer = setTimeout(async () => {
        try {
          await requireMigrated(pool, service);
          log.info('the database answered: it has every migration this build carries');
        } catch (err) {
          if (stopped) return;
          // Still out of reach: try again. Anything else would have refused the start.
          if (isDatabaseUnavailable(err)) again();
          else found(err instanceof Error ? err : new Error(String(err)));
        }
      }, recheckMs);
      timer.unref();
    };
    again();
  });
  return {
    behind,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

export async function runService<S extends { shutdown(reason: string): Promise<void>; schemaBehind?: Promise<Error> }>(
  name: string,
  start: () => Promise<S>,
): Promise<S> {
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
  void svc.schemaBehind?.then((err) => {
    process.stderr.write(`${name}: stopping, as a start would refuse.\n${err.message}\n`);
    svc.shutdown('a schema check the start could not make refused this build').finally(() => process.exit(1));
  });
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
