// The test kit's database: a fresh, migrated database per kit, dropped on close. It lives on the
// first server found of: the kit's `databaseUrl` option; the PostgreSQL a vitest global setup
// provides as `pgAdminUrl` (this repository's test/setup/global-pg.ts does, so the kit shares the
// suite's server); DATABASE_URL; else an embedded PostgreSQL the kit starts and stops itself.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startEmbeddedPg, withDatabase, type EmbeddedPg } from '../dev/embedded-pg.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { createPool } from '../runtime/db/pool.ts';

export interface KitDatabase {
  url: string;
  /** A pool on the kit's database; every pool made here ends on drop(). */
  newPool(max: number): pg.Pool;
  drop(): Promise<void>;
}

/** The admin URL a vitest global setup provided (`project.provide('pgAdminUrl', url)`), when running under one. */
async function providedByVitest(): Promise<string | undefined> {
  if (!process.env.VITEST) return undefined;
  try {
    const { inject } = await import('vitest');
    const url = (inject as (key: string) => unknown)('pgAdminUrl');
    return typeof url === 'string' && url !== '' ? url : undefined;
  } catch {
    return undefined; // not inside a vitest worker after all
  }
}

async function adminQuery(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined); // a dropped connection surfaces as the query's error
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

export async function openKitDatabase(databaseUrl?: string): Promise<KitDatabase> {
  let server: EmbeddedPg | null = null;
  let admin = databaseUrl ?? (await providedByVitest()) ?? process.env.DATABASE_URL;
  if (!admin) {
    server = await startEmbeddedPg();
    admin = server.url;
  }
  // A generated name (letters and digits only): safe to put in the statement, which takes no parameters.
  const name = `jobs_kit_${randomBytes(6).toString('hex')}`;
  const pools: pg.Pool[] = [];
  try {
    await adminQuery(admin, `CREATE DATABASE ${name}`);
    const url = withDatabase(admin, name);
    const newPool = (max: number) => {
      const p = createPool({ url, max, applicationName: 'jobs-test-kit' });
      pools.push(p);
      return p;
    };
    const migrator = newPool(2);
    await migrate(migrator);
    const adminUrl = admin;
    return {
      url,
      newPool,
      async drop() {
        await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
        await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
        await server?.stop();
      },
    };
  } catch (err) {
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    await server?.stop();
    throw err;
  }
}
