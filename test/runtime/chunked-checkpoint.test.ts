// Issue 18 §1: chunked work is exactly-once by construction. A handler writes each chunk's rows
// through ctx.db and saves a checkpoint after it; the checkpoint commits those rows with it, in
// the same fenced transaction, so a later attempt resumes from the last checkpoint with exactly
// the rows of the chunks before it. Against the real PostgreSQL and the real worker: a failure,
// a kill and a zombie between chunks each end with every invoice posted exactly once; a
// checkpoint by a worker that lost its lease (it does not know yet) rolls its chunk back.
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Job } from '../../runtime/domain/job.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob, type JobContext } from '../../runtime/handlers/types.ts';
import { JobTransaction } from '../../runtime/worker/job-transaction.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

const INVOICES = 12;
const CHUNK = 3; // four chunks: 1–3, 4–6, 7–9, 10–12

interface Plan {
  /** Attempt → what happens after the rows of the chunk that ends at `afterInvoice`, before its checkpoint. */
  [attempt: number]: { afterInvoice: number; action: 'throw' | 'wait' } | undefined;
}
let plan: Plan = {};
/** Released by the test: a handler waiting at its point goes on. */
let gate: { reached: boolean; open: () => void; opened: Promise<void> };
const outcomes: { attempt: number; error?: string }[] = [];

function newGate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return { reached: false, open, opened };
}

interface Checkpoint {
  next: number;
}

/** Posts invoices 1..INVOICES, CHUNK at a time, one row each, checkpoint per chunk. */
const postInvoices = defineJob<{ run: string }, { posted: number }, Checkpoint>({
  type: 'test.invoices_post',
  description: 'posts invoices in chunks with a checkpoint after each',
  parse: (p) => p as { run: string },
  async run(p, ctx: JobContext<Checkpoint>) {
    // Destructured on purpose: the context's functions are bound (issue 18 §5).
    const { saveCheckpoint, progress } = ctx;
    const { query } = ctx.db;
    try {
      for (let first = ctx.checkpoint?.next ?? 1; first <= INVOICES; first += CHUNK) {
        const last = first + CHUNK - 1;
        await query('INSERT INTO invoice_postings (run, invoice, attempt) SELECT $1, g, $2 FROM generate_series($3::int, $4::int) AS g', [
          p.run,
          ctx.job.attempt,
          first,
          last,
        ]);
        progress(last / INVOICES, `posted to ${last}`);
        const step = plan[ctx.job.attempt];
        if (step?.afterInvoice === last) {
          if (step.action === 'throw') throw new Error(`planned failure after invoice ${last}`);
          gate.reached = true;
          await gate.opened;
        }
        await saveCheckpoint({ next: last + 1 }, { fraction: last / INVOICES });
      }
      outcomes.push({ attempt: ctx.job.attempt });
      return { posted: INVOICES };
    } catch (err) {
      outcomes.push({ attempt: ctx.job.attempt, error: (err as Error).name });
      throw err;
    }
  },
});

let p: Platform;
let other: pg.Pool; // a second connection: sees only what committed
beforeAll(async () => {
  p = await createPlatform({ registry: new JobRegistry([postInvoices]), timings: { maxAttempts: 3, leaseSeconds: 1 } });
  other = p.db.newPool(2);
  await p.db.pool.query('CREATE TABLE invoice_postings (run text NOT NULL, invoice int NOT NULL, attempt int NOT NULL)');
});
afterAll(async () => {
  await other.end();
  await p.close();
});
afterEach(async () => {
  gate.open();
  // Each test starts its own workers: none may claim the next test's job.
  await Promise.all(p.workers.splice(0).map((w) => w.stop(1)));
});
beforeEach(() => {
  plan = {};
  gate = newGate();
  outcomes.length = 0;
});

async function enqueue(run: string): Promise<Job> {
  const [r] = await p.client.enqueueNow({ type: 'test.invoices_post', payload: { run } });
  return r!.job;
}
const job = async (id: string) => (await p.store.get(id))!;
const until = (id: string, state: string, ms = 15_000) =>
  waitFor(async () => ((await job(id)).state === state ? job(id) : null), ms, state);
/** invoice → [attempts that posted it], as committed. */
async function postings(run: string): Promise<Map<number, number[]>> {
  const { rows } = await other.query('SELECT invoice, attempt FROM invoice_postings WHERE run = $1 ORDER BY invoice, attempt', [run]);
  const m = new Map<number, number[]>();
  for (const r of rows) m.set(r.invoice, [...(m.get(r.invoice) ?? []), r.attempt]);
  return m;
}
function expectEachOnce(m: Map<number, number[]>) {
  expect([...m.keys()]).toEqual(Array.from({ length: INVOICES }, (_, i) => i + 1));
  for (const [invoice, attempts] of m) expect({ invoice, attempts: attempts.length }).toEqual({ invoice, attempts: 1 });
}

