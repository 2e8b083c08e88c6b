// The schema bootstrap's handler against a real PostgreSQL (the suite's embedded one): Create
// applies the runtime's migrations, a rerun applies none, Delete leaves the schema alone, a
// failing migration fails the custom resource, and the secret is read from the Parameters and
// Secrets extension the way Lambda serves it.

import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { cp, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  createBootstrapHandler,
  migrateAt,
  readSecretFromExtension,
  SCHEMA_PHYSICAL_ID,
  type BootstrapDeps,
  type BootstrapEvent,
} from '../../runtime/bootstrap/handler.ts';
import { databaseUrlFromEnv, ENV } from '../../runtime/config/env.ts';
import { defaultMigrationsDir, loadAppMigrations, loadMigrations } from '../../runtime/db/migrate.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

const SECRET_ARN = 'arn:aws:secretsmanager:eu-central-1:111122223333:secret:ErpJobsDatabaseSecret-AbCdEf';

/** The secret as RDS generates it, pointing at the test database. */
function rdsSecretFor(url: string): string {
  const u = new URL(url);
  return JSON.stringify({
    engine: 'postgres',
    host: u.hostname,
    port: Number(u.port || 5432),
    username: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    dbname: u.pathname.slice(1),
  });
}

/** The services' own URL builder, minus TLS: the embedded server has none, RDS requires it. */
function urlWithoutTls(secretJson: string): string {
  const u = new URL(databaseUrlFromEnv({ [ENV.databaseSecret]: secretJson }));
  expect(u.searchParams.get('sslmode')).toBe('no-verify');
  u.searchParams.delete('sslmode');
  return u.toString();
}

const event = (RequestType: BootstrapEvent['RequestType'], hash = 'h1'): BootstrapEvent => ({
  RequestType,
  PhysicalResourceId: RequestType === 'Create' ? undefined : SCHEMA_PHYSICAL_ID,
  ResourceProperties: { DatabaseSecretArn: SECRET_ARN, MigrationsHash: hash },
});

