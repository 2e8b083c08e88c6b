// The test kit's database: a fresh, migrated database per kit, dropped on close. It lives on the
// first server found of: the kit's `databaseUrl` option; the PostgreSQL a vitest global setup
// provides as `pgAdminUrl` (this repository's test/setup/global-pg.ts does, so the kit shares the
// suite's server); DATABASE_URL; else an embedded PostgreSQL the kit starts and stops itself.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startEmbeddedPg, withDatabase, type EmbeddedPg } from '../dev/embedded-pg.ts';
import { ensureAppRole } from '../runtime/db/app-role.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { createPool } from '../runtime/db/pool.ts';

export interface KitDatabase {
  url: string;
  /** A pool on the kit's database, as its owner (fixtures, DDL, assertions); every pool made here ends on drop(). */
  newPool(max: number): pg.Pool;
  /**
   * A pool as the services connect when deployed: a role of this kit's own with row access only
   * (runtime/db/app-role.ts), so a handler that needs more (DDL, another schema's owner) fails
   * its test as it would fail in AWS. The owner's pool when the server lets the kit create no role.
   */
  newAppPool(max: number): pg.Pool;
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

/**
 * The kit creates a database of its own; a role that may not (42501) is most often the local
 * stack's row-access role, whose DATABASE_URL an exported .jobs-local/env left in the shell.
 */
function cannotCreateDatabase(err: unknown, url: string, source: string): unknown {
  if ((err as { code?: string }).code !== '42501') return err;
  const user = decodeURIComponent(new URL(url).username) || 'this user';
  return new Error(
    `the test kit creates a database of its own, and ${user} (from ${source}) may not create databases. ` +
      (source === 'DATABASE_URL'
        ? 'If this shell exported .jobs-local/env, DATABASE_URL is the local stack\'s row-access role: unset it (the kit then uses an embedded PostgreSQL of its own) or run the tests with DATABASE_URL="$DATABASE_ADMIN_URL".'
        : 'Give it a role with CREATEDB.'),
    { cause: err },
  );
}

export async function openKitDatabase(databaseUrl?: string): Promise<KitDatabase> {
  let server: EmbeddedPg | null = null;
  const provided = databaseUrl ? undefined : await providedByVitest();
  let admin = databaseUrl ?? provided ?? process.env.DATABASE_URL;
  // The suite's global setup passes DATABASE_URL on when it is set: name the variable the person set.
  const source =
    admin === process.env.DATABASE_URL ? 'DATABASE_URL' : databaseUrl ? "the kit's databaseUrl option" : "the vitest global setup's server";
  if (!admin) {
    server = await startEmbeddedPg();
    admin = server.url;
  }
  // A generated name (letters and digits only): safe to put in the statement, which takes no parameters.
  const name = `jobs_kit_${randomBytes(6).toString('hex')}`;
  const pools: pg.Pool[] = [];
  try {
    await adminQuery(admin, `CREATE DATABASE ${name}`).catch((err: unknown) => {
      throw cannotCreateDatabase(err, admin!, source);
    });
    const url = withDatabase(admin, name);
    const poolOn = (at: string) => (max: number) => {
      const p = createPool({ url: at, max, applicationName: 'jobs-test-kit' });
      pools.push(p);
      return p;
    };
    const newPool = poolOn(url);
    const migrator = newPool(2);
    await migrate(migrator);
    // The services' role, one per kit (kits run side by side on one server, and a role is the server's).
    const role = { username: `${name}_app`, password: randomBytes(18).toString('base64url') };
    let appUrl = url;
    let roleCreated = false;
    try {
      await ensureAppRole(migrator, role);
      roleCreated = true;
      const u = new URL(url);
      u.username = role.username;
      u.password = role.password;
      u.searchParams.delete('user'); // would override the URL's user (pg-connection-string)
      u.searchParams.delete('password');
      // A URL without a host (a socket) takes no user: the owner runs the handlers then.
      if (u.username === role.username) appUrl = u.toString();
    } catch (err) {
      // A server that lets this user create no role: the owner runs the handlers.
      if ((err as { code?: string }).code !== '42501') throw err;
    }
    if (appUrl === url)
      process.emitWarning(
        'erp-jobs/testing: handlers run as the database owner here (the kit could not create or use a role of its own): a handler that needs more than row access will pass its test and fail when deployed',
      );
    const adminUrl = admin;
    return {
      url,
      newPool,
      newAppPool: poolOn(appUrl),
      async drop() {
        await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
        await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
        if (roleCreated) await adminQuery(adminUrl, `DROP ROLE IF EXISTS ${role.username}`).catch(() => undefined);
        await server?.stop();
      },
    };
  } catch (err) {
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    await server?.stop();
    throw err;
  }
}
