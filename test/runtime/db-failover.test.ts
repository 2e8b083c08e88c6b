// The database failing over under a worker and the schema bootstrap, in-process and through a
// TCP proxy that resets every connection and refuses new ones (dev/db-proxy.ts). The
// end-to-end version on real processes is test/e2e/db-failover.test.ts.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { migrateAt } from '../../runtime/bootstrap/handler.ts';
import { workerQueryTimeoutMs } from '../../runtime/config/rules.ts';
import { createPool, endPool } from '../../runtime/db/pool.ts';
import { isDatabaseUnavailable } from '../../runtime/db/unavailable.ts';
import { startDbProxy, type DbProxy } from '../../dev/db-proxy.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { Rescuer } from '../../runtime/maintenance/rescuer.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { createTestDb } from '../support/db.ts';
import { createPlatform, holdJobRow, waitFor, type Platform } from '../support/platform.ts';

const proxyTo = (url: string) => {
  const u = new URL(url);
  return startDbProxy({ host: u.hostname, port: Number(u.port) });
};

/** A platform of this test's own and a worker pool through a failover proxy (`applicationName` finds its sessions); all closed when the test ends. */
async function behindProxy(opts: Parameters<typeof createPlatform>[0], applicationName: string) {
  const p = await createPlatform(opts);
  const proxy = await proxyTo(p.db.url);
  const pool = createPool({ url: proxy.url(p.db.url), max: 8, applicationName });
  onTestFinished(async () => {
    await p.close();
    await pool.end().catch(() => undefined);
    await proxy.stop();
  });
  return { p, proxy, pool };
}

describe('a worker through a database failover', () => {
  let p: Platform;
  let proxy: DbProxy;

  beforeAll(async () => {
    p = await createPlatform({ timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3, maxReceiveCount: 4 } });
    proxy = await proxyTo(p.db.url);
  });
  afterAll(async () => {
    await p.close();
    await proxy.stop();
  });

  it('stops receiving while the database is gone, aborts the handler whose lease ran out, and finishes every job exactly once afterwards', async () => {
    const pool = createPool({ url: proxy.url(p.db.url), max: 8, applicationName: 'jobs-worker failover-test' });
    const w = p.worker({ pool, workerId: 'behind-proxy' });
    w.start();
    // One job holds its transaction open (rows written) when the sockets reset; one is waiting.
    const [held] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'FOI-1', entries: 4, workAfterWriteMs: 5000 } }]);
    await waitFor(async () => (await p.store.get(held!.job.id))?.state === 'running', 10_000, 'running');
    await new Promise((r) => setTimeout(r, 300));
    const receivesBefore = p.queue.peek().reduce((n, m) => n + m.receiveCount, 0);
    proxy.failover(4);
    const [waiting] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'FOI-2', entries: 2 } }]);
    await new Promise((r) => setTimeout(r, 3500));
    // While the database is gone: at most the one receive that found it gone, then none.
    const during = p.queue.peek().find((m) => m.body.includes(waiting!.job.id));
    expect(during?.receiveCount ?? 0).toBeLessThanOrEqual(1);
    expect(p.metrics.counts.get(METRIC.databaseUnavailable)).toBeGreaterThanOrEqual(1);
    // The lease (2 s) ran out unrenewed: the handler was aborted as a lost lease.
    expect(p.metrics.counts.get(METRIC.leasesLost)).toBeGreaterThanOrEqual(1);
    expect(w.runningJobs.find((j) => j.id === held!.job.id)).toBeUndefined();

    await waitFor(
      async () => {
        const [a, b] = await Promise.all([p.store.get(held!.job.id), p.store.get(waiting!.job.id)]);
        return a?.state === 'succeeded' && b?.state === 'succeeded';
      },
      30_000,
      'both jobs succeeded after the failover',
    );
    const { rows } = await p.db.pool.query<{ batch: string; n: number }>(
      "SELECT batch, count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'FOI-%' GROUP BY batch ORDER BY batch",
    );
    expect(rows).toEqual([
      { batch: 'FOI-1', n: 4 },
      { batch: 'FOI-2', n: 2 },
    ]);
    // The held job was taken again (its first attempt's rows were lost with the connection).
    expect((await p.store.get(held!.job.id))!.attempt).toBeGreaterThanOrEqual(2);
    expect(receivesBefore).toBeGreaterThanOrEqual(1);
    await w.stop(1);
    await pool.end();
  }, 60_000);
});