describe('schema bootstrap handler', () => {
  let db: TestDb;
  const secretReads: string[] = [];
  const logs: string[] = [];
  let deps: BootstrapDeps;

  beforeAll(async () => {
    db = await createTestDb({ migrate: false });
    deps = {
      readSecret: async (arn) => {
        secretReads.push(arn);
        return rdsSecretFor(db.url);
      },
      databaseUrl: urlWithoutTls,
      runMigrations: (url) => migrateAt(url, { log: (m) => logs.push(m), connectAttempts: 1 }),
      log: (m) => logs.push(m),
    };
  });
  afterAll(() => db.drop());

  it('Create applies every migration of runtime/db/migrations, then the ERP’s (migrations/app, whatever it holds), then an Update applies none', async () => {
    const onEvent = createBootstrapHandler(deps);
    const files = (await loadMigrations(defaultMigrationsDir())).map((m) => m.name);
    const all = [...files, ...(await loadAppMigrations()).map((m) => `app/${m.name}`)];
    const created = await onEvent(event('Create'));
    expect(created.PhysicalResourceId).toBe(SCHEMA_PHYSICAL_ID);
    expect(created.Data).toEqual({ Applied: all.join(','), AppliedCount: all.length, AlreadyApplied: 0 });
    expect(secretReads).toEqual([SECRET_ARN]);
    const { rows } = await db.pool.query<{ name: string }>('SELECT name FROM jobs.schema_migrations ORDER BY version');
    expect(rows.map((r) => r.name)).toEqual(files);

    const updated = await onEvent(event('Update', 'h2'));
    expect(updated.PhysicalResourceId).toBe(SCHEMA_PHYSICAL_ID);
    expect(updated.Data).toMatchObject({ AppliedCount: 0, AlreadyApplied: all.length });
  });

  it("a rollback's Update (the previous release's hash, sent while the function is still the new release's) migrates nothing, sets the services' role from the secret it names, and succeeds", async () => {
    // Stack review: it migrated again, failed as the deploy had (a bad file, a lock it could not
    // get), and the stack stopped in UPDATE_ROLLBACK_FAILED. Second review: the role still
    // follows the secret the rollback names.
    const appArn = 'arn:aws:secretsmanager:eu-central-1:111122223333:secret:ErpJobsAppSecret-Rollback';
    const runs: { appRole: string | undefined; migrate: boolean | undefined }[] = [];
    const onEvent = createBootstrapHandler({
      ...deps,
      bundledMigrationsHash: 'h-new',
      readSecret: async (arn) => (arn === appArn ? JSON.stringify({ username: 'jobs_app_old', password: 'p' }) : rdsSecretFor(db.url)),
      runMigrations: async (_url, appRole, o) => {
        runs.push({ appRole: appRole?.username, migrate: o?.migrate });
        if (o?.migrate !== false) throw new Error('0099_bad.sql: syntax error at or near "ALTR"');
        return { applied: [], alreadyApplied: 0 };
      },
    });
    const withApp = (hash: string): BootstrapEvent => ({
      RequestType: 'Update',
      PhysicalResourceId: SCHEMA_PHYSICAL_ID,
      ResourceProperties: { DatabaseSecretArn: SECRET_ARN, AppSecretArn: appArn, MigrationsHash: hash },
    });
    await expect(onEvent(withApp('h-new'))).rejects.toThrow(/0099_bad\.sql/);
    const rolledBack = await onEvent(withApp('h-old'));
    expect(rolledBack).toMatchObject({
      PhysicalResourceId: SCHEMA_PHYSICAL_ID,
      Data: { Applied: '', AppliedCount: 0, AppRole: 'jobs_app_old' },
    });
    expect(runs).toEqual([
      { appRole: 'jobs_app_old', migrate: true },
      { appRole: 'jobs_app_old', migrate: false },
    ]);
    expect(logs).toContain("update to migrations h-old, not this bundle's h-new: a rollback; the schema stays as it is");
  });

  it('Delete leaves the schema and its data alone and touches nothing', async () => {
    const reads = secretReads.length;
    const onEvent = createBootstrapHandler(deps);
    const res = await onEvent(event('Delete'));
    expect(res).toEqual({ PhysicalResourceId: SCHEMA_PHYSICAL_ID });
    expect(secretReads.length).toBe(reads);
    const { rows } = await db.pool.query("SELECT to_regclass('jobs.schema_migrations') IS NOT NULL AS present");
    expect(rows[0].present).toBe(true);
  });

  it('fails the custom resource (and the deployment) when a migration fails, naming the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bootstrap-mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '9999_broken.sql'), 'CREATE TABLE jobs.broken (id int REFERENCES jobs.no_such_table(id));\n');
    const onEvent = createBootstrapHandler({
      ...deps,
      runMigrations: (url) => migrateAt(url, { dir, log: () => undefined, connectAttempts: 1 }),
    });
    await expect(onEvent(event('Update', 'h3'))).rejects.toThrow(/migration 9999_broken\.sql failed/);
  });

  it('fails at once, without retrying, when the database refuses the master password (waiting would not change it)', async () => {
    const wrong = new URL(db.url);
    wrong.password = 'not-the-master-password';
    const said: string[] = [];
    await expect(migrateAt(wrong.toString(), { log: (m) => said.push(m), connectAttempts: 3, retryDelayMs: 60_000 })).rejects.toMatchObject(
      { code: '28P01' },
    );
    expect(said.filter((m) => /unreachable/.test(m))).toEqual([]);
  });

  it('fails without a secret ARN rather than guessing', async () => {
    const onEvent = createBootstrapHandler(deps);
    await expect(onEvent({ RequestType: 'Create', ResourceProperties: { MigrationsHash: 'x' } as never })).rejects.toThrow(
      /no DatabaseSecretArn/,
    );
  });
});

