// The ERP's own tables (issue 18 §4, README "Your tables"): a migration in the application's
// folder (migrations/app) creates a table in the `erp` schema as the owner role, after the
// services' role exists, as on a later deployment. A handler then writes it through ctx.db, in a
// real worker connecting as the services' role the way the local stack and ECS do, and cannot
// ALTER, DROP or TRUNCATE it: PostgreSQL refuses (insufficient_privilege). The ERP's migrations
// here come from a folder of this file's own, never the repository's migrations/app: the tests
// hold whatever the ERP has put there (its own 0001, the README's tables).
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ensureAppRole } from '../../runtime/db/app-role.ts';
import { migrate, pendingMigrations } from '../../runtime/db/migrate.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { idList, text } from '../../runtime/handlers/validate.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { postInvoices as readmeExample } from '../examples/invoices-post.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';
import * as z from 'zod';

const INVOICE_LINES = `CREATE TABLE erp.invoice_lines (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  uuid NOT NULL,
  invoice text NOT NULL UNIQUE
);
`;

/** What the handler does with the ERP table, by payload.action. */
const ACTIONS: Record<string, string> = {
  alter: 'ALTER TABLE erp.invoice_lines ADD COLUMN sneaky int',
  drop: 'DROP TABLE erp.invoice_lines',
  truncate: 'TRUNCATE erp.invoice_lines',
  create: 'CREATE TABLE erp.sneaky (id int)',
};

const postInvoices = defineJob({
  type: 'invoice_lines.post',
  description: 'test: writes erp.invoice_lines, or tries to change it',
  schema: z.strictObject({ ids: idList({ max: 100 }), action: text({ max: 20 }).optional() }),
  async run(p, ctx) {
    if (p.action) {
      await ctx.db.query(ACTIONS[p.action]!);
      return { changed: p.action };
    }
    for (const invoice of p.ids) {
      await ctx.db.query('INSERT INTO erp.invoice_lines (job_id, invoice) VALUES ($1, $2)', [ctx.job.id, invoice]);
    }
    const { rows } = await ctx.db.query<{ n: number }>('SELECT count(*)::int AS n FROM erp.invoice_lines WHERE job_id = $1', [ctx.job.id]);
    return { posted: rows[0]!.n };
  },
});

// Roles are cluster-wide and test files run in parallel: a name of this file's own.
const role = { username: `jobs_app_${randomBytes(4).toString('hex')}`, password: randomBytes(18).toString('base64url') };
let p: Platform;
let appPool: pg.Pool;
let appDir: string;

beforeAll(async () => {
  // A stack deployed before the ERP had tables (its folder empty): the platform migrated, the services' role made.
  appDir = await mkdtemp(join(tmpdir(), 'app-migrations-'));
  p = await createPlatform({ registry: new JobRegistry([postInvoices, readmeExample]), timings: { maxAttempts: 1 }, appDir });
  await ensureAppRole(p.db.pool, role);
  // Then the ERP adds its first migration and deploys: applied as the owner role, after the platform's.
  await writeFile(join(appDir, '0001_invoice_lines.sql'), INVOICE_LINES);
  expect(await pendingMigrations(p.db.pool, undefined, appDir)).toEqual(['app/0001_invoice_lines.sql']);
  const r = await migrate(p.db.pool, { appDir });
  expect(r.applied).toEqual(['app/0001_invoice_lines.sql']);
  expect(await pendingMigrations(p.db.pool, undefined, appDir)).toEqual([]);

  const url = new URL(p.db.url);
  url.username = role.username;
  url.password = role.password;
  appPool = createPool({ url: url.toString(), max: 8, applicationName: 'jobs-test app role' });
  p.worker({ pool: appPool, publisher: new Publisher(appPool, p.queue, silentLogger) }).start();
});

afterAll(async () => {
  await p?.close();
  await appPool?.end().catch(() => undefined);
  const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await admin.connect();
  await admin.query(`DROP ROLE IF EXISTS ${role.username}`);
  await admin.end();
});

