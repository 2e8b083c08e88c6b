// A database password rotated while the services run (runtime/db/credentials.ts, db/pool.ts):
// against a real PostgreSQL that checks passwords, with Secrets Manager played by
// aws-sdk-client-mock. What on-call needs to hold: a rotation in either order (the secret first,
// or the database first) loses no job and needs no restart; open connections keep working; a
// Secrets Manager that cannot be read takes nothing away; a wrong password does not become a
// stream of reads.
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { apiConfigFromEnv, startApiService } from '../../runtime/apps/api.ts';
import { databaseSecretArnFromEnv } from '../../runtime/config/env.ts';
import { ensureAppRole, scramVerifier } from '../../runtime/db/app-role.ts';
import { type DatabaseCredentials, DatabaseCredentialSource, databaseCredentialSource } from '../../runtime/db/credentials.ts';
import { createPool, freshLogin } from '../../runtime/db/pool.ts';
import { NotifyEventSink } from '../../runtime/live/events.ts';
import { LiveFeed } from '../../runtime/live/feed.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call } from '../api/support.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

const ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:erp-jobs-app-AbCdEf';
const suffix = Math.random().toString(36).slice(2, 8);
const USER = `rot_app_${suffix}`;
const CLONE = `${USER}_clone`;
const pw = (n: number) => `rotated-password-${n}-${suffix}`;

function captureLog() {
  const lines: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
  return {
    lines,
    info: (fields: object, msg: string) => lines.push({ level: 'info', msg, fields: fields as Record<string, unknown> }),
    warn: (fields: object, msg: string) => lines.push({ level: 'warn', msg, fields: fields as Record<string, unknown> }),
  };
}