describe('chunked work: a checkpoint commits the rows of its chunk', () => {
  it('a chunk is visible to others as soon as its checkpoint is saved, not only at completion', async () => {
    plan = { 1: { afterInvoice: 9, action: 'wait' } };
    const j = await enqueue('visible');
    p.worker().start();
    await waitFor(() => gate.reached, 10_000, 'handler at invoice 9');
    // Chunks 1–3 and 4–6 committed with their checkpoints; chunk 7–9 is written but not yet.
    expect([...(await postings('visible')).keys()]).toEqual([1, 2, 3, 4, 5, 6]);
    expect((await job(j.id)).checkpoint).toEqual({ next: 7 });
    gate.open();
    await until(j.id, 'succeeded');
    expectEachOnce(await postings('visible'));
  });

  it('a failure between chunks: the retry resumes after the last checkpoint, every invoice once', async () => {
    plan = { 1: { afterInvoice: 9, action: 'throw' } };
    const j = await enqueue('failure');
    p.worker().start();
    const done = await until(j.id, 'succeeded');
    expect(done.attemptLog.map((a) => a.outcome)).toEqual(['retry']);
    const m = await postings('failure');
    expectEachOnce(m);
    // 1–6 by the first attempt (their checkpoints committed them), 7–12 by the second.
    expect([...m.values()].map((a) => a[0])).toEqual([1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
  });

  it('a worker killed between chunks: another reclaims, resumes after the last checkpoint, every invoice once', async () => {
    plan = { 1: { afterInvoice: 6, action: 'wait' } };
    const j = await enqueue('kill');
    const a = p.worker();
    a.start();
    await waitFor(() => gate.reached, 10_000, 'handler at invoice 6');
    // Killed while the handler waits between chunks: it writes nothing more (its open chunk is
    // rolled back, as PostgreSQL does when a dead process's connection drops).
    const crashed = a.crash();
    gate.open();
    await crashed;
    p.worker().start();
    const done = await until(j.id, 'succeeded');
    expect(done.attempt).toBe(2);
    const m = await postings('kill');
    expectEachOnce(m);
    expect([...m.values()].map((x) => x[0])).toEqual([1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
  });

  it('a zombie between chunks: its checkpoint is refused by the fence and its chunk rolled back; every invoice once', async () => {
    plan = { 1: { afterInvoice: 6, action: 'wait' } };
    const j = await enqueue('zombie');
    // A worker whose heartbeat will not come in time: its lease (1 s) runs out while the handler
    // waits, and it does not know.
    const a = p.worker({ timings: { heartbeatSeconds: 60 } });
    a.start();
    await waitFor(() => gate.reached, 10_000, 'handler at invoice 6');
    p.worker().start(); // reclaims once the lease has expired and the message is back
    const done = await until(j.id, 'succeeded');
    expect(done.attempt).toBeGreaterThanOrEqual(2);
    // The zombie goes on: its checkpoint for 4–6 matches no row (a later attempt owns the job).
    gate.open();
    await waitFor(() => outcomes.some((o) => o.attempt === 1), 10_000, 'zombie ended');
    expect(outcomes.find((o) => o.attempt === 1)).toEqual({ attempt: 1, error: 'LeaseLostError' });
    const m = await postings('zombie');
    expectEachOnce(m);
    // Only chunk 1–3 of the zombie landed (checkpointed before its lease ran out); 4–12 are the
    // reclaiming attempt's.
    expect([...m.values()].map((x) => (x[0] === 1 ? 'zombie' : 'reclaimer'))).toEqual([
      ...Array(3).fill('zombie'),
      ...Array(9).fill('reclaimer'),
    ]);
    expect((await job(j.id)).state).toBe('succeeded');
  });

  it('a handler that never checkpoints keeps one transaction: nothing is visible before completion', async () => {
    const once = defineJob<{ run: string }, { ok: true }>({
      type: 'test.single_tx',
      description: 'writes, waits, completes',
      parse: (x) => x as { run: string },
      async run(x, ctx) {
        await ctx.db.query('INSERT INTO invoice_postings (run, invoice, attempt) VALUES ($1, 1, $2)', [x.run, ctx.job.attempt]);
        gate.reached = true;
        await gate.opened;
        await ctx.db.query('INSERT INTO invoice_postings (run, invoice, attempt) VALUES ($1, 2, $2)', [x.run, ctx.job.attempt]);
        return { ok: true };
      },
    });
    p.registry.register(once);
    const [r] = await p.client.enqueueNow({ type: 'test.single_tx', payload: { run: 'single' } });
    p.worker().start();
    await waitFor(() => gate.reached, 10_000, 'handler waiting');
    expect((await postings('single')).size).toBe(0);
    gate.open();
    await until(r!.job.id, 'succeeded');
    expect([...(await postings('single')).keys()]).toEqual([1, 2]);
  });

  it('a checkpoint by a worker that lost its lease, and does not know it, rolls back its chunk', async () => {
    const [r] = await p.client.enqueueNow({ type: 'test.invoices_post', payload: { run: 'fence' } });
    const [mine] = await p.store.claim([r!.job.id], 'worker-a', 30);
    const token = { id: mine!.id, attempt: mine!.attempt };
    const tx = new JobTransaction(p.db.pool);
    await tx.query('INSERT INTO invoice_postings (run, invoice, attempt) VALUES ($1, 1, 1)', ['fence']);
    expect(await tx.commitChunk((c) => p.store.checkpoint(token, { next: 2 }, null, c))).toBe(true);
    await tx.query('INSERT INTO invoice_postings (run, invoice, attempt) VALUES ($1, 2, 1)', ['fence']);
    // Meanwhile the lease ran out and another worker claimed the job (attempt 2).
    await p.db.pool.query("UPDATE jobs.job SET lease_expires_at = statement_timestamp() - interval '1 second' WHERE id = $1", [token.id]);
    expect((await p.store.claim([token.id], 'worker-b', 30))[0]?.attempt).toBe(2);
    expect(await tx.commitChunk((c) => p.store.checkpoint(token, { next: 3 }, null, c))).toBe(false);
    expect([...(await postings('fence')).keys()]).toEqual([1]);
    expect((await job(token.id)).checkpoint).toEqual({ next: 2 });
    // The transaction is over: the zombie cannot write on.
    await expect(tx.query('SELECT 1')).rejects.toThrow(/has ended/);
  });
});
