// createJobClient(env): enqueue from ERP code with the services' environment and nothing else
// (issue 18 §3), against the test database and a local SQS (fauxqs). The enqueue is typed by the
// registered job definitions: the @ts-expect-error lines below are checked by `npm run typecheck`
// (tsc over test/**), where a line that compiles fails the check.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { ConfigError } from '../../runtime/config/rules.ts';
import { ValidationError } from '../../runtime/domain/errors.ts';
import type { RegisteredJob } from '../../runtime/handlers/index.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { createJobClient, type TypedJobClient } from '../../runtime/store/create-client.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

let db: TestDb;
let sqs: LocalSqs;
let queue: SqsQueue;
let env: Record<string, string>;
beforeAll(async () => {
  db = await createTestDb();
  sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 30, maxReceiveCount: 10 }, prefix: 'create-client' });
  queue = new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint, region: 'us-east-1' });
  env = { DATABASE_URL: db.url, JOBS_QUEUE_URL: sqs.queueUrl, JOBS_SQS_ENDPOINT: sqs.endpoint, LOG_LEVEL: 'silent' };
});
afterAll(async () => {
  await sqs?.stop();
  await db?.drop();
});

/** The job ids of every message on the queue now (received and deleted). */
async function published(): Promise<string[]> {
  const ids: string[] = [];
  for (;;) {
    const got = await queue.receive(10, 0);
    if (got.length === 0) return ids;
    for (const m of got) {
      const r = parseJobMessage(m.body);
      if (r.ok) ids.push(r.message.jobId);
    }
    await queue.delete(got.map((m) => m.receipt));
  }
}

const outboxRows = async (jobId: string) =>
  (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [jobId])).rows[0]!.n;

/** An ERP transaction on a connection of its own. */
async function inTransaction<T>(work: (tx: pg.PoolClient) => Promise<T>, end: 'COMMIT' | 'ROLLBACK' = 'COMMIT'): Promise<T> {
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    const r = await work(c);
    await c.query(end);
    return r;
  } finally {
    c.release();
  }
}

