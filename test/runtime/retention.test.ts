// Retention (issue 15): the pruner deletes finished jobs past their type's retention in small
// batches, never a job a lasting key still returns, an active job or a dead job on-call has not
// discarded; discarded dead jobs, poison messages and operator actions have their own settings,
// checked at start. Time is simulated by moving a job's timestamps back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiConfigFromEnv } from '../../runtime/apps/api.ts';
import { DEFAULT_RETENTION, retentionFromEnv, type Retention } from '../../runtime/config/retention.ts';
import { ConfigError } from '../../runtime/config/rules.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob, type JobDefinition } from '../../runtime/handlers/types.ts';
import { Pruner } from '../../runtime/maintenance/pruner.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const noop = (def: Partial<JobDefinition<Record<string, never>, null>> & { type: string }) =>
  defineJob<Record<string, never>, null>({ description: def.type, parse: () => ({}), run: async () => null, ...def });
const short = noop({ type: 'test.short', keepFinishedDays: 1 });
// Keys kept five days; the job's own retention (1 day) is shorter, so the key's window decides.
const windowed = noop({ type: 'test.windowed', keepFinishedDays: 1, idempotency: { keepDays: 5 } });

let p: Platform;
beforeAll(async () => {
  const defaults = defaultRegistry();
  p = await createPlatform({ registry: new JobRegistry([...defaults.types().map((t) => defaults.get(t)!), short, windowed]) });
});
afterAll(() => p.close());

const pruner = (opts: { retention?: Partial<Retention>; batchSize?: number; maxBatches?: number } = {}) =>
  new Pruner(p.db.pool, silentLogger, { ...opts, retention: { ...DEFAULT_RETENTION, ...opts.retention } });
const PAYLOADS: Record<string, unknown> = {
  'inventory.cost': { store: 'S01', period: '2026-10' },
  'ledger.post': { batch: 'B', entries: 1 },
};
const enqueue = async (type: string, key?: string) =>
  (await p.client.enqueueNow({ type, payload: PAYLOADS[type] ?? {}, ...(key ? { idempotencyKey: key } : {}) }))[0]!.job.id;
/** Cancelled now: a finished job. */
const finished = async (type: string, key?: string) => {
  const id = await enqueue(type, key);
  await p.client.cancel(id, 'test');
  return id;
};
/** As if `days` more days had passed for this job (its creation, end and next look move back). */
const age = (ids: string[], days: number) =>
  p.db.pool.query(
    `UPDATE jobs.job SET created_at = created_at - $2 * interval '1 day', run_after = run_after - $2 * interval '1 day',
            finished_at = finished_at - $2 * interval '1 day', prune_after = prune_after - $2 * interval '1 day'
      WHERE id = ANY($1::uuid[])`,
    [ids, days],
  );
const exists = async (id: string) => (await p.db.pool.query('SELECT 1 FROM jobs.job WHERE id = $1', [id])).rowCount === 1;
const keyExists = async (type: string, key: string) =>
  (await p.db.pool.query('SELECT 1 FROM jobs.idempotency_key WHERE type = $1 AND key = $2', [type, key])).rowCount === 1;

describe('finished jobs', () => {
  it('are pruned after their retention (the default, or the type’s own), not before', async () => {
    const costing = await finished('inventory.cost');
    const brief = await finished('test.short');
    await age([costing], 29);
    await age([brief], 0.5);
    await pruner().runOnce();
    expect([await exists(costing), await exists(brief)]).toEqual([true, true]);
    await age([costing], 2);
    await age([brief], 1);
    await pruner().runOnce();
    expect([await exists(costing), await exists(brief)]).toEqual([false, false]);
  });

  it('JOBS_KEEP_FINISHED_DAYS of the enqueuer sets the default, as it does the attempt cap', async () => {
    const { rows } = await p.db.pool.query('SELECT keep_days FROM jobs.job WHERE id = $1', [await enqueue('inventory.cost')]);
    expect(rows[0].keep_days).toBe(30);
    expect(apiConfigFromEnv(apiEnv({ JOBS_KEEP_FINISHED_DAYS: '7' })).defaultKeepFinishedDays).toBe(7);
  });

  it('an active job is never pruned, however old, and one that ended late is kept its full time after its end', async () => {
    const pending = await enqueue('test.short');
    await age([pending], 400);
    const late = await enqueue('inventory.cost');
    await age([late], 40); // created 40 days ago …
    await p.client.cancel(late, 'test'); // … ended now
    const counts = await pruner().runOnce();
    expect([await exists(pending), await exists(late)]).toEqual([true, true]);
    expect(counts.postponed).toBeGreaterThanOrEqual(1);
    // Looked at again 30 days after its end, not at every pass.
    const { rows } = await p.db.pool.query(
      "SELECT prune_after - finished_at BETWEEN interval '29 days 23 hours' AND interval '30 days 1 hour' AS ok FROM jobs.job WHERE id = $1",
      [late],
    );
    expect(rows[0].ok).toBe(true);
  });
});