describe('database credentials that rotate while the services run', () => {
  let p: Platform;
  let admin: pg.Pool;
  const urlAs = (user: string, password: string) => {
    const u = new URL(p.db.url);
    u.username = user;
    u.password = password;
    return u.toString();
  };
  const backendsOf = async (applicationName: string) =>
    (
      await admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()',
        [applicationName],
      )
    ).rows[0]!.n;
  // What a failover does to the pool: every connection reset, new ones needed. Waits until the
  // pool has dropped them (`pool`), or at least until the server has (the API's, not reachable here).
  // A connection whose login was under way when the password changed shows in pg_stat_activity
  // only once its login is done, too late for one pass: under a loaded suite such a straggler,
  // logged in with the old password, answered a refused worker's probe and opened its gate. So
  // the backends are terminated again until none has shown up for half a second.
  const terminate = async (applicationName: string, pool?: pg.Pool) => {
    // At most 3 s: a client that logs in again with the right password at once is not a straggler.
    for (let quiet = 0, round = 0; quiet < 5 && round < 30; round++) {
      const { rows } = await admin.query<{ n: number }>(
        'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()',
        [applicationName],
      );
      quiet = rows[0]!.n === 0 ? quiet + 1 : 0;
      await new Promise((r) => setTimeout(r, 100));
    }
    await waitFor(async () => (await backendsOf(applicationName)) === 0 && (!pool || pool.totalCount === 0), 5000, 'the connections gone');
    if (!pool) await new Promise((r) => setTimeout(r, 200));
  };

  beforeAll(async () => {
    p = await createPlatform({ timings: { leaseSeconds: 3, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 4 } });
    admin = p.db.pool;
    await ensureAppRole(admin, { username: USER, password: pw(1) });
  });
  afterAll(async () => {
    await p.close();
    // Roles belong to the cluster, not to the test's database.
    const c = createPool({ url: p.db.url, max: 1, applicationName: 'jobs-test cleanup' });
    for (const role of [CLONE, USER]) {
      await c.query(`DROP OWNED BY ${role}`).catch(() => undefined);
      await c.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    }
    await c.end();
  });
  afterEach(async () => {
    await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(1)}'`);
  });

  /** A pool on the app role whose secret is `secret.value`, read through `reads`. */
  function rotatingPool(
    secret: { value: DatabaseCredentials },
    o: { minIntervalMs?: number; read?: () => Promise<DatabaseCredentials> } = {},
  ) {
    const log = captureLog();
    let reads = 0;
    let failed = 0;
    const source = new DatabaseCredentialSource({
      initial: secret.value,
      read: async () => {
        reads++;
        return o.read ? o.read() : { ...secret.value };
      },
      log,
      source: ARN,
      minIntervalMs: o.minIntervalMs ?? 60_000,
      onReadFailed: () => failed++,
    });
    const applicationName = `jobs-test rotation ${Math.random().toString(36).slice(2, 8)}`;
    const pool = createPool({ url: urlAs('ignored', 'ignored'), max: 4, applicationName, credentials: source });
    return { pool, source, log, applicationName, reads: () => reads, failedReads: () => failed };
  }

  it('the secret rotated first, then the database: new connections log in with the new password and nobody sees a refusal', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 1000 });
    try {
      expect((await r.pool.query('SELECT current_user AS u')).rows[0].u).toBe(USER);
      // The server stores a SCRAM verifier: the password itself was never sent in a statement.
      const stored = (await admin.query<{ p: string }>('SELECT rolpassword AS p FROM pg_authid WHERE rolname = $1', [USER])).rows[0]!.p;
      // Exactly the verifier the client computed: PostgreSQL would hash a malformed one as a plain password.
      const salt = Buffer.from(/^SCRAM-SHA-256\$4096:([^$]+)\$/.exec(stored)![1]!, 'base64');
      expect(stored).toBe(scramVerifier(pw(1), salt));
      secret.value = { user: USER, password: pw(2) };
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(2)}'`);
      // The open connection keeps working: PostgreSQL checks a password only at login.
      expect((await r.pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      await terminate(r.applicationName, r.pool);
      // The next login is refused with the old password, the secret is read, the login retried: the caller sees none of it.
      expect((await r.pool.query('SELECT current_user AS u')).rows[0].u).toBe(USER);
      expect(r.reads()).toBe(1);
      expect(r.log.lines).toContainEqual(
        expect.objectContaining({
          level: 'info',
          fields: expect.objectContaining({ passwordChanged: true, reason: 'PostgreSQL refused the login' }),
        }),
      );
      // Rotated again, then four connections at once after a failover: all four are refused the
      // old password, and the secret is read once for them, not four times.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      secret.value = { user: USER, password: pw(7) };
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(7)}'`);
      await terminate(r.applicationName, r.pool);
      await Promise.all(Array.from({ length: 4 }, () => r.pool.query('SELECT pg_sleep(0.05)')));
      expect(r.reads()).toBe(2);
      expect(r.source.current()).toEqual({ user: USER, password: pw(7) });
    } finally {
      await r.pool.end();
    }
  });

  it('the database rotated first: logins fail until the secret has the password, then succeed without a restart', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 200 });
    try {
      await r.pool.query('SELECT 1');
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(3)}'`);
      await terminate(r.applicationName, r.pool);
      await expect(r.pool.query('SELECT 1')).rejects.toMatchObject({ code: '28P01' });
      // Refused again at once: the secret is not read again within the interval.
      await expect(r.pool.query('SELECT 1')).rejects.toMatchObject({ code: '28P01' });
      expect(r.reads()).toBe(1);
      secret.value = { user: USER, password: pw(3) };
      await waitFor(
        () =>
          r.pool.query('SELECT 1').then(
            () => true,
            () => false,
          ),
        5000,
        'a login with the password from the secret',
      );
      expect(r.reads()).toBeLessThanOrEqual(3);
    } finally {
      await r.pool.end();
    }
  });

  it('credentials that changed while a caller waited for a free connection, and are refused, are not tried a second time', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 0 });
    // Counts the logins the pool attempts (each is a client constructed).
    const internals = r.pool as unknown as { Client: typeof pg.Client };
    let logins = 0;
    const Client = internals.Client;
    internals.Client = class extends Client {
      constructor(config?: pg.ClientConfig) {
        super(config);
        logins++;
      }
    } as typeof pg.Client;
    try {
      await r.pool.query('SELECT 1');
      const held = await Promise.all(Array.from({ length: 4 }, () => r.pool.connect()));
      // Every slot taken: this caller waits, with the secret's first password current.
      const waiting = r.pool.query('SELECT 1');
      // The secret now has a password the database does not have yet, read while the caller waits.
      secret.value = { user: USER, password: pw(5) };
      await r.source.refresh('periodic');
      const readsBefore = r.reads();
      const loginsBefore = logins;
      // A failover frees a slot: the waiting caller's new connection logs in with pw(5), refused.
      for (const c of held) c.release(new Error('the connection was reset'));
      await expect(waiting).rejects.toMatchObject({ code: '28P01' });
      // One refused login, then the secret read again (it still has pw(5)): no second login with the same password.
      expect(logins - loginsBefore).toBe(1);
      expect(r.reads()).toBe(readsBefore + 1);
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(5)}'`);
      expect((await r.pool.query('SELECT current_user AS u')).rows[0].u).toBe(USER);
    } finally {
      await r.pool.end();
    }
  });

  it('freshLogin tells a refused login that an idle pooled connection hides, and follows the secret once it has the password', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 0 });
    try {
      await r.pool.query('SELECT 1');
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(8)}'`);
      // The idle connection logged in before the change: a query through the pool still works.
      expect((await r.pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      await expect(freshLogin(r.pool)).rejects.toMatchObject({ code: '28P01' });
      secret.value = { user: USER, password: pw(8) };
      await freshLogin(r.pool);
      expect(r.source.current().password).toBe(pw(8));
    } finally {
      await r.pool.end();
    }
  });

  it('alternating users (the other user now current): new connections log in as it, open ones stay on the first', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret);
    try {
      const held = await r.pool.connect();
      // What the multi-user rotation does: a second login role, member of the first, becomes current.
      await ensureAppRole(admin, { username: CLONE, password: pw(4) });
      secret.value = { user: CLONE, password: pw(4) };
      await r.source.refresh('periodic');
      const other = await r.pool.connect();
      expect((await other.query('SELECT current_user AS u')).rows[0].u).toBe(CLONE);
      // Its rights are the first user's: the job table is there for it.
      expect((await other.query('SELECT count(*)::int AS n FROM jobs.job')).rows[0].n).toBeGreaterThanOrEqual(0);
      expect((await held.query('SELECT current_user AS u')).rows[0].u).toBe(USER);
      held.release();
      other.release();
    } finally {
      await r.pool.end();
    }
  });

  it("the live view's LISTEN session, outside any pool, follows a rotation too", async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    let reads = 0;
    const source = new DatabaseCredentialSource({
      initial: secret.value,
      read: async () => {
        reads++;
        return { ...secret.value };
      },
      log: captureLog(),
      source: ARN,
      minIntervalMs: 0,
    });
    const applicationName = 'jobs-test live rotation';
    const feed = new LiveFeed({ url: urlAs('ignored', 'ignored'), credentials: source, applicationName });
    await feed.start();
    try {
      expect(feed.connected).toBe(true);
      secret.value = { user: USER, password: pw(8) };
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(8)}'`);
      await terminate(applicationName);
      // Its first reconnect is refused the old password and reads the secret; the next one logs in.
      await waitFor(() => feed.connected, 10_000, 'the feed back, logged in with the new password');
      expect(reads).toBe(1);
      const sink = new NotifyEventSink(admin, { flushMs: 10 });
      sink.push({
        kind: 'claimed',
        workerId: 'w-1',
        jobId: 'after-rotation',
        type: 'ledger.post',
        attempt: 1,
        at: new Date().toISOString(),
      });
      await sink.stop();
      await waitFor(() => feed.since(0).some((e) => e.jobId === 'after-rotation'), 5000, 'an event after the rotation');
    } finally {
      await feed.stop();
    }
  });

  it('a secret that cannot be read (throttled, unreachable, malformed) keeps the credentials the task has', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, {
      minIntervalMs: 0,
      read: () => Promise.reject(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' })),
    });
    try {
      await r.source.refresh('periodic');
      await terminate(r.applicationName, r.pool);
      expect((await r.pool.query('SELECT current_user AS u')).rows[0].u).toBe(USER);
      expect(r.source.current()).toEqual({ user: USER, password: pw(1) });
      expect(r.log.lines).toContainEqual(
        expect.objectContaining({ level: 'warn', msg: 'could not read the database secret; keeping the current credentials' }),
      );
      expect(r.failedReads()).toBe(1);
    } finally {
      await r.pool.end();
    }
  });

  it('a worker running jobs through a rotation and a failover finishes every job once, with no restart', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 100 });
    const w = p.worker({ pool: r.pool, workerId: 'rotation' });
    w.start();
    try {
      const first = await p.client.enqueueNow(
        Array.from({ length: 10 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `ROT-A${i}`, entries: 2 } })),
      );
      await waitFor(
        async () => (await Promise.all(first.map((j) => p.store.get(j.job.id)))).every((j) => j?.state === 'succeeded'),
        15_000,
      );
      // The rotation: the secret first, then the database; then every connection reset.
      secret.value = { user: USER, password: pw(5) };
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(5)}'`);
      await terminate(r.applicationName);
      const second = await p.client.enqueueNow(
        Array.from({ length: 10 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `ROT-B${i}`, entries: 2 } })),
      );
      await waitFor(
        async () => (await Promise.all(second.map((j) => p.store.get(j.job.id)))).every((j) => j?.state === 'succeeded'),
        15_000,
      );
      const { rows } = await admin.query<{ n: number; batches: number }>(
        "SELECT count(*)::int AS n, count(DISTINCT batch)::int AS batches FROM ledger_entries WHERE batch LIKE 'ROT-%'",
      );
      expect(rows[0]).toEqual({ n: 40, batches: 20 });
      // The new connections are the app role's, with the new password.
      expect(await backendsOf(r.applicationName)).toBeGreaterThan(0);
      expect(r.reads()).toBeGreaterThanOrEqual(1);
    } finally {
      await w.stop(1);
      await r.pool.end();
    }
  }, 40_000);

  it('a worker whose logins are refused stops receiving and hands its messages back (none drifts to the DLQ), then resumes once the secret has the password', async () => {
    const secret = { value: { user: USER, password: pw(1) } };
    const r = rotatingPool(secret, { minIntervalMs: 100 });
    const metrics = new CountingMetrics();
    const w = p.worker({ pool: r.pool, workerId: 'refused', metrics });
    w.start();
    try {
      await r.pool.query('SELECT 1');
      // The database's password changed; the secret lags (a rotation half done, or a task that cannot read it).
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(4)}'`);
      // (Not waiting for the pool to empty: the worker's own reconnects, refused, come and go.)
      await terminate(r.applicationName);
      const jobs = await p.client.enqueueNow(
        Array.from({ length: 5 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `REFUSED-${i}`, entries: 1 } })),
      );
      // Received once, the claim refused: the messages are back in the queue at once, and stay
      // there (no receive spent toward maxReceiveCount while logins are refused).
      await waitFor(() => metrics.get(METRIC.databaseUnavailable) === 1, 10_000, 'the worker to stop receiving');
      await waitFor(() => p.queue.depth().visible === 5, 10_000, 'the messages handed back');
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(p.queue.depth()).toMatchObject({ visible: 5, inFlight: 0 });
      expect(Math.max(...p.queue.peek().map((m) => m.receiveCount))).toBeLessThanOrEqual(1);
      expect(p.dlq.depth().total).toBe(0);
      // Its probes log in afresh and are refused: counted, for the "database logins refused" alarm.
      await waitFor(() => metrics.get(METRIC.databaseLoginsRefused) >= 1, 5000, 'refused probes counted');
      // The secret catches up: the worker's probe reads it, logs in, and runs every job once.
      secret.value = { user: USER, password: pw(4) };
      await waitFor(
        async () => (await Promise.all(jobs.map((j) => p.store.get(j.job.id)))).every((j) => j?.state === 'succeeded'),
        15_000,
        'every job done',
      );
      const { rows } = await admin.query<{ n: number }>("SELECT count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'REFUSED-%'");
      expect(rows[0]!.n).toBe(5);
    } finally {
      await w.stop(1);
      await r.pool.end();
    }
  }, 40_000);

  it('the API service reads the secret by DATABASE_SECRET_ARN: an enqueue after a rotation and a failover succeeds; a read that fails is counted', async () => {
    const sm = mockClient(SecretsManagerClient);
    let current = { username: USER, password: pw(1), host: 'ignored', port: 5432, dbname: 'ignored' };
    let denied = false;
    const createdAt = new Date(Date.now() - 3 * 86_400_000);
    sm.on(GetSecretValueCommand, { SecretId: ARN }).callsFake(async () => {
      if (denied)
        throw Object.assign(new Error('not authorized to perform: secretsmanager:GetSecretValue'), { name: 'AccessDeniedException' });
      return { SecretString: JSON.stringify(current), CreatedDate: createdAt };
    });
    const metrics = new CountingMetrics();
    const svc = await startApiService(
      {
        databaseUrl: urlAs(USER, pw(1)),
        databaseSecretArn: ARN,
        queueUrl: 'http://127.0.0.1:1/q/jobs',
        region: 'us-east-1',
        port: 0,
        poolSize: 2,
        defaultMaxAttempts: 3,
      },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: silentLogger, host: '127.0.0.1', metrics },
    );
    try {
      // The secret's age, read at start (the "database password not rotated" alarm's figure).
      await waitFor(() => (metrics.timings.get(METRIC.databaseSecretAgeMs) ?? []).length === 1, 2000, 'the age reported');
      expect(metrics.timings.get(METRIC.databaseSecretAgeMs)![0]).toBeGreaterThanOrEqual(3 * 86_400_000);
      const enqueue = (batch: string) =>
        call(`http://127.0.0.1:${svc.port}`, 'POST', '/v1/jobs', { json: { type: 'ledger.post', payload: { batch, entries: 1 } } });
      expect((await enqueue('ROT-API-1')).status).toBe(201);
      current = { ...current, password: pw(6) };
      await admin.query(`ALTER ROLE ${USER} PASSWORD '${pw(6)}'`);
      await terminate('jobs-api');
      expect((await enqueue('ROT-API-2')).status).toBe(201);
      // One read at start, one for the refused login.
      expect(sm.commandCalls(GetSecretValueCommand).length).toBe(2);
      expect(metrics.get(METRIC.databaseSecretReadsFailed)).toBe(0);
    } finally {
      await svc.shutdown('test');
    }
    // A task whose role cannot read the secret, started with a password the database no longer
    // has: its reads fail and are counted (the "database secret unreadable" alarm counts the
    // API's too), and its requests are answered 503 with Retry-After, not 500.
    denied = true;
    const stale = new CountingMetrics();
    const svc2 = await startApiService(
      {
        databaseUrl: urlAs(USER, pw(1)),
        databaseSecretArn: ARN,
        queueUrl: 'http://127.0.0.1:1/q/jobs',
        region: 'us-east-1',
        port: 0,
        poolSize: 2,
        defaultMaxAttempts: 3,
      },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: silentLogger, host: '127.0.0.1', metrics: stale },
    );
    try {
      const res = await call(`http://127.0.0.1:${svc2.port}`, 'POST', '/v1/jobs', {
        json: { type: 'ledger.post', payload: { batch: 'ROT-API-3', entries: 1 } },
      });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('2');
      expect(stale.get(METRIC.databaseSecretReadsFailed)).toBeGreaterThanOrEqual(1);
    } finally {
      await svc2.shutdown('test');
      sm.restore();
    }
  });
});