describe('a claim waiting on a row lock when the connections reset', () => {
  it('is cancelled by PostgreSQL, not committed once the lock goes: the job runs at once, attempt 1, not after its lease', async () => {
    // Lease 30 s: a claim committed by the orphaned session would leave the job to the rescuer,
    // beyond this test's wait.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 30, heartbeatSeconds: 5, visibilityTimeoutSeconds: 3, maxReceiveCount: 5 } },
      'jobs-worker claim-reset-test',
    );
    const [job] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'CRS-1', entries: 1 } }]);
    const lock = await holdJobRow(p.db.pool, job!.job.id);
    const w = p.worker({ pool, workerId: 'claim-reset' });
    try {
      w.start();
      await lock.claimWaiting(1);
      proxy.failover(1);
      // The server's end of the claim's session ends within the check interval, lock or no lock.
      await waitFor(
        async () =>
          (
            await p.db.pool.query(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'jobs-worker claim-reset-test' AND wait_event_type = 'Lock'",
            )
          ).rows[0].n === 0,
        5_000,
        "the orphaned claim's session ended",
      );
    } finally {
      await lock.release();
    }
    await waitFor(async () => (await p.store.get(job!.job.id))?.state === 'succeeded', 15_000, 'the job ran once the database answered');
    // One attempt: the claim the reset cut off took nothing.
    expect(await p.store.get(job!.job.id)).toMatchObject({ attempt: 1 });
    await w.stop(1);
  }, 40_000);
});

