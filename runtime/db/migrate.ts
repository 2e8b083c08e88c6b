// Applies the numbered SQL migrations in runtime/db/migrations, idempotently, under a
// PostgreSQL advisory lock. `jobs migrate`, the local stack, the tests and the deploy-time
// bootstrap function all call `migrate()`, so the schema a deployment gets is the one the
// runtime was tested against.
//
// Rules: files are named NNNN_name.sql and are append-only. Each runs in its own transaction
// and is recorded with a checksum; an applied file whose text changed stops the run with the
// file's name, because silently skipping it would leave environments with different schemas.
//
// The ERP's own tables (README "Your tables") come from a second folder, migrations/app at the
// repository's root, applied the same way right after the platform's, as the same owner role,
// and recorded in a ledger of their own (jobs.app_schema_migrations), so the ERP numbers its
// files without colliding with the platform's. Their tables go in the application schema `erp`,
// created here; the services' role gets row access to every table in it and no DDL through
// default privileges (runtime/db/app-role.ts).

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

/** The schema the ERP's own tables live in (migrations/app): the services' role may read and write its rows, never change it. */
export const APP_SCHEMA = 'erp';

/** In the names migrate() reports for the application's migrations: `app/0001_invoices.sql`. */
const APP_PREFIX = 'app/';

/** Arbitrary constant shared by every process that migrates this schema. */
export const MIGRATION_LOCK_KEY = 7_210_531_204;

export interface Migration {
  version: number;
  name: string;
  sql: string;
  checksum: string;
}

export interface MigrateResult {
  applied: string[];
  alreadyApplied: number;
}

/**
 * Where the .sql files are: beside this module in the source tree, and beside the bundle in an
 * image or the bootstrap function (the bundlers copy the folder). JOBS_MIGRATIONS_DIR overrides.
 */
export function defaultMigrationsDir(): string {
  return process.env.JOBS_MIGRATIONS_DIR ?? fileURLToPath(new URL('./migrations/', import.meta.url));
}

/**
 * Where the application's .sql files are: `app-migrations/` beside the bundle in an image or the
 * bootstrap function (the bundlers copy migrations/app there), else migrations/app in the source
 * tree. JOBS_APP_MIGRATIONS_DIR overrides. A folder that does not exist holds no migrations.
 */
export function defaultAppMigrationsDir(): string {
  if (process.env.JOBS_APP_MIGRATIONS_DIR) return process.env.JOBS_APP_MIGRATIONS_DIR;
  const bundled = fileURLToPath(new URL('./app-migrations/', import.meta.url));
  return existsSync(bundled) ? bundled : fileURLToPath(new URL('../../migrations/app/', import.meta.url));
}

export async function loadMigrations(dir = defaultMigrationsDir()): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const out: Migration[] = [];
  for (const file of files) {
    const m = /^(\d{4})_([a-z0-9_]+)\.sql$/.exec(file);
    if (!m) throw new Error(`migration file ${file} in ${dir} must be named NNNN_name.sql (four digits, lower-case name)`);
    const sql = await readFile(`${dir}/${file}`, 'utf8');
    const version = Number(m[1]);
    if (out.some((o) => o.version === version)) throw new Error(`two migration files share version ${m[1]} in ${dir}`);
    out.push({ version, name: file, sql, checksum: createHash('sha256').update(sql).digest('hex') });
  }
  return out;
}

/** The application's migrations, none when its folder does not exist (a platform without ERP tables yet). */
export async function loadAppMigrations(dir = defaultAppMigrationsDir()): Promise<Migration[]> {
  return existsSync(dir) ? loadMigrations(dir) : [];
}

const LEDGER_DDL = `
  CREATE SCHEMA IF NOT EXISTS jobs;
  CREATE TABLE IF NOT EXISTS jobs.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  );
  CREATE TABLE IF NOT EXISTS jobs.app_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  );
  CREATE SCHEMA IF NOT EXISTS ${APP_SCHEMA}`;

/** The two folders and their ledgers, in the order they are applied. */
const LEDGERS = [
  { table: 'jobs.schema_migrations', prefix: '' },
  { table: 'jobs.app_schema_migrations', prefix: APP_PREFIX },
] as const;

/** Apply every migration not yet applied, the platform's then the application's. Safe to run from many processes at once. */
/**
 * How a migration waits for its table locks. An ALTER of jobs.job needs the table to itself; while
 * it waits in PostgreSQL's lock queue, every claim, heartbeat and enqueue queues behind it, so a
 * deploy behind one long transaction (a report reading jobs.job, an ERP request that enqueued and
 * has not committed) would stop the whole fleet for as long as that transaction lasts. So each
 * migration waits at most `lockTimeoutMs` for a lock (the fleet stalls at most that long), gives
 * way, and tries again after a backoff, `lockAttempts` times in all (about 3 minutes by default,
 * inside the bootstrap function's 10), then fails naming the sessions that held the tables.
 */
export interface MigrationLockWait {
  lockTimeoutMs?: number;
  lockAttempts?: number;
  /** First backoff between attempts (doubling, at most 10 s). */
  lockRetryDelayMs?: number;
}

export const MIGRATION_LOCK_WAIT = { lockTimeoutMs: 2000, lockAttempts: 20, lockRetryDelayMs: 500 } as const;

