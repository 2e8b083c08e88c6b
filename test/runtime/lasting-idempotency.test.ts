// Idempotency keys that outlive the job (issue 15): a type that keeps its keys (ledger.post:
// forever) returns the original job for a key it has seen, after success, after failure past the
// cap and after a cancel, and never makes a second job; concurrent enqueues of one key make one.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import type { EnqueueResult } from '../../runtime/store/client.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

// A type whose keys are kept two days after the job ends.
const windowed = defineJob<Record<string, never>, null>({
  type: 'test.windowed',
  description: 'keeps its keys for two days',
  parse: () => ({}),
  idempotency: { keepDays: 2 },
  async run() {
    return null;
  },
});

let p: Platform;
beforeAll(async () => {
  p = await createPlatform({
    registry: new JobRegistry([
      ...defaultRegistry()
        .types()
        .map((t) => defaultRegistry().get(t)!),
      windowed,
    ]),
  });
});
afterAll(() => p.close());

const posting = (batch: string, key: string, extra: Record<string, unknown> = {}) => ({
  type: 'ledger.post',
  payload: { batch, entries: 3, ...extra },
  idempotencyKey: key,
});
const enqueue = async (spec: Parameters<Platform['client']['enqueueNow']>[0]) => (await p.client.enqueueNow(spec))[0]!;
const jobsWithKey = async (key: string) =>
  (await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.job WHERE idempotency_key = $1', [key])).rows[0].n as number;
const keyRow = async (type: string, key: string) =>
  (await p.db.pool.query('SELECT job_id, keep_days FROM jobs.idempotency_key WHERE type = $1 AND key = $2', [type, key])).rows[0] as
    | { job_id: string; keep_days: number | null }
    | undefined;
const messagesFor = (jobId: string) =>
  p.queue.sentLog.filter((m) => {
    const r = parseJobMessage(m.body);
    return r.ok && r.message.jobId === jobId;
  }).length;
const ledgerRows = async (batch: string) =>
  (await p.db.pool.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch = $1', [batch])).rows[0].n as number;

/** A dead job, made the way a worker makes one: claimed, then failed on its final attempt (fenced). */
async function kill(id: string) {
  const [claimed] = await p.store.claim([id], 'worker-a', 30);
  const dead = await p.store.fail(
    { id, attempt: claimed!.attempt },
    { name: 'Error', message: 'period 2026-10 is closed for posting', retryable: false },
    0,
    true,
  );
  expect(dead!.state).toBe('dead');
}

describe('a type whose keys outlive its jobs (ledger.post: forever)', () => {
  it('after success: the same key returns the original job, succeeded with its result, and the batch is posted once', async () => {
    const first = await enqueue(posting('B-1', 'post-B-1'));
    const w = p.worker();
    w.start();
    await waitFor(async () => (await p.store.get(first.job.id))!.state === 'succeeded', 10_000, 'B-1 posted');
    const again = await enqueue(posting('B-1', 'post-B-1'));
    expect(again).toMatchObject({ duplicate: true, job: { id: first.job.id, state: 'succeeded', result: { batch: 'B-1', posted: 3 } } });
    expect(again.payloadDiffers).toBeUndefined(); // the same payload (its keys in another order than jsonb keeps them)
    // Even with another payload: the key names the work, and that work is done; the answer says the
    // payloads differ (a key reused for other work by mistake would otherwise pass unseen).
    const other = await enqueue(posting('B-1', 'post-B-1', { entries: 50 }));
    expect(other).toMatchObject({ duplicate: true, payloadDiffers: true, job: { id: first.job.id, payload: { entries: 3 } } });
    expect(await jobsWithKey('post-B-1')).toBe(1);
    expect(messagesFor(first.job.id)).toBe(1);
    await w.stop(1);
    expect(await ledgerRows('B-1')).toBe(3);
  });

  it('after failure past the cap: the key returns the dead job; on-call redrives that same job, and a resubmission meanwhile still returns it', async () => {
    const first = await enqueue(posting('B-2', 'post-B-2'));
    await kill(first.job.id);
    const again = await enqueue(posting('B-2', 'post-B-2'));
    expect(again).toMatchObject({
      duplicate: true,
      job: { id: first.job.id, state: 'dead', lastError: { message: 'period 2026-10 is closed for posting' } },
    });
    const redrive = await new DeadJobService(p.db.pool, p.publisher).redrive({
      ids: [first.job.id],
      by: 'ops@example',
      reason: 'period reopened',
    });
    expect(redrive.jobs.map((j) => j.id)).toEqual([first.job.id]);
    const resubmitted = await enqueue(posting('B-2', 'post-B-2'));
    expect(resubmitted).toMatchObject({ duplicate: true, job: { id: first.job.id, state: 'pending' } });
    expect(await jobsWithKey('post-B-2')).toBe(1);
  });

  it('after a cancel: the key returns the cancelled job, which is not run', async () => {
    const first = await enqueue(posting('B-3', 'post-B-3'));
    await p.client.cancel(first.job.id, 'ops@example');
    const again = await enqueue(posting('B-3', 'post-B-3'));
    expect(again).toMatchObject({ duplicate: true, job: { id: first.job.id, state: 'cancelled', cancelledBy: 'ops@example' } });
    expect(messagesFor(first.job.id)).toBe(1);
    expect(await jobsWithKey('post-B-3')).toBe(1);
    expect(await keyRow('ledger.post', 'post-B-3')).toEqual({ job_id: first.job.id, keep_days: null });
  });

  it('concurrent enqueues of a key whose job has ended, each on its own connection, all get that job', async () => {
    const first = await enqueue(posting('B-4', 'post-B-4'));
    await p.client.cancel(first.job.id, 'test');
    const results = await racing(20, () => posting('B-4', 'post-B-4'));
    expect(results.every((r) => r.duplicate && r.job.id === first.job.id)).toBe(true);
    expect(await jobsWithKey('post-B-4')).toBe(1);
  });

  it('a rolled-back enqueue leaves no key behind', async () => {
    const c = await p.db.pool.connect();
    try {
      await c.query('BEGIN');
      await p.client.enqueue(c, posting('B-5', 'post-B-5'));
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    expect(await keyRow('ledger.post', 'post-B-5')).toBeUndefined();
    expect((await enqueue(posting('B-5', 'post-B-5'))).duplicate).toBe(false);
  });

  it('an active job enqueued before its type kept keys has its key adopted, so it is not posted twice once it ends', async () => {
    const first = await enqueue(posting('B-6', 'post-B-6'));
    await p.db.pool.query("DELETE FROM jobs.idempotency_key WHERE key = 'post-B-6'"); // as before migration 0009
    expect(await enqueue(posting('B-6', 'post-B-6'))).toMatchObject({ duplicate: true, job: { id: first.job.id } });
    expect((await keyRow('ledger.post', 'post-B-6'))?.job_id).toBe(first.job.id);
    await p.client.cancel(first.job.id, 'test');
    expect(await enqueue(posting('B-6', 'post-B-6'))).toMatchObject({ duplicate: true, job: { id: first.job.id, state: 'cancelled' } });
  });

  it('the enqueuer cannot shorten the window: no field of the request sets it', () => {
    for (const field of ['keepDays', 'idempotency', 'keepFinishedDays']) {
      const err = (() => {
        try {
          p.client.validate({ ...posting('B-7', 'post-B-7'), [field]: 1 } as never);
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(ValidationError);
      expect(err).toMatchObject({ field, reason: expect.stringMatching(/^is not a field of a job/) });
    }
  });

  it('a key kept forever keeps its job forever: the job is never due for pruning', async () => {
    const first = await enqueue(posting('B-8', 'post-B-8'));
    const { rows } = await p.db.pool.query("SELECT keep_days, prune_after = 'infinity' AS forever FROM jobs.job WHERE id = $1", [
      first.job.id,
    ]);
    expect(rows[0]).toEqual({ keep_days: null, forever: true });
    // Without a key, a ledger.post job is kept like any other.
    const plain = (await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'B-8b', entries: 1 } }))[0]!;
    const r = await p.db.pool.query('SELECT keep_days FROM jobs.job WHERE id = $1', [plain.job.id]);
    expect(r.rows[0].keep_days).toBe(30);
  });
});

describe('a type whose keys are kept for a window (test.windowed: 2 days)', () => {
  const spec = (key: string) => ({ type: 'test.windowed', payload: {}, idempotencyKey: key });
  /** The job ended `days` days ago. */
  const endedDaysAgo = (id: string, days: number) =>
    p.db.pool.query("UPDATE jobs.job SET finished_at = now() - $2 * interval '1 day' WHERE id = $1", [id, days]);

  it('within the window the key returns the ended job; past it, the same key makes a new job and the key names it', async () => {
    const first = await enqueue(spec('w-1'));
    await p.client.cancel(first.job.id, 'test');
    await endedDaysAgo(first.job.id, 1.9);
    expect(await enqueue(spec('w-1'))).toMatchObject({ duplicate: true, job: { id: first.job.id } });
    await endedDaysAgo(first.job.id, 2.1);
    const next = await enqueue(spec('w-1'));
    expect(next.duplicate).toBe(false);
    expect(next.job.id).not.toBe(first.job.id);
    expect(await keyRow('test.windowed', 'w-1')).toEqual({ job_id: next.job.id, keep_days: 2 });
    // The job is kept at least as long as its key.
    const { rows } = await p.db.pool.query('SELECT keep_days FROM jobs.job WHERE id = $1', [next.job.id]);
    expect(rows[0].keep_days).toBe(30);
  });

  it('concurrent enqueues of a key whose window has passed make exactly one new job', async () => {
    const first = await enqueue(spec('w-2'));
    await p.client.cancel(first.job.id, 'test');
    await endedDaysAgo(first.job.id, 3);
    const results = await racing(10, () => spec('w-2'));
    const fresh = results.filter((r) => !r.duplicate);
    expect(fresh).toHaveLength(1);
    expect(new Set(results.map((r) => r.job.id))).toEqual(new Set([fresh[0]!.job.id]));
    expect(await jobsWithKey('w-2')).toBe(2);
    expect((await keyRow('test.windowed', 'w-2'))?.job_id).toBe(fresh[0]!.job.id);
  });
});

/** `n` enqueues of one spec at once, each in its own transaction on its own connection. */
async function racing(n: number, spec: () => Parameters<Platform['client']['enqueueNow']>[0]): Promise<EnqueueResult[]> {
  const pools = Array.from({ length: n }, () => p.db.newPool(1));
  const clients = await Promise.all(pools.map((pool) => pool.connect()));
  try {
    const results = await Promise.allSettled(
      clients.map(async (c) => {
        await c.query('BEGIN');
        const r = await p.client.enqueue(c, spec());
        await c.query('COMMIT');
        await r.afterCommit();
        return r.jobs[0]!;
      }),
    );
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    return results.map((r) => (r as PromiseFulfilledResult<EnqueueResult>).value);
  } finally {
    for (const c of clients) c.release();
    await Promise.all(pools.map((x) => x.end()));
  }
}
