// Dead jobs against a real PostgreSQL: what the dead-job statements do and refuse (runtime/oncall/sql.ts),
// and a redriven job running again through a worker. Redrive: dead → pending with a fresh attempt
// budget, the fencing token still growing, re-published through the outbox, recorded with who
// asked; never a succeeded, running, pending or cancelled job; one winner when two operators race.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NonRetryableError } from '../../runtime/domain/errors.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { pause } from '../../runtime/handlers/validate.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { listPoisonMessages } from '../../runtime/store/poison.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

const registry = new JobRegistry([
  ledgerPost,
  defineJob<{ n?: number }, null>({
    type: 'test.fatal',
    description: 'fails for good',
    parse: (p) => p as { n?: number },
    async run() {
      throw new NonRetryableError('period 2026-10 is closed for posting');
    },
  }),
  defineJob<Record<string, never>, null>({
    type: 'test.block',
    description: 'runs until aborted',
    parse: () => ({}),
    async run(_p, ctx) {
      await pause(60_000, ctx.signal);
      return null;
    },
  }),
]);

let p: Platform;
let dead: DeadJobService;
beforeAll(async () => {
  p = await createPlatform({ registry });
  dead = new DeadJobService(p.db.pool, p.publisher);
});
afterAll(() => p.close());

/** A dead job, made the way a worker makes one: claimed, then failed non-retryably (fenced). */
async function deadJob(type = 'test.fatal', extra: { idempotencyKey?: string; maxAttempts?: number; lane?: 'urgent' | 'bulk' } = {}) {
  const [r] = await p.client.enqueueNow({ type, payload: type === 'ledger.post' ? { batch: 'DEAD', entries: 1 } : {}, ...extra });
  const [claimed] = await p.store.claim([r!.job.id], 'worker-a', 30);
  const after = await p.store.fail(
    { id: claimed!.id, attempt: claimed!.attempt },
    { name: 'Error', message: `boom ${claimed!.id}`, retryable: false },
    0,
    true,
  );
  expect(after!.state).toBe('dead');
  return after!;
}
const messagesFor = (id: string) =>
  p.queue
    .peek()
    .filter((m) => parseJobMessage(m.body).ok && (parseJobMessage(m.body) as { message: { jobId: string } }).message.jobId === id);