describe('createJobClient', () => {
  it('enqueues in the caller’s transaction; afterCommit publishes; close() flushes the outbox and closes', async () => {
    const jobs = createJobClient(env);
    const r = await inTransaction((tx) => jobs.enqueue(tx, { type: 'ledger.post', payload: { batch: 'ERP-1', entries: 3 } }));
    await r.afterCommit();
    await jobs.close();
    const id = r.jobs[0]!.job.id;
    expect(await published()).toEqual([id]);
    // The publish's outbox row is deleted before close() returns: no relay publishes it again.
    expect(await outboxRows(id)).toBe(0);
    await expect(jobs.enqueueNow({ type: 'ledger.post', payload: { batch: 'X', entries: 1 } })).rejects.toThrow(/closed/);
  });

  it('close() publishes a committed enqueue whose afterCommit was never called, and nothing of a rolled-back one', async () => {
    const jobs = createJobClient(env);
    const kept = await inTransaction((tx) => jobs.enqueue(tx, { type: 'inventory.cost', payload: { store: 'S1', period: '2026-11' } }));
    const rolledBack = await inTransaction(
      (tx) => jobs.enqueue(tx, { type: 'ledger.post', payload: { batch: 'GONE', entries: 1 } }),
      'ROLLBACK',
    );
    await jobs.close();
    const id = kept.jobs[0]!.job.id;
    expect(await published()).toEqual([id]);
    expect(await outboxRows(id)).toBe(0);
    const gone = await db.pool.query('SELECT 1 FROM jobs.job WHERE id = $1', [rolledBack.jobs[0]!.job.id]);
    expect(gone.rowCount).toBe(0);
  });

  it('enqueueNow is a one-off in a transaction of its own, with the job type’s defaults and the platform’s attempt cap', async () => {
    const jobs = createJobClient({ ...env, JOBS_MAX_ATTEMPTS: '7' });
    const [r] = await jobs.enqueueNow({ type: 'ledger.post', payload: { batch: 'ONE-OFF', entries: 2 }, idempotencyKey: 'one-off' });
    await jobs.close();
    expect(r!.job).toMatchObject({ type: 'ledger.post', maxAttempts: 7, payload: { batch: 'ONE-OFF', entries: 2, workMs: 0 } });
    expect(await published()).toEqual([r!.job.id]);
  });

  it('refuses bad input at run time too, naming the field (a payload built from untyped data)', async () => {
    const jobs = createJobClient(env, { log: silentLogger });
    const err = await jobs.enqueueNow({ type: 'ledger.post', payload: JSON.parse('{"batch":"B","entries":"3"}') }).catch((e: unknown) => e);
    await jobs.close();
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toMatch(/^payload\.entries: must be a whole number from 1 to 100000 \(got "3"\)/);
  });

  it('refuses a bad or missing setting before connecting, naming each variable and its rule as the services do', () => {
    const refusal = (e: Record<string, string>) => {
      try {
        createJobClient(e);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as ConfigError).violations.map((v) => `[${v.rule}] ${v.message}`);
      }
      throw new Error('no refusal');
    };
    expect(refusal({}).join('\n')).toMatch(
      /\[database-configured\] set DATABASE_URL[\s\S]*\[jobs_queue_url-set\] JOBS_QUEUE_URL is required/,
    );
    const bad = refusal({ DATABASE_URL: 'mysql://erp@db/erp', JOBS_QUEUE_URL: 'queue', JOBS_MAX_ATTEMPTS: 'many' });
    expect(bad).toEqual([
      expect.stringMatching(/^\[database-url-scheme\] DATABASE_URL must start with postgres:\/\//),
      '[jobs_queue_url-url] JOBS_QUEUE_URL = "queue" is not a URL',
      expect.stringMatching(/^\[aws-region-set\] AWS_REGION is required/),
      '[maxAttempts-is-a-number] JOBS_MAX_ATTEMPTS = "many" is not a number',
    ]);
  });

  it('beside a running local stack whose settings are not exported, says to export them, not that no stack runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobs-client-local-'));
    // A stand-in for `jobs local`: a live process whose command line names jobs.ts, as the stack's does.
    const stack = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'jobs.ts'], { stdio: 'ignore' });
    const cwd = process.cwd();
    const databaseMessage = () => {
      try {
        createJobClient({});
      } catch (err) {
        return (err as ConfigError).violations.find((v) => v.rule === 'database-configured')?.message;
      }
      throw new Error('no refusal');
    };
    try {
      mkdirSync(join(dir, '.jobs-local'));
      writeFileSync(
        join(dir, '.jobs-local/env'),
        `# Written by jobs local (pid ${stack.pid})\nDATABASE_URL=postgres://x@127.0.0.1:1/jobs\n`,
      );
      process.chdir(dir);
      expect(databaseMessage()).toMatch(
        /a stack runs in this directory, but its settings are not in this process's environment: export them first \(set -a; \. \.jobs-local\/env; set \+a\)$/,
      );
      stack.kill('SIGKILL');
      await once(stack, 'exit');
      // The stack is gone (its file left by a SIGKILL): start one.
      expect(databaseMessage()).toMatch(
        /Locally: `npm start` runs a stack and writes its settings to \.jobs-local\/env; export them first/,
      );
    } finally {
      process.chdir(cwd);
      stack.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// Compiled, never run: what the typed enqueue refuses. Each @ts-expect-error must meet an error.
async function _typedEnqueueRefuses(jobs: TypedJobClient<RegisteredJob>, tx: pg.PoolClient): Promise<void> {
  // Accepted: the registered types with their payloads (fields with defaults may be left out).
  await jobs.enqueue(tx, { type: 'ledger.post', payload: { batch: 'B', entries: 3 }, idempotencyKey: 'k', runAt: new Date() });
  await jobs.enqueue(tx, [
    { type: 'inventory.cost', payload: { store: 'S1', period: '2026-11' } },
    { type: 'ledger.post', payload: { batch: 'B', entries: 1, workMs: null } },
  ]);
  // @ts-expect-error batch is a string, and entries is required
  await jobs.enqueue(tx, { type: 'ledger.post', payload: { batch: 1 } });
  // @ts-expect-error entries is a number
  await jobs.enqueueNow({ type: 'ledger.post', payload: { batch: 'B', entries: '3' } });
  // @ts-expect-error no such job type
  await jobs.enqueue(tx, { type: 'ledger.psot', payload: { batch: 'B', entries: 3 } });
  // @ts-expect-error ledger.post has required fields: the payload is required
  await jobs.enqueueNow({ type: 'ledger.post' });
  // @ts-expect-error colour is not a field of ledger.post
  await jobs.enqueueNow({ type: 'ledger.post', payload: { batch: 'B', entries: 3, colour: 'red' } });
  // @ts-expect-error inventory.cost's payload is not ledger.post's
  await jobs.enqueueNow({ type: 'inventory.cost', payload: { batch: 'B', entries: 3 } });
  // @ts-expect-error maxAttempts is a number
  await jobs.enqueueNow({ type: 'ledger.post', payload: { batch: 'B', entries: 3 }, maxAttempts: '3' });
}
