// Enqueue in the caller's transaction, idempotency keys, and publish-after-commit (DESIGN 6, 7).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { OutboxRelay } from '../../runtime/store/outbox-relay.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { pino } from 'pino';
import { JobClient } from '../../runtime/store/client.ts';
import { isDatabaseUnavailable } from '../../runtime/db/unavailable.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { unknownTypeMessage } from '../support/registered-types.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';

const ledger = (batch: string, extra: Record<string, unknown> = {}) => ({ type: 'ledger.post', payload: { batch, entries: 3, ...extra } });
const messagesFor = (p: Platform, jobId: string) =>
  p.queue.sentLog.filter((m) => {
    const r = parseJobMessage(m.body);
    return r.ok && r.message.jobId === jobId;
  });

describe('enqueue', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform();
  });
  afterAll(() => p.close());

  it('20 concurrent enqueues of one idempotency key make 1 job and 19 duplicates, with no errors', async () => {
    // Each enqueuer is its own connection and transaction, all released at once.
    const pools = Array.from({ length: 20 }, () => p.db.newPool(1));
    const results = await Promise.allSettled(
      pools.map(async (pool) => {
        const c = await pool.connect();
        try {
          await c.query('BEGIN');
          const r = await p.client.enqueue(c, { ...ledger('B-IDEM'), idempotencyKey: 'close-2026-11' });
          await c.query('COMMIT');
          await r.afterCommit();
          return r.jobs[0]!;
        } finally {
          c.release();
        }
      }),
    );
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    const ok = results.map((r) => (r as PromiseFulfilledResult<{ job: { id: string }; duplicate: boolean }>).value);
    expect(ok.filter((r) => !r.duplicate)).toHaveLength(1);
    expect(ok.filter((r) => r.duplicate)).toHaveLength(19);
    expect(new Set(ok.map((r) => r.job.id)).size).toBe(1);
    const { rows } = await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE idempotency_key = 'close-2026-11'");
    expect(rows[0].n).toBe(1);
    expect(messagesFor(p, ok[0]!.job.id)).toHaveLength(1);
    await Promise.all(pools.map((x) => x.end()));
  });

  it('returns the existing job for a key in the same batch, and frees the key of a type without lasting keys once the job has ended', async () => {
    // inventory.cost declares no `idempotency`: its keys are unique among active jobs only (ledger.post's last: lasting-idempotency.test.ts).
    const costing = { type: 'inventory.cost', payload: { store: 'S-SAME', period: '2026-10' } };
    const [a, b] = await p.client.enqueueNow([
      { ...costing, idempotencyKey: 'k-same' },
      { ...costing, idempotencyKey: 'k-same' },
    ]);
    expect(a!.duplicate).toBe(false);
    expect(b!.duplicate).toBe(true);
    expect(b!.job.id).toBe(a!.job.id);
    await p.client.cancel(a!.job.id, 'test');
    const [c] = await p.client.enqueueNow({ ...costing, idempotencyKey: 'k-same' });
    expect(c!.duplicate).toBe(false);
    expect(c!.job.id).not.toBe(a!.job.id);
  });

  it('the same key under another job type is a different job', async () => {
    const [a] = await p.client.enqueueNow({ ...ledger('B-T'), idempotencyKey: 'k-type' });
    const [b] = await p.client.enqueueNow({
      type: 'inventory.cost',
      payload: { store: 'S01', period: '2026-10' },
      idempotencyKey: 'k-type',
    });
    expect(a!.duplicate || b!.duplicate).toBe(false);
  });

  it('a rolled-back transaction leaves no job and sends no message', async () => {
    const c = await p.db.pool.connect();
    let jobId: string;
    try {
      await c.query('BEGIN');
      const r = await p.client.enqueue(c, ledger('B-ROLLBACK'));
      jobId = r.jobs[0]!.job.id;
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    const relay = new OutboxRelay(p.db.pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 });
    await relay.runOnce();
    expect(await p.store.get(jobId)).toBeNull();
    expect(messagesFor(p, jobId)).toHaveLength(0);
    const { rows } = await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [jobId]);
    expect(rows[0].n).toBe(0);
  });

  it('enqueueNow of a batch without keys is all or nothing: a job PostgreSQL refuses leaves none of the batch and sends nothing', async () => {
    const sentBefore = p.queue.sentLog.length;
    // Valid for the handler's schema; jsonb refuses the NUL character, so the statement fails at the database.
    const err = await p.client
      .enqueueNow([ledger('B-ATOMIC-1'), ledger('B-ATOMIC-2'), ledger('B-ATOMIC-\u0000')])
      .catch((e: unknown) => e as { code?: string });
    expect(err).toMatchObject({ code: '22P05' });
    const { rows } = await p.db.pool.query(
      `SELECT (SELECT count(*)::int FROM jobs.job WHERE payload->>'batch' LIKE 'B-ATOMIC-%') AS jobs,
              (SELECT count(*)::int FROM jobs.outbox o WHERE NOT EXISTS (SELECT 1 FROM jobs.job j WHERE j.id = o.job_id)) AS orphans`,
    );
    expect(rows[0]).toEqual({ jobs: 0, orphans: 0 });
    expect(p.queue.sentLog.length).toBe(sentBefore);
    // The same batch without the refused job goes in whole.
    const ok = await p.client.enqueueNow([ledger('B-ATOMIC-1'), ledger('B-ATOMIC-2')]);
    expect(ok.map((r) => r.duplicate)).toEqual([false, false]);
    expect(ok.every((r) => messagesFor(p, r.job.id).length === 1)).toBe(true);
  });

  it("a batch mixing keyed and keyless jobs keeps the request's order in the ids (a concurrency key's jobs start in that order; review: the keyless ones got theirs first)", async () => {
    const [a, b, c] = await p.client.enqueueNow(
      [ledger('B-ORDER-1', {}), ledger('B-ORDER-2'), ledger('B-ORDER-3')].map((spec, i) => ({
        ...spec,
        concurrencyKey: 'order-key',
        ...(i === 0 ? { idempotencyKey: 'order-1' } : {}),
      })),
    );
    expect([a!.job.id < b!.job.id, b!.job.id < c!.job.id]).toEqual([true, true]);
    for (const r of [a, b, c]) await p.store.cancel(r!.job.id, 'cleanup');
  });

  it('a statement the database refused (a read-only standby reached in a failover) is unavailable, not an outcome unknown: nothing was written', async () => {
    const pool = p.db.newPool(1);
    pool.on('connect', (c) => void c.query('SET default_transaction_read_only = on').catch(() => undefined));
    try {
      const client = new JobClient({ pool, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 });
      const err = await client.enqueueNow(ledger('B-READ-ONLY')).catch((e: unknown) => e);
      expect({ name: (err as Error).name, code: (err as { code?: string }).code, unavailable: isDatabaseUnavailable(err) }).toEqual({
        name: 'error',
        code: '25006',
        unavailable: true,
      });
    } finally {
      await pool.end();
    }
  });

  it('a COMMIT that PostgreSQL turned into a ROLLBACK (an error earlier in the transaction): afterCommit publishes nothing', async () => {
    // Review finding: afterCommit sent the message of a job that did not exist; the worker
    // dead-lettered it as unknown-job and the DLQ alarm paged on-call.
    const c = await p.db.pool.connect();
    let jobId: string;
    let afterCommit: () => Promise<void>;
    try {
      await c.query('BEGIN');
      const r = await p.client.enqueue(c, ledger('B-ABORTED'));
      jobId = r.jobs[0]!.job.id;
      afterCommit = r.afterCommit;
      // The ERP's code catches a failed statement and commits anyway.
      await c.query('SELECT 1/0').catch(() => undefined);
      expect((await c.query('COMMIT')).command).toBe('ROLLBACK');
    } finally {
      c.release();
    }
    await afterCommit();
    await p.publisher.flush();
    expect(await p.store.get(jobId)).toBeNull();
    expect(messagesFor(p, jobId)).toHaveLength(0);
  });

  it('a ROLLBACK TO SAVEPOINT past the enqueue: afterCommit publishes the jobs that committed, not the undone one', async () => {
    const c = await p.db.pool.connect();
    let kept: string;
    let undone: string;
    let afters: (() => Promise<void>)[];
    try {
      await c.query('BEGIN');
      const a = await p.client.enqueue(c, ledger('B-KEPT'));
      await c.query('SAVEPOINT s');
      const b = await p.client.enqueue(c, ledger('B-UNDONE'));
      await c.query('ROLLBACK TO SAVEPOINT s');
      await c.query('COMMIT');
      kept = a.jobs[0]!.job.id;
      undone = b.jobs[0]!.job.id;
      afters = [a.afterCommit, b.afterCommit];
    } finally {
      c.release();
    }
    for (const after of afters) await after();
    expect(messagesFor(p, kept)).toHaveLength(1);
    expect(messagesFor(p, undone)).toHaveLength(0);
  });

  it('a transaction longer than the relay waits: the relay published the job first, and afterCommit neither says it rolled back nor sends it again', async () => {
    // API review: the outbox row's time is its transaction's start, so a long transaction's row
    // was old at COMMIT; a relay sent it and deleted it, and afterCommit then logged that the
    // job was not in the database.
    const lines: { msg: string }[] = [];
    const log = pino({ level: 'warn' }, { write: (x: string) => void lines.push(JSON.parse(x)) });
    const publisher = new Publisher(p.db.pool, p.queue, log);
    const client = new JobClient({ pool: p.db.pool, registry: p.registry, publisher, defaultMaxAttempts: 3 });
    const c = await p.db.pool.connect();
    let jobId: string;
    let afterCommit: () => Promise<void>;
    try {
      await c.query('BEGIN');
      const r = await client.enqueue(c, ledger('B-LONG'));
      jobId = r.jobs[0]!.job.id;
      afterCommit = r.afterCommit;
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    // The relay's pass between the COMMIT and afterCommit (the row was old enough at once).
    expect(
      await new OutboxRelay(p.db.pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 100 }).runOnce(),
    ).toBeGreaterThan(0);
    await afterCommit();
    await publisher.flush();
    expect(messagesFor(p, jobId)).toHaveLength(1);
    expect(lines).toEqual([]);
  });

  it('batches that share idempotency keys in opposite orders, enqueued at the same time, never deadlock', async () => {
    // Review finding: rows were inserted in request order, so each batch could wait on a key the
    // other had inserted first; PostgreSQL failed one with 40P01 and the API answered 500.
    for (let round = 0; round < 15; round++) {
      const keys = Array.from({ length: 50 }, (_, i) => `DL-${round}-${i}`);
      const batch = (ks: string[]) => ks.map((k) => ({ ...ledger(k), idempotencyKey: k }));
      const [a, b] = await Promise.all([p.client.enqueueNow(batch(keys)), p.client.enqueueNow(batch([...keys].reverse()))]);
      // One job per key; each batch's answers in its own order.
      expect(a.map((r) => r.job.idempotencyKey)).toEqual(keys);
      expect(b.map((r) => r.job.idempotencyKey)).toEqual([...keys].reverse());
      const jobs = new Map(a.map((r) => [r.job.idempotencyKey, r.job.id]));
      for (const r of b) expect(r.job.id).toBe(jobs.get(r.job.idempotencyKey));
    }
  });

  it('a request does not wait on an SQS that does not answer: publish returns after its wait, the send goes on, and what it sent is cleaned up', async () => {
    // Review finding: an enqueue request waited for SQS's retries (30 s a call, 5 tries) after
    // its job had committed: a gateway timeout, and a caller that retried made a second job.
    let answer: () => void = () => undefined;
    const sent: unknown[] = [];
    const hanging = {
      ...p.queue,
      send: (messages: unknown[]) =>
        new Promise<void>((resolve) => {
          answer = () => {
            sent.push(...messages);
            resolve();
          };
        }),
    };
    const { Publisher } = await import('../../runtime/store/outbox.ts');
    const publisher = new Publisher(p.db.pool, hanging as never, silentLogger, { waitMs: 50 });
    const [r] = await p.client.store.insertMany(p.db.pool, [
      { type: 'ledger.post', payload: { batch: 'B-HANG', entries: 1 }, maxAttempts: 3 },
    ]);
    // Returns though the send has not answered; the outbox row stays meanwhile.
    await publisher.publish([{ outboxId: r!.outboxId!, jobId: r!.job.id, lane: 'bulk' }]);
    expect(sent).toHaveLength(0);
    const outbox = async () =>
      (await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [r!.job.id])).rows[0].n as number;
    expect(await outbox()).toBe(1);
    // SQS answers later: the row of what was sent is deleted (drain waits for the send, as a stop does).
    answer();
    await publisher.drain();
    expect(sent).toHaveLength(1);
    expect(await outbox()).toBe(0);
  });

  it('a job committed but never published (the process died after COMMIT) is published by the relay', async () => {
    const c = await p.db.pool.connect();
    let jobId: string;
    try {
      await c.query('BEGIN');
      const r = await p.client.enqueue(c, ledger('B-CRASH'));
      jobId = r.jobs[0]!.job.id;
      await c.query('COMMIT');
      // "crash": afterCommit() is never called.
    } finally {
      c.release();
    }
    expect(messagesFor(p, jobId)).toHaveLength(0);
    const relay = new OutboxRelay(p.db.pool, p.queue, silentLogger, { minAgeSeconds: 0.2, intervalMs: 100, batchSize: 100 });
    relay.start();
    try {
      const deadline = Date.now() + 5000;
      while (messagesFor(p, jobId).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    } finally {
      await relay.stop();
    }
    expect(messagesFor(p, jobId)).toHaveLength(1);
    const { rows } = await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [jobId]);
    expect(rows[0].n).toBe(0);
  });

  it('two relays racing over the same outbox publish each row once', async () => {
    const c = await p.db.pool.connect();
    const ids: string[] = [];
    try {
      await c.query('BEGIN');
      const r = await p.client.enqueue(
        c,
        Array.from({ length: 30 }, (_, i) => ledger(`B-RACE-${i}`)),
      );
      ids.push(...r.jobs.map((j) => j.job.id));
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    const relays = [p.db.newPool(2), p.db.newPool(2)].map(
      (pool) => new OutboxRelay(pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 1000, batchSize: 7 }),
    );
    const sent = await Promise.all(relays.map((r) => r.runOnce()));
    expect(sent[0]! + sent[1]!).toBe(30);
    for (const id of ids) expect(messagesFor(p, id)).toHaveLength(1);
  });

  it('a publish that fails leaves the outbox row for the relay', async () => {
    const failing = {
      ...p.queue,
      send: async () => {
        throw new Error('SQS unavailable');
      },
    };
    const { Publisher } = await import('../../runtime/store/outbox.ts');
    const publisher = new Publisher(p.db.pool, failing as never, silentLogger);
    const [r] = await p.client.store.insertMany(p.db.pool, [
      { type: 'ledger.post', payload: { batch: 'B-FAIL', entries: 1 }, maxAttempts: 3 },
    ]);
    await publisher.publish([{ outboxId: r!.outboxId!, jobId: r!.job.id, lane: 'bulk' }]);
    await publisher.flush();
    const { rows } = await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.outbox WHERE job_id = $1', [r!.job.id]);
    expect(rows[0].n).toBe(1);
  });

  it.each([
    [
      { type: 'ledger.postt', payload: { batch: 'x', entries: 1 } },
      'type',
      unknownTypeMessage('ledger.postt', defaultRegistry()), // createPlatform's registry, whatever it holds
    ],
    [{ type: 'ledger.post', payload: { batch: 'x' } }, 'payload.entries', /is required/],
    [{ type: 'ledger.post', payload: { batch: 'x', entries: -1 } }, 'payload.entries', /whole number from 1 to 100000 \(got -1\)/],
    [{ type: 'ledger.post', payload: { batch: 'x', entries: 1, colour: 'red' } }, 'payload.colour', /not a field/],
    [{ type: 'ledger.post', payload: { batch: 'x', entries: 1 }, maxAttempts: 0 }, 'maxAttempts', /1 to 100/],
    [{ type: 'ledger.post', payload: { batch: 'x', entries: 1 }, runAt: 'tomorrow' }, 'runAt', /ISO 8601/],
    [{ type: 'inventory.cost', payload: { store: 'S1', period: '2026-13' } }, 'payload.period', /YYYY-MM/],
    [{ type: 'ledger.post', payload: { batch: 'x'.repeat(300_000), entries: 1 } }, 'payload', /limit is 262144 bytes/],
  ])('refuses bad input (case %#)', async (spec, field, message) => {
    const err = await p.client.enqueueNow(spec as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).field).toBe(field);
    expect((err as ValidationError).message).toMatch(message);
  });

  it('a job due later is published with a delay', async () => {
    const runAt = new Date(Date.now() + 120_000);
    const [r] = await p.client.enqueueNow({ ...ledger('B-LATER'), runAt });
    const [m] = messagesFor(p, r!.job.id);
    expect(m!.delaySeconds).toBeGreaterThanOrEqual(119);
    expect(m!.delaySeconds).toBeLessThanOrEqual(121);
  });
});
