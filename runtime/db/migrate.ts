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
// default privileges (runtime/db/app-role.ts). That is enforced: an application file that creates,
// changes or drops a relation in any other schema (public and jobs are the platform's) is rolled
// back and stops the run, naming the file and the relations.

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { ReportedError } from '../domain/errors.ts';
import { timed } from './pool.ts';

/** A migration that cannot apply: the message names the file, what is wrong and what to do (the `jobs` command prints it without a stack). */
export class MigrationError extends ReportedError {
  override name = 'MigrationError';
}

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
    if (!m) throw new MigrationError(`migration file ${file} in ${dir} must be named NNNN_name.sql (four digits, lower-case name)`);
    const sql = await readFile(`${dir}/${file}`, 'utf8');
    const version = Number(m[1]);
    if (out.some((o) => o.version === version)) throw new MigrationError(`two migration files share version ${m[1]} in ${dir}`);
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

/**
 * How migrations wait for their table locks. An ALTER of jobs.job needs the table to itself; while
 * it waits in PostgreSQL's lock queue, every claim, heartbeat and enqueue queues behind it, so a
 * deploy behind one long transaction (a report reading jobs.job, an ERP request that enqueued and
 * has not committed) would stop the whole fleet for as long as that transaction lasts. So a
 * migration waits at most `lockTimeoutMs` for a lock, gives way (and the workers' statements go
 * through), and tries again after a backoff, until `lockWaitMs` have passed for the whole run
 * (3 minutes by default, inside the bootstrap function's 10); then the run fails naming the
 * sessions that held the tables. The trade: a deploy never holds the fleet for longer than one
 * try, and one behind a transaction that lasts longer than the whole wait fails instead of
 * waiting it out.
 */
export interface MigrationLockWait {
  lockTimeoutMs?: number;
  lockWaitMs?: number;
  /** First backoff between tries (doubling, at most 10 s). */
  lockRetryDelayMs?: number;
}

export const MIGRATION_LOCK_WAIT = { lockTimeoutMs: 2000, lockWaitMs: 180_000, lockRetryDelayMs: 500 } as const;

const TRY_LOCK = 'SELECT pg_try_advisory_lock($1) AS ok';
/** PostgreSQL's lock_not_available (lock_timeout ran out) and deadlock_detected: both worth another try. */
const LOCK_RETRY_CODES = new Set(['55P03', '40P01']);

function lockWait(opts: MigrationLockWait): Required<MigrationLockWait> {
  const out = {
    lockTimeoutMs: opts.lockTimeoutMs ?? MIGRATION_LOCK_WAIT.lockTimeoutMs,
    lockWaitMs: opts.lockWaitMs ?? MIGRATION_LOCK_WAIT.lockWaitMs,
    lockRetryDelayMs: opts.lockRetryDelayMs ?? MIGRATION_LOCK_WAIT.lockRetryDelayMs,
  };
  for (const [k, v] of Object.entries(out))
    if (!Number.isInteger(v) || v < 1) throw new TypeError(`migrate: ${k} must be a whole number of milliseconds ≥ 1, got ${v}`);
  return out;
}