describe('dead jobs', () => {
  it('lists dead jobs newest death first with their reason, filtered by type and time, paged', async () => {
    const t0 = new Date();
    const a = await deadJob();
    const b = await deadJob();
    const c = await deadJob('ledger.post');
    const page1 = await dead.list({ limit: 2, since: t0 });
    expect(page1.jobs.map((j) => j.id)).toEqual([c.id, b.id]);
    expect(page1.jobs[0]!.dead!.deadAt).toBeInstanceOf(Date);
    const page2 = await dead.list({ limit: 2, since: t0, cursor: page1.nextCursor! });
    expect(page2.jobs.map((j) => j.id)).toEqual([a.id]);
    expect(page2.nextCursor).toBeNull();
    const fatal = await dead.list({ limit: 10, type: 'test.fatal', since: t0 });
    expect(fatal.jobs.map((j) => j.id)).toEqual([b.id, a.id]);
    expect(fatal.jobs[0]!.lastError).toMatchObject({ message: `boom ${b.id}` });
    expect(fatal.jobs[0]!.attemptLog.at(-1)).toMatchObject({ outcome: 'dead', owner: 'worker-a' });
    expect((await dead.list({ limit: 10, until: t0 })).jobs.map((j) => j.id)).not.toContain(a.id);
  });

  it('redrive: dead → pending, fresh budget, attempt (the fencing token) unchanged until the next claim, outbox row, recorded with who and why', async () => {
    const job = await deadJob();
    const before = await p.queue.peek().length;
    const r = await dead.redrive({ ids: [job.id], by: 'alice', reason: 'period reopened' });
    expect(r.skipped).toEqual([]);
    const [j] = r.jobs;
    expect(j).toMatchObject({ id: job.id, state: 'pending', attempt: 1, releases: 1, maxAttempts: job.maxAttempts, finishedAt: null });
    expect(j!.attemptLog.at(-1)).toMatchObject({ outcome: 'redriven', by: 'alice', attempt: 1 });
    expect(j!.attemptLog.at(-1)!.message).toMatch(/redriven by alice: period reopened \(1 attempt\(s\) used; fresh budget of \d+\)/);
    // Re-published: a message for it (after COMMIT), and no outbox row left once published.
    await waitFor(() => messagesFor(job.id).length > 0, 2000, 'message published');
    expect(p.queue.peek().length).toBeGreaterThan(before);
    await p.publisher.flush();
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [job.id])).rows[0].n).toBe(0);
    // Gone from the dead listing, recorded in the audit trail.
    expect((await dead.list({ limit: 100 })).jobs.map((x) => x.id)).not.toContain(job.id);
    const shown = await dead.get(job.id);
    expect(shown!.actions).toMatchObject([
      { action: 'job-redrive', by: 'alice', reason: 'period reopened', detail: { attemptsUsedBefore: 1, attempt: 1 } },
    ]);
    expect(shown!.job.dead).toBeNull();
    // The next claim is a new token: attempt 2, and it counts as the first of the fresh budget.
    const [claimed] = await p.store.claim([job.id], 'worker-b', 30);
    expect(claimed).toMatchObject({ attempt: 2, releases: 1 });
    // A worker still holding attempt 1 is refused.
    expect(await p.store.renewLeases([{ id: job.id, attempt: 1 }], 30)).toEqual(new Set());
    await p.store.cancel(job.id, 'test cleanup');
  });

  it('redrive with a new budget, from scratch: max_attempts replaced, checkpoint and progress dropped', async () => {
    const job = await deadJob();
    await p.db.pool.query(`UPDATE jobs.job SET checkpoint = '{"next": 3}', progress = '{"fraction": 0.5}' WHERE id = $1`, [job.id]);
    const r = await dead.redrive({ ids: [job.id], by: 'bob', maxAttempts: 1, fromScratch: true });
    expect(r.jobs[0]).toMatchObject({ maxAttempts: 1, checkpoint: null, progress: null, state: 'pending' });
    const kept = await deadJob();
    await p.db.pool.query(`UPDATE jobs.job SET checkpoint = '{"next": 3}' WHERE id = $1`, [kept.id]);
    expect((await dead.redrive({ ids: [kept.id], by: 'bob' })).jobs[0]!.checkpoint).toEqual({ next: 3 });
    await p.store.cancel(job.id, 'cleanup');
    await p.store.cancel(kept.id, 'cleanup');
  });

  it('a probe redrive (--max-attempts 1) does not stick: a plain redrive after it gives back the budget the job had', async () => {
    const job = await deadJob('test.fatal', { maxAttempts: 4 });
    const probe = await dead.redrive({ ids: [job.id], by: 'oncall', reason: 'probe', maxAttempts: 1 });
    expect(probe.jobs[0]).toMatchObject({ maxAttempts: 1 });
    // The probe's attempt fails too (a worker would): dead again on its single attempt.
    const [claimed] = await p.store.claim([job.id], 'worker-b', 30);
    expect(
      (await p.store.fail(
        { id: job.id, attempt: claimed!.attempt },
        { name: 'Error', message: 'still broken', retryable: true },
        0,
        false,
      ))!.state,
    ).toBe('dead');
    const plain = await dead.redrive({ ids: [job.id], by: 'oncall', reason: 'fixed' });
    expect(plain.jobs[0]).toMatchObject({ maxAttempts: 4, state: 'pending' });
    expect(plain.jobs[0]!.attemptLog.at(-1)!.message).toMatch(/fresh budget of 4, the budget it had before a redrive overrode it\)$/);
    // A second probe and another plain redrive: still the budget it was enqueued with.
    const [again] = await p.store.claim([job.id], 'worker-c', 30);
    await p.store.fail({ id: job.id, attempt: again!.attempt }, { name: 'Error', message: 'x', retryable: false }, 0, true);
    await dead.redrive({ ids: [job.id], by: 'oncall', maxAttempts: 2 });
    const [third] = await p.store.claim([job.id], 'worker-d', 30);
    await p.store.fail({ id: job.id, attempt: third!.attempt }, { name: 'Error', message: 'x', retryable: false }, 0, true);
    expect((await dead.redrive({ ids: [job.id], by: 'oncall' })).jobs[0]).toMatchObject({ maxAttempts: 4 });
    await p.store.cancel(job.id, 'cleanup');
  });

  it('refuses to redrive a succeeded, running, pending, cancelled or unknown job, and says why; nothing changes', async () => {
    const [s] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'OK', entries: 1 } });
    const [c1] = await p.store.claim([s!.job.id], 'w', 30);
    const tx = await p.db.pool.connect();
    await tx.query('BEGIN');
    expect(await p.store.complete(tx, { id: c1!.id, attempt: c1!.attempt }, { ok: true })).toBe(true);
    await tx.query('COMMIT');
    tx.release();
    const [running] = await p.client.enqueueNow({ type: 'test.block', payload: {} });
    await p.store.claim([running!.job.id], 'w', 30);
    const [pending] = await p.client.enqueueNow({ type: 'test.block', payload: {} });
    const [cancelled] = await p.client.enqueueNow({ type: 'test.block', payload: {} });
    await p.store.cancel(cancelled!.job.id, 'carol');
    const unknown = '00000000-0000-4000-8000-000000000001';
    const ids = [s!.job.id, running!.job.id, pending!.job.id, cancelled!.job.id, unknown];
    const before = await p.db.pool.query('SELECT id, state, attempt, releases, attempt_log FROM jobs.job WHERE id = ANY($1) ORDER BY id', [
      ids,
    ]);
    const r = await dead.redrive({ ids, by: 'mallory' });
    expect(r.jobs).toEqual([]);
    const why = Object.fromEntries(r.skipped.map((x) => [x.id, x]));
    expect(why[s!.job.id]).toMatchObject({
      state: 'succeeded',
      reason: expect.stringMatching(/job succeeded at .*: redrive never touches a succeeded job/),
    });
    expect(why[running!.job.id]).toMatchObject({ state: 'running', reason: expect.stringMatching(/never touches a running job/) });
    expect(why[pending!.job.id]).toMatchObject({ state: 'pending' });
    expect(why[cancelled!.job.id]).toMatchObject({ state: 'cancelled', reason: expect.stringMatching(/cancelled by carol/) });
    expect(why[unknown]).toMatchObject({ state: null, reason: `no job ${unknown}` });
    const after = await p.db.pool.query('SELECT id, state, attempt, releases, attempt_log FROM jobs.job WHERE id = ANY($1) ORDER BY id', [
      ids,
    ]);
    expect(after.rows).toEqual(before.rows);
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.operator_action WHERE by = 'mallory'")).rows[0].n).toBe(0);
    await p.store.cancel(running!.job.id, 'cleanup');
    await p.store.cancel(pending!.job.id, 'cleanup');
  });

  it('two operators redriving the same dead jobs at once: each job is redriven exactly once', async () => {
    const jobs = await Promise.all(Array.from({ length: 8 }, () => deadJob()));
    const ids = jobs.map((j) => j.id);
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => dead.redrive({ ids, by: `op-${i}` })));
    const redriven = results.flatMap((r) => r.jobs.map((j) => j.id));
    expect(redriven.sort()).toEqual([...ids].sort());
    const actions = await p.db.pool.query("SELECT job_id FROM jobs.operator_action WHERE action = 'job-redrive' AND job_id = ANY($1)", [
      ids,
    ]);
    expect(actions.rowCount).toBe(ids.length);
    const logs = await p.db.pool.query('SELECT attempt_log FROM jobs.job WHERE id = ANY($1)', [ids]);
    for (const r of logs.rows) expect((r.attempt_log as { outcome: string }[]).filter((a) => a.outcome === 'redriven')).toHaveLength(1);
    await Promise.all(ids.map((id) => p.store.cancel(id, 'cleanup')));
  });

  it('a filtered redrive that waits for a discard committing meanwhile leaves the discarded job dead (API review: it redrove it)', async () => {
    const since = new Date();
    const job = await deadJob();
    // A discard under way: its dead_job and job rows locked and updated, not yet committed.
    const alice = await p.db.pool.connect();
    try {
      await alice.query('BEGIN');
      await alice.query('SELECT 1 FROM jobs.dead_job d JOIN jobs.job j ON j.id = d.job_id WHERE d.job_id = $1 FOR UPDATE OF j, d', [
        job.id,
      ]);
      await alice.query(
        "UPDATE jobs.dead_job SET discarded_at = now(), discarded_by = 'alice', discard_reason = 'posted by hand' WHERE job_id = $1",
        [job.id],
      );
      await alice.query('UPDATE jobs.job SET attempt_log = attempt_log WHERE id = $1', [job.id]);
      // Bob's redrive of every dead job of the type (discarded ones left out) waits for the locks...
      const bob = dead.redrive({ type: 'test.fatal', since, by: 'bob' });
      await waitFor(async () => {
        const { rows } = await p.db.pool.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH locked AS%'",
        );
        return rows[0].n > 0;
      });
      // ...and Alice's discard commits first.
      await alice.query('COMMIT');
      const r = await bob;
      expect({ redriven: r.jobs.map((j) => j.id), wereDiscarded: r.wereDiscarded }).toEqual({ redriven: [], wereDiscarded: [] });
    } finally {
      alice.release();
    }
    const { rows } = await p.db.pool.query(
      'SELECT j.state, d.discarded_by FROM jobs.job j LEFT JOIN jobs.dead_job d ON d.job_id = j.id WHERE j.id = $1',
      [job.id],
    );
    expect(rows[0]).toEqual({ state: 'dead', discarded_by: 'alice' });
  });

  it('a redrive of a discarded job the pruner is deleting at that moment waits for it, without a deadlock (diff review)', async () => {
    const job = await deadJob();
    await dead.discard({ ids: [job.id], by: 'erin', reason: 'posted by hand' });
    // The pruner's order: the job row (locked), then its dead_job row (deleted).
    const pruner = await p.db.pool.connect();
    try {
      await pruner.query('BEGIN');
      await pruner.query('SELECT 1 FROM jobs.job WHERE id = $1 FOR UPDATE SKIP LOCKED', [job.id]);
      const redrive = dead.redrive({ ids: [job.id], by: 'frank' }).catch((e: unknown) => e as Error);
      await waitFor(async () => {
        const { rows } = await p.db.pool.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH locked AS%'",
        );
        return rows[0].n > 0;
      });
      await pruner.query('DELETE FROM jobs.dead_job WHERE job_id = $1', [job.id]);
      await pruner.query('COMMIT'); // (the job row's own delete left out: its message would then name no job)
      const r = await redrive;
      expect(r instanceof Error ? r.message : { redriven: r.jobs.length }).toEqual({ redriven: 0 });
    } finally {
      pruner.release();
    }
  });

  it('idempotency keys: a dead job whose key an active job holds is skipped with the reason, not a 500', async () => {
    const old = await deadJob('test.fatal', { idempotencyKey: 'close-2026-10' });
    const [active] = await p.client.enqueueNow({ type: 'test.fatal', payload: {}, idempotencyKey: 'close-2026-10' });
    const r = await dead.redrive({ ids: [old.id], by: 'dave' });
    expect(r.jobs).toEqual([]);
    expect(r.skipped).toEqual([{ id: old.id, type: 'test.fatal', state: 'dead', reason: 'an active job holds its idempotency key' }]);
    await p.store.cancel(active!.job.id, 'cleanup');
    // Two dead jobs with one key: the newest is redriven, the other skipped.
    const older = await deadJob('test.fatal', { idempotencyKey: 'close-2026-11' });
    const newer = await deadJob('test.fatal', { idempotencyKey: 'close-2026-11' });
    const r2 = await dead.redrive({ ids: [older.id, newer.id], by: 'dave' });
    expect(r2.jobs.map((j) => j.id)).toEqual([newer.id]);
    expect(r2.skipped).toMatchObject([{ id: older.id, reason: /newer dead job with the same idempotency key/ }]);
    await p.store.cancel(newer.id, 'cleanup');
  });

  it('discard: with a reason, recorded, left out of the listing; a discard of a non-dead job is refused', async () => {
    const job = await deadJob();
    await expect(dead.discard({ ids: [job.id], by: 'erin', reason: '  ' })).rejects.toThrow(/reason: is required/);
    // A dry run says what it would discard and discards nothing (on-call drill: `--all` had no preview).
    const dry = await dead.discard({ ids: [job.id], by: 'erin', reason: 'duplicate of INV-7, posted by hand', dryRun: true });
    expect(dry).toMatchObject({ dryRun: true, jobs: [{ id: job.id }] });
    expect((await dead.list({ limit: 500 })).jobs.map((j) => j.id)).toContain(job.id);
    const r = await dead.discard({ ids: [job.id], by: 'erin', reason: 'duplicate of INV-7, posted by hand' });
    expect(r.jobs[0]).toMatchObject({
      id: job.id,
      state: 'dead',
      dead: { discardedBy: 'erin', discardReason: 'duplicate of INV-7, posted by hand' },
    });
    expect(r.jobs[0]!.attemptLog.at(-1)).toMatchObject({ outcome: 'discarded', by: 'erin' });
    expect((await dead.list({ limit: 500 })).jobs.map((j) => j.id)).not.toContain(job.id);
    expect((await dead.list({ limit: 500, includeDiscarded: true })).jobs.map((j) => j.id)).toContain(job.id);
    const again = await dead.discard({ ids: [job.id], by: 'erin', reason: 'again' });
    expect(again.skipped[0]!.reason).toMatch(/already discarded by erin/);
    // Discarded jobs stay out of filtered redrives, but an explicit id brings one back.
    expect((await dead.redrive({ type: 'test.fatal', by: 'x', dryRun: true })).wouldRedrive).not.toContain(job.id);
    // ...saying whose discard it overrides (on-call drill: it went ahead without a word).
    const look = await dead.redrive({ ids: [job.id], by: 'frank', dryRun: true });
    expect(look.wereDiscarded).toEqual([{ id: job.id, by: 'erin', reason: 'duplicate of INV-7, posted by hand' }]);
    const back = await dead.redrive({ ids: [job.id], by: 'frank', reason: 'it was not a duplicate after all' });
    expect(back.jobs[0]).toMatchObject({ state: 'pending' });
    expect(back.wereDiscarded).toEqual([{ id: job.id, by: 'erin', reason: 'duplicate of INV-7, posted by hand' }]);
    await p.store.cancel(job.id, 'cleanup');
  });

  it("by lane: the urgent DLQ's alarm lists, redrives and discards the urgent lane's dead jobs only (on-call drill: step 1 could not tell them from the bulk backlog's)", async () => {
    const since = new Date();
    const urgent = await Promise.all([deadJob('test.fatal', { lane: 'urgent' }), deadJob('test.fatal', { lane: 'urgent' })]);
    const bulk = await deadJob('test.fatal', { lane: 'bulk' });
    const listed = await dead.list({ lane: 'urgent', since, limit: 50 });
    expect(listed.jobs.map((j) => j.id).sort()).toEqual(urgent.map((j) => j.id).sort());
    expect((await dead.list({ lane: 'bulk', since, limit: 50 })).jobs.map((j) => j.id)).toEqual([bulk.id]);
    // A lane is a scope of its own, as a type is.
    const look = await dead.redrive({ lane: 'urgent', since, by: 'oncall', dryRun: true });
    expect(look.wouldRedrive.sort()).toEqual(urgent.map((j) => j.id).sort());
    const back = await dead.redrive({ lane: 'urgent', since, by: 'oncall', reason: 'urgent lane fixed' });
    expect(back.jobs.map((j) => j.id).sort()).toEqual(urgent.map((j) => j.id).sort());
    expect((await p.store.get(bulk.id))!.state).toBe('dead');
    await expect(dead.redrive({ ids: [bulk.id], lane: 'bulk', by: 'x' })).rejects.toThrow(/not both/);
    const gone = await dead.discard({ lane: 'bulk', since, by: 'oncall', reason: 'posted by hand' });
    expect(gone.jobs.map((j) => j.id)).toEqual([bulk.id]);
    for (const j of urgent) await p.store.cancel(j.id, 'cleanup');
  });

  it('a filtered redrive needs a scope, a dry run changes nothing, and --all walks every batch', async () => {
    await expect(dead.redrive({ by: 'x' })).rejects.toThrow(/redrive needs job ids, a type, a lane, a time range/);
    await expect(dead.redrive({ ids: [], by: 'x' })).rejects.toThrow(/at least one job id/);
    await expect(dead.redrive({ ids: ['00000000-0000-4000-8000-000000000001'], type: 't', by: 'x' })).rejects.toThrow(/not both/);
    await expect(dead.redrive({ all: true, by: 'x', maxAttempts: 0 })).rejects.toThrow(/maxAttempts/);
    const since = new Date();
    const jobs = await Promise.all(Array.from({ length: 5 }, () => deadJob()));
    const dry = await dead.redrive({ since, by: 'x', dryRun: true });
    expect(dry.wouldRedrive.sort()).toEqual(jobs.map((j) => j.id).sort());
    expect((await p.store.getMany(jobs.map((j) => j.id))).get(jobs[0]!.id)!.state).toBe('dead');
    const all = await dead.redrive({ all: true, by: 'grace' });
    expect(all.jobs.map((j) => j.id)).toEqual(expect.arrayContaining(jobs.map((j) => j.id)));
    expect((await dead.list({ limit: 10 })).jobs).toEqual([]);
    await Promise.all(all.jobs.map((j) => p.store.cancel(j.id, 'cleanup')));
  });
});