async function run(payload: { ids: string[]; action?: string }) {
  const [r] = await p.client.enqueueNow({ type: 'invoice_lines.post', payload });
  return waitFor(
    async () => {
      const job = await p.store.get(r!.job.id);
      return job?.finishedAt ? job : null;
    },
    15_000,
    `job ${r!.job.id} to end`,
  );
}

describe("the ERP's own tables (migrations/app)", () => {
  it('are recorded in their own ledger, apart from the platform migrations', async () => {
    const { rows } = await p.db.pool.query('SELECT name FROM jobs.app_schema_migrations');
    expect(rows).toEqual([{ name: '0001_invoice_lines.sql' }]);
    const again = await migrate(p.db.pool, { appDir });
    expect(again.applied).toEqual([]);
  });

  it('a handler writes them through ctx.db, in a worker connected as the services role', async () => {
    const job = await run({ ids: ['INV-1', 'INV-2', 'INV-3'] });
    expect(job.state).toBe('succeeded');
    expect(job.result).toEqual({ posted: 3 });
    const { rows } = await p.db.pool.query('SELECT invoice FROM erp.invoice_lines WHERE job_id = $1 ORDER BY invoice', [job.id]);
    expect(rows.map((r) => r.invoice)).toEqual(['INV-1', 'INV-2', 'INV-3']);
    // The worker really is the services' role, not the owner.
    const who = await appPool.query<{ u: string }>('SELECT current_user AS u');
    expect(who.rows[0]!.u).toBe(role.username);
  });

  it.each([
    ['alter', /must be owner of table invoice_lines/],
    ['drop', /must be owner of table invoice_lines/],
    ['truncate', /permission denied for table invoice_lines/],
    ['create', /permission denied for schema erp/],
  ])('a handler that tries to %s it is refused by PostgreSQL (permission denied)', async (action, message) => {
    const job = await run({ ids: ['INV-X'], action });
    expect(job.state).toBe('dead');
    expect(job.lastError?.message).toMatch(message);
    const { rows } = await p.db.pool.query(
      "SELECT count(*)::int AS n, bool_or(column_name = 'sneaky') AS altered FROM information_schema.columns WHERE table_schema = 'erp' AND table_name = 'invoice_lines'",
    );
    expect(rows[0]).toEqual({ n: 3, altered: false });
  });

  it('the same refusals as the role itself, with the SQLSTATE (42501 insufficient_privilege)', async () => {
    for (const sql of Object.values(ACTIONS)) {
      await expect(appPool.query(sql), sql).rejects.toMatchObject({ code: '42501' });
    }
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM erp.invoice_lines')).rows[0].n).toBe(3);
  });
});

describe("the README's example migration (Your tables) with its example handler (Writing a job handler)", () => {
  it('applies as the next app migration, and invoices.post posts through it as the services role', async () => {
    const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
    const section = readme.slice(readme.indexOf('## Your tables\n'));
    const sql = section.slice(section.indexOf('```sql\n') + '```sql\n'.length, section.indexOf('```\n', section.indexOf('```sql\n') + 7));
    expect(sql).toMatch(/CREATE TABLE erp\.invoice /);
    await writeFile(join(appDir, '0002_invoices.sql'), sql);
    expect((await migrate(p.db.pool, { appDir })).applied).toEqual(['app/0002_invoices.sql']);
    await p.db.pool.query("INSERT INTO erp.invoice (batch, total) SELECT 'B-README', g FROM generate_series(1, 25) g");
    const [r] = await p.client.enqueueNow({ type: 'invoices.post', payload: { batch: 'B-README', chunk: 10 } });
    const job = await waitFor(async () => {
      const j = await p.store.get(r!.job.id);
      return j?.finishedAt ? j : null;
    });
    expect(job.state).toBe('succeeded');
    const { rows } = await p.db.pool.query(
      "SELECT count(*)::int AS lines, sum(amount)::int AS amount, count(*) FILTER (WHERE i.posted_at IS NULL)::int AS unposted FROM erp.invoice i LEFT JOIN erp.ledger_line l ON l.invoice_id = i.id WHERE i.batch = 'B-README'",
    );
    expect(rows[0]).toEqual({ lines: 25, amount: 325, unposted: 0 });
  });
});