export async function migrate(
  pool: pg.Pool,
  opts: { dir?: string; appDir?: string; log?: (msg: string) => void } & MigrationLockWait = {},
): Promise<MigrateResult> {
  const sets = [await loadMigrations(opts.dir), await loadAppMigrations(opts.appDir)];
  const client = await pool.connect();
  try {
    // Session-level lock: held across the per-migration transactions below, released in finally.
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query(LEDGER_DDL);
      const applied: string[] = [];
      let alreadyApplied = 0;
      for (const [i, ledger] of LEDGERS.entries()) {
        const r = await applySet(client, sets[i]!, ledger, { ...MIGRATION_LOCK_WAIT, ...opts });
        applied.push(...r.applied);
        alreadyApplied += r.alreadyApplied;
      }
      return { applied, alreadyApplied };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => undefined);
    }
  } finally {
    client.release();
  }
}

async function applySet(
  client: pg.PoolClient,
  migrations: Migration[],
  ledger: (typeof LEDGERS)[number],
  opts: Required<MigrationLockWait> & { log?: (msg: string) => void },
): Promise<MigrateResult> {
  const { log } = opts;
  const { rows } = await client.query<{ version: number; name: string; checksum: string }>(
    `SELECT version, name, checksum FROM ${ledger.table} ORDER BY version`,
  );
  const done = new Map(rows.map((r) => [r.version, r]));
  const applied: string[] = [];
  for (const m of migrations) {
    const name = ledger.prefix + m.name;
    const prior = done.get(m.version);
    if (prior) {
      if (prior.checksum !== m.checksum) {
        throw new Error(
          `migration ${name} was changed after it was applied (recorded as ${ledger.prefix}${prior.name}); migrations are append-only: ` +
            `restore the file and add a new NNNN_*.sql with the change`,
        );
      }
      continue;
    }
    for (let attempt = 1; ; attempt++) {
      await client.query('BEGIN');
      try {
        await client.query("SELECT set_config('lock_timeout', $1, true)", [`${opts.lockTimeoutMs}ms`]);
        await client.query(m.sql);
        await client.query(`INSERT INTO ${ledger.table} (version, name, checksum) VALUES ($1, $2, $3)`, [m.version, m.name, m.checksum]);
        await client.query('COMMIT');
        break;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE)
          throw new Error(`migration ${name} failed: ${(err as Error).message}`, { cause: err });
        const holders = await lockHolders(client);
        if (attempt >= opts.lockAttempts) {
          throw new Error(
            `migration ${name} could not take its table locks: ${attempt} tries of ${opts.lockTimeoutMs} ms each, given way every time so ` +
              `that claims and heartbeats were not held behind it. Holding locks on the job tables: ${holders}. ` +
              'Let those transactions finish (or end them with pg_terminate_backend) and deploy again.',
            { cause: err },
          );
        }
        const delay = Math.min(10_000, opts.lockRetryDelayMs * 2 ** (attempt - 1));
        log?.(
          `migration ${name}: a lock was not free within ${opts.lockTimeoutMs} ms (held by ${holders}); try ${attempt + 1} of ${opts.lockAttempts} in ${delay} ms`,
        );
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    log?.(`applied ${name}`);
    applied.push(name);
  }
  return { applied, alreadyApplied: migrations.length - applied.length };
}

/** PostgreSQL's lock_not_available: lock_timeout ran out. */
const LOCK_NOT_AVAILABLE = '55P03';

/** The other sessions holding locks on tables of the platform's or the application's schema, oldest transaction first, for the message. */
async function lockHolders(client: pg.PoolClient): Promise<string> {
  let rows: Record<string, unknown>[];
  try {
    ({ rows } = await client.query(
      `SELECT a.pid, a.application_name AS app, a.usename AS usr, a.state,
              round(extract(epoch FROM statement_timestamp() - a.xact_start))::int AS xact_s,
              left(regexp_replace(a.query, '\\s+', ' ', 'g'), 120) AS query,
              string_agg(DISTINCT n.nspname || '.' || c.relname || ' ' || l.mode, ', ') AS locks
         FROM pg_locks l
         JOIN pg_class c ON c.oid = l.relation
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.granted AND l.pid <> pg_backend_pid() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND n.nspname IN ('jobs', $1)
        GROUP BY 1, 2, 3, 4, 5, 6, a.xact_start ORDER BY a.xact_start NULLS LAST LIMIT 5`,
      [APP_SCHEMA],
    ));
  } catch (err) {
    return `unknown (reading pg_locks failed: ${(err as Error).message})`;
  }
  if (rows.length === 0) return 'no session now (the holder has finished)';
  return rows
    .map(
      (r) =>
        `pid ${r.pid} (${r.app || 'no application_name'}, user ${r.usr}, ${r.state}, transaction open ${r.xact_s} s, ${r.locks}: ${r.query})`,
    )
    .join('; ');
}

/** Names of migrations not yet applied, the platform's and the application's (empty when the schema is current). Used by /readyz. */
export async function pendingMigrations(pool: pg.Pool, dir?: string, appDir?: string): Promise<string[]> {
  const sets = [await loadMigrations(dir), await loadAppMigrations(appDir)];
  const pending: string[] = [];
  for (const [i, ledger] of LEDGERS.entries()) {
    const { rows } = await pool.query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [ledger.table]);
    const have = new Set(
      rows[0]?.exists ? (await pool.query<{ version: number }>(`SELECT version FROM ${ledger.table}`)).rows.map((r) => r.version) : [],
    );
    pending.push(...sets[i]!.filter((m) => !have.has(m.version)).map((m) => ledger.prefix + m.name));
  }
  return pending;
}
