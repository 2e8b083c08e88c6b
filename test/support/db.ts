// A fresh, migrated database per test file on the suite's PostgreSQL (see test/setup/global-pg.ts).
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { inject } from 'vitest';
import { defaultMigrationsDir, migrate } from '../../runtime/db/migrate.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { withDatabase } from '../../dev/embedded-pg.ts';

export interface TestDb {
  url: string;
  pool: pg.Pool;
  /** A new pool on the same database: a second "process" with its own connections. */
  newPool(max?: number): pg.Pool;
  drop(): Promise<void>;
}

/**
 * `migrate: false`: an empty database. `migrateThrough: N`: the migrations numbered up to N only,
 * the schema a deployment had before a later one (upgrade tests then run `migrate` for the rest).
 * The ERP's own migrations come from migrations/app (whatever the ERP has put there) unless
 * `appDir` names another folder: a test of the mechanism, or one that makes erp tables of its own,
 * passes a folder of its own (an empty one: none of the ERP's).
 */
export async function createTestDb(opts: { migrate?: boolean; migrateThrough?: number; appDir?: string } = {}): Promise<TestDb> {
  const admin = inject('pgAdminUrl');
  const name = `t_${randomBytes(6).toString('hex')}`;
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`CREATE DATABASE ${name}`);
  await c.end();
  const url = withDatabase(admin, name);
  const pools: pg.Pool[] = [];
  const newPool = (max = 10) => {
    const p = createPool({ url, max, applicationName: 'jobs-test' });
    pools.push(p);
    return p;
  };
  const pool = newPool(20);
  const appDir = opts.appDir ? { appDir: opts.appDir } : {};
  if (opts.migrateThrough !== undefined) await migrateThrough(pool, opts.migrateThrough, appDir);
  else if (opts.migrate !== false) await migrate(pool, appDir);
  return {
    url,
    pool,
    newPool,
    async drop() {
      await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
      const c2 = new pg.Client({ connectionString: admin });
      await c2.connect();
      await c2.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c2.end();
    },
  };
}

async function migrateThrough(pool: pg.Pool, last: number, appDir: { appDir?: string }): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), `mig-${last}-`));
  try {
    await cp(defaultMigrationsDir(), dir, {
      recursive: true,
      filter: (src) => {
        const m = /(\d{4})_[^/]*\.sql$/.exec(src);
        return !m || Number(m[1]) <= last;
      },
    });
    await migrate(pool, { dir, ...appDir });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
