// The API service entry: configuration from the environment (refused with every bad value named),
// the service over a real PostgreSQL with the outbox relay running, graceful stop with a request
// in flight, and the process itself: exit 1 on a bad configuration, exit 0 after SIGTERM.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiConfigFromEnv, startApiService, type RunningApi } from '../../runtime/apps/api.ts';
import { ConfigError } from '../../runtime/config/rules.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';
import { call, rawRequest } from './support.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const GOOD_ENV = {
  DATABASE_URL: 'postgres://jobs:pw@db.internal:5432/jobs',
  JOBS_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs',
  AWS_REGION: 'eu-west-1',
};

const configError = (env: Record<string, string | undefined>): ConfigError => {
  try {
    apiConfigFromEnv(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
};

describe('apiConfigFromEnv', () => {
  it('reads the environment with defaults for PORT, API_POOL_SIZE, the attempt cap and the retention of finished jobs', () => {
    expect(apiConfigFromEnv(GOOD_ENV)).toEqual({
      databaseUrl: GOOD_ENV.DATABASE_URL,
      queueUrl: GOOD_ENV.JOBS_QUEUE_URL,
      region: 'eu-west-1',
      port: 8080,
      poolSize: 10,
      defaultMaxAttempts: 5,
      defaultKeepFinishedDays: 30,
    });
    expect(apiConfigFromEnv({ ...GOOD_ENV, PORT: '9000', API_POOL_SIZE: '4', API_TOKEN: 'tok-123', JOBS_MAX_ATTEMPTS: '7' })).toMatchObject(
      {
        port: 9000,
        poolSize: 4,
        apiToken: 'tok-123',
        defaultMaxAttempts: 7,
      },
    );
  });

  it('builds the database URL from DATABASE_SECRET, and defaults the region for a local SQS endpoint', () => {
    const c = apiConfigFromEnv({
      DATABASE_SECRET: JSON.stringify({ host: 'db', port: 5432, username: 'u', password: 'p@ss', dbname: 'jobs' }),
      JOBS_QUEUE_URL: 'http://127.0.0.1:4566/000000000000/jobs',
      JOBS_SQS_ENDPOINT: 'http://127.0.0.1:4566',
    });
    expect(c.databaseUrl).toMatch(/^postgres:\/\/u:p%40ss@db:5432\/jobs/);
    expect(c).toMatchObject({ region: 'us-east-1', sqsEndpoint: 'http://127.0.0.1:4566' });
  });

  it('JOBS_SQS_HTTP_CLIENT reaches the API too (its publisher and relay send through the wire)', () => {
    expect(apiConfigFromEnv(GOOD_ENV).sqsHttpClient).toBeUndefined();
    expect(apiConfigFromEnv({ ...GOOD_ENV, JOBS_SQS_HTTP_CLIENT: 'node' }).sqsHttpClient).toBe('node');
  });

  it('an empty API_TOKEN means no token', () => {
    expect(apiConfigFromEnv({ ...GOOD_ENV, API_TOKEN: '' }).apiToken).toBeUndefined();
  });

  it('reports every bad value at once, each with its variable, value and rule', () => {
    const err = configError({ PORT: 'eighty', API_POOL_SIZE: '0', JOBS_SQS_ENDPOINT: 'not a url', JOBS_HEARTBEAT_SECONDS: '60' });
    const text = err.message;
    expect(text).toContain(`set DATABASE_URL (postgres://user:password@host:port/db) or DATABASE_SECRET`);
    expect(text).toContain('JOBS_QUEUE_URL is required');
    expect(text).toContain('JOBS_SQS_ENDPOINT = "not a url" is not a URL');
    expect(text).toContain('PORT = "eighty" must be a whole number between 0 and 65535');
    expect(text).toContain('API_POOL_SIZE = "0" must be a whole number between 1 and 200');
    expect(text).toMatch(/JOBS_HEARTBEAT_SECONDS/);
    expect(
      configError({ DATABASE_URL: GOOD_ENV.DATABASE_URL, JOBS_QUEUE_URL: GOOD_ENV.JOBS_QUEUE_URL }).violations.map((v) => v.rule),
    ).toEqual(['aws-region-set']);
  });

  it('refuses an API_TOKEN that cannot travel in a header, without echoing it', () => {
    const err = configError({ ...GOOD_ENV, API_TOKEN: 'secret with spaces' });
    expect(err.violations.map((v) => v.rule)).toEqual(['api-token-printable']);
    expect(err.message).not.toContain('secret with spaces');
  });
});

describe('the API service', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(() => db?.drop());

  const start = async (queue: MemoryQueue, shutdownGraceMs?: number): Promise<RunningApi> =>
    startApiService(
      { databaseUrl: db.url, queueUrl: 'http://unused', region: 'us-east-1', port: 0, poolSize: 4, defaultMaxAttempts: 3 },
      { queue, log: silentLogger, host: '127.0.0.1', ...(shutdownGraceMs ? { shutdownGraceMs } : {}) },
    );
  const apiConnections = async () =>
    (
      await db.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'jobs-api' AND datname = current_database()",
      )
    ).rows[0]!.n;

  it('names its database connections after its ECS task (`jobs connections`: which API task holds how many)', async () => {
    const api = await startApiService(
      {
        databaseUrl: db.url,
        queueUrl: 'http://unused',
        region: 'us-east-1',
        port: 0,
        poolSize: 4,
        defaultMaxAttempts: 3,
        applicationName: 'jobs-api 0123abcd',
      },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: silentLogger, host: '127.0.0.1' },
    );
    try {
      await call(`http://127.0.0.1:${api.port}`, 'POST', '/v1/jobs', {
        json: { type: 'ledger.post', payload: { batch: 'B-NAME', entries: 1 } },
      });
      const { rows } = await db.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'jobs-api 0123abcd' AND datname = current_database()",
      );
      expect(rows[0]!.n).toBeGreaterThan(0);
    } finally {
      await api.shutdown('test');
    }
  });

  it('serves the API, publishes an enqueue, and its outbox relay publishes a job nobody published', async () => {
    const queue = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    const api = await start(queue);
    try {
      const base = `http://127.0.0.1:${api.port}`;
      const r = await call(base, 'POST', '/v1/jobs', { json: { type: 'ledger.post', payload: { batch: 'B-SVC', entries: 1 } } });
      expect(r.status).toBe(201);
      expect(queue.sentLog.map((m) => parseJobMessage(m.body))).toContainEqual({
        ok: true,
        message: { jobId: r.body.id, type: 'ledger.post' },
      });

      // A process that died between COMMIT and publish leaves only the outbox row.
      const c = await db.pool.connect();
      let orphan: string;
      try {
        await c.query('BEGIN');
        const [ins] = await new JobStore(db.pool).insertMany(c, [
          { type: 'ledger.post', payload: { batch: 'B-ORPHAN', entries: 1 }, maxAttempts: 3 },
        ]);
        orphan = ins!.job.id;
        await c.query('COMMIT');
      } finally {
        c.release();
      }
      await waitFor(() => queue.sentLog.some((m) => m.body.includes(orphan)), 8000, 'the relay to publish the orphaned job');
    } finally {
      await api.shutdown('test');
      queue.close();
    }
  });

  it('on shutdown refuses new connections, finishes the request in flight, then closes its pool', async () => {
    const queue = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    const api = await start(queue);
    const base = `http://127.0.0.1:${api.port}`;
    expect((await call(base, 'GET', '/readyz')).status).toBe(200);
    expect(await apiConnections()).toBeGreaterThan(0);
    // An upload in three pieces, 150 ms apart: still being received when the stop begins.
    const body = JSON.stringify({ type: 'ledger.post', payload: { batch: 'B-INFLIGHT', entries: 2 } });
    const third = Math.ceil(body.length / 3);
    const inflight = rawRequest(base, {
      method: 'POST',
      path: '/v1/jobs',
      // A keep-alive client (as the load balancer is) must be told the connection is closing.
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), connection: 'keep-alive' },
      chunks: [body.slice(0, third), body.slice(third, 2 * third), body.slice(2 * third)],
      gapMs: 150,
    });
    await new Promise((r) => setTimeout(r, 50));
    const stopped = api.shutdown('SIGTERM');
    await new Promise((r) => setTimeout(r, 20));
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
    const r = await inflight;
    expect(r.status).toBe(201);
    expect(r.headers.connection).toBe('close');
    await stopped;
    // pool.end() has closed every connection; PostgreSQL drops the backends a moment later.
    await waitFor(async () => (await apiConnections()) === 0, 5000, 'the API pool to be closed');
    queue.close();
  });

  it('closes a connection that outlives the grace period', async () => {
    const queue = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    const api = await start(queue, 300);
    const base = `http://127.0.0.1:${api.port}`;
    // A client that never finishes its upload.
    const hung = rawRequest(base, {
      method: 'POST',
      path: '/v1/jobs',
      headers: { 'content-type': 'application/json', 'content-length': '1000' },
      chunks: ['{"type":', ...Array.from({ length: 20 }, () => ' ')],
      gapMs: 200,
    }).catch((err: Error) => err);
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    await api.shutdown('SIGTERM');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(await hung).toBeInstanceOf(Error);
    queue.close();
  });

  describe('as a process', () => {
    const runMain = (env: Record<string, string>) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'runtime/apps/api-main.ts'], {
        cwd: REPO,
        env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'info', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      return { child, exited, out: () => stdout, err: () => stderr };
    };

    it('exits 1 on a bad configuration, naming the variable and the rule', async () => {
      const p = runMain({ ...GOOD_ENV, PORT: '99999' });
      expect(await p.exited).toBe(1);
      expect(p.err()).toContain('jobs api: refusing to start.');
      expect(p.err()).toContain('PORT = "99999" must be a whole number between 0 and 65535');
    });

    it('serves until SIGTERM, then exits 0 after a clean shutdown', async () => {
      const p = runMain({
        DATABASE_URL: db.url,
        JOBS_QUEUE_URL: 'http://127.0.0.1:1/000000000000/jobs',
        JOBS_SQS_ENDPOINT: 'http://127.0.0.1:1',
        PORT: '0',
      });
      const started = await waitFor(
        () =>
          p
            .out()
            .split('\n')
            .find((l) => l.includes('"api service started"')),
        20_000,
        `the API to start (stderr: ${p.err()})`,
      );
      const { port } = JSON.parse(started) as { port: number };
      expect((await call(`http://127.0.0.1:${port}`, 'GET', '/readyz')).status).toBe(200);
      p.child.kill('SIGTERM');
      expect(await p.exited).toBe(0);
      expect(p.out()).toContain('"shut down cleanly"');
    });
  });
});
