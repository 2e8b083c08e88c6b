// Applies the numbered SQL migrations in runtime/db/migrations, idempotently, under a
// PostgreSQL advisory lock. `jobs migrate`, the local stack, the tests and the deploy-time
// bootstrap function all call `migrate()`, so the schema a deployment gets is the one the
// runtime was tested against.
//
// Rules: files are named NNNN_name.sql and are append-only. Each runs in its own transaction
// and is recorded with a checksum; an applied file whose text changed stops the run with the
// file's name, because silently skipping it would leave environments with different schemas.

import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

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

const LEDGER_DDL = `
  CREATE SCHEMA IF NOT EXISTS jobs;
  CREATE TABLE IF NOT EXISTS jobs.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  )`;

/** Apply every migration not yet applied. Safe to run from many processes at once. */
export async function migrate(pool: pg.Pool, opts: { dir?: string; log?: (msg: string) => void } = {}): Promise<MigrateResult> {
  const migrations = await loadMigrations(opts.dir);
  const client = await pool.connect();
  try {
    // Session-level lock: held across the per-migration transactions below, released in finally.
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query(LEDGER_DDL);
      const { rows } = await client.query<{ version: number; name: string; checksum: string }>(
        'SELECT version, name, checksum FROM jobs.schema_migrations ORDER BY version',
      );
      const done = new Map(rows.map((r) => [r.version, r]));
      const applied: string[] = [];
      for (const m of migrations) {
        const prior = done.get(m.version);
        if (prior) {
          if (prior.checksum !== m.checksum) {
            throw new Error(
              `migration ${m.name} was changed after it was applied (recorded as ${prior.name}); migrations are append-only: ` +
                `restore the file and add a new NNNN_*.sql with the change`,
            );
          }
          continue;
        }
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO jobs.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)', [
            m.version,
            m.name,
            m.checksum,
          ]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw new Error(`migration ${m.name} failed: ${(err as Error).message}`, { cause: err });
        }
        opts.log?.(`applied ${m.name}`);
        applied.push(m.name);
      }
      return { applied, alreadyApplied: migrations.length - applied.length };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => undefined);
    }
  } finally {
    client.release();
  }
}

/** Names of migrations not yet applied (empty when the schema is current). Used by /readyz. */
export async function pendingMigrations(pool: pg.Pool, dir?: string): Promise<string[]> {
  const migrations = await loadMigrations(dir);
  const { rows } = await pool.query<{ exists: boolean }>("SELECT to_regclass('jobs.schema_migrations') IS NOT NULL AS exists");
  if (!rows[0]?.exists) return migrations.map((m) => m.name);
  const applied = await pool.query<{ version: number }>('SELECT version FROM jobs.schema_migrations');
  const have = new Set(applied.rows.map((r) => r.version));
  return migrations.filter((m) => !have.has(m.version)).map((m) => m.name);
}
