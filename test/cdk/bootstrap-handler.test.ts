// The schema bootstrap's handler against a real PostgreSQL (the suite's embedded one): Create
// applies the runtime's migrations, a rerun applies none, Delete leaves the schema alone, a
// failing migration fails the custom resource, and the secret is read from the Parameters and
// Secrets extension the way Lambda serves it.

import { createServer } from 'node:http';
import { cp, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createBootstrapHandler,
  migrateAt,
  readSecretFromExtension,
  SCHEMA_PHYSICAL_ID,
  type BootstrapDeps,
  type BootstrapEvent,
} from '../../runtime/bootstrap/handler.ts';
import { databaseUrlFromEnv, ENV } from '../../runtime/config/env.ts';
import { defaultMigrationsDir, loadMigrations } from '../../runtime/db/migrate.ts';
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

  it('Create applies every migration of runtime/db/migrations, then an Update applies none', async () => {
    const onEvent = createBootstrapHandler(deps);
    const files = (await loadMigrations(defaultMigrationsDir())).map((m) => m.name);
    const created = await onEvent(event('Create'));
    expect(created.PhysicalResourceId).toBe(SCHEMA_PHYSICAL_ID);
    expect(created.Data).toEqual({ Applied: files.join(','), AppliedCount: files.length, AlreadyApplied: 0 });
    expect(secretReads).toEqual([SECRET_ARN]);
    const { rows } = await db.pool.query<{ name: string }>('SELECT name FROM jobs.schema_migrations ORDER BY version');
    expect(rows.map((r) => r.name)).toEqual(files);

    const updated = await onEvent(event('Update', 'h2'));
    expect(updated.PhysicalResourceId).toBe(SCHEMA_PHYSICAL_ID);
    expect(updated.Data).toMatchObject({ AppliedCount: 0, AlreadyApplied: files.length });
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
    const onEvent = createBootstrapHandler({ ...deps, runMigrations: (url) => migrateAt(url, { dir, log: () => undefined, connectAttempts: 1 }) });
    await expect(onEvent(event('Update', 'h3'))).rejects.toThrow(/migration 9999_broken\.sql failed/);
  });

  it('fails without a secret ARN rather than guessing', async () => {
    const onEvent = createBootstrapHandler(deps);
    await expect(onEvent({ RequestType: 'Create', ResourceProperties: { MigrationsHash: 'x' } as never })).rejects.toThrow(/no DatabaseSecretArn/);
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
      const value = await readSecretFromExtension(SECRET_ARN, { PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: String(port), AWS_SESSION_TOKEN: 'session-token' });
      expect(value).toBe('{"host":"db"}');
      expect(seen.url).toBe(`/secretsmanager/get?secretId=${encodeURIComponent(SECRET_ARN)}`);
      expect(seen.token).toBe('session-token');
    } finally {
      server.close();
    }
  });
});
