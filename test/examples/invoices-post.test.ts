// The README's handler example (test/examples/invoices-post.ts, the same text) does what the
// README says: every invoice of the batch posted once, a chunk at a time, and an attempt that
// fails between chunks resumes after the last checkpoint without posting anything twice.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';
import { postInvoices } from './invoices-post.ts';

let p: Platform;
beforeAll(async () => {
  // An empty folder for the ERP's migrations, not migrations/app: the ERP's own may already make
  // erp.invoice (the README's "Your tables" does), and these tables, made below, stand in for them.
  const appDir = await mkdtemp(join(tmpdir(), 'no-app-migrations-'));
  p = await createPlatform({ registry: new JobRegistry([postInvoices]), timings: { maxAttempts: 5 }, appDir });
  // The erp schema comes with the migrations (README "Your tables").
  await p.db.pool.query(`
    CREATE TABLE erp.invoice (id bigint PRIMARY KEY, batch text NOT NULL, total numeric NOT NULL, posted_at timestamptz);
    CREATE TABLE erp.ledger_line (invoice_id bigint NOT NULL REFERENCES erp.invoice, amount numeric NOT NULL);
    INSERT INTO erp.invoice (id, batch, total) SELECT g, 'B-11', g * 10 FROM generate_series(1, 250) AS g;
    -- The third chunk fails (the period is closed) until the test drops this trigger.
    CREATE FUNCTION erp.period_closed() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.invoice_id = 201 THEN RAISE EXCEPTION 'posting period closed'; END IF;
        RETURN NEW;
      END $$;
    CREATE TRIGGER period_closed BEFORE INSERT ON erp.ledger_line FOR EACH ROW EXECUTE FUNCTION erp.period_closed();
  `);
});
afterAll(() => p.close());

describe('README example: invoices.post', () => {
  it('posts every invoice once, 100 at a time, resuming after a failure between chunks', async () => {
    const [r] = await p.client.enqueueNow({ type: 'invoices.post', payload: { batch: 'B-11' } });
    p.worker().start();
    await waitFor(async () => ((await p.store.get(r!.job.id))?.attemptLog.length ? true : null), 10_000, 'first attempt failed');
    // Chunks 1–200 committed with their checkpoints; 201–250 rolled back. Open the period.
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM erp.ledger_line')).rows[0].n).toBe(200);
    await p.db.pool.query('DROP TRIGGER period_closed ON erp.ledger_line');
    const done = await waitFor(async () => {
      const j = await p.store.get(r!.job.id);
      return j?.state === 'succeeded' ? j : null;
    });
    expect(done.attempt).toBeGreaterThanOrEqual(2);
    expect(done.result).toEqual({ lastInvoice: '250' });
    const { rows } = await p.db.pool.query(
      'SELECT count(*)::int AS lines, count(DISTINCT invoice_id)::int AS invoices, sum(amount)::int AS amount FROM erp.ledger_line',
    );
    expect(rows[0]).toEqual({ lines: 250, invoices: 250, amount: (10 * (250 * 251)) / 2 });
    expect((await p.db.pool.query('SELECT count(*)::int AS n FROM erp.invoice WHERE posted_at IS NULL')).rows[0].n).toBe(0);
  });
});