describe('through a worker', () => {
  it('a job that died of a handler bug runs again after redrive and succeeds, its effects once', async () => {
    const [r] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'REDRIVE-1', entries: 3, failAttempts: 2 },
      maxAttempts: 2,
    });
    const w = p.worker();
    w.start();
    await waitFor(async () => (await p.store.get(r!.job.id))!.state === 'dead', 10_000, 'dead');
    const report = await dead.redrive({ ids: [r!.job.id], by: 'oncall' });
    expect(report.jobs).toHaveLength(1);
    const done = await waitFor(
      async () => {
        const j = await p.store.get(r!.job.id);
        return j!.state === 'succeeded' ? j : null;
      },
      10_000,
      'succeeded after redrive',
    );
    expect(done.attempt).toBe(3);
    expect(done.attemptLog.map((a) => a.outcome)).toEqual(['retry', 'dead', 'redriven']);
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM ledger_entries WHERE batch = 'REDRIVE-1'")).rows[0].n).toBe(3);
  });

  it('poison messages are recorded with their raw body, once per source message', async () => {
    await p.queue.send([{ body: 'not json {' }, { body: jobMessageBody('11111111-2222-4333-8444-555555555555', 'ledger.post') }]);
    p.workers[0]!.start();
    const list = await waitFor(
      async () => {
        const l = await listPoisonMessages(p.db.pool, { limit: 10 });
        return l.messages.length >= 2 ? l : null;
      },
      5000,
      'poison recorded',
    );
    const byReason = Object.fromEntries(list.messages.map((m) => [m.reason, m]));
    expect(byReason['unparseable-body']).toMatchObject({
      body: 'not json {',
      detail: 'body is not JSON',
      workerId: p.workers[0]!.workerId,
      jobId: null,
    });
    expect(byReason['unknown-job']).toMatchObject({
      jobId: '11111111-2222-4333-8444-555555555555',
      detail: expect.stringMatching(/no job/),
    });
    expect((await listPoisonMessages(p.db.pool, { limit: 10, reason: 'unknown-job' })).messages).toHaveLength(1);
  });
});