describe("the services' own database role (least privilege)", () => {
  const APP_ARN = 'arn:aws:secretsmanager:eu-central-1:111122223333:secret:ErpJobsAppSecret-GhIjKl';
  // Roles are cluster-wide and test files run in parallel: a name of this file's own.
  const role = `jobs_app_${randomBytes(4).toString('hex')}`;
  let db: TestDb;
  let password = randomBytes(18).toString('base64url');
  let deps: BootstrapDeps;
  const appUrl = () => {
    const u = new URL(db.url);
    u.username = role;
    u.password = password;
    return u.toString();
  };
  const asApp = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: appUrl() });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  const denied = (c: pg.Client, sql: string) => expect(c.query(sql), sql).rejects.toMatchObject({ code: '42501' });

  beforeAll(async () => {
    db = await createTestDb({ migrate: false });
    deps = {
      readSecret: async (arn) => {
        if (arn === APP_ARN) {
          const master = JSON.parse(rdsSecretFor(db.url)) as Record<string, unknown>;
          return JSON.stringify({ ...master, username: role, password });
        }
        return rdsSecretFor(db.url);
      },
      databaseUrl: urlWithoutTls,
      runMigrations: (url, appRole) => migrateAt(url, { log: () => undefined, connectAttempts: 1, ...(appRole ? { appRole } : {}) }),
      log: () => undefined,
    };
  });
  afterAll(async () => {
    await db.drop();
    const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
    await admin.connect();
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  });

  it("is created after the migrations with the password from its secret, and does the platform's work", async () => {
    const onEvent = createBootstrapHandler(deps);
    const res = await onEvent({
      ...event('Create'),
      ResourceProperties: { DatabaseSecretArn: SECRET_ARN, AppSecretArn: APP_ARN, MigrationsHash: 'h1' },
    });
    expect(res.Data).toMatchObject({ AppRole: role });
    await asApp(async (c) => {
      const store = new JobStore(c as unknown as pg.Pool);
      await c.query('BEGIN');
      const [ins] = await store.insertMany(c, [{ type: 'ledger.post', payload: { batch: 'ROLE-1', entries: 1 }, maxAttempts: 3 }]);
      await c.query('COMMIT');
      await c.query('DELETE FROM jobs.outbox WHERE id = $1', [ins!.outboxId]);
      const [claimed] = await store.claim([ins!.job.id], 'w', 30);
      expect(claimed!.attempt).toBe(1);
      await c.query('INSERT INTO ledger_entries (job_id, batch, line_no) VALUES ($1, $2, 1)', [ins!.job.id, 'ROLE-1']);
      expect(await store.completeMany([{ id: ins!.job.id, attempt: 1, result: { posted: 1 } }])).toEqual(new Set());
      expect((await store.get(ins!.job.id))!.state).toBe('succeeded');
    });
  });

  it('can change no schema: no CREATE, ALTER or DROP, and no writes to the migration bookkeeping', async () => {
    await asApp(async (c) => {
      await denied(c, 'CREATE TABLE public.sneaky (id int)');
      await denied(c, 'CREATE TABLE jobs.sneaky (id int)');
      await denied(c, 'ALTER TABLE jobs.job ADD COLUMN sneaky int');
      await denied(c, 'DROP TABLE ledger_entries');
      await denied(c, "INSERT INTO jobs.schema_migrations (version, name, checksum) VALUES (9999, '9999_x.sql', 'x')");
      await denied(c, 'DELETE FROM jobs.schema_migrations');
      await denied(c, 'CREATE ROLE sneaky');
    });
  });

  it('gets row access to a table a later migration adds, and a rerun with a new password in the secret moves the role to it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bootstrap-role-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '9999_erp_extra.sql'), 'CREATE TABLE public.erp_extra (id bigserial PRIMARY KEY, note text);\n');
    const old = password;
    password = randomBytes(18).toString('base64url');
    const onEvent = createBootstrapHandler({
      ...deps,
      runMigrations: (url, appRole) => migrateAt(url, { dir, log: () => undefined, connectAttempts: 1, ...(appRole ? { appRole } : {}) }),
    });
    await onEvent({
      ...event('Update', 'h2'),
      ResourceProperties: { DatabaseSecretArn: SECRET_ARN, AppSecretArn: APP_ARN, MigrationsHash: 'h2' },
    });
    await asApp(async (c) => {
      await c.query("INSERT INTO public.erp_extra (note) VALUES ('posted by a handler')");
      expect((await c.query('SELECT count(*)::int AS n FROM public.erp_extra')).rows[0].n).toBe(1);
    });
    const stale = new URL(appUrl());
    stale.password = old;
    const c = new pg.Client({ connectionString: stale.toString() });
    await expect(c.connect()).rejects.toThrow(/password authentication failed/);
  });

  it("applies the ERP's own migrations (migrations/app) after the platform's: the role writes their erp tables and cannot change them", async () => {
    // A folder of its own with a version of its own: the Create above applied migrations/app, whatever the ERP has put there.
    const appDir = await mkdtemp(join(tmpdir(), 'bootstrap-app-'));
    await writeFile(
      join(appDir, '9001_bootstrap_lines.sql'),
      'CREATE TABLE erp.bootstrap_lines (id bigserial PRIMARY KEY, invoice text NOT NULL);\n',
    );
    const onEvent = createBootstrapHandler({
      ...deps,
      runMigrations: (url, appRole) =>
        migrateAt(url, { appDir, log: () => undefined, connectAttempts: 1, ...(appRole ? { appRole } : {}) }),
    });
    const res = await onEvent({
      ...event('Update', 'h4'),
      ResourceProperties: { DatabaseSecretArn: SECRET_ARN, AppSecretArn: APP_ARN, MigrationsHash: 'h4' },
    });
    expect(res.Data).toMatchObject({ Applied: 'app/9001_bootstrap_lines.sql', AppliedCount: 1 });
    await asApp(async (c) => {
      await c.query("INSERT INTO erp.bootstrap_lines (invoice) VALUES ('INV-1')");
      expect((await c.query('SELECT count(*)::int AS n FROM erp.bootstrap_lines')).rows[0].n).toBe(1);
      await denied(c, 'ALTER TABLE erp.bootstrap_lines ADD COLUMN sneaky int');
      await denied(c, 'DROP TABLE erp.bootstrap_lines');
      await denied(c, 'CREATE TABLE erp.sneaky (id int)');
      await denied(c, "INSERT INTO jobs.app_schema_migrations (version, name, checksum) VALUES (9999, '9999_x.sql', 'x')");
    });
  });

  it('refuses an app secret without a username or password, naming the secret and not its contents', async () => {
    const onEvent = createBootstrapHandler({
      ...deps,
      readSecret: async (arn) => (arn === APP_ARN ? JSON.stringify({ password: 'p'.repeat(20) }) : rdsSecretFor(db.url)),
    });
    await expect(
      onEvent({
        ...event('Update', 'h3'),
        ResourceProperties: { DatabaseSecretArn: SECRET_ARN, AppSecretArn: APP_ARN, MigrationsHash: 'h3' },
      }),
    ).rejects.toThrow(new RegExp(`the app secret ${APP_ARN.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} lacks a username or password`));
  });
});

describe('reading the secret through the Parameters and Secrets extension', () => {
  it('asks localhost for the secret with the session token and returns SecretString', async () => {
    const seen: { url?: string; token?: string } = {};
    const server = createServer((req, res) => {
      seen.url = req.url;
      seen.token = req.headers['x-aws-parameters-secrets-token'] as string;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ ARN: SECRET_ARN, SecretString: '{"host":"db"}' }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      const value = await readSecretFromExtension(SECRET_ARN, {
        PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: String(port),
        AWS_SESSION_TOKEN: 'session-token',
      });
      expect(value).toBe('{"host":"db"}');
      expect(seen.url).toBe(`/secretsmanager/get?secretId=${encodeURIComponent(SECRET_ARN)}`);
      expect(seen.token).toBe('session-token');
    } finally {
      server.close();
    }
  });
});