describe('a failover between a handler that wrote nothing and its batched completion', () => {
  /** A platform behind a failover proxy whose one job type computes, writes nothing, and returns `total` once the test calls `finish`; its job enqueued, its worker started. */
  async function computing(
    total: number,
    workerId: string,
    o: { timings?: NonNullable<Parameters<typeof createPlatform>[0]>['timings']; maxAttempts?: number } = {},
  ) {
    let release: (() => void) | null = null;
    const computed = defineJob<Record<string, never>, { total: number }>({
      type: 'test.computed',
      description: 'computes, writes nothing, returns a result once the test lets it',
      parse: () => ({}),
      async run() {
        await new Promise<void>((r) => (release = r));
        return { total };
      },
    });
    const { p, proxy, pool } = await behindProxy(
      {
        registry: new JobRegistry([computed]),
        timings: o.timings ?? { leaseSeconds: 10, heartbeatSeconds: 1, visibilityTimeoutSeconds: 10 },
      },
      `jobs-worker ${workerId}-test`,
    );
    const [job] = await p.client.enqueueNow([
      { type: 'test.computed', payload: {}, ...(o.maxAttempts ? { maxAttempts: o.maxAttempts } : {}) },
    ]);
    const w = p.worker({ pool, workerId });
    w.start();
    await waitFor(() => release !== null, 10_000, 'the handler running');
    return { p, proxy, w, jobId: job!.job.id, finish: () => release!() };
  }

  it('the completion is tried again once the database answers: the job succeeds on its first attempt with its result', async () => {
    // Before: the completion's failure was the attempt's, so the job ran again (attempt 2).
    const { p, proxy, w, jobId, finish } = await computing(42, 'completion-failover');
    const outage = proxy.failover(2);
    finish();
    await outage.over;
    await waitFor(async () => (await p.store.get(jobId))?.state === 'succeeded', 15_000, 'succeeded after the outage');
    expect(await p.store.get(jobId)).toMatchObject({ attempt: 1, result: { total: 42 }, attemptLog: [] });
    expect(p.metrics.counts.get(METRIC.jobsFailed) ?? 0).toBe(0);
    expect(p.metrics.counts.get(METRIC.leasesLost) ?? 0).toBe(0);
    await w.stop(1);
  }, 40_000);

  it('an outage longer than the lease: the completion still lands when the database answers; a job on its one attempt does not die, its work done', async () => {
    // Review finding: the heartbeat gave the job up with its lease (a lost lease counted), the
    // completion stopped trying, and the job ran again, or died on its last attempt.
    const { p, proxy, w, jobId, finish } = await computing(5, 'completion-long-failover', {
      timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3 },
      maxAttempts: 1,
    });
    // Another worker through the same outage (diff review: the job's message came back while the
    // database was down, and it claimed the job from its own completion once the database answered).
    const otherPool = createPool({ url: proxy.url(p.db.url), max: 4, applicationName: 'jobs-worker other-test' });
    const other = p.worker({ pool: otherPool, workerId: 'other' });
    other.start();
    onTestFinished(async () => {
      await other.stop(1);
      await otherPool.end().catch(() => undefined);
    });
    const outage = proxy.failover(5);
    await new Promise((r) => setTimeout(r, 300));
    finish();
    await outage.over;
    // A heartbeat right after: its renewal matches nothing (the lease ran out), and the job stays
    // its completion's (diff review: it was given up as a lost lease).
    await w.heartbeat();
    await waitFor(async () => ['succeeded', 'dead'].includes((await p.store.get(jobId))?.state ?? ''), 20_000, 'ended');
    expect(await p.store.get(jobId)).toMatchObject({ state: 'succeeded', attempt: 1, result: { total: 5 } });
    expect(p.metrics.counts.get(METRIC.leasesLost) ?? 0).toBe(0);
    expect(p.metrics.counts.get(METRIC.jobsSucceeded)).toBe(1);
    await w.stop(1);
  }, 40_000);

  it('a completion that committed and whose answer was lost is counted a success (metric, event), not a lost lease', async () => {
    // Review finding: its retry matched nothing (the job already succeeded), and the success went
    // uncounted: after every failover CloudWatch under-counted the jobs that succeeded.
    const { p, w, jobId, finish } = await computing(3, 'completion-answer-lost');
    const real = w.store.completeMany.bind(w.store);
    let cut = false;
    w.store.completeMany = async (...args: Parameters<typeof real>) => {
      const out = await real(...args);
      if (cut) return out;
      cut = true;
      throw new Error('Connection terminated unexpectedly');
    };
    finish();
    await waitFor(() => (p.metrics.counts.get(METRIC.jobsSucceeded) ?? 0) === 1, 10_000, 'the success counted');
    expect(cut).toBe(true);
    expect(await p.store.get(jobId)).toMatchObject({ state: 'succeeded', attempt: 1 });
    expect(p.metrics.counts.get(METRIC.leasesLost) ?? 0).toBe(0);
    await w.stop(1);
  }, 40_000);

  it('while the worker stops (a deploy): the completion is still tried again within the drain, and the job succeeds on its first attempt', async () => {
    // Review finding: a stopping worker gave the batched completion up at its first failure; the
    // failed attempt could not be recorded either, and the job waited out its lease for the rescuer.
    const { p, proxy, w, jobId, finish } = await computing(7, 'completion-stop-failover');
    const outage = proxy.failover(2);
    const stopped = w.stop(15);
    finish();
    await outage.over;
    await stopped;
    expect(await p.store.get(jobId)).toMatchObject({ state: 'succeeded', attempt: 1, result: { total: 7 } });
  }, 40_000);
});

