import { mkdtemp, writeFile, cp } from 'node:fs/promises';
import pg from 'pg';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultMigrationsDir, migrate, MIGRATION_LOCK_KEY, pendingMigrations } from '../../runtime/db/migrate.ts';
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

  it("waits for another session's migration lock within the run's budget, then fails saying so (stack review: it waited without end)", async () => {
    const holder = await db.pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      await expect(migrate(db.pool, { lockWaitMs: 300, lockRetryDelayMs: 50 })).rejects.toThrow(
        'migrate: another session held the migration lock for 0.3 s',
      );
      setTimeout(() => void holder.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]), 200);
      await expect(migrate(db.pool, { lockWaitMs: 5_000, lockRetryDelayMs: 50 })).resolves.toMatchObject({ applied: [] });
    } finally {
      holder.release();
    }
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

// The ERP's own migrations (README "Your tables") may create and change relations in the erp
// schema only: a file that touches any other (public and jobs are the platform's) is rolled back
// whole and stops the run, naming the file, the relations and the fix. Its folders are its own:
// none of the repository's migrations/app (whatever the ERP has put there) is applied here.
describe("the ERP's migrations stay in the erp schema", () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb({ appDir: await mkdtemp(join(tmpdir(), 'no-app-mig-')) });
  });
  afterAll(() => db.drop());

  /** A folder of the ERP's migrations holding `files` (name → SQL). */
  async function appDirWith(files: Record<string, string>): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'app-mig-'));
    for (const [name, sql] of Object.entries(files)) await writeFile(join(dir, name), sql);
    return dir;
  }
  const exists = async (name: string) =>
    (await db.pool.query<{ ok: boolean }>('SELECT to_regclass($1) IS NOT NULL AS ok', [name])).rows[0]!.ok;
  const recorded = async (version: number) =>
    (await db.pool.query('SELECT 1 FROM jobs.app_schema_migrations WHERE version = $1', [version])).rowCount;

  it('refuses a table in public and leaves nothing of the file: no table, not recorded, still pending', async () => {
    const appDir = await appDirWith({
      '9101_stock.sql': 'CREATE TABLE erp.stock_first (id int);\nCREATE TABLE public.stock_public (id bigserial PRIMARY KEY);\n',
    });
    await expect(migrate(db.pool, { appDir })).rejects.toThrow(
      /^migration app\/9101_stock\.sql created table public\.stock_public, sequence public\.stock_public_id_seq: the ERP's migrations \(migrations\/app\) create and change relations in the erp schema only \(write erp\.stock_public, not public\.stock_public\); nothing of the ERP's in public, jobs/,
    );
    expect(await exists('public.stock_public')).toBe(false);
    expect(await exists('erp.stock_first')).toBe(false);
    expect(await recorded(9101)).toBe(0);
    expect(await pendingMigrations(db.pool, undefined, appDir)).toEqual(['app/9101_stock.sql']);
    // Fixed, the same file applies.
    await writeFile(join(appDir, '9101_stock.sql'), 'CREATE TABLE erp.stock_first (id int);\nCREATE TABLE erp.stock_public (id int);\n');
    expect((await migrate(db.pool, { appDir })).applied).toEqual(['app/9101_stock.sql']);
    expect(await exists('erp.stock_public')).toBe(true);
  });

  it('refuses a table in jobs, the platform’s schema', async () => {
    const appDir = await appDirWith({ '9102_jobs_side.sql': 'CREATE TABLE jobs.erp_side (id int);\n' });
    await expect(migrate(db.pool, { appDir })).rejects.toThrow(
      /^migration app\/9102_jobs_side\.sql created table jobs\.erp_side: .*erp\.erp_side/,
    );
    expect(await exists('jobs.erp_side')).toBe(false);
    expect(await recorded(9102)).toBe(0);
  });

  it('refuses an unqualified CREATE TABLE: with the owner’s search_path ("$user", public) it lands in public', async () => {
    const appDir = await appDirWith({ '9103_unqualified.sql': 'CREATE TABLE stock_unqualified (id int);\n' });
    await expect(migrate(db.pool, { appDir })).rejects.toThrow(
      /^migration app\/9103_unqualified\.sql created table public\.stock_unqualified: .*\(write erp\.stock_unqualified, not public\.stock_unqualified\)/,
    );
    expect(await exists('public.stock_unqualified')).toBe(false);
  });

  it.each([
    ['a view in public', 'CREATE VIEW public.open_jobs AS SELECT id FROM jobs.job', /created view public\.open_jobs/],
    [
      'a materialized view in public',
      'CREATE MATERIALIZED VIEW erp_totals AS SELECT 1 AS n',
      /created materialized view public\.erp_totals/,
    ],
    ['a sequence in jobs', 'CREATE SEQUENCE jobs.erp_numbers', /created sequence jobs\.erp_numbers/],
    ['a table in a schema of its own', 'CREATE SCHEMA erp_extra; CREATE TABLE erp_extra.t (id int)', /created table erp_extra\.t/],
    [
      'an ALTER of the platform’s job table',
      'ALTER TABLE jobs.job ADD COLUMN erp_note text',
      /changed table jobs\.job: .*leave the platform's tables as they are/,
    ],
    [
      'an ALTER of a platform table in public',
      'ALTER TABLE ledger_entries ADD COLUMN erp_note text',
      /changed table public\.ledger_entries/,
    ],
    ['an index on the platform’s job table', 'CREATE INDEX erp_by_type ON jobs.job (type)', /created index jobs\.erp_by_type/],
    ['a GRANT on a platform table', 'GRANT SELECT ON jobs.job TO PUBLIC', /changed table jobs\.job/],
    ['a DROP of a platform table', 'DROP TABLE inventory_costs', /dropped or moved table public\.inventory_costs/],
    [
      'a foreign key to jobs.job (its triggers go on the platform’s table)',
      'CREATE TABLE erp.job_note (job_id uuid REFERENCES jobs.job)',
      /changed table jobs\.job/,
    ],
    [
      'a change made in a DO block that catches its error (a subtransaction)',
      'DO $$ BEGIN ALTER TABLE jobs.job ADD COLUMN erp_note text; EXCEPTION WHEN duplicate_column THEN NULL; END $$',
      /changed table jobs\.job/,
    ],
    [
      'a foreign key to jobs.job added in a DO block that catches its error',
      'CREATE TABLE erp.job_note2 (job_id uuid);\nDO $$ BEGIN ALTER TABLE erp.job_note2 ADD FOREIGN KEY (job_id) REFERENCES jobs.job; EXCEPTION WHEN duplicate_object THEN NULL; END $$',
      /changed table jobs\.job/,
    ],
  ])('refuses %s, and applies none of it', async (_, sql, message) => {
    const appDir = await appDirWith({ '9104_outside.sql': `CREATE TABLE erp.alongside (id int);\n${sql};\n` });
    await expect(migrate(db.pool, { appDir })).rejects.toThrow(message);
    expect(await exists('erp.alongside')).toBe(false);
    expect(await recorded(9104)).toBe(0);
    const { rows } = await db.pool.query(
      "SELECT count(*)::int AS n FROM information_schema.columns WHERE column_name = 'erp_note' AND table_schema IN ('jobs', 'public')",
    );
    expect(rows[0].n).toBe(0);
    expect(await exists('public.inventory_costs')).toBe(true);
  });

  it('refuses a file that ends its own transaction (a COMMIT in it), saying so instead of "nothing applied"', async () => {
    const appDir = await appDirWith({
      '9105_commits.sql': 'CREATE TABLE erp.before_commit (id int);\nCOMMIT;\nCREATE TABLE erp.after_commit (id int);\n',
    });
    await expect(migrate(db.pool, { appDir })).rejects.toThrow(
      /^migration app\/9105_commits\.sql ended the transaction it is applied in \(a COMMIT, ROLLBACK or END in the file\): what it did before that may be committed, and the file is not recorded as applied/,
    );
    expect(await recorded(9105)).toBe(0);
    await db.pool.query('DROP TABLE IF EXISTS erp.before_commit, erp.after_commit');
  });

  it('applies what stays in erp: tables, their sequences and indexes, views of the platform’s tables, its own temporary tables', async () => {
    const appDir = await appDirWith({
      '9105_stock_count.sql':
        'CREATE TABLE erp.stock_count (id bigserial PRIMARY KEY, warehouse text NOT NULL UNIQUE);\n' +
        'CREATE INDEX stock_count_by_warehouse ON erp.stock_count (lower(warehouse));\n' +
        'CREATE VIEW erp.job_states AS SELECT state, count(*) AS n FROM jobs.job GROUP BY state;\n' +
        'CREATE TEMPORARY TABLE scratch (n int) ON COMMIT DROP;\n' +
        'INSERT INTO erp.stock_count (warehouse) VALUES ($$W1$$);\n',
    });
    expect((await migrate(db.pool, { appDir })).applied).toEqual(['app/9105_stock_count.sql']);
    expect(await recorded(9105)).toBe(1);
    expect((await db.pool.query('SELECT warehouse FROM erp.stock_count')).rows).toEqual([{ warehouse: 'W1' }]);
  });
});