describe('lasting keys', () => {
  it('pruning keeps a job and its key while the key is inside its window, and removes both outside it', async () => {
    const id = await finished('test.windowed', 'win-1');
    await age([id], 4.9);
    await pruner().runOnce();
    expect([await exists(id), await keyExists('test.windowed', 'win-1')]).toEqual([true, true]);
    expect((await p.client.enqueueNow({ type: 'test.windowed', payload: {}, idempotencyKey: 'win-1' }))[0]).toMatchObject({
      duplicate: true,
      job: { id },
    });
    await age([id], 0.2);
    await pruner().runOnce();
    expect([await exists(id), await keyExists('test.windowed', 'win-1')]).toEqual([false, false]);
  });

  it('the key keeps its job even if the job’s own retention says otherwise (the pruner re-checks the key)', async () => {
    const id = await finished('test.windowed', 'win-2');
    // As if the job had been enqueued with a retention shorter than its key's window.
    await p.db.pool.query("UPDATE jobs.job SET keep_days = 1, prune_after = created_at + interval '1 day' WHERE id = $1", [id]);
    await age([id], 3);
    await pruner().runOnce();
    expect([await exists(id), await keyExists('test.windowed', 'win-2')]).toEqual([true, true]);
  });

  it('a key kept forever (ledger.post) keeps its job forever; the key of a job whose window passed and was taken by a new job stays with the new one', async () => {
    const posted = await finished('ledger.post', 'post-forever');
    await age([posted], 3650);
    await pruner().runOnce();
    expect([await exists(posted), await keyExists('ledger.post', 'post-forever')]).toEqual([true, true]);

    const old = await finished('test.windowed', 'win-3');
    await age([old], 6);
    const fresh = (await p.client.enqueueNow({ type: 'test.windowed', payload: {}, idempotencyKey: 'win-3' }))[0]!;
    expect(fresh.duplicate).toBe(false);
    await pruner().runOnce();
    expect(await exists(old)).toBe(false);
    const { rows } = await p.db.pool.query("SELECT job_id FROM jobs.idempotency_key WHERE type = 'test.windowed' AND key = 'win-3'");
    expect(rows).toEqual([{ job_id: fresh.job.id }]);
  });
});

describe('dead jobs', () => {
  const kill = async (id: string) => {
    const [claimed] = await p.store.claim([id], 'worker-a', 30);
    await p.store.fail({ id, attempt: claimed!.attempt }, { name: 'Error', message: 'boom', retryable: false }, 0, true);
  };

  it('stay while on-call has not discarded them; once discarded, JOBS_KEEP_DISCARDED_DEAD_DAYS after the discard, with their dead_job row', async () => {
    const id = await enqueue('test.short');
    await kill(id);
    await age([id], 400);
    await pruner().runOnce();
    expect(await exists(id)).toBe(true);
    // The pass looked and set the next look a day away, not at every pass.
    await p.db.pool.query("UPDATE jobs.job SET prune_after = now() - interval '1 second' WHERE id = $1", [id]);
    await new DeadJobService(p.db.pool, p.publisher).discard({ ids: [id], by: 'ops@example', reason: 'duplicate of INV-7' });
    await p.db.pool.query("UPDATE jobs.dead_job SET discarded_at = now() - interval '9 days' WHERE job_id = $1", [id]);
    await pruner({ retention: { discardedDeadDays: 10 } }).runOnce();
    expect(await exists(id)).toBe(true);
    await p.db.pool.query("UPDATE jobs.job SET prune_after = now() - interval '1 second' WHERE id = $1", [id]);
    await pruner({ retention: { discardedDeadDays: 8 } }).runOnce();
    expect(await exists(id)).toBe(false);
    expect((await p.db.pool.query('SELECT 1 FROM jobs.dead_job WHERE job_id = $1', [id])).rowCount).toBe(0);
  });
});

describe('batches and locks', () => {
  it('prunes in batches, at most maxBatches a pass, and skips a row another transaction holds without waiting for it', async () => {
    await p.db.pool.query("UPDATE jobs.job SET prune_after = 'infinity' WHERE finished_at IS NOT NULL"); // earlier tests' jobs
    const { rows } = await p.db.pool.query(
      `INSERT INTO jobs.job (type, state, finished_at, keep_days, prune_after)
       SELECT 'test.short', 'succeeded', now() - interval '3 days', 1, now() - interval '2 days' FROM generate_series(1, 1201)
       RETURNING id`,
    );
    const held = rows[0].id as string;
    const c = await p.db.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('SELECT 1 FROM jobs.job WHERE id = $1 FOR UPDATE', [held]); // as a redrive would
      expect((await pruner({ batchSize: 500, maxBatches: 1 }).runOnce()).jobs).toBe(500);
      const started = Date.now();
      expect((await pruner({ batchSize: 500 }).runOnce()).jobs).toBe(700);
      expect(Date.now() - started).toBeLessThan(5000);
      expect(await exists(held)).toBe(true);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
    expect((await pruner().runOnce()).jobs).toBe(1);
  });
});

