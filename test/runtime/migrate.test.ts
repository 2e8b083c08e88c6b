import { mkdtemp, writeFile, cp } from 'node:fs/promises';
import pg from 'pg';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultMigrationsDir, migrate, pendingMigrations } from '../../runtime/db/migrate.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

describe('migrate', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb({ migrate: false });
  });
  afterAll(() => db.drop());

  it('applies every migration once even when ten processes race to do it', async () => {
    const pools = Array.from({ length: 10 }, () => db.newPool(1));
    const results = await Promise.all(pools.map((p) => migrate(p)));
    const applied = results.flatMap((r) => r.applied);
    const files = (await pendingMigrations(pools[0]!)).length;
    expect(files).toBe(0);
    // Each file applied by exactly one racer.
    expect(new Set(applied).size).toBe(applied.length);
    expect(applied.length).toBeGreaterThanOrEqual(2);
    const again = await migrate(db.pool);
    expect(again.applied).toEqual([]);
  });

  it('refuses an applied migration whose text changed, naming the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '0001_job_table.sql'), '-- edited\n', { flag: 'a' });
    await expect(migrate(db.pool, { dir })).rejects.toThrow(/0001_job_table\.sql was changed after it was applied/);
  });

  it('reports a new migration as pending until it is applied', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '9999_extra.sql'), 'CREATE TABLE extra_table (id int);');
    expect(await pendingMigrations(db.pool, dir)).toEqual(['9999_extra.sql']);
    await migrate(db.pool, { dir });
    expect(await pendingMigrations(db.pool, dir)).toEqual([]);
  });
});

// A deploy in the middle of a month-end backlog: a migration that alters jobs.job needs the table
// to itself, and while it waits in PostgreSQL's lock queue every claim, heartbeat and enqueue
// queues behind it. One long transaction on the table (a report, an ERP request that enqueued and
// has not committed) must not stop the fleet: the migration gives way and tries again.
describe('migrate behind a long transaction', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(() => db.drop());

  /** The platform's migrations plus `extra` (file name → SQL), in a folder of their own. */
  async function migrationsWith(extra: Record<string, string>): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    for (const [name, sql] of Object.entries(extra)) await writeFile(join(dir, name), sql);
    return dir;
  }

  /** A session with a transaction open that has read jobs.job, as a long report does. */
  async function openReport(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: db.url, application_name: 'month-end-report' });
    c.on('error', () => undefined);
    await c.connect();
    await c.query('BEGIN');
    await c.query('SELECT count(*) FROM jobs.job');
    return c;
  }

  /** An enqueue-like write to jobs.job that gives up after `ms` if it is stuck behind a lock. */
  async function writeJob(ms: number): Promise<void> {
    const c = new pg.Client({ connectionString: db.url, application_name: 'worker' });
    c.on('error', () => undefined);
    await c.connect();
    try {
      await c.query(`SET statement_timeout = ${ms}`);
      await c.query("INSERT INTO jobs.job (type, max_attempts) VALUES ('deploy.probe', 3)");
    } finally {
      await c.end();
    }
  }

  it('waits for its lock a short while at a time, so the workers keep writing, and applies once the transaction ends', async () => {
    // Two statements: the first has run when the second times out, and each try must undo it.
    const dir = await migrationsWith({
      '9998_alter_job.sql': 'CREATE TABLE jobs.deploy_side (id int);\nALTER TABLE jobs.job ADD COLUMN deploy_test integer;',
    });
    const report = await openReport();
    const lines: string[] = [];
    const migrating = migrate(db.pool, { dir, lockTimeoutMs: 300, lockWaitMs: 60_000, lockRetryDelayMs: 50, log: (l) => lines.push(l) });
    let settled = false;
    migrating.then(
      () => (settled = true),
      () => (settled = true),
    );
    try {
      // The ALTER is in PostgreSQL's lock queue behind the report: writes to jobs.job still go
      // through, one after another (each may wait out one short try).
      const altering = async () =>
        (
          await db.pool.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ALTER TABLE jobs.job ADD COLUMN deploy_test%'",
          )
        ).rows[0].n as number;
      await expect.poll(altering, { timeout: 10_000, interval: 20 }).toBe(1);
      for (let i = 0; i < 5; i++) await writeJob(3000); // without lock_timeout: stuck behind the ALTER until the report ends
      expect(settled).toBe(false);
      await expect.poll(() => lines.length).toBeGreaterThan(0);
      expect(lines[0]).toMatch(
        /9998_alter_job\.sql: a lock was not free within 300 ms \(held by pid \d+ \(month-end-report, .*jobs\.job AccessShareLock/,
      );
      expect(lines[0]).not.toContain('SELECT count(*)'); // no statement text: it may carry data
    } finally {
      await report.query('COMMIT');
      await report.end();
    }
    const result = await migrating;
    expect(result.applied).toEqual(['9998_alter_job.sql']);
    const { rows } = await db.pool.query(
      "SELECT (SELECT count(*)::int FROM information_schema.columns WHERE table_schema = 'jobs' AND table_name = 'job' AND column_name = 'deploy_test') AS col, to_regclass('jobs.deploy_side') IS NOT NULL AS side",
    );
    expect(rows[0]).toEqual({ col: 1, side: true });
  });

  it('fails the deploy when its time is up, naming the session that held the table, and leaves the migration pending', async () => {
    const dir = await migrationsWith({ '9997_alter_job_again.sql': 'ALTER TABLE jobs.job ADD COLUMN deploy_test_2 integer;' });
    const report = await openReport();
    try {
      await expect(migrate(db.pool, { dir, lockTimeoutMs: 100, lockWaitMs: 400, lockRetryDelayMs: 10 })).rejects.toThrow(
        /migration 9997_alter_job_again\.sql could not take its table locks: \d+ tries of 100 ms, .*month-end-report.*pg_terminate_backend/s,
      );
      expect(await pendingMigrations(db.pool, dir)).toEqual(['9997_alter_job_again.sql']);
    } finally {
      await report.query('ROLLBACK');
      await report.end();
    }
  });
});