/** Apply every migration not yet applied, the platform's then the application's. Safe to run from many processes at once. */
export async function migrate(
  pool: pg.Pool,
  opts: { dir?: string; appDir?: string; log?: (msg: string) => void } & MigrationLockWait = {},
): Promise<MigrateResult> {
  const wait = lockWait(opts);
  const sets = [await loadMigrations(opts.dir), await loadAppMigrations(opts.appDir)];
  const client = await pool.connect();
  try {
    // Session-level lock: held across the per-migration transactions below, released in finally;
    // waited for within the run's budget (a migrator's session left open held the bootstrap function
    // for its whole timeout, and a rollback's call after it: stack review).
    for (const until = Date.now() + wait.lockWaitMs; !(await client.query(TRY_LOCK, [MIGRATION_LOCK_KEY])).rows[0].ok; ) {
      if (Date.now() > until) throw new Error(`migrate: another session held the migration lock for ${wait.lockWaitMs / 1000} s`);
      await new Promise((r) => setTimeout(r, wait.lockRetryDelayMs));
    }
    try {
      // One budget for the whole run (every file), counted from here: waiting for the advisory
      // lock (another migrator) holds up nobody else.
      const deadline = Date.now() + wait.lockWaitMs;
      await client.query(LEDGER_DDL);
      const applied: string[] = [];
      let alreadyApplied = 0;
      for (const [i, ledger] of LEDGERS.entries()) {
        const r = await applySet(client, sets[i]!, ledger, wait, deadline, opts.log);
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
  wait: Required<MigrationLockWait>,
  deadline: number,
  log?: (msg: string) => void,
): Promise<MigrateResult> {
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
        throw new MigrationError(
          `migration ${name} was changed after it was applied (recorded as ${ledger.prefix}${prior.name}); migrations are append-only: ` +
            `restore the file and add a new NNNN_*.sql with the change`,
        );
      }
      continue;
    }
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query('BEGIN');
        await client.query("SELECT set_config('lock_timeout', $1, true)", [`${wait.lockTimeoutMs}ms`]);
        // The transaction's id, taken now: a file that ends it (a COMMIT in its text) is caught below.
        const xid = (await client.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]!.x;
        const before = ledger.prefix === APP_PREFIX ? (await client.query<Relation>(OUTSIDE_APP_SCHEMA, [APP_SCHEMA])).rows : null;
        await client.query(m.sql);
        const still = (await client.query<{ x: string | null }>('SELECT pg_current_xact_id_if_assigned()::text AS x')).rows[0]!.x;
        if (still !== xid) {
          throw new MigrationError(
            `migration ${name} ended the transaction it is applied in (a COMMIT, ROLLBACK or END in the file): what it did before ` +
              'that may be committed, and the file is not recorded as applied. Take the transaction control out of the file (each ' +
              'file runs in one transaction of its own), undo by hand what it committed, and run again',
          );
        }
        if (before) outsideAppSchema(name, before, (await client.query<Relation>(OUTSIDE_APP_SCHEMA, [APP_SCHEMA])).rows);
        await client.query(`INSERT INTO ${ledger.table} (version, name, checksum) VALUES ($1, $2, $3)`, [m.version, m.name, m.checksum]);
        await client.query('COMMIT');
        break;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        if (err instanceof MigrationError) throw err;
        if (!LOCK_RETRY_CODES.has((err as { code?: string }).code ?? '')) {
          throw new MigrationError(`migration ${name} failed: ${(err as Error).message}`, { cause: err });
        }
        const holders = await lockHolders(client, wait.lockTimeoutMs);
        const delay = Math.min(10_000, wait.lockRetryDelayMs * 2 ** (attempt - 1));
        if (Date.now() + delay >= deadline) {
          throw new MigrationError(
            `migration ${name} could not take its table locks: ${attempt} tries of ${wait.lockTimeoutMs} ms, giving way after each so ` +
              `that claims and heartbeats were not held behind it, until the run's ${wait.lockWaitMs / 1000} s were up. ` +
              `Holding locks on the job tables for longer than a try: ${holders}. ` +
              'Let those transactions finish (or end them with SELECT pg_terminate_backend(pid)) and deploy again.',
            { cause: err },
          );
        }
        log?.(
          `migration ${name}: ${(err as { code?: string }).code === '40P01' ? 'deadlocked' : `a lock was not free within ${wait.lockTimeoutMs} ms`} ` +
            `(held by ${holders}); try ${attempt + 1} in ${delay} ms`,
        );
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    log?.(`applied ${name}`);
    applied.push(name);
  }
  return { applied, alreadyApplied: migrations.length - applied.length };
}

/** The relations an application migration is checked against: pg_class relkind → what to call it. */
const RELKINDS: Record<string, string> = {
  r: 'table',
  p: 'partitioned table',
  v: 'view',
  m: 'materialized view',
  S: 'sequence',
  f: 'foreign table',
  i: 'index',
  I: 'partitioned index',
};

interface Relation {
  oid: string;
  name: string;
  relname: string;
  kind: string;
  /** An index's table. */
  table_oid: string | null;
  /** This transaction wrote its definition: its pg_class row, or a column, default, constraint, trigger, rule or policy of it. */
  touched: boolean;
}

/**
 * Every relation outside the application schema ($1), system schemas aside (pg_catalog, pg_toast,
 * temporary tables' pg_temp_N, information_schema). Read inside an application file's transaction
 * before and after its SQL: new ones it created, missing ones it dropped (or moved), touched ones
 * it changed (ALTER, GRANT, TRUNCATE, a trigger or a foreign key to it), as catalog rows written
 * by this transaction or one of its subtransactions (a DO block's EXCEPTION clause runs in one):
 * age(xmin) is 0 for this transaction's id and negative for the later ids its subtransactions
 * take. (A transaction of another session that started later has such an id too: DDL outside erp
 * running elsewhere during the file would be blamed on it, and the file refused.)
 */
const OUTSIDE_APP_SCHEMA = `
  WITH touched AS (
    SELECT oid AS rel FROM pg_class WHERE age(xmin) <= 0
    UNION SELECT attrelid FROM pg_attribute WHERE age(xmin) <= 0
    UNION SELECT adrelid FROM pg_attrdef WHERE age(xmin) <= 0
    UNION SELECT conrelid FROM pg_constraint WHERE age(xmin) <= 0
    UNION SELECT tgrelid FROM pg_trigger WHERE age(xmin) <= 0
    UNION SELECT ev_class FROM pg_rewrite WHERE age(xmin) <= 0
    UNION SELECT polrelid FROM pg_policy WHERE age(xmin) <= 0)
  SELECT c.oid::text AS oid, format('%I.%I', n.nspname, c.relname) AS name, quote_ident(c.relname) AS relname,
         c.relkind::text AS kind, i.indrelid::text AS table_oid, c.oid IN (SELECT rel FROM touched) AS touched
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_index i ON i.indexrelid = c.oid
   WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'i', 'I')
     AND n.nspname <> $1 AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'`;