describe('side tables', () => {
  it('poison messages and operator actions older than their settings are pruned, younger ones kept', async () => {
    await p.db.pool.query(
      `INSERT INTO jobs.poison_message (source_message_id, reason, detail, body, recorded_at)
       VALUES ('m-old', 'unparseable-body', 'x', 'x', now() - interval '31 days'), ('m-new', 'unparseable-body', 'x', 'x', now() - interval '29 days')`,
    );
    await p.db.pool.query(
      `INSERT INTO jobs.operator_action (action, by, at)
       VALUES ('job-redrive', 'old', now() - interval '731 days'), ('job-redrive', 'new', now() - interval '729 days')`,
    );
    const counts = await pruner().runOnce();
    expect(counts).toMatchObject({ poisonMessages: 1, operatorActions: 1 });
    const poison = await p.db.pool.query('SELECT source_message_id FROM jobs.poison_message');
    expect(poison.rows).toEqual([{ source_message_id: 'm-new' }]);
    const actions = await p.db.pool.query("SELECT by FROM jobs.operator_action WHERE by IN ('old', 'new')");
    expect(actions.rows).toEqual([{ by: 'new' }]);
  });
});

describe('settings', () => {
  it('default, and a bad value refused at start with the variable and the rule', () => {
    expect(retentionFromEnv({})).toEqual({ finishedDays: 30, discardedDeadDays: 90, poisonDays: 30, operatorActionDays: 730 });
    expect(retentionFromEnv({ JOBS_KEEP_FINISHED_DAYS: '7', JOBS_KEEP_OPERATOR_ACTIONS_DAYS: '3650' })).toMatchObject({
      finishedDays: 7,
      operatorActionDays: 3650,
    });
    const refused = (env: Record<string, string>) => {
      try {
        retentionFromEnv(env);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as ConfigError).message;
      }
      throw new Error(`accepted ${JSON.stringify(env)}`);
    };
    expect(refused({ JOBS_KEEP_FINISHED_DAYS: '0' })).toMatch(
      /JOBS_KEEP_FINISHED_DAYS = "0" must be a whole number of days from 1 to 36500/,
    );
    expect(refused({ JOBS_KEEP_FINISHED_DAYS: '1.5' })).toMatch(/JOBS_KEEP_FINISHED_DAYS = "1.5" must be a whole number/);
    expect(refused({ JOBS_KEEP_POISON_DAYS: '7' })).toMatch(
      /JOBS_KEEP_POISON_DAYS = "7" must be a whole number of days from 14 to 36500 \(the DLQ may hold a poison message up to 14 days/,
    );
    expect(refused({ JOBS_KEEP_DISCARDED_DEAD_DAYS: 'soon' })).toMatch(/JOBS_KEEP_DISCARDED_DEAD_DAYS = "soon"/);
    expect(refused({ JOBS_KEEP_OPERATOR_ACTIONS_DAYS: '7' })).toMatch(/JOBS_KEEP_OPERATOR_ACTIONS_DAYS = "7" .* from 30 /);
    expect(() => apiConfigFromEnv(apiEnv({ JOBS_KEEP_FINISHED_DAYS: '-1' }))).toThrow(/JOBS_KEEP_FINISHED_DAYS = "-1"/);
  });

  it('a job type’s own retention is checked when it is registered', () => {
    expect(() => new JobRegistry([noop({ type: 'test.bad', keepFinishedDays: 0 })])).toThrow(
      /job type "test.bad": keepFinishedDays must be a whole number of days from 1 to 36500 \(got 0\)/,
    );
    expect(() => new JobRegistry([noop({ type: 'test.bad', idempotency: { keepDays: 2.5 } })])).toThrow(
      /job type "test.bad": idempotency.keepDays must be a whole number of days from 1 to 36500 \(got 2.5\)/,
    );
    expect(() => new JobRegistry([noop({ type: 'test.bad', idempotency: { keep: 'always' } as never })])).toThrow(
      /idempotency must be \{ keep: 'forever' \} or \{ keepDays: N \}/,
    );
  });
});

function apiEnv(extra: Record<string, string>): Record<string, string> {
  return {
    DATABASE_URL: 'postgres://u:p@localhost:5432/db',
    JOBS_QUEUE_URL: 'http://localhost:4566/000000000000/jobs',
    AWS_REGION: 'eu-west-1',
    ...extra,
  };
}
