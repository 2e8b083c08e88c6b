// Priority lanes (issue 14) over the in-process queues (a MemoryQueue per lane, each with its own
// DLQ and redrive) and a real PostgreSQL: with both lanes full the worker starts urgent jobs first
// and bulk jobs still make progress; every path that sends a job's message sends it to its lane's
// queue (enqueue, the outbox relay, a key's next job, the rescuer, the reconciler, a redrive) and
// a dead job's report to its lane's DLQ; one queue for every lane keeps working; a bad lane and a
// bad lane configuration are refused, naming the field or the variable.
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { ConfigError } from '../../runtime/config/rules.ts';
import { sqsFromEnv } from '../../runtime/config/sqs.ts';
import { ValidationError } from '../../runtime/domain/errors.ts';
import type { Lane } from '../../runtime/domain/lanes.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { pause } from '../../runtime/handlers/validate.ts';
import { Reconciler } from '../../runtime/maintenance/reconciler.ts';
import { Rescuer } from '../../runtime/maintenance/rescuer.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { LaneQueues } from '../../runtime/queue/lanes.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { SqsBatchError } from '../../runtime/queue/sqs.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { OutboxRelay } from '../../runtime/store/outbox-relay.ts';
import { pino } from 'pino';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { NonRetryableError } from '../../runtime/domain/errors.ts';
import { TestWorker } from 'erp-jobs/testing';
import type pg from 'pg';
import { startDbProxy } from '../../dev/db-proxy.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { FAST_TIMINGS, holdJobRow, stagedJobs, waitFor } from '../support/platform.ts';