describe('DATABASE_SECRET_ARN', () => {
  const secret = JSON.stringify({
    host: 'db.internal',
    port: 5432,
    username: 'erp_jobs_app',
    password: 'x'.repeat(32),
    dbname: 'erp_jobs',
  });

  it('is taken with DATABASE_SECRET, and refused with its rule when it cannot renew it', () => {
    expect(databaseSecretArnFromEnv({ DATABASE_SECRET: secret, DATABASE_SECRET_ARN: ARN })).toBe(ARN);
    expect(databaseSecretArnFromEnv({ DATABASE_SECRET: secret })).toBeUndefined();
    expect(() => databaseSecretArnFromEnv({ DATABASE_SECRET: secret, DATABASE_SECRET_ARN: 'erp-jobs-app' })).toThrow(
      /DATABASE_SECRET_ARN must be a Secrets Manager secret ARN .*got "erp-jobs-app"/,
    );
    expect(() => databaseSecretArnFromEnv({ DATABASE_URL: 'postgres://u:p@h/db', DATABASE_SECRET_ARN: ARN })).toThrow(
      /DATABASE_SECRET_ARN renews the credentials of DATABASE_SECRET: set it with DATABASE_SECRET and without DATABASE_URL/,
    );
    // The API reports it with the rest of its configuration.
    expect(() =>
      apiConfigFromEnv({ DATABASE_SECRET: secret, DATABASE_SECRET_ARN: 'nope', JOBS_QUEUE_URL: 'http://127.0.0.1:1/q' }),
    ).toThrow(/database-secret-arn|DATABASE_SECRET_ARN must be/);
  });

  it("reports the secret's age (its current version's, made by the last rotation) at start and each periodic read", async () => {
    const sm = mockClient(SecretsManagerClient);
    const rotated = Date.now() - 40 * 86_400_000;
    sm.on(GetSecretValueCommand).resolves({ SecretString: secret, CreatedDate: new Date(rotated) });
    const ages: number[] = [];
    try {
      const source = databaseCredentialSource({
        secretArn: ARN,
        databaseUrl: 'postgres://erp_jobs_app:x@db.internal:5432/erp_jobs',
        log: captureLog(),
        onAge: (ms) => ages.push(ms),
      });
      await source.refresh('PostgreSQL refused the login');
      expect(ages).toEqual([]);
      // start() reads at once, so a task that lives less than an hour still reports.
      source.start();
      await waitFor(() => ages.length === 1, 2000, 'the age at start');
      expect(Math.round(ages[0]! / 86_400_000)).toBe(40);
      sm.on(GetSecretValueCommand).resolves({ SecretString: secret, CreatedDate: new Date(rotated + 39 * 86_400_000) });
      await source.refresh('periodic');
      expect(Math.round(ages[1]! / 86_400_000)).toBe(1);
      await source.stop();
    } finally {
      sm.restore();
    }
  });

  it("reads the secret in the ARN's region and starts from the URL's credentials", async () => {
    const sm = mockClient(SecretsManagerClient);
    sm.on(GetSecretValueCommand).resolves({ SecretString: secret });
    try {
      const source = databaseCredentialSource({
        secretArn: ARN,
        databaseUrl: 'postgres://erp_jobs_app:p%40ss%2Fword@db.internal:5432/erp_jobs?sslmode=verify-full',
        log: captureLog(),
      });
      expect(source.current()).toEqual({ user: 'erp_jobs_app', password: 'p@ss/word' });
      await source.refresh('test');
      expect(source.current()).toEqual({ user: 'erp_jobs_app', password: 'x'.repeat(32) });
      const region = await sm.call(0).thisValue.config.region();
      expect(region).toBe('eu-west-1');
    } finally {
      sm.restore();
    }
  });
});
