// What AWS can do to the platform, on the local stack's real processes (DESIGN 11 and 12).
//
// A database failover: the local stack's API and
// worker processes reach PostgreSQL through a proxy that resets every connection and refuses new
// ones for a while, as an RDS Multi-AZ failover or a NAT/ENI reset looks from a task. No process
// may exit; the API answers 503 with Retry-After meanwhile and /readyz says unavailable; after
// the outage every job completes exactly once (the ledger holds each batch's rows once) and
// nothing is left running or pending.
//
// A purged job queue: every message gone while jobs are pending, due and delayed; the workers'
// reconciler publishes them again (through the local SQS endpoint's own message counts), each
// runs exactly once, the delayed ones not before their time.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalStack, type LocalStack } from '../../dev/stack.ts';
import { waitFor } from '../support/platform.ts';

const OUTAGE_SECONDS = Number(process.env.FAILOVER_TEST_SECONDS ?? 10);

let stack: LocalStack;
let db: pg.Pool;

beforeAll(async () => {
  stack = await startLocalStack({
    workers: 2,
    dir: await mkdtemp(join(tmpdir(), 'jobs-failover-')),
    timings: {
      leaseSeconds: 3,
      heartbeatSeconds: 1,
      visibilityTimeoutSeconds: 4,
      maxAttempts: 5,
      maxReceiveCount: 10,
      backoffBaseSeconds: 0.5,
      backoffMaxSeconds: 1,
      drainSeconds: 1,
    },
    log: () => undefined,
    env: { LOG_LEVEL: 'error' },
  });
  db = new pg.Pool({ connectionString: stack.env.DATABASE_URL, max: 2 });
}, 90_000);

afterAll(async () => {
  await db?.end();
  await stack?.stop();
}, 60_000);