describe('a failover that resets nothing: the old primary just goes silent', () => {
  let p: Platform;
  let proxy: DbProxy;
  beforeAll(async () => {
    p = await createPlatform({ timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3, maxReceiveCount: 10 } });
    proxy = await proxyTo(p.db.url);
  });
  afterAll(async () => {
    await p.close();
    await proxy.stop();
  });

  it('statements that get no answer fail within their read timeout: the worker closes its gate, moves to new connections, finishes every job, and stops on time', async () => {
    // Fault review, probe D: with no reset, a renewal or a claim on a silent connection waited
    // for TCP to give up (about 15 minutes): no job was claimed, and stop() never returned.
    const timings = { leaseSeconds: 2 };
    const pool = createPool({
      url: proxy.url(p.db.url),
      max: 8,
      applicationName: 'jobs-worker silent-failover-test',
      platformQueryTimeoutMs: workerQueryTimeoutMs(timings),
    });
    const w = p.worker({ pool, workerId: 'behind-silent-proxy' });
    w.start();
    const [held] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'SIL-1', entries: 3, workAfterWriteMs: 3000 } }]);
    await waitFor(async () => (await p.store.get(held!.job.id))?.state === 'running', 10_000, 'running');
    expect(proxy.stall()).toBeGreaterThanOrEqual(1);
    // Another worker, on the new primary, may take the job back: the stalled worker's own attempt
    // must still end (its COMMIT and ROLLBACK time out and drop the connection), or its stop hangs.
    p.worker({ workerId: 'on-the-new-primary' }).start();
    const [waiting] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'SIL-2', entries: 2 } }]);
    await waitFor(
      async () => {
        const [a, b] = await Promise.all([p.store.get(held!.job.id), p.store.get(waiting!.job.id)]);
        return a?.state === 'succeeded' && b?.state === 'succeeded';
      },
      20_000,
      'both jobs succeeded on new connections',
    );
    expect(p.metrics.counts.get(METRIC.databaseUnavailable)).toBeGreaterThanOrEqual(1);
    const { rows } = await p.db.pool.query<{ batch: string; n: number }>(
      "SELECT batch, count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'SIL-%' GROUP BY batch ORDER BY batch",
    );
    expect(rows).toEqual([
      { batch: 'SIL-1', n: 3 },
      { batch: 'SIL-2', n: 2 },
    ]);
    const t0 = Date.now();
    await w.stop(1);
    expect(Date.now() - t0).toBeLessThan(15_000); // at most a COMMIT's and a ROLLBACK's read timeouts (5 s each), not TCP's 15 minutes
    await endPool(pool, 1000); // its silent connections never answer the goodbye
  }, 60_000);
});

describe("a handler's own statement on a connection gone silent", () => {
  const between = { reached: false, go: () => undefined as void };
  let p: Platform;
  let proxy: DbProxy;
  beforeAll(async () => {
    const registry = new JobRegistry([
      defineJob<Record<string, never>, null>({
        type: 'test.two_statements',
        description: 'one statement, a pause the test ends, another statement',
        parse: () => ({}),
        async run(_p, ctx) {
          await ctx.db.query('SELECT 1'); // its transaction's connection opens now
          await new Promise<void>((r) => {
            between.reached = true;
            between.go = r;
          });
          await ctx.db.query('SELECT 2'); // sent into the silence: no read timeout (a handler's own statement)
          return null;
        },
      }),
    ]);
    p = await createPlatform({
      registry,
      timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3, maxReceiveCount: 10 },
    });
    proxy = await proxyTo(p.db.url);
  });
  afterAll(async () => {
    await p.close();
    await proxy.stop();
  });

  it('is cut off when the attempt is given up (its lease lost), so the handler ends and the worker stops', async () => {
    // Review finding: the handler's statement waited for TCP (about 15 minutes), and the
    // worker's stop with it, after the lease was long lost.
    const pool = createPool({
      url: proxy.url(p.db.url),
      max: 8,
      applicationName: 'jobs-worker silent-handler-test',
      platformQueryTimeoutMs: 5000,
    });
    const w = p.worker({ pool, workerId: 'silent-handler' });
    w.start();
    const [job] = await p.client.enqueueNow({ type: 'test.two_statements', payload: {} });
    await waitFor(() => between.reached, 10_000, 'the handler between its statements');
    proxy.stall();
    between.go();
    // The lease (2 s) cannot be renewed on the silent connections (read timeout 5 s): lost, the handler aborted, its statement cut off.
    await waitFor(() => w.runningJobs.length === 0, 20_000, 'the handler ended');
    const t0 = Date.now();
    await w.stop(1);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect((await p.store.get(job!.job.id))!.attempt).toBe(1); // nothing of the attempt committed; another worker would take it
    await endPool(pool, 1000);
  }, 60_000);
});

