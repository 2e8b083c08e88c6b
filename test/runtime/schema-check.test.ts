// A service started against a database that lacks migrations its build carries (an image deployed
// without its schema bootstrap, `jobs worker` pointed at a database nobody migrated): its
// statements would fail one by one, and a worker's failed claims would spend every message's
// receives toward the DLQ. The start refuses instead, naming what is missing and how to apply it;
// a database that does not answer at start is no reason to refuse (a failover), nor is a database
// ahead of the build (a rollback).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { checkSchema } from '../../runtime/apps/entry.ts';
import { startWorkerService } from '../../runtime/apps/worker.ts';
import { loadMigrations } from '../../runtime/db/migrate.ts';
import { requireMigrated, SchemaBehindError } from '../../runtime/db/schema-check.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { silentLogger, type Logger } from '../../runtime/observability/log.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';
import { startDbProxy } from '../../dev/db-proxy.ts';

let behind: TestDb;
let empty: TestDb;
let newest: string;
beforeAll(async () => {
  const all = await loadMigrations();
  newest = all.at(-1)!.name;
  [behind, empty] = await Promise.all([createTestDb({ migrateThrough: all.at(-2)!.version }), createTestDb({ migrate: false })]);
});
afterAll(async () => {
  await Promise.all([behind?.drop(), empty?.drop()]);
});

describe('the schema check at a service start', () => {
  it('refuses a database one migration behind, naming it and how to apply it', async () => {
    const err = await requireMigrated(behind.pool, 'worker').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaBehindError);
    expect((err as Error).message).toBe(
      `the database lacks a migration this worker was built with: ${newest}. Apply it before starting the worker: \`cdk deploy\` runs the schema bootstrap before it updates the services; against another database, \`jobs migrate\` (the local stack, \`npm start\`, runs it)`,
    );
  });

  it('refuses a database never migrated, counting every migration', async () => {
    const count = (await loadMigrations()).length;
    await expect(requireMigrated(empty.pool, 'API')).rejects.toThrow(
      new RegExp(`^the database lacks ${count} migrations this API was built with: 0001_job_table\\.sql, `),
    );
  });

  it('accepts a database ahead of the build (the previous release after a rollback)', async () => {
    const ahead = await createTestDb();
    try {
      await ahead.pool.query("INSERT INTO jobs.schema_migrations (version, name, checksum) VALUES (9999, '9999_next_release.sql', 'x')");
      await expect(requireMigrated(ahead.pool, 'worker')).resolves.toBeUndefined();
    } finally {
      await ahead.drop();
    }
  });

  it('a database that does not answer: starts without the check, and says so', async () => {
    const warnings: string[] = [];
    const log = { ...silentLogger, warn: (_: object, msg: string) => warnings.push(msg) } as unknown as Logger;
    const nowhere = createPool({ url: 'postgres://jobs@127.0.0.1:9/jobs', max: 1, applicationName: 'jobs-test' });
    try {
      (await checkSchema(nowhere, 'worker', log)).stop();
    } finally {
      await nowhere.end();
    }
    expect(warnings).toEqual([
      "could not check the database for this build's migrations: it did not answer; starting, and checking again once it answers",
    ]);
  });

  it('a check skipped at start is made again once the database answers: behind, the watch settles with the refusal; current, it says so and settles nothing', async () => {
    const current = await createTestDb();
    const proxies = await Promise.all(
      [behind, current].map((d) => startDbProxy({ host: new URL(d.url).hostname, port: Number(new URL(d.url).port) })),
    );
    const pools = [behind, current].map((d, i) => createPool({ url: proxies[i]!.url(d.url), max: 1, applicationName: 'jobs-test' }));
    const infos: string[] = [];
    const log = { ...silentLogger, warn: () => undefined, info: (...a: unknown[]) => infos.push(String(a.at(-1))) } as unknown as Logger;
    try {
      for (const p of proxies) p.failover(1);
      const [behindWatch, currentWatch] = await Promise.all(pools.map((pool) => checkSchema(pool, 'worker', log, 200)));
      const refusal = await Promise.race([behindWatch!.behind, new Promise((r) => setTimeout(() => r('not settled'), 10_000))]);
      expect(refusal).toBeInstanceOf(SchemaBehindError);
      expect((refusal as Error).message).toContain(`lacks a migration this worker was built with: ${newest}`);
      await waitFor(
        () => infos.includes('the database answered: it has every migration this build carries'),
        10_000,
        'the current one checked',
      );
      let settled = false;
      void currentWatch!.behind.then(() => (settled = true));
      await new Promise((r) => setTimeout(r, 500));
      expect(settled).toBe(false);
      currentWatch!.stop();
      behindWatch!.stop();
    } finally {
      await Promise.all(pools.map((p) => p.end()));
      await Promise.all(proxies.map((p) => p.stop()));
      await current.drop();
    }
  });

  it('the worker service refuses to start, and leaves no connection open behind it', async () => {
    const env = {
      DATABASE_URL: behind.url,
      AWS_REGION: 'us-east-1',
      // Never reached: the check comes before any receive.
      JOBS_QUEUE_URL: 'http://127.0.0.1:9/000000000000/jobs',
      JOBS_DLQ_URL: 'http://127.0.0.1:9/000000000000/jobs-dlq',
      JOBS_SQS_ENDPOINT: 'http://127.0.0.1:9',
      LOG_LEVEL: 'silent',
    };
    await expect(startWorkerService(env, undefined, [])).rejects.toThrow(SchemaBehindError);
    const admin = new pg.Client({ connectionString: behind.url });
    await admin.connect();
    try {
      const { rows } = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'jobs-worker%'");
      expect(rows[0].n).toBe(0);
    } finally {
      await admin.end();
    }
  });
});