/** Throws, naming the file and the relations, when an application file created, changed or dropped a relation outside `erp`. */
function outsideAppSchema(name: string, before: Relation[], after: Relation[]): void {
  const was = new Set(before.map((r) => r.oid));
  const is = new Set(after.map((r) => r.oid));
  // A table's own indexes go with it: `created table public.x`, not its primary key's index too.
  // Tables first (the kinds in RELKINDS' order), then by name.
  const rank = (r: Relation) => Object.keys(RELKINDS).indexOf(r.kind);
  const own = (rs: Relation[]) =>
    rs
      .filter((r) => !(r.table_oid && rs.some((t) => t.oid === r.table_oid)))
      .sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
  const created = own(after.filter((r) => !was.has(r.oid)));
  const found = [
    ['created', created],
    ['changed', own(after.filter((r) => was.has(r.oid) && r.touched))],
    ['dropped or moved', own(before.filter((r) => !is.has(r.oid)))],
  ] as const;
  const did = found
    .filter(([, rs]) => rs.length > 0)
    .map(([verb, rs]) => `${verb} ${rs.map((r) => `${RELKINDS[r.kind]} ${r.name}`).join(', ')}`);
  if (did.length === 0) return;
  const first = created.find((r) => r.table_oid === null);
  const hint = first
    ? ` (write ${APP_SCHEMA}.${first.relname}, not ${first.name})`
    : " (leave the platform's tables as they are: no ALTER, GRANT, index or trigger on one, and no foreign key to one, which puts triggers on it)";
  throw new MigrationError(
    `migration ${name} ${did.join('; ')}: the ERP's migrations (migrations/app) create and change relations in the ${APP_SCHEMA} schema only${hint}; ` +
      "nothing of the ERP's in public, jobs (the platform's) or another schema. Nothing of the file was applied: fix it and run again",
  );
}

/** The other sessions holding locks on tables of the platform's or the application's schema, oldest transaction first, for the message. */
async function lockHolders(client: pg.PoolClient, olderThanMs: number): Promise<string> {
  let rows: Record<string, unknown>[];
  try {
    ({ rows } = await client.query(
      // No statement text: it can carry data, and this goes to the deploy's logs and events.
      `SELECT a.pid, a.application_name AS app, a.usename AS usr, a.state,
              round(extract(epoch FROM statement_timestamp() - a.xact_start))::int AS xact_s,
              string_agg(DISTINCT n.nspname || '.' || c.relname || ' ' || l.mode, ', ') AS locks
         FROM pg_locks l
         JOIN pg_class c ON c.oid = l.relation
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.granted AND l.pid <> pg_backend_pid() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND c.relkind IN ('r', 'p') AND n.nspname IN ('jobs', $1) AND a.xact_start < statement_timestamp() - $2 * interval '1 millisecond'
        GROUP BY 1, 2, 3, 4, 5, a.xact_start ORDER BY a.xact_start LIMIT 5`,
      [APP_SCHEMA, olderThanMs],
    ));
  } catch (err) {
    return `unknown (reading pg_locks failed: ${(err as Error).message})`;
  }
  if (rows.length === 0) return 'no transaction open that long now (it has finished, or the lock was on a row or an advisory lock)';
  return rows
    .map((r) => `pid ${r.pid} (${r.app || 'no application_name'}, user ${r.usr}, ${r.state}, transaction open ${r.xact_s} s, ${r.locks})`)
    .join('; ');
}

/** Migrations not yet applied, the platform's and the application's. /readyz's: with the read timeout (a silent primary held a connection per call for ~15 min). */
export async function pendingMigrations(pool: pg.Pool, dir?: string, appDir?: string): Promise<string[]> {
  const sets = [await loadMigrations(dir), await loadAppMigrations(appDir)];
  const pending: string[] = [];
  const query = <R extends pg.QueryResultRow>(text: string, values: unknown[] = []) => pool.query<R>(timed(pool, { text, values }));
  for (const [i, ledger] of LEDGERS.entries()) {
    const { rows } = await query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [ledger.table]);
    const have = new Set(
      rows[0]?.exists ? (await query<{ version: number }>(`SELECT version FROM ${ledger.table}`)).rows.map((r) => r.version) : [],
    );
    pending.push(...sets[i]!.filter((m) => !have.has(m.version)).map((m) => ledger.prefix + m.name));
  }
  return pending;
}