/** Handler starts, in the order the worker started them (the payload's tag). */
const started: string[] = [];
const registry = new JobRegistry([
  defineJob<{ tag: string; ms?: number }, null>({
    type: 'test.work',
    description: 'records its start, then works a little',
    parse: (p) => p as { tag: string; ms?: number },
    async run(p, ctx) {
      started.push(p.tag);
      await pause(p.ms ?? 10, ctx.signal);
      return null;
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.close',
    description: 'month-end close: urgent by default',
    lane: 'urgent',
    parse: () => ({}),
    run: async () => null,
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.fatal',
    description: 'fails for good',
    parse: () => ({}),
    async run() {
      throw new NonRetryableError('period closed');
    },
  }),
]);

interface Lanes {
  db: TestDb;
  urgent: MemoryQueue;
  bulk: MemoryQueue;
  urgentDlq: MemoryQueue;
  bulkDlq: MemoryQueue;
  queue: LaneQueues;
  dlq: LaneQueues;
  client: JobClient;
  store: JobStore;
  workers: TestWorker[];
  worker(concurrency: number, o?: { bulkSlots?: number; prefetch?: number; pool?: pg.Pool; metrics?: CountingMetrics }): TestWorker;
}

let l: Lanes;
async function lanes(shared = false, timings: Partial<typeof FAST_TIMINGS> = {}): Promise<Lanes> {
  const db = await createTestDb();
  const t = { ...FAST_TIMINGS, ...timings };
  const mem = (dlq?: MemoryQueue) =>
    new MemoryQueue({
      visibilityTimeoutSeconds: t.visibilityTimeoutSeconds,
      maxReceiveCount: 10,
      ...(dlq ? { deadLetterQueue: dlq } : {}),
    });
  const urgentDlq = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
  const bulkDlq = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
  const urgent = mem(urgentDlq);
  const bulk = mem(bulkDlq);
  const queue = new LaneQueues({ bulk, urgent: shared ? null : urgent });
  const dlq = new LaneQueues({ bulk: bulkDlq, urgent: shared ? null : urgentDlq });
  const publisher = new Publisher(db.pool, queue, silentLogger);
  const workers: TestWorker[] = [];
  return {
    db,
    urgent,
    bulk,
    urgentDlq,
    bulkDlq,
    queue,
    dlq,
    client: new JobClient({ pool: db.pool, registry, publisher, defaultMaxAttempts: 3 }),
    store: new JobStore(db.pool),
    workers,
    worker(concurrency, o = {}) {
      const pool = o.pool ?? db.newPool(concurrency + 2);
      const w = new TestWorker({
        pool,
        queue,
        dlq,
        registry,
        publisher: new Publisher(pool, queue, silentLogger),
        log: silentLogger,
        receiveWaitSeconds: 0.2,
        ...o,
        timings: { ...t, concurrency },
      });
      workers.push(w);
      return w;
    },
  };
}
beforeEach(() => {
  started.length = 0;
});
afterEach(async () => {
  await Promise.all(l.workers.map((w) => w.crash().catch(() => undefined)));
  for (const q of [l.urgent, l.bulk, l.urgentDlq, l.bulkDlq]) q.close();
  await l.db.drop();
});

const ids = (q: MemoryQueue) => q.peek().map((m) => (parseJobMessage(m.body) as { ok: true; message: { jobId: string } }).message?.jobId);
const sentIds = (q: MemoryQueue) => q.sentLog.map((m) => JSON.parse(m.body).jobId as string);

describe('lanes: the worker prefers urgent and never starves bulk', () => {
  it('200 bulk and 50 urgent queued before the worker starts: urgent jobs start first, bulk jobs still run meanwhile', async () => {
    l = await lanes();
    const bulkSpecs = Array.from({ length: 200 }, (_, i) => ({ type: 'test.work', payload: { tag: `b${i}` } }));
    const urgentSpecs = Array.from({ length: 50 }, (_, i) => ({ type: 'test.work', payload: { tag: `u${i}` }, lane: 'urgent' as const }));
    // Bulk first: without lanes, every bulk job would start before any urgent one.
    for (let i = 0; i < bulkSpecs.length; i += 50) await l.client.enqueueNow(bulkSpecs.slice(i, i + 50));
    await l.client.enqueueNow(urgentSpecs);
    expect(l.urgent.depth().total).toBe(50);
    expect(l.bulk.depth().total).toBe(200);

    // Concurrency 4: bulk keeps max(1, 4 / 5) = 1 slot while urgent work waits.
    const w = l.worker(4);
    w.start();
    await waitFor(
      async () => (await l.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE state = 'succeeded'")).rows[0].n === 250,
      60_000,
      'all 250 jobs done',
    );

    expect(started).toHaveLength(250);
    const lastUrgent = started.findLastIndex((t) => t.startsWith('u'));
    const bulkBeforeLastUrgent = started.slice(0, lastUrgent).filter((t) => t.startsWith('b')).length;
    // Urgent first: the 50 urgent jobs have all started within the first 50 + the bulk share…
    expect(lastUrgent).toBeLessThan(100);
    expect(started.slice(0, 20).filter((t) => t.startsWith('u')).length).toBeGreaterThanOrEqual(14);
    // …and bulk was not starved meanwhile: about one start in four (its slot of four) went to bulk.
    expect(bulkBeforeLastUrgent).toBeGreaterThanOrEqual(8);
    expect(bulkBeforeLastUrgent).toBeLessThanOrEqual(40);

    // The database says the same: urgent jobs' median start is before bulk's.
    const { rows } = await l.db.pool.query(
      `SELECT lane, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at)) AS median FROM jobs.job GROUP BY lane`,
    );
    const median = Object.fromEntries(rows.map((r) => [r.lane, Number(r.median)]));
    expect(median.urgent).toBeLessThan(median.bulk!);
    // Nothing left anywhere (the last deletes go out in batches, within 50 ms); nothing dead-lettered.
    await waitFor(async () => l.urgent.depth().total + l.bulk.depth().total === 0, 5_000, 'every message deleted');
    expect(l.urgentDlq.depth().total + l.bulkDlq.depth().total).toBe(0);
  }, 90_000);

  it('idle, a queue per lane: a job that arrives while the last one is still being claimed runs meanwhile', async () => {
    // As deployed (a queue per lane): the lanes' long polls open again when the last one returns,
    // not once its claim has committed. Long leases: under load the lock may be held a few
    // seconds, and A's lease must not run out (nor its message come back) meanwhile.
    l = await lanes(false, { leaseSeconds: 30, heartbeatSeconds: 5, visibilityTimeoutSeconds: 60 });
    const [a] = await l.client.enqueueNow({ type: 'test.work', payload: { tag: 'a' }, lane: 'urgent' });
    // A's claim waits on this row lock for as long as the test holds it.
    const lock = await holdJobRow(l.db.pool, a!.job.id);
    try {
      l.worker(4).start();
      await lock.claimWaiting();
      await l.client.enqueueNow({ type: 'test.work', payload: { tag: 'b' } });
      await waitFor(() => started.includes('b'), 5_000, 'B run while A is still being claimed');
      expect(started).toEqual(['b']);
    } finally {
      await lock.release();
    }
    await waitFor(() => started.includes('a'), 10_000, 'A run once the lock is gone');
    expect(started).toEqual(['b', 'a']);
  }, 30_000);

  it('idle, a queue per lane: a job its long poll brings is claimed at once, with no receive without waiting first', async () => {
    // A receive that does not wait is a round trip (10–20 ms in a region) spent before the claim,
    // and a second SQS call per job on a quiet lane. Only a poll that comes back full makes the
    // lane busy.
    l = await lanes();
    const calls: number[] = [];
    const receive = l.urgent.receive.bind(l.urgent);
    l.urgent.receive = (max, waitSeconds, signal) => {
      calls.push(waitSeconds);
      return receive(max, waitSeconds, signal);
    };
    l.worker(4).start();
    // Idle: both lanes' first receives came back empty and their long polls are open.
    await waitFor(() => calls.some((w) => w > 0), 5_000, 'the urgent lane long polling');
    const before = calls.filter((w) => w === 0).length;
    for (const tag of ['q1', 'q2', 'q3', 'q4', 'q5']) {
      await l.client.enqueueNow({ type: 'test.work', payload: { tag }, lane: 'urgent' });
      await waitFor(() => started.includes(tag), 5_000, `${tag} started`);
    }
    expect(calls.filter((w) => w === 0).length - before).toBe(0);
  });

  it("a failover, a queue per lane: what a lane's poll brought while the claims hung goes back to its queue with theirs", async () => {
    // Two claims wait on row locks (the most a worker has in flight), the urgent lane's poll brings
    // C meanwhile, and no pass comes to take it; then the database goes. The failed claims hand
    // their messages back, and C with them: left in the poll's hands it would stay hidden for the
    // visibility timeout (60 s here), however soon the database answered.
    l = await lanes(false, { leaseSeconds: 30, heartbeatSeconds: 5, visibilityTimeoutSeconds: 60 });
    const u = new URL(l.db.url);
    const proxy = await startDbProxy({ host: u.hostname, port: Number(u.port) });
    const pool = createPool({ url: proxy.url(l.db.url), max: 8, applicationName: 'jobs-worker lanes-failover-test' });
    onTestFinished(async () => {
      await Promise.all(l.workers.map((w) => w.crash().catch(() => undefined)));
      await pool.end().catch(() => undefined);
      await proxy.stop();
    });
    // The rows exist, and are locked, before their messages reach the urgent queue, one at a time.
    const staged = await stagedJobs(
      l.db.pool,
      registry,
      ['a', 'b', 'c'].map((tag) => ({ type: 'test.work', payload: { tag }, lane: 'urgent' as const })),
      l.urgent,
    );
    const { ids } = staged;
    const lock = await holdJobRow(l.db.pool, ids);
    try {
      l.worker(4, { pool }).start();
      await staged.deliverNext();
      await lock.claimWaiting(1);
      await staged.deliverNext();
      await lock.claimWaiting(2);
      await staged.deliverNext();
      await waitFor(() => l.urgent.peek().filter((m) => m.receiveCount === 1).length === 3, 5_000, 'C received by the urgent poll');
      proxy.failover(2);
      // As when the old primary goes: its sessions end at once (the proxy's reset alone ends them
      // within the pool's client_connection_check_interval, db-failover.test.ts).
      await l.db.pool.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jobs-worker lanes-failover-test'",
      );
      // Every message back in the queue, C with A and B (the test takes them, then
      // returns them for the worker).
      const back = await waitFor(
        async () => {
          const got = await l.urgent.receive(10, 0);
          if (got.length > 0) await l.urgent.changeVisibility(got.map((m) => ({ receipt: m.receipt, seconds: 0 })));
          const jobIds = got.map((m) => JSON.parse(m.body).jobId as string);
          return ids.every((id) => jobIds.includes(id)) ? jobIds : null;
        },
        10_000,
        'A, B and C handed back',
      );
      expect(back.sort()).toEqual([...ids].sort());
    } finally {
      await lock.release();
      staged.close();
    }
    await waitFor(() => ['a', 'b', 'c'].every((t) => started.includes(t)), 20_000, 'all three run once the database answers');
    expect(started.sort()).toEqual(['a', 'b', 'c']);
  }, 60_000);

  it('a bulk receive that fails after the urgent one brought messages: the urgent jobs run at once, not after their visibility timeout', async () => {
    // Before: the failure was thrown and what urgent had brought was dropped, hidden for 30 s.
    l = await lanes(false, { leaseSeconds: 9, heartbeatSeconds: 3, visibilityTimeoutSeconds: 30 });
    await l.client.enqueueNow(['u1', 'u2'].map((tag) => ({ type: 'test.work', payload: { tag }, lane: 'urgent' as const })));
    await l.client.enqueueNow([{ type: 'test.work', payload: { tag: 'b1' } }]);
    await waitFor(async () => (await l.urgent.approximateCount()) === 2 && (await l.bulk.approximateCount()) === 1, 5_000, 'published');
    const receive = l.bulk.receive.bind(l.bulk);
    let failures = 0;
    l.bulk.receive = async (max, wait, signal) => {
      if (failures++ === 0)
        throw Object.assign(new Error('We encountered an internal error. Please try again.'), { name: 'InternalError' });
      return receive(max, wait, signal);
    };
    l.worker(4).start();
    await waitFor(() => ['u1', 'u2', 'b1'].every((t) => started.includes(t)), 8_000, 'every job ran');
    expect(failures).toBeGreaterThan(1);
    expect(started.slice(0, 2).sort()).toEqual(['u1', 'u2']);
  });

  it('an urgent queue whose receives keep failing (throttled at month-end) leaves the bulk lane running, and is tried again after its backoff', async () => {
    // Worker SQS review: the urgent receive's failure was thrown every pass, and no bulk job ran.
    l = await lanes(false, { leaseSeconds: 9, heartbeatSeconds: 3, visibilityTimeoutSeconds: 30 });
    await l.client.enqueueNow(['b1', 'b2', 'b3'].map((tag) => ({ type: 'test.work', payload: { tag } })));
    await waitFor(async () => (await l.bulk.approximateCount()) === 3, 5_000, 'published');
    const receive = l.urgent.receive.bind(l.urgent);
    let throttled = true;
    let urgentCalls = 0;
    l.urgent.receive = async (max, wait, signal) => {
      urgentCalls++;
      if (throttled) throw Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
      return receive(max, wait, signal);
    };
    const metrics = new CountingMetrics();
    l.worker(4, { metrics }).start();
    await waitFor(() => ['b1', 'b2', 'b3'].every((t) => started.includes(t)), 8_000, 'the bulk jobs ran');
    // Left alone meanwhile (1 s, 2 s, …), not asked every pass; each failure counted for the alarm.
    expect(urgentCalls).toBeLessThan(5);
    expect(metrics.counts.get(METRIC.sqsCallsFailed)).toBe(urgentCalls);
    // SQS answers again: the urgent lane is back within its backoff.
    throttled = false;
    await l.client.enqueueNow([{ type: 'test.work', payload: { tag: 'u-back' }, lane: 'urgent' }]);
    await waitFor(() => started.includes('u-back'), 40_000, 'the urgent job ran once the lane answered');
  }, 60_000);

  it('a bulk queue whose receives keep failing leaves the urgent lane running, without spinning while it waits to try bulk again', async () => {
    // Review: the down bulk lane still reserved every slot, so urgent was asked for nothing, and
    // the fetcher came straight back, a pass per tick at full CPU.
    l = await lanes(false, { leaseSeconds: 9, heartbeatSeconds: 3, visibilityTimeoutSeconds: 30 });
    let bulkCalls = 0;
    l.bulk.receive = async () => {
      bulkCalls++;
      throw Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
    };
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    l.worker(30).start();
    await l.client.enqueueNow(['u1', 'u2'].map((tag) => ({ type: 'test.work', payload: { tag }, lane: 'urgent' as const })));
    await waitFor(() => ['u1', 'u2'].every((t) => started.includes(t)), 8_000, 'the urgent jobs ran');
    await new Promise((r) => setTimeout(r, 1_000));
    const cpu = process.cpuUsage(cpu0);
    // A loop that spins burns a core; waiting for the lane's backoff burns next to nothing.
    expect((cpu.user + cpu.system) / 1000).toBeLessThan((performance.now() - t0) / 2);
    expect(bulkCalls).toBeLessThan(5);
  });

  it('one queue for every lane (no urgent queue): urgent jobs go to the shared queue and run', async () => {
    l = await lanes(true);
    const [r] = await l.client.enqueueNow({ type: 'test.work', payload: { tag: 'u-shared' }, lane: 'urgent' });
    expect(r!.job.lane).toBe('urgent');
    expect(ids(l.bulk)).toEqual([r!.job.id]);
    expect(l.urgent.sentLog).toHaveLength(0);
    l.worker(2).start();
    await waitFor(async () => (await l.store.get(r!.job.id))!.state === 'succeeded', 10_000, 'urgent job done');
  });
});

/** `n` urgent jobs older than the reconciler's minimum age (every job is aged), whose messages the urgent queue lost (a purge). */
async function urgentJobsPurged(n: number) {
  const jobs = await l.client.enqueueNow(
    Array.from({ length: n }, (_, i) => ({ type: 'test.work', payload: { tag: `u${i}` }, lane: 'urgent' as const })),
  );
  await l.db.pool.query("UPDATE jobs.job SET created_at = created_at - interval '1 hour', run_after = run_after - interval '1 hour'");
  await waitFor(async () => (await l.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox')).rows[0].n === 0, 5000, 'outbox emptied');
  l.urgent.purge();
  return jobs;
}

/** A reconciler over the lanes' queues, each counted by `count` (default: the queue's own count). */
function laneReconciler(count = (queue: MemoryQueue, _lanes: readonly Lane[]) => queue.approximateCount()): Reconciler {
  return new Reconciler({
    pool: l.db.pool,
    publisher: new Publisher(l.db.pool, l.queue, silentLogger),
    queues: l.queue.queues.map((q) => ({ lanes: q.lanes, countMessages: () => count(q.queue as MemoryQueue, q.lanes) })),
    log: silentLogger,
    timings: { intervalMs: 1000, minAgeSeconds: 1, republishWindowSeconds: 60 },
  });
}

describe("lanes: every message of a job goes to its lane's queue", () => {
  beforeEach(async () => {
    l = await lanes();
  });

  it("enqueue: the enqueuer's lane, else the type's, else bulk", async () => {
    const [a, b, c, d] = await l.client.enqueueNow([
      { type: 'test.work', payload: { tag: 'a' }, lane: 'urgent' },
      { type: 'test.work', payload: { tag: 'b' } },
      { type: 'test.close', payload: {} },
      { type: 'test.close', payload: {}, lane: 'bulk' },
    ]);
    expect([a, b, c, d].map((r) => r!.job.lane)).toEqual(['urgent', 'bulk', 'urgent', 'bulk']);
    expect(new Set(ids(l.urgent))).toEqual(new Set([a!.job.id, c!.job.id]));
    expect(new Set(ids(l.bulk))).toEqual(new Set([b!.job.id, d!.job.id]));
    expect((await l.store.get(a!.job.id))!.lane).toBe('urgent');
  });

  it('a bad lane is refused naming the field and the allowed values', () => {
    expect(() => l.client.validate({ type: 'test.work', payload: { tag: 'x' }, lane: 'fast' as never })).toThrow(ValidationError);
    try {
      l.client.validate({ type: 'test.work', payload: { tag: 'x' }, lane: 'fast' as never });
    } catch (err) {
      expect((err as ValidationError).field).toBe('lane');
      expect((err as ValidationError).message).toMatch(/must be one of urgent, bulk \(got "fast"\)/);
    }
  });

  it('the outbox relay publishes a committed job whose enqueuer died to its lane', async () => {
    const [u, b] = await l.store.insertMany(l.db.pool, [
      { type: 'test.work', payload: { tag: 'r1' }, maxAttempts: 3, lane: 'urgent' },
      { type: 'test.work', payload: { tag: 'r2' }, maxAttempts: 3 },
    ]);
    const relay = new OutboxRelay(l.db.pool, l.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 });
    expect(await relay.runOnce()).toBe(2);
    expect(ids(l.urgent)).toEqual([u!.job.id]);
    expect(ids(l.bulk)).toEqual([b!.job.id]);
  });

  it("one lane's queue failing (deleted, its permission revoked) does not hold the other's publishes back, nor re-send them", async () => {
    // Review finding: the sends of both lanes were one all-or-nothing: the publisher counted the
    // bulk messages failed with the urgent ones, and every relay pass re-sent the bulk lane's
    // messages and rolled back, the rows behind never reached.
    let urgentSends = 0;
    const brokenUrgent = {
      ...l.urgent,
      send: () => {
        urgentSends++;
        return Promise.reject(new Error('AWS.SimpleQueueService.NonExistentQueue'));
      },
    };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: brokenUrgent as never });
    const rows = await l.store.insertMany(l.db.pool, [
      ...Array.from({ length: 3 }, (_, i) => ({ type: 'test.work', payload: { tag: `lu${i}` }, maxAttempts: 3, lane: 'urgent' as const })),
      ...Array.from({ length: 12 }, (_, i) => ({ type: 'test.work', payload: { tag: `lb${i}` }, maxAttempts: 3 })),
    ]);
    const urgentIds = rows.slice(0, 3).map((r) => r.job.id);
    const bulkIds = rows.slice(3).map((r) => r.job.id);
    // The publisher: the bulk lane's go out and their rows go.
    const publisher = new Publisher(l.db.pool, queue, silentLogger);
    await publisher.publish(rows.map((r) => ({ outboxId: r.outboxId!, jobId: r.job.id, lane: r.job.lane })));
    await publisher.flush();
    const outboxJobs = async () =>
      (await l.db.pool.query('SELECT job_id FROM jobs.outbox WHERE job_id = ANY($1::uuid[])', [rows.map((r) => r.job.id)])).rows.map(
        (r) => r.job_id as string,
      );
    expect((await outboxJobs()).sort()).toEqual([...urgentIds].sort());
    // More bulk jobs behind the urgent rows, left by an enqueuer that died: the relay, batches of 2,
    // several passes, sends each once and reports the urgent lane's failure every pass.
    const behind = await l.store.insertMany(
      l.db.pool,
      Array.from({ length: 3 }, (_, i) => ({ type: 'test.work', payload: { tag: `lr${i}` }, maxAttempts: 3 })),
    );
    const metrics = new CountingMetrics();
    const lines: { msg: string; lanes?: unknown; jobIds?: string[] }[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const relay = new OutboxRelay(l.db.pool, queue, log, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 2 }, metrics);
    urgentSends = 0;
    for (let pass = 0; pass < 3; pass++) expect(await relay.runOnce()).toBe(pass === 0 ? 3 : 0);
    // One send to the failing lane, not one per batch (a send to an SQS that does not answer waits
    // out its retries: maintenance review), then a backoff: the next passes neither send to it nor
    // lease its rows (12,000 rows of a deleted queue were written twice a pass in every task).
    expect(urgentSends).toBe(1);
    expect((await l.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE leased_until IS NOT NULL')).rows[0].n).toBe(0);
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await relay.runOnce()).toBe(0);
    expect(urgentSends).toBe(2);
    // One line a try naming the lane, SQS's error and the jobs (runbook *publishing failing*, step 1).
    const line = (published: number, retry: number) =>
      `outbox relay could not publish 2 job(s) to the urgent lane's queue (AWS.SimpleQueueService.NonExistentQueue); published ${published}; trying that lane again in ${retry} s`;
    expect(lines.map((x) => x.msg)).toEqual([line(3, 1), line(0, 2)]);
    // The jobs of the batch tried (the lane's rows behind it are not leased once it fails).
    expect(lines[0]).toMatchObject({ lanes: { urgent: { jobs: 2, error: 'AWS.SimpleQueueService.NonExistentQueue' } } });
    expect(urgentIds).toEqual(expect.arrayContaining(lines[0]!.jobIds!));
    // What the *publishing failing* alarm counts: the jobs each try could not send.
    expect(metrics.counts.get(METRIC.outboxPublishesFailed)).toBe(4);
    expect((await outboxJobs()).sort()).toEqual([...urgentIds].sort());
    for (const id of [...bulkIds, ...behind.map((r) => r.job.id)]) expect(sentIds(l.bulk).filter((s) => s === id)).toHaveLength(1);
  });

  it("a send stuck on one lane's queue does not hold back the cleanup of the other lane's publishes (the relays would send those again)", async () => {
    // Review finding: the publisher's cleanup waited for every send in flight, so while one lane's
    // send hung, the other lane's published rows stayed and every relay re-sent them.
    const hangingUrgent = { ...l.urgent, send: () => new Promise<void>(() => undefined) };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: hangingUrgent as never });
    const publisher = new Publisher(l.db.pool, queue, silentLogger, { waitMs: 50 });
    const [u, b] = await l.store.insertMany(l.db.pool, [
      { type: 'test.work', payload: { tag: 'hang-u' }, maxAttempts: 3, lane: 'urgent' },
      { type: 'test.work', payload: { tag: 'hang-b' }, maxAttempts: 3 },
    ]);
    await publisher.publish([{ outboxId: u!.outboxId!, jobId: u!.job.id, lane: 'urgent' }]);
    await publisher.publish([{ outboxId: b!.outboxId!, jobId: b!.job.id, lane: 'bulk' }]);
    const rows = async () =>
      (await l.db.pool.query('SELECT job_id FROM jobs.outbox WHERE job_id = ANY($1::uuid[])', [[u!.job.id, b!.job.id]])).rows.map(
        (r) => r.job_id as string,
      );
    // The bulk row goes within the cleanup's batching delay; the urgent one waits for its send.
    await waitFor(async () => (await rows()).length === 1, 2_000, 'the bulk row cleaned up');
    expect(await rows()).toEqual([u!.job.id]);
  });

  it('one publish of both lanes (a batch enqueue): the bulk rows go as soon as their send is done, not when the hung urgent one ends; the urgent send gives up at its deadline', async () => {
    // API review: the rows sent were cleaned up once every send of the publish had ended, so a
    // hung urgent send kept the bulk rows, and every relay sent them again.
    const silentUrgent = {
      ...l.urgent,
      send: (_m: unknown, signal?: AbortSignal) =>
        new Promise<void>((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason), { once: true })),
    };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: silentUrgent as never });
    const lines: { msg: string; lane?: string }[] = [];
    const log = pino({ level: 'warn' }, { write: (x: string) => void lines.push(JSON.parse(x)) });
    const publisher = new Publisher(l.db.pool, queue, log, { waitMs: 50, sendDeadlineMs: 3_000 });
    const [u, b] = await l.store.insertMany(l.db.pool, [
      { type: 'test.work', payload: { tag: 'mixed-u' }, maxAttempts: 3, lane: 'urgent' },
      { type: 'test.work', payload: { tag: 'mixed-b' }, maxAttempts: 3 },
    ]);
    await publisher.publish([
      { outboxId: u!.outboxId!, jobId: u!.job.id, lane: 'urgent' },
      { outboxId: b!.outboxId!, jobId: b!.job.id, lane: 'bulk' },
    ]);
    const rows = async () =>
      (await l.db.pool.query('SELECT job_id FROM jobs.outbox WHERE job_id = ANY($1::uuid[])', [[u!.job.id, b!.job.id]])).rows.map(
        (r) => r.job_id as string,
      );
    await waitFor(async () => (await rows()).length === 1, 2_500, 'the bulk row cleaned up while the urgent send hangs');
    expect(await rows()).toEqual([u!.job.id]);
    await publisher.drain(5_000);
    expect(lines).toMatchObject([{ msg: 'publish failed; the outbox relay will retry', lane: 'urgent' }]);
    expect(await rows()).toEqual([u!.job.id]);
  });

  it('the relay holds no connection while a send hangs (SQS not answering), and no other relay sends those rows meanwhile', async () => {
    // Before (migration 0021): the rows were locked in a transaction held across the send, so an
    // SQS that did not answer held a maintenance connection idle in transaction for the SDK's
    // retries, minutes, and the rescuer and the stuck count queued behind it.
    let release!: () => void;
    let hung = 0;
    const hangingUrgent = {
      ...l.urgent,
      send: (m: Parameters<MemoryQueue['send']>[0]) => {
        hung++;
        return new Promise<void>((r) => (release = r)).then(() => l.urgent.send(m));
      },
    };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: hangingUrgent as never });
    const [u, b] = await l.store.insertMany(l.db.pool, [
      { type: 'test.work', payload: { tag: 'lease-u' }, maxAttempts: 3, lane: 'urgent' },
      { type: 'test.work', payload: { tag: 'lease-b' }, maxAttempts: 3 },
    ]);
    const relay = new OutboxRelay(l.db.pool, queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 });
    const pass = relay.runOnce();
    await waitFor(() => hung === 1, 2_000, 'the urgent send under way');
    const { rows } = await l.db.pool.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    );
    expect(rows[0].n).toBe(0);
    // Another relay (another task) meanwhile: the leased row is not sent again.
    const other = new OutboxRelay(l.db.pool, l.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 });
    expect(await other.runOnce()).toBe(0);
    release();
    expect(await pass).toBe(2);
    expect(sentIds(l.urgent)).toEqual([u!.job.id]);
    expect(sentIds(l.bulk)).toEqual([b!.job.id]);
    expect((await l.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox')).rows[0].n).toBe(0);
  });

  it('an urgent queue that stops answering holds neither the bulk rows beside it nor the relay: they go at once, and the urgent send gives up at its deadline', async () => {
    // API review: the lanes were sent one after the other with no deadline, so an urgent row
    // ahead of bulk ones held them for the wire's whole retry budget, pass after pass.
    let silent = 0;
    const silentUrgent = {
      ...l.urgent,
      send: (_m: unknown, signal?: AbortSignal) => {
        silent++;
        return new Promise<void>((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason), { once: true }));
      },
    };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: silentUrgent as never });
    const [u, ...bulk] = await l.store.insertMany(l.db.pool, [
      { type: 'test.work', payload: { tag: 'silent-u' }, maxAttempts: 3, lane: 'urgent' },
      ...Array.from({ length: 12 }, (_, i) => ({ type: 'test.work', payload: { tag: `beside-${i}` }, maxAttempts: 3 })),
    ]);
    const lines: { msg: string }[] = [];
    const log = pino({ level: 'warn' }, { write: (x: string) => void lines.push(JSON.parse(x)) });
    const relay = new OutboxRelay(l.db.pool, queue, log, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100, sendDeadlineMs: 500 });
    const pass = relay.runOnce();
    await waitFor(() => sentIds(l.bulk).length === 12, 2_000, 'the bulk rows sent while the urgent send hangs');
    expect(silent).toBe(1);
    expect(await pass).toBe(12);
    expect(sentIds(l.bulk).sort()).toEqual(bulk.map((r) => r.job.id).sort());
    expect(lines.map((x) => x.msg)).toEqual([
      "outbox relay could not publish 1 job(s) to the urgent lane's queue (TimeoutError); published 12; trying that lane again in 1 s",
    ]);
    expect((await l.db.pool.query('SELECT job_id FROM jobs.outbox WHERE leased_until IS NULL')).rows).toEqual([{ job_id: u!.job.id }]);
  });

  it("a send SQS answered with failed entries names their codes in the relay's line (runbook *publishing failing*)", async () => {
    const refusing = {
      ...l.urgent,
      send: () => Promise.reject(new SqsBatchError('SendMessageBatch', [{ code: 'KmsThrottled', message: 'slow down' }])),
    };
    const queue = new LaneQueues({ bulk: l.bulk, urgent: refusing as never });
    await l.store.insertMany(l.db.pool, [{ type: 'test.work', payload: { tag: 'kms' }, maxAttempts: 3, lane: 'urgent' }]);
    const lines: { msg: string }[] = [];
    const log = pino({ level: 'warn' }, { write: (x: string) => void lines.push(JSON.parse(x)) });
    expect(await new OutboxRelay(l.db.pool, queue, log, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 }).runOnce()).toBe(0);
    expect(lines.map((x) => x.msg)).toEqual([
      "outbox relay could not publish 1 job(s) to the urgent lane's queue (KmsThrottled); published 0; trying that lane again in 1 s",
    ]);
  });

  it("a relay that dies mid-send leaves its rows to another relay when its lease ends; a failed send's rows are released at once", async () => {
    const [u] = await l.store.insertMany(l.db.pool, [{ type: 'test.work', payload: { tag: 'died' }, maxAttempts: 3, lane: 'urgent' }]);
    const dying = new LaneQueues({ bulk: l.bulk, urgent: { ...l.urgent, send: () => new Promise<void>(() => undefined) } as never });
    const opts = { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100, leaseSeconds: 1 };
    void new OutboxRelay(l.db.pool, dying, silentLogger, opts).runOnce(); // never ends: the task died
    await waitFor(
      async () => (await l.db.pool.query('SELECT 1 FROM jobs.outbox WHERE leased_until IS NOT NULL')).rowCount === 1,
      2_000,
      'leased',
    );
    const other = new OutboxRelay(l.db.pool, l.queue, silentLogger, opts);
    expect(await other.runOnce()).toBe(0);
    await waitFor(async () => (await other.runOnce()) === 1, 3_000, 'sent by the other relay after the lease');
    expect(sentIds(l.urgent)).toEqual([u!.job.id]);
    // A send that fails releases its row for the next pass, not after the lease.
    const [v] = await l.store.insertMany(l.db.pool, [{ type: 'test.work', payload: { tag: 'refused' }, maxAttempts: 3, lane: 'urgent' }]);
    const refusing = new LaneQueues({ bulk: l.bulk, urgent: { ...l.urgent, send: () => Promise.reject(new Error('throttled')) } as never });
    expect(await new OutboxRelay(l.db.pool, refusing, silentLogger, { ...opts, leaseSeconds: 600 }).runOnce()).toBe(0);
    expect(await other.runOnce()).toBe(1);
    expect(sentIds(l.urgent)).toEqual([u!.job.id, v!.job.id]);
  });

  it("a pass that outlived its lease releases only rows still under it: another relay's lease since stands", async () => {
    // Diff review: a release not fenced by the lease let a third relay send the rows a second one
    // was still sending.
    await l.store.insertMany(l.db.pool, [{ type: 'test.work', payload: { tag: 'fenced' }, maxAttempts: 3, lane: 'urgent' }]);
    let failA!: () => void;
    const slow = new LaneQueues({
      bulk: l.bulk,
      urgent: { ...l.urgent, send: () => new Promise<void>((_, reject) => (failA = () => reject(new Error('throttled')))) } as never,
    });
    const opts = { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 };
    const a = new OutboxRelay(l.db.pool, slow, silentLogger, { ...opts, leaseSeconds: 1 }).runOnce();
    await waitFor(() => failA !== undefined, 2_000, "relay A's send under way");
    await new Promise((r) => setTimeout(r, 1_200)); // A's lease runs out while its send waits
    const hanging = new LaneQueues({ bulk: l.bulk, urgent: { ...l.urgent, send: () => new Promise<void>(() => undefined) } as never });
    void new OutboxRelay(l.db.pool, hanging, silentLogger, { ...opts, leaseSeconds: 600 }).runOnce();
    const leasedLong = async () =>
      (await l.db.pool.query("SELECT 1 FROM jobs.outbox WHERE leased_until > now() + interval '500 seconds'")).rowCount === 1;
    await waitFor(leasedLong, 2_000, 'relay B leased the row');
    failA();
    expect(await a).toBe(0);
    expect(await leasedLong()).toBe(true);
    expect(await new OutboxRelay(l.db.pool, l.queue, silentLogger, opts).runOnce()).toBe(0);
    expect(sentIds(l.urgent)).toEqual([]);
  });

  it("a concurrency key's next job (relay_now) goes to the urgent queue, and a dead urgent job's report to the urgent DLQ", async () => {
    const keyed = await l.client.enqueueNow(
      Array.from({ length: 3 }, (_, i) => ({
        type: 'test.work',
        payload: { tag: `k${i}`, ms: 30 },
        lane: 'urgent' as const,
        concurrencyKey: 'ledger:7',
      })),
    );
    const [fatal] = await l.client.enqueueNow({ type: 'test.fatal', payload: {}, lane: 'urgent' });
    l.worker(3).start();
    await waitFor(async () => (await l.store.get(fatal!.job.id))!.state === 'dead', 10_000, 'fatal job dead');
    for (const k of keyed) await waitFor(async () => (await l.store.get(k.job.id))!.state === 'succeeded', 10_000, 'keyed job done');
    // The blocked ones were published again when the key had room: on the urgent queue, never the bulk one.
    expect(sentIds(l.urgent).filter((id) => keyed.some((k) => k.job.id === id)).length).toBeGreaterThan(3);
    expect(l.bulk.sentLog).toHaveLength(0);
    expect(l.urgentDlq.peek().map((m) => m.attributes.JobId)).toEqual([fatal!.job.id]);
    expect(l.urgentDlq.peek()[0]!.attributes.Lane).toBe('urgent');
    expect(l.bulkDlq.depth().total).toBe(0);
  });

  it('the rescuer re-queues an expired urgent job to the urgent queue', async () => {
    const [r] = await l.client.enqueueNow({ type: 'test.work', payload: { tag: 'x' }, lane: 'urgent' });
    await l.store.claim([r!.job.id], 'dead-worker', 0.05);
    l.urgent.purge();
    const rescuer = new Rescuer(l.store, new Publisher(l.db.pool, l.queue, silentLogger), silentLogger, {
      graceSeconds: 0,
      intervalMs: 1000,
      batchSize: 10,
    });
    await new Promise((res) => setTimeout(res, 100));
    expect((await rescuer.runOnce()).map((j) => j.id)).toEqual([r!.job.id]);
    expect(ids(l.urgent)).toEqual([r!.job.id]);
    expect(l.bulk.sentLog).toHaveLength(0);
  });

  it('the reconciler heals a purged urgent queue from urgent jobs, not from the bulk backlog', async () => {
    const bulkJobs = await l.client.enqueueNow(Array.from({ length: 5 }, (_, i) => ({ type: 'test.work', payload: { tag: `b${i}` } })));
    const urgentJobs = await urgentJobsPurged(3);
    const reconciler = laneReconciler();
    expect((await reconciler.runOnce()).deficit).toBe(3); // seen once: not acted on yet
    expect((await reconciler.runOnce()).republished).toBe(3);
    expect(new Set(ids(l.urgent))).toEqual(new Set(urgentJobs.map((r) => r.job.id)));
    expect(l.bulk.sentLog).toHaveLength(bulkJobs.length); // the enqueue's own, nothing more
  });

  it("the reconciler's pass holds no picked job's row while it waits on SQS: a claim of one goes through meanwhile", async () => {
    // Before: the urgent lane's picks were locked, then the bulk queue was counted (an SQS call)
    // in the same transaction; a worker's claim of a picked job waited for that call.
    const urgentJobs = await urgentJobsPurged(3);
    let slowCounts = false;
    let countsStarted = 0;
    let countsEnded = 0;
    const reconciler = laneReconciler(async (queue, lanes) => {
      if (slowCounts && lanes.includes('bulk')) {
        countsStarted++;
        await new Promise((r) => setTimeout(r, 3000)); // SQS throttled
        countsEnded++;
      }
      return queue.approximateCount();
    });
    expect((await reconciler.runOnce()).deficit).toBe(3); // seen once
    slowCounts = true;
    const pass = reconciler.runOnce();
    // While the slow bulk count runs (the urgent picks already made, in the old order), a claim.
    await waitFor(() => countsStarted > 0, 3000, 'the bulk count under way');
    await new Promise((r) => setTimeout(r, 200));
    const claimed = await l.store.claim([urgentJobs[0]!.job.id], 'w', 30);
    expect(countsEnded).toBe(0); // claimed while the count still waited
    expect(claimed).toHaveLength(1);
    expect((await pass).republished).toBe(2); // the claimed one is not pending any more
  });

  it('a redriven dead urgent job goes back to the urgent queue', async () => {
    const [r] = await l.client.enqueueNow({ type: 'test.fatal', payload: {}, lane: 'urgent' });
    const [c] = await l.store.claim([r!.job.id], 'w', 30);
    await l.store.fail({ id: c!.id, attempt: c!.attempt }, { name: 'Error', message: 'no', retryable: false }, 0, true);
    l.urgent.purge();
    const report = await new DeadJobService(l.db.pool, new Publisher(l.db.pool, l.queue, silentLogger)).redrive({
      ids: [r!.job.id],
      by: 'test',
      reason: 'fixed',
    });
    expect(report.jobs.map((j) => j.id)).toEqual([r!.job.id]);
    expect(ids(l.urgent)).toEqual([r!.job.id]);
    expect(l.bulk.sentLog).toHaveLength(0);
  });
});

