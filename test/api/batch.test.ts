// Issue 15, POST /v1/jobs/batch: up to 500 jobs in one request, all or none, each checked by the
// rules of POST /v1/jobs (the item's index in the field's name), each with its duplicate flag.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BATCH_JOBS } from '../../runtime/http/job-routes.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { call, startServer, type TestServer } from './support.ts';

const ledger = (batch: string, extra: Record<string, unknown> = {}) => ({ type: 'ledger.post', payload: { batch, entries: 3 }, ...extra });

describe('POST /v1/jobs/batch', () => {
  let p: Platform;
  let api: TestServer;
  beforeAll(async () => {
    p = await createPlatform();
    api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger });
  });
  afterAll(async () => {
    await api?.close();
    await p?.close();
  });
  const count = async () => (await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.job')).rows[0].n as number;
  const sentIds = () => p.queue.peek().map((m) => (parseJobMessage(m.body) as { message: { jobId: string } }).message.jobId);

  it(`${MAX_BATCH_JOBS} jobs in one request: 201, each job in order with its flag, one message each`, async () => {
    const jobs = Array.from({ length: MAX_BATCH_JOBS }, (_, i) => ledger(`BATCH-${i}`, i === 7 ? { idempotencyKey: 'batch-k' } : {}));
    const r = await call(api.url, 'POST', '/v1/jobs/batch', { json: { jobs } });
    expect(r.status).toBe(201);
    expect(r.body.jobs).toHaveLength(MAX_BATCH_JOBS);
    expect(r.body.jobs.map((j: { payload: { batch: string } }) => j.payload.batch)).toEqual(jobs.map((j) => j.payload.batch));
    expect(r.body.jobs.every((j: { duplicate: boolean; state: string }) => j.duplicate === false && j.state === 'pending')).toBe(true);
    const sent = new Set(sentIds());
    expect(r.body.jobs.every((j: { id: string }) => sent.has(j.id))).toBe(true);

    // Again with the key, beside a new job and a second copy of itself: the duplicates name the first job.
    const again = await call(api.url, 'POST', '/v1/jobs/batch', {
      json: { jobs: [ledger('X', { idempotencyKey: 'batch-k' }), ledger('NEW'), ledger('X', { idempotencyKey: 'batch-k' })] },
    });
    expect(again.status).toBe(201);
    expect(again.body.jobs.map((j: { duplicate: boolean }) => j.duplicate)).toEqual([true, false, true]);
    expect(again.body.jobs[0].id).toBe(r.body.jobs[7].id);
    expect(again.body.jobs[2].id).toBe(r.body.jobs[7].id);
    // Only duplicates: 200, nothing new.
    const dup = await call(api.url, 'POST', '/v1/jobs/batch', { json: { jobs: [ledger('X', { idempotencyKey: 'batch-k' })] } });
    expect(dup.status).toBe(200);
    expect(dup.body.jobs[0]).toMatchObject({ id: r.body.jobs[7].id, duplicate: true });
  });

  it('one bad job refuses the whole batch, naming its index and field; nothing is enqueued or sent', async () => {
    const before = await count();
    const sentBefore = p.queue.peek().length;
    const cases: [unknown, number, string][] = [
      [
        { jobs: [ledger('OK'), ledger('OK2'), { type: 'ledger.post', payload: { batch: 'B', entries: 0 } }] },
        400,
        'jobs.2.payload.entries',
      ],
      [{ jobs: [ledger('OK'), { type: 'nope', payload: {} }] }, 400, 'jobs.1.type'],
      [{ jobs: [ledger('OK'), { ...ledger('B'), idempotency_key: 'k' }] }, 400, 'jobs.1.idempotency_key'],
      [{ jobs: [] }, 400, 'jobs'],
      [{ jobs: Array.from({ length: MAX_BATCH_JOBS + 1 }, (_, i) => ledger(`B${i}`)) }, 400, 'jobs'],
      [{ jobs: [ledger('OK')], extra: 1 }, 400, 'extra'],
      [[ledger('OK')], 400, 'body'],
    ];
    for (const [json, status, field] of cases) {
      const r = await call(api.url, 'POST', '/v1/jobs/batch', { json });
      expect({ field, status: r.status, named: r.body.error?.field ?? r.body.error?.message }).toMatchObject({
        field,
        status,
        named: expect.stringContaining(field),
      });
    }
    const big = await call(api.url, 'POST', '/v1/jobs/batch', {
      json: { jobs: [ledger('x'.repeat(100), { payload: { blob: 'x'.repeat(5_000_000) } })] },
    });
    expect(big.status).toBe(413);
    expect(big.body.error.message).toMatch(/split it/);
    expect(await count()).toBe(before);
    expect(p.queue.peek()).toHaveLength(sentBefore);
  });

  it('all or none: a batch whose transaction fails leaves no job', async () => {
    const before = await count();
    // A constraint only the database checks fails the one INSERT of the batch: nothing of it stays.
    await p.db.pool.query(
      "ALTER TABLE jobs.job ADD CONSTRAINT test_no_poison CHECK (payload->>'batch' IS DISTINCT FROM 'POISON') NOT VALID",
    );
    try {
      const r = await call(api.url, 'POST', '/v1/jobs/batch', { json: { jobs: [ledger('FINE-1'), ledger('POISON'), ledger('FINE-2')] } });
      expect(r.status).toBe(500);
    } finally {
      await p.db.pool.query('ALTER TABLE jobs.job DROP CONSTRAINT test_no_poison');
    }
    expect(await count()).toBe(before);
  });
});