const api = async (path: string, init?: RequestInit) => {
  const res = await fetch(`${stack.apiUrl}${path}`, { ...init, headers: { 'content-type': 'application/json', ...init?.headers } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
};
const post = (payload: unknown) => api('/v1/jobs', { method: 'POST', body: JSON.stringify({ type: 'ledger.post', payload }) });
const alive = () => [stack.api, ...stack.workers].filter((c) => c.exitCode === null && c.signalCode === null).length;

describe(`database failover: every connection reset, new ones refused for ${OUTAGE_SECONDS} s`, () => {
  it('no process exits, the API answers 503 with Retry-After, and afterwards every job completes exactly once', async () => {
    // Work in every phase: jobs that will be mid-handler (some with their rows already written
    // in the fenced transaction), jobs waiting, and jobs due just after the outage starts.
    const batches: { batch: string; entries: number; id: string }[] = [];
    for (let i = 0; i < 16; i++) {
      // Every third one holds its transaction open (rows written, still working) when the sockets reset.
      const p = { batch: `FO-${i}`, entries: 3 + i, ...(i % 3 === 0 ? { workAfterWriteMs: 4000 } : { workMs: i % 2 === 0 ? 2500 : 600 }) };
      const r = await post(p);
      expect(r.status).toBe(201);
      batches.push({ batch: p.batch, entries: p.entries, id: r.body.id });
    }
    await waitFor(
      async () => ((await db.query("SELECT count(*)::int AS n FROM jobs.job WHERE state = 'running'")).rows[0].n >= 2 ? true : null),
      20_000,
      'jobs running',
    );

    const { reset, endsAt, over } = stack.dbProxy.failover(OUTAGE_SECONDS);
    expect(reset).toBeGreaterThan(0);

    // During the outage: every route that needs the database says 503 with Retry-After, never 500.
    await new Promise((r) => setTimeout(r, 1000));
    const refused = await post({ batch: 'FO-during', entries: 1 });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(refused.body.error.code).toBe('unavailable');
    expect((await api(`/v1/jobs/${batches[0]!.id}`)).status).toBe(503);
    expect((await api('/v1/jobs?state=running')).status).toBe(503);
    const ready = await api('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.status).toBe('unavailable');
    expect((await api('/healthz')).status).toBe(200);
    await over;
    const backAt = Date.now();
    expect(backAt).toBeGreaterThanOrEqual(endsAt);
    expect(alive()).toBe(3);

    // After: everything completes, exactly once.
    await waitFor(
      async () => {
        const { rows } = await db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM jobs.job WHERE id = ANY($1::uuid[]) AND state <> 'succeeded'",
          [batches.map((b) => b.id)],
        );
        return rows[0]!.n === 0 ? true : null;
      },
      60_000,
      'every job succeeded after the failover',
    );
    const resumedInMs = Date.now() - backAt;
    const { rows } = await db.query<{ batch: string; n: number }>(
      "SELECT batch, count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'FO-%' GROUP BY batch",
    );
    const posted = new Map(rows.map((r) => [r.batch, r.n]));
    for (const b of batches) expect(posted.get(b.batch), b.batch).toBe(b.entries);
    expect(posted.has('FO-during')).toBe(false);
    const stuck = await db.query("SELECT count(*)::int AS n FROM jobs.job WHERE state IN ('pending', 'running')");
    expect(stuck.rows[0].n).toBe(0);
    expect(alive()).toBe(3);
    expect((await api('/readyz')).status).toBe(200);
    // The figure the README's failure table quotes (lease 3 s): outage over → every job done.
    process.stdout.write(
      `failover ${OUTAGE_SECONDS} s: every job done ${(resumedInMs / 1000).toFixed(1)} s after the database returned; ${alive()} of 3 processes alive\n`,
    );
  }, 120_000);
});

describe('the job queue purged with jobs pending, due and delayed', () => {
  it('the reconciler publishes them again: each runs exactly once, the delayed ones not before their time', async () => {
    // A backlog the two workers (concurrency 5) cannot take at once, and jobs due in 8 s.
    const due = await Promise.all(Array.from({ length: 60 }, (_, i) => post({ batch: `PQ-${i}`, entries: 2, workMs: 500 })));
    const runAt = new Date(Date.now() + 8000).toISOString();
    const delayed = await Promise.all(
      Array.from({ length: 3 }, (_, i) =>
        api('/v1/jobs', {
          method: 'POST',
          body: JSON.stringify({ type: 'ledger.post', payload: { batch: `PQ-D${i}`, entries: 3 }, runAt }),
        }),
      ),
    );
    for (const r of [...due, ...delayed]) expect(r.status).toBe(201);
    const { pendingJobs, purgedAt } = await stack.faults.injector.purgeQueue();
    expect(pendingJobs).toBeGreaterThan(3);
    const ids = [...due, ...delayed].map((r) => r.body.id as string);
    await waitFor(
      async () => {
        const { rows } = await db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM jobs.job WHERE id = ANY($1::uuid[]) AND state <> 'succeeded'",
          [ids],
        );
        return rows[0]!.n === 0 ? true : null;
      },
      60_000,
      'every job succeeded after the purge',
    );
    const healedInMs = Date.now() - purgedAt;
    const { rows } = await db.query<{ batch: string; n: number }>(
      "SELECT batch, count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'PQ-%' GROUP BY batch",
    );
    const posted = new Map(rows.map((r) => [r.batch, r.n]));
    for (let i = 0; i < 60; i++) expect(posted.get(`PQ-${i}`), `PQ-${i}`).toBe(2);
    for (let i = 0; i < 3; i++) expect(posted.get(`PQ-D${i}`), `PQ-D${i}`).toBe(3);
    const early = await db.query('SELECT count(*)::int AS n FROM jobs.job WHERE id = ANY($1::uuid[]) AND started_at < run_after', [ids]);
    expect(early.rows[0].n).toBe(0);
    process.stdout.write(
      `queue purged with ${pendingJobs} pending jobs: every job done ${(healedInMs / 1000).toFixed(1)} s later (lease 3 s)\n`,
    );
  }, 90_000);
});