describe('lanes: configuration', () => {
  const base = {
    JOBS_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/1/q',
    JOBS_DLQ_URL: 'https://sqs.eu-west-1.amazonaws.com/1/dlq',
    AWS_REGION: 'eu-west-1',
  };
  const refused = (env: Record<string, string>, needs?: { dlq: true }) => {
    try {
      sqsFromEnv(env, needs);
    } catch (err) {
      if (err instanceof ConfigError) return err.message;
      throw err;
    }
    return null;
  };

  it('the urgent queue is optional; given, the worker needs its DLQ too', () => {
    expect(sqsFromEnv(base, { dlq: true }).urgentQueueUrl).toBeUndefined();
    const urgent = { ...base, JOBS_URGENT_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/1/uq' };
    expect(refused(urgent, { dlq: true })).toMatch(/JOBS_URGENT_DLQ_URL is required/);
    expect(sqsFromEnv(urgent).urgentQueueUrl).toBe(urgent.JOBS_URGENT_QUEUE_URL);
    const both = { ...urgent, JOBS_URGENT_DLQ_URL: 'https://sqs.eu-west-1.amazonaws.com/1/udlq' };
    expect(sqsFromEnv(both, { dlq: true })).toMatchObject({
      urgentQueueUrl: urgent.JOBS_URGENT_QUEUE_URL,
      urgentDlqUrl: both.JOBS_URGENT_DLQ_URL,
    });
  });

  it('bad lane settings are refused naming the variable', () => {
    expect(refused({ ...base, JOBS_URGENT_QUEUE_URL: 'not a url', JOBS_URGENT_DLQ_URL: 'https://x/udlq' })).toMatch(
      /JOBS_URGENT_QUEUE_URL = "not a url" is not a URL/,
    );
    expect(refused({ ...base, JOBS_URGENT_DLQ_URL: 'https://x/udlq' })).toMatch(/JOBS_URGENT_DLQ_URL is set without JOBS_URGENT_QUEUE_URL/);
    expect(refused({ ...base, JOBS_URGENT_QUEUE_URL: base.JOBS_QUEUE_URL })).toMatch(
      /JOBS_URGENT_QUEUE_URL must differ from JOBS_QUEUE_URL/,
    );
  });
});
