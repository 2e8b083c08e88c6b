// Issue 15, enqueue from any language: jobs.enqueue(...) called by a plain client (as a Java or
// C# ERP, or psql, would) inside its own transaction. Rolled back: nothing exists, nothing is
// published. Committed: the outbox relay publishes it and a worker runs it. Refusals name the
// argument (SQLSTATE 22023, the argument in the error's column field).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../runtime/observability/log.ts';
import { registerJobTypes } from '../../runtime/store/job-types.ts';
import { OutboxRelay } from '../../runtime/store/outbox-relay.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

describe('jobs.enqueue, the SQL function', () => {
  let p: Platform;
  let erp: pg.Client; // the ERP's own connection: no pool, no platform code
  let relay: OutboxRelay;
  beforeAll(async () => {
    p = await createPlatform();
    await registerJobTypes(p.db.pool, p.registry, { maxAttempts: 3 }, 'test');
    erp = new pg.Client({ connectionString: p.db.url });
    erp.on('error', () => undefined);
    await erp.connect();
    relay = new OutboxRelay(p.db.pool, p.queue, silentLogger, { minAgeSeconds: 0, intervalMs: 50, batchSize: 100, quiet: true });
  });
  afterAll(async () => {
    await erp?.end();
    await p?.close();
  });

  const sent = () => p.queue.peek().map((m) => JSON.parse(m.body).jobId as string);
  const refusal = async (sql: string, values: unknown[]) => {
    await erp.query('BEGIN');
    try {
      await erp.query(sql, values);
      return null;
    } catch (err) {
      const e = err as { code: string; column?: string; message: string };
      return { code: e.code, column: e.column, message: e.message };
    } finally {
      await erp.query('ROLLBACK');
    }
  };

  it('rolled back: no job, no outbox row, nothing published; committed: published by the relay and run by a worker', async () => {
    await erp.query('BEGIN');
    const { rows: rolled } = await erp.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "SQL-1", "entries": 2}')`);
    await erp.query('ROLLBACK');
    expect(rolled[0].duplicate).toBe(false);
    expect(await p.store.get(rolled[0].job_id)).toBeNull();
    await relay.runOnce();
    expect(sent()).not.toContain(rolled[0].job_id);

    await erp.query('BEGIN');
    const { rows } = await erp.query(`SELECT * FROM jobs.enqueue(type => 'ledger.post', payload => $1, idempotency_key => 'sql-b-2')`, [
      { batch: 'SQL-2', entries: 2 },
    ]);
    // Not visible, not published, until the ERP's COMMIT.
    await relay.runOnce();
    expect(sent()).not.toContain(rows[0].job_id);
    await erp.query('COMMIT');
    await relay.runOnce();
    expect(sent()).toContain(rows[0].job_id);
    const job = await p.store.get(rows[0].job_id);
    expect(job).toMatchObject({ type: 'ledger.post', state: 'pending', maxAttempts: 3, idempotencyKey: 'sql-b-2' });
    // A time-ordered id (UUID v7), as the TypeScript client makes them.
    expect(rows[0].job_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    p.worker().start();
    await waitFor(async () => (await p.store.get(rows[0].job_id))?.state === 'succeeded', 20_000, 'the SQL-enqueued job ran');
    const { rows: posted } = await p.db.pool.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch = $1', ['SQL-2']);
    expect(posted[0].n).toBe(2);

    // ledger.post keeps its keys after its jobs end: posting SQL-2 again returns the job that posted it.
    const again = await erp.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "SQL-2", "entries": 2}', 'sql-b-2')`);
    expect(again.rows[0]).toEqual({ job_id: rows[0].job_id, duplicate: true });
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM jobs.job WHERE idempotency_key = $1', ['sql-b-2'])).rows[0].n).toBe(1);
  });

  it("a type's keys: unique among active jobs for inventory.cost, for good for ledger.post, as through the TypeScript client", async () => {
    const cost = `SELECT * FROM jobs.enqueue('inventory.cost', '{"store": "S-9", "period": "2026-11"}', 'cost-k')`;
    const first = (await erp.query(cost)).rows[0];
    expect((await erp.query(cost)).rows[0]).toEqual({ job_id: first.job_id, duplicate: true });
    await p.store.cancel(first.job_id, 'test');
    expect((await erp.query(cost)).rows[0].duplicate).toBe(false); // its key is free once the job ended
    // A key the TypeScript client took for ledger.post is the same key here.
    const [viaClient] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'TS-1', entries: 1 },
      idempotencyKey: 'shared-k',
    });
    await p.store.cancel(viaClient!.job.id, 'test');
    const viaSql = await erp.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "TS-1", "entries": 1}', 'shared-k')`);
    expect(viaSql.rows[0]).toEqual({ job_id: viaClient!.job.id, duplicate: true });
    // Concurrent enqueues of one new key on separate connections: one job.
    const racers = await Promise.all(
      Array.from({ length: 8 }, () =>
        p.db.pool.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "R", "entries": 1}', 'race-k')`),
      ),
    );
    expect(new Set(racers.map((r) => r.rows[0].job_id)).size).toBe(1);
    expect(racers.filter((r) => !r.rows[0].duplicate)).toHaveLength(1);
  });

  it("a job's lane: the caller's, else its type's default (bulk)", async () => {
    const bulk = (await erp.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "L-1", "entries": 1}')`)).rows[0];
    const urgent = (await erp.query(`SELECT * FROM jobs.enqueue('ledger.post', '{"batch": "L-2", "entries": 1}', lane => 'urgent')`))
      .rows[0];
    const lanes = await p.db.pool.query(
      'SELECT id, lane FROM jobs.job WHERE id = ANY($1::uuid[]) ORDER BY array_position($1::uuid[], id)',
      [[bulk.job_id, urgent.job_id]],
    );
    expect(lanes.rows.map((r) => r.lane)).toEqual(['bulk', 'urgent']);
  });

  it("ids sort in the order they were made, within one millisecond too (a key's jobs start in id order)", async () => {
    // 300 enqueues in one statement take a few milliseconds: many share one. Made in order n.
    await erp.query('BEGIN');
    const { rows } = await erp.query(
      `SELECT n, e.job_id FROM generate_series(1, 300) AS n,
              LATERAL jobs.enqueue('ledger.post', jsonb_build_object('batch', 'ORD-' || n, 'entries', 1), concurrency_key => 'ord-k') e
        ORDER BY n`,
    );
    await erp.query('COMMIT');
    const ids = rows.map((r) => r.job_id as string);
    expect(ids).toEqual([...ids].sort());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    // The table's default too, and across statements of one transaction.
    await erp.query('BEGIN');
    const made = (await erp.query('SELECT jobs.uuid_v7() AS id FROM generate_series(1, 2000)')).rows.map((r) => r.id);
    const next = (await erp.query('SELECT jobs.uuid_v7() AS id')).rows[0].id;
    await erp.query('COMMIT');
    expect(new Set(made).size).toBe(2000);
    expect(new Set(made.map((id) => id.slice(0, 13))).size).toBeLessThan(2000); // milliseconds shared
    expect([...made, next]).toEqual([...made, next].sort());
    await p.db.pool.query("UPDATE jobs.job SET state = 'cancelled', finished_at = now() WHERE concurrency_key = 'ord-k'");
  });

  it("applies the type's defaults: its attempt cap and its concurrency key's template", async () => {
    const { rows } = await erp.query(`SELECT * FROM jobs.enqueue('inventory.cost', '{"store": "S-12", "period": "2026-11"}')`);
    expect(await p.store.get(rows[0].job_id)).toMatchObject({ concurrencyKey: 'costing:S-12', concurrencyLimit: 1 });
    const own = await erp.query(
      `SELECT * FROM jobs.enqueue('inventory.cost', '{"store": "S-12", "period": "2026-12"}', concurrency_key => 'mine', concurrency_limit => 2, max_attempts => 7)`,
    );
    expect(await p.store.get(own.rows[0].job_id)).toMatchObject({ concurrencyKey: 'mine', concurrencyLimit: 2, maxAttempts: 7 });
  });

  it.each([
    [`SELECT * FROM jobs.enqueue('ledger.postt', '{}')`, [], 'type', /unknown job type 'ledger.postt'; known types: .*ledger\.post/],
    [`SELECT * FROM jobs.enqueue(NULL, '{}')`, [], 'type', /unknown job type null/],
    [`SELECT * FROM jobs.enqueue('ledger.post', '[1, 2]')`, [], 'payload', /must be a JSON object \(got array\)/],
    [`SELECT * FROM jobs.enqueue('ledger.post', $1)`, [{ blob: 'x'.repeat(300_000) }], 'payload', /bytes; the limit is 262144 bytes/],
    [`SELECT * FROM jobs.enqueue('ledger.post', '{}', idempotency_key => '')`, [], 'idempotency_key', /1 to 200 characters/],
    [`SELECT * FROM jobs.enqueue('ledger.post', '{}', max_attempts => 0)`, [], 'max_attempts', /from 1 to 100 \(got 0\)/],
    [`SELECT * FROM jobs.enqueue('ledger.post', '{}', concurrency_limit => 2)`, [], 'concurrency_limit', /give one too/],
    [`SELECT * FROM jobs.enqueue('ledger.post', '{}', lane => 'fast')`, [], 'lane', /must be urgent or bulk \(got 'fast'\)/],
    [
      `SELECT * FROM jobs.enqueue('ledger.post', '{}', idempotency_key => E'a\\x1b[2J')`,
      [],
      'idempotency_key',
      /control characters \(U\+001B at character 2\)/,
    ],
    [
      `SELECT * FROM jobs.enqueue('ledger.post', '{}', concurrency_key => E'x\\ny')`,
      [],
      'concurrency_key',
      /control characters \(U\+000A at character 2\)/,
    ],
    [
      `SELECT * FROM jobs.enqueue('inventory.cost', $1)`,
      [{ store: { id: 1 }, period: '2026-11' }],
      'payload',
      /store is an object, and job type inventory\.cost keys its jobs on it \(costing:\{store\}\): it must be a string, number or boolean/,
    ],
    [
      `SELECT * FROM jobs.enqueue('inventory.cost', $1)`,
      [{ store: 'S\u00851', period: '2026-11' }],
      'payload',
      /store must not contain control characters \(U\+0085 at character 2\), and job type inventory\.cost keys/,
    ],
    [
      `SELECT * FROM jobs.enqueue('inventory.cost', $1)`,
      [{ store: 's'.repeat(200), period: '2026-11' }],
      'payload',
      /makes the key of job type inventory\.cost \(costing:\{store\}\) 208 characters long; the limit is 200/,
    ],
    [
      `SELECT * FROM jobs.enqueue('inventory.cost', '{"period": "2026-11"}')`,
      [],
      'payload',
      /has no store, which job type inventory\.cost keys its jobs on \(costing:\{store\}\)/,
    ],
  ])('%s is refused naming %s', async (sql, values, column, message) => {
    const r = await refusal(sql, values);
    expect(r).toMatchObject({ code: '22023', column });
    expect(r!.message).toMatch(message);
    expect(r!.message.startsWith(`jobs.enqueue: ${column}: `)).toBe(true);
  });

  it('a type whose default key is a TypeScript function asks SQL callers for the key', async () => {
    await p.db.pool.query(
      "INSERT INTO jobs.job_type (type, default_max_attempts, key_from_code, registered_by) VALUES ('keyed.in.code', 3, true, 'test')",
    );
    const r = await refusal(`SELECT * FROM jobs.enqueue('keyed.in.code', '{}')`, []);
    expect(r).toMatchObject({ code: '22023', column: 'concurrency_key' });
    expect(r!.message).toMatch(/derives its key from the payload in its TypeScript definition/);
  });
});