describe('the schema bootstrap through a database failover', () => {
  it('retries while the database is unreachable and applies the migrations once it answers', async () => {
    const db = await createTestDb({ migrate: false });
    const proxy = await proxyTo(db.url);
    try {
      proxy.failover(1.5);
      const logs: string[] = [];
      const result = await migrateAt(proxy.url(db.url), { log: (m) => logs.push(m), connectAttempts: 10, retryDelayMs: 400 });
      expect(result.applied.length).toBeGreaterThan(0);
      expect(logs.some((l) => /database unreachable.*retrying/.test(l))).toBe(true);
      const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM jobs.schema_migrations');
      expect(rows[0].n).toBe(result.applied.length);
    } finally {
      await proxy.stop();
      await db.drop();
    }
  });

  it('does not retry what a retry cannot fix: a refused password fails at once, naming it', async () => {
    const db = await createTestDb({ migrate: false });
    try {
      const bad = new URL(db.url);
      bad.password = 'not-the-password';
      bad.username = 'no_such_role';
      const t0 = Date.now();
      await expect(migrateAt(bad.toString(), { log: () => undefined, connectAttempts: 5, retryDelayMs: 2000 })).rejects.toThrow(
        /no_such_role|password/,
      );
      expect(Date.now() - t0).toBeLessThan(2000);
    } finally {
      await db.drop();
    }
  });
});

describe('isDatabaseUnavailable', () => {
  it('tells an outage or a refused login (a retry may succeed) from a fault in what was asked', () => {
    for (const e of [
      { code: 'ECONNRESET' },
      { code: 'ECONNREFUSED' },
      { code: '57P01' },
      { code: '08006' },
      { code: '53300' },
      { code: '53100' }, // disk full
      { code: '53200' }, // out of memory
      { code: '58030' }, // I/O error
      { code: '25006' }, // a read-only server (a standby, in a failover)
      new Error('Connection terminated unexpectedly'),
      new Error('Client has encountered a connection error and is not queryable'),
      new Error('timeout exceeded when trying to connect'),
      Object.assign(new Error('wrapped'), { cause: { code: 'ECONNRESET' } }),
      // A login refused: the password rotated and this task has not followed yet.
      { code: '28P01' },
      { code: '28000' },
    ]) {
      expect(isDatabaseUnavailable(e), JSON.stringify(e)).toBe(true);
    }
    for (const e of [
      { code: '23505' },
      { code: '42P01' },
      { code: '42501' },
      { code: '53400' },
      new Error('syntax error at or near'),
      null,
      'ECONNRESET',
    ]) {
      expect(isDatabaseUnavailable(e), JSON.stringify(e)).toBe(false);
    }
  });
});

/**
 * A worker of concurrency 1 and prefetch 1: a long job (`<batch>-1`, `workMs`) holds the slot, and
 * a job on its one attempt (`<batch>-2`, two ledger rows) waits for it, claimed ahead. Their ids.
 */
async function claimedAhead(p: Platform, batch: string, workMs = 6000): Promise<{ long: string; ahead: string }> {
  const [long] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: `${batch}-1`, entries: 1, workMs } }]);
  await waitFor(async () => (await p.store.get(long!.job.id))?.state === 'running', 10_000, 'the long job running');
  const [ahead] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: `${batch}-2`, entries: 2 }, maxAttempts: 1 }]);
  await waitFor(async () => (await p.store.get(ahead!.job.id))?.state === 'running', 10_000, 'the second job claimed ahead');
  return { long: long!.job.id, ahead: ahead!.job.id };
}

