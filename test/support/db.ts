// A fresh, migrated database per test file on the suite's PostgreSQL (see test/setup/global-pg.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { migrate } from '../../runtime/db/migrate.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { withDatabase } from '../../dev/embedded-pg.ts';

export interface TestDb {
  url: string;
  pool: pg.Pool;
  /** A new pool on the same database: a second "process" with its own connections. */
  newPool(max?: number): pg.Pool;
  drop(): Promise<void>;
}

export async function createTestDb(opts: { migrate?: boolean } = {}): Promise<TestDb> {
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
  if (opts.migrate !== false) await migrate(pool);
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