describe('a failover longer than the lease, with jobs claimed ahead of a free slot', () => {
  it('the jobs that never started are released unstarted (no attempt spent) and run once the database answers: one on its last attempt does not die', async () => {
    // Review finding: the heartbeat gave up every held job whose lease ran out, the prefetched
    // ones too; their claims had counted an attempt, so once the database answered a job on its
    // final attempt was dead-lettered (`LeaseExpired`) without ever having run.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3, maxReceiveCount: 10, concurrency: 1 } },
      'jobs-worker prefetch-failover-test',
    );
    const w = p.worker({ pool, workerId: 'prefetch-failover', prefetch: 1 });
    w.start();
    const { ahead } = await claimedAhead(p, 'PFO');
    const posted = async () =>
      (await p.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM ledger_entries WHERE batch = 'PFO-2'")).rows[0]!.n;
    expect(await posted()).toBe(0);
    await proxy.failover(4).over;
    const ended = async () => ['succeeded', 'dead'].includes((await p.store.get(ahead))?.state ?? '');
    await waitFor(ended, 20_000, 'the job claimed ahead ended after the outage');
    const after = (await p.store.get(ahead))!;
    expect(after.state).toBe('succeeded');
    // Its second claim, the first one released unstarted: one attempt used of its one.
    expect(after).toMatchObject({ attempt: 2, releases: 1 });
    // Released as a job claimed ahead (not through another path that also spares the attempt).
    expect(after.attemptLog).toEqual([
      expect.objectContaining({ attempt: 1, outcome: 'released', message: expect.stringMatching(/claimed it ahead|claimed ahead/) }),
    ]);
    expect(await posted()).toBe(2);
    await w.stop(1);
  }, 60_000);

  it("with another task's rescuer running through the same outage: the owner releases its job first, and the job does not die", async () => {
    // Review finding: the owner's release waited for its gate's probe (a heartbeat apart,
    // 7.5–10 s deployed) while another task's rescuer, on its first pass after the outage,
    // reclaimed every expired lease with the attempt counted: on its last attempt, dead unrun.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 2, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 3, maxReceiveCount: 10, concurrency: 1 } },
      'jobs-worker rescuer-race-test',
    );
    const rescuerPool = createPool({ url: proxy.url(p.db.url), max: 2, applicationName: 'jobs-worker other-task' });
    const rescuer = new Rescuer(new JobStore(rescuerPool), new Publisher(rescuerPool, p.queue, silentLogger), silentLogger, {
      graceSeconds: 0.5,
      intervalMs: 200,
      batchSize: 100,
    });
    rescuer.start();
    onTestFinished(async () => {
      await rescuer.stop();
      await rescuerPool.end().catch(() => undefined);
    });
    const w = p.worker({ pool, workerId: 'rescuer-race', prefetch: 1 });
    w.start();
    const { ahead } = await claimedAhead(p, 'RRC');
    await proxy.failover(4).over;
    await waitFor(async () => ['succeeded', 'dead'].includes((await p.store.get(ahead))?.state ?? ''), 20_000, 'ended');
    expect(await p.store.get(ahead)).toMatchObject({ state: 'succeeded', attempt: 2, releases: 1 });
    await w.stop(1);
  }, 60_000);
});

describe('a worker stopping (a deploy) while the database fails over', () => {
  it('what it could not hand back is released once the database answers, within the drain: a claimed-ahead job on its last attempt does not wait out its lease and die', async () => {
    // Review finding: the stop's release of claimed-ahead jobs failed with the database down and
    // was only logged; the jobs ran under the stopped worker until their leases ran out, and the
    // rescuer counted the attempt: one on its last attempt died without having run.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 8, heartbeatSeconds: 1, visibilityTimeoutSeconds: 10, maxReceiveCount: 10, concurrency: 1 } },
      'jobs-worker stop-failover-test',
    );
    const w = p.worker({ pool, workerId: 'stop-failover', prefetch: 1 });
    w.start();
    const { long, ahead } = await claimedAhead(p, 'SFO', 5000);
    // The deploy's SIGTERM arrives in a 3 s outage; the drain (15 s) outlasts it.
    const outage = proxy.failover(3).over;
    await w.stop(15);
    await outage;
    const after = (await p.store.get(ahead))!;
    // Released, not left running for its lease: its one attempt is still there for the next worker.
    expect(after).toMatchObject({ state: 'pending', attempt: 1, releases: 1 });
    expect(after.attemptLog).toEqual([expect.objectContaining({ attempt: 1, outcome: 'released' })]);
    // The long job finished in the drain.
    expect((await p.store.get(long))!.state).toBe('succeeded');
  }, 60_000);
});

describe("a worker retiring (a long drain) when a failover cuts a job's own transaction", () => {
  it('the interrupted attempt is released once the database answers, not after the drain: its lease does not run out first', async () => {
    // Review finding: an attempt noted as interrupted after the receive loop had ended was
    // released only at the very end of the stop (after a drain of up to hours for a retiring
    // task); its lease ran out first and the rescuer counted the attempt.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 8, heartbeatSeconds: 1, visibilityTimeoutSeconds: 10, maxReceiveCount: 10 } },
      'jobs-worker retire-failover-test',
    );
    const w = p.worker({ pool, workerId: 'retire-failover' });
    w.start();
    const [job] = await p.client.enqueueNow([
      { type: 'ledger.post', payload: { batch: 'RFO-1', entries: 3, workAfterWriteMs: 1500 }, maxAttempts: 1 },
    ]);
    await waitFor(async () => (await p.store.get(job!.job.id))?.state === 'running', 10_000, 'running');
    await new Promise((r) => setTimeout(r, 300)); // its rows written, its transaction open
    // The handler ends inside the outage (its transaction gone): the attempt is noted, not released.
    const stopped = w.stop(600);
    await proxy.failover(4).over;
    // Well within its 8 s lease: released with the interrupted mark, its attempt not counted.
    await waitFor(async () => (await p.store.get(job!.job.id))?.state === 'pending', 5_000, 'released once the database answered');
    expect(await p.store.get(job!.job.id)).toMatchObject({ attempt: 1, releases: 1 });
    expect((await p.store.get(job!.job.id))!.attemptLog).toEqual([expect.objectContaining({ outcome: 'released', interrupted: true })]);
    await stopped;
  }, 60_000);
});

describe("a failover shorter than the lease, under a job's own transaction", () => {
  it('the attempt is released, not counted: a job on its last attempt runs again and succeeds, its rows written once', async () => {
    // Review finding: the handler's transaction died with its connection, and the attempt was
    // failed as the handler's own: a job on its last attempt died (attempts-exhausted) although
    // its lease was never at risk.
    const { p, proxy, pool } = await behindProxy(
      { timings: { leaseSeconds: 10, heartbeatSeconds: 1, visibilityTimeoutSeconds: 10, maxReceiveCount: 10 } },
      'jobs-worker tx-failover-test',
    );
    const w = p.worker({ pool, workerId: 'tx-failover' });
    w.start();
    const [job] = await p.client.enqueueNow([
      { type: 'ledger.post', payload: { batch: 'TXF-1', entries: 3, workAfterWriteMs: 1500 }, maxAttempts: 1 },
    ]);
    await waitFor(async () => (await p.store.get(job!.job.id))?.state === 'running', 10_000, 'running');
    await new Promise((r) => setTimeout(r, 300)); // its rows written, its transaction open
    await proxy.failover(2).over;
    const ended = async () => ['succeeded', 'dead'].includes((await p.store.get(job!.job.id))?.state ?? '');
    await waitFor(ended, 20_000, 'the job ended after the outage');
    const after = (await p.store.get(job!.job.id))!;
    expect(after).toMatchObject({ state: 'succeeded', attempt: 2, releases: 1 });
    expect(after.attemptLog).toEqual([
      expect.objectContaining({
        attempt: 1,
        outcome: 'released',
        interrupted: true,
        message: expect.stringMatching(/lost the job's database connection/),
      }),
    ]);
    const { rows } = await p.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM ledger_entries WHERE batch = 'TXF-1'");
    expect(rows[0]!.n).toBe(3);
    expect(p.metrics.counts.get(METRIC.jobsFailed) ?? 0).toBe(0);
    await w.stop(1);
  }, 60_000);
});

describe('a connection ended right after its login', () => {
  it('fails its connect with the server’s error instead of ending the process (an error event nobody listened to yet)', async () => {
    // CI once: pg_terminate_backend's FATAL arrived in the same packet as the login's
    // ReadyForQuery, before pg-pool listened on the new client: an uncaught 'error'.
    const p = await createPlatform({});
    onTestFinished(() => p.close());
    const pool = createPool({ url: p.db.url, max: 1, applicationName: 'jobs-test early-error' });
    onTestFinished(() => pool.end().catch(() => undefined));
    const { Client, options } = pool as unknown as { Client: new (o: unknown) => pg.Client; options: unknown };
    const c = new Client(options) as pg.Client & { connection: { emit(e: string, m: unknown): void } };
    const fatal = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' });
    // 'connect' is emitted while pg handles ReadyForQuery: the message that follows it in the packet comes here.
    c.once('connect', () => c.connection.emit('errorMessage', fatal));
    await expect(c.connect()).rejects.toMatchObject({ code: '57P01' });
    await c.end().catch(() => undefined);
    // The pool's own connections go the same way: a refused connect, handled by its caller.
    expect(isDatabaseUnavailable(fatal)).toBe(true);
  });
});
