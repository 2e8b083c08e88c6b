// DESIGN 13: a handler cannot leave the fence. Against the suite's real PostgreSQL: ctx.db
// refuses every kind of transaction control before sending it (nothing of the attempt commits);
// quoted look-alikes pass; an end of transaction that slips past the refusal is detected, the
// fenced completion is not applied and the job goes dead (non-retryable) with the reason; a
// procedure or DO block that commits is refused by PostgreSQL itself inside the job's
// transaction. Through the real worker too (MemoryQueue path).
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobTransactionEndedError, NonRetryableError, TransactionControlRefusedError } from '../../runtime/domain/errors.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob, type JobContext } from '../../runtime/handlers/types.ts';
import { JobTransaction } from '../../runtime/worker/job-transaction.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

/** What each test handler does with ctx.db, by payload.script. */
const scripts: Record<string, (ctx: JobContext, batch: string) => Promise<void>> = {
  // Writes its ledger rows, then tries to commit them itself.
  commit: async (ctx, batch) => {
    await insertLedger(ctx, batch, 3);
    await ctx.db.query('COMMIT');
  },
  // The same, but swallows the refusal and returns as if all went well.
  'commit-swallowed': async (ctx, batch) => {
    await insertLedger(ctx, batch, 3);
    await ctx.db.query('COMMIT').catch(() => undefined);
  },
  // Catches the refusal and throws an error of its own (a retryable one).
  'commit-rethrown': async (ctx, batch) => {
    await insertLedger(ctx, batch, 3);
    await ctx.db.query('COMMIT').catch(() => {
      throw new Error('our own wrapper error');
    });
  },
  // Ends the transaction in a way the lexer cannot see, and begins a new one: the lexer reads
  // text with standard_conforming_strings on, as PostgreSQL does by default; with it off,
  // PostgreSQL reads \' as an escaped quote, so the text below runs COMMIT and BEGIN while the
  // lexer sees them inside a string literal.
  'smuggled-commit-begin': async (ctx, batch) => {
    await insertLedger(ctx, batch, 3);
    await ctx.db.query('SET standard_conforming_strings = off');
    await ctx.db.query(SMUGGLED_COMMIT_BEGIN);
    await insertLedger(ctx, `${batch}-after`, 2);
  },
  // The same with no BEGIN after the COMMIT: the connection is left outside any transaction.
  'smuggled-commit': async (ctx, batch) => {
    await insertLedger(ctx, batch, 3);
    await ctx.db.query('SET standard_conforming_strings = off');
    await ctx.db.query(SMUGGLED_COMMIT);
    await insertLedger(ctx, `${batch}-after`, 2); // must never run: it would autocommit
  },
  // Its only ctx.db call is the refused one (no transaction was ever opened), swallowed.
  'commit-only-swallowed': async (ctx) => {
    await ctx.db.query('COMMIT').catch(() => undefined);
  },
  'call-committing-procedure': async (ctx, batch) => {
    await insertLedger(ctx, batch, 1);
    await ctx.db.query('CALL fence_commit_proc($1)', [batch]);
  },
  'do-commit': async (ctx, batch) => {
    await insertLedger(ctx, batch, 1);
    await ctx.db.query(
      `DO $$ BEGIN INSERT INTO ledger_entries (job_id, batch, line_no) VALUES (gen_random_uuid(), '${batch}-do', 1); COMMIT; END $$`,
    );
  },
};

const SMUGGLED_COMMIT_BEGIN = "SELECT 'x\\'' ; COMMIT; BEGIN; --'";
const SMUGGLED_COMMIT = "SELECT 'x\\'' ; COMMIT; --'";

function insertLedger(ctx: JobContext, batch: string, n: number) {
  return ctx.db.query('INSERT INTO ledger_entries (job_id, batch, line_no) SELECT $1, $2, g FROM generate_series(1, $3::int) AS g', [
    ctx.job.id,
    batch,
    n,
  ]);
}

const fenceJob = defineJob<{ script: string; batch: string }, { ok: true }>({
  type: 'test.fence',
  description: 'does with ctx.db what payload.script says',
  parse: (p) => p as { script: string; batch: string },
  async run(p, ctx) {
    await scripts[p.script]!(ctx, p.batch);
    return { ok: true };
  },
});

let p: Platform;
let other: pg.Pool; // a second "process": sees only what committed
beforeAll(async () => {
  p = await createPlatform({ registry: new JobRegistry([ledgerPost, fenceJob]), timings: { maxAttempts: 2 } });
  other = p.db.newPool(2);
  await p.db.pool.query('CREATE TABLE fence_probe (tag text NOT NULL)');
  await p.db.pool.query(`CREATE PROCEDURE fence_commit_proc(b text) LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ledger_entries (job_id, batch, line_no) VALUES (gen_random_uuid(), b || '-proc', 1);
      COMMIT;
    END $$`);
});
afterAll(() => p.close());

const probes = async (tag: string) =>
  (await other.query('SELECT count(*)::int AS n FROM fence_probe WHERE tag LIKE $1', [tag])).rows[0].n as number;
const ledgerRows = async (batch: string) =>
  (await other.query('SELECT count(*)::int AS n FROM ledger_entries WHERE batch LIKE $1', [batch])).rows[0].n as number;
/** A stand-in for the store's fenced completion: a row we can look for. */
const completion = (tag: string) => async (c: pg.PoolClient) => {
  await c.query('INSERT INTO fence_probe (tag) VALUES ($1)', [`${tag}:completion`]);
  return true;
};

describe('ctx.db refuses transaction control before sending it', () => {
  const kinds: [string, string][] = [
    ['COMMIT', 'COMMIT'],
    ['END', 'END'],
    ['ROLLBACK', 'ROLLBACK'],
    ['ABORT', 'ABORT'],
    ['BEGIN', 'BEGIN'],
    ['START TRANSACTION', 'START TRANSACTION'],
    ['SAVEPOINT s1', 'SAVEPOINT'],
    ['RELEASE SAVEPOINT s1', 'RELEASE SAVEPOINT'],
    ['ROLLBACK TO SAVEPOINT s1', 'ROLLBACK TO SAVEPOINT'],
    ['SET TRANSACTION ISOLATION LEVEL SERIALIZABLE', 'SET TRANSACTION'],
    ['SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY', 'SET SESSION CHARACTERISTICS'],
    ["PREPARE TRANSACTION 'fence-gid'", 'PREPARE TRANSACTION'],
    ["COMMIT PREPARED 'fence-gid'", 'COMMIT PREPARED'],
    ["ROLLBACK PREPARED 'fence-gid'", 'ROLLBACK PREPARED'],
    // Hidden: several statements in one text, comments, case, whitespace.
    ["INSERT INTO fence_probe VALUES ('hidden:in-text'); COMMIT; INSERT INTO fence_probe VALUES ('hidden:in-text')", 'COMMIT'],
    ['/* done */ COMMIT', 'COMMIT'],
    ['-- done\ncommit', 'COMMIT'],
    ['  \n\tCoMmIt   WORK ', 'COMMIT'],
  ];
  for (const [text, name] of kinds) {
    it(`${JSON.stringify(text)}: refused as ${name}, with the fence explained; nothing of the attempt commits`, async () => {
      const tag = `refused:${text}`;
      const tx = new JobTransaction(p.db.pool);
      await tx.query('INSERT INTO fence_probe (tag) VALUES ($1)', [tag]);
      const err = await tx.query(text).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(TransactionControlRefusedError);
      expect(err).toBeInstanceOf(NonRetryableError);
      const message = (err as Error).message;
      expect(message).toContain(`ctx.db refuses ${name}:`);
      expect(message).toMatch(/commits only with its fenced completion \(DESIGN 13\).*ctx\.saveCheckpoint/);
      expect((err as TransactionControlRefusedError).statement).toBe(name);
      // Not sent: the handler's row is still uncommitted, invisible to another connection.
      expect(await probes(tag)).toBe(0);
      expect(await probes('hidden:%')).toBe(0);
      // The attempt cannot complete any more, even if the handler swallowed the error.
      await expect(tx.query('SELECT 1')).rejects.toBe(err);
      await expect(tx.commitWith(completion(tag))).rejects.toBe(err);
      expect(await probes(`${tag}%`)).toBe(0);
    });
  }
});

describe('quoted look-alikes pass', () => {
  it('COMMIT in a literal, an identifier, a comment or a dollar-quoted body is not transaction control', async () => {
    const tx = new JobTransaction(p.db.pool);
    const texts = [
      "INSERT INTO fence_probe (tag) VALUES ('quoted:COMMIT')",
      "INSERT INTO fence_probe (tag) VALUES ('quoted:a;COMMIT;b')",
      "INSERT INTO fence_probe (tag) VALUES (E'quoted:it\\'s; COMMIT')",
      'SELECT 1 AS "commit"',
      'INSERT INTO fence_probe (tag) VALUES ($$quoted:$$ || $body$; COMMIT; BEGIN $body$) -- ; COMMIT',
      `CREATE FUNCTION fence_tx_fn() RETURNS void LANGUAGE plpgsql AS $fn$ BEGIN COMMIT; END $fn$`,
      "DO $$ BEGIN INSERT INTO fence_probe (tag) VALUES ('quoted:do'); END $$",
    ];
    for (const t of texts) await tx.query(t);
    expect(await probes('quoted:%')).toBe(0); // not yet: they commit with the completion
    expect(await tx.commitWith(completion('quoted'))).toBe(true);
    expect(await probes('quoted:%')).toBe(6); // 4 inserts, the DO block's, the completion
    expect((await other.query("SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'fence_tx_fn'")).rows[0].n).toBe(1);
  });
});

describe('an end of transaction that slips past the refusal', () => {
  it('COMMIT; BEGIN hidden from the lexer (standard_conforming_strings off): detected at completion, completion not applied, connection discarded', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('slip1:before')");
    await tx.query('SET standard_conforming_strings = off');
    await tx.query(SMUGGLED_COMMIT_BEGIN); // the lexer sees one SELECT of a string literal
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('slip1:after')");
    // What the handler did: the first row landed outside the fence.
    expect(await probes('slip1:before')).toBe(1);
    const err = await tx.commitWith(completion('slip1')).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(JobTransactionEndedError);
    expect(err).toBeInstanceOf(NonRetryableError);
    expect((err as Error).message).toMatch(
      /the handler ended the job's transaction \(the transaction at completion began at .+, not the one opened at BEGIN.*\): effects written before that may have landed outside the fence \(DESIGN 13\)/,
    );
    expect(await probes('slip1:completion')).toBe(0);
    expect(await probes('slip1:after')).toBe(0); // rolled back with the new transaction
    // The connection (standard_conforming_strings off, committed) did not go back to the pool.
    const conns = await Promise.all(Array.from({ length: 5 }, () => p.db.pool.connect()));
    try {
      for (const c of conns) expect((await c.query('SHOW standard_conforming_strings')).rows[0].standard_conforming_strings).toBe('on');
    } finally {
      for (const c of conns) c.release();
    }
  });

  it('COMMIT with nothing after it: stopped at that statement, before anything autocommits', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('slip2:before')");
    await tx.query('SET standard_conforming_strings = off');
    const err = await tx.query(SMUGGLED_COMMIT).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(JobTransactionEndedError);
    expect((err as Error).message).toContain('no transaction was open after the statement');
    await expect(tx.query("INSERT INTO fence_probe (tag) VALUES ('slip2:after')")).rejects.toBe(err);
    await expect(tx.commitWith(completion('slip2'))).rejects.toBe(err);
    expect(await probes('slip2:after')).toBe(0);
    expect(await probes('slip2:completion')).toBe(0);
  });

  it('the underlying client reached directly (COMMIT; BEGIN on it): detected at completion', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('slip3:before')");
    // What a handler could do by digging the client out of ctx.db: no lexer sees this.
    await (tx as unknown as { client: pg.PoolClient }).client.query('COMMIT; BEGIN');
    await expect(tx.commitWith(completion('slip3'))).rejects.toBeInstanceOf(JobTransactionEndedError);
    expect(await probes('slip3:before')).toBe(1);
    expect(await probes('slip3:completion')).toBe(0);
  });

  it('the underlying client left idle (COMMIT on it): refused before the completion runs', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('slip4:before')");
    await (tx as unknown as { client: pg.PoolClient }).client.query('COMMIT');
    const err = await tx.commitWith(completion('slip4')).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(JobTransactionEndedError);
    expect((err as Error).message).toContain('no transaction was open at completion');
    expect(await probes('slip4:completion')).toBe(0); // it would have autocommitted
  });

  it('the happy path: a transaction that stayed the same commits with its completion', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('same:1')");
    await new Promise((r) => setTimeout(r, 5));
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('same:2')");
    expect(await tx.commitWith(completion('same'))).toBe(true);
    expect(await probes('same:%')).toBe(3);
  });
});

describe('PostgreSQL refuses transaction control inside a procedure or DO block in the job transaction', () => {
  it('CALL of a procedure that INSERTs then COMMITs: the call fails, nothing lands', async () => {
    const tx = new JobTransaction(p.db.pool);
    await tx.query("INSERT INTO fence_probe (tag) VALUES ('call:before')");
    await expect(tx.query("CALL fence_commit_proc('CALL-1')")).rejects.toMatchObject({
      code: '2D000',
      message: expect.stringMatching(/invalid transaction termination/),
    });
    await expect(tx.commitWith(completion('call'))).rejects.toThrow(/current transaction is aborted/);
    expect(await ledgerRows('CALL-1%')).toBe(0);
    expect(await probes('call:%')).toBe(0);
  });

  it('DO block with COMMIT: refused the same way', async () => {
    const tx = new JobTransaction(p.db.pool);
    await expect(tx.query("DO $$ BEGIN INSERT INTO fence_probe (tag) VALUES ('do:inside'); COMMIT; END $$")).rejects.toMatchObject({
      code: '2D000',
    });
    await tx.rollback();
    expect(await probes('do:%')).toBe(0);
  });
});

describe('through the real worker (MemoryQueue)', () => {
  const state = async (id: string) => (await p.store.get(id))!;
  const enqueue = async (script: string, batch: string, maxAttempts = 2) =>
    (await p.client.enqueueNow({ type: 'test.fence', payload: { script, batch }, maxAttempts }))[0]!.job;
  const settled = (id: string) =>
    waitFor(
      async () => {
        const j = await state(id);
        return ['dead', 'succeeded'].includes(j.state) ? j : null;
      },
      15_000,
      `job ${id} settled`,
    );
  beforeAll(() => p.worker().start());

  it("a handler that calls ctx.db.query('COMMIT'): dead on its first attempt with the reason, its ledger rows not committed, dead-lettered", async () => {
    const job = await enqueue('commit', 'W-COMMIT');
    const dead = await settled(job.id);
    expect(dead.state).toBe('dead');
    expect(dead.attempt).toBe(1); // non-retryable: no second attempt
    expect(dead.lastError).toMatchObject({ name: 'TransactionControlRefusedError', retryable: false });
    expect(dead.lastError!.message).toMatch(
      /^ctx\.db refuses COMMIT: the job's transaction commits only with its fenced completion \(DESIGN 13\)/,
    );
    expect(await ledgerRows('W-COMMIT')).toBe(0);
    await waitFor(
      () => p.dlq.peek().some((m) => m.body.includes(job.id) && m.attributes?.Reason === 'non-retryable'),
      5000,
      'dead letter with the reason',
    );
  });

  it('a handler that swallows the refusal and returns: still dead, rows not committed', async () => {
    const job = await enqueue('commit-swallowed', 'W-SWALLOWED');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 1, lastError: { name: 'TransactionControlRefusedError' } });
    expect(await ledgerRows('W-SWALLOWED')).toBe(0);
  });

  it('a handler that catches the refusal and throws its own error: dead with the fence reason, not retried', async () => {
    const job = await enqueue('commit-rethrown', 'W-RETHROWN');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 1, lastError: { name: 'TransactionControlRefusedError' } });
    expect(await ledgerRows('W-RETHROWN')).toBe(0);
  });

  it('a handler whose only ctx.db call is a swallowed COMMIT: dead too, not completed in a batch', async () => {
    const job = await enqueue('commit-only-swallowed', 'W-ONLY');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 1, result: null, lastError: { name: 'TransactionControlRefusedError' } });
  });

  it('a handler that slips COMMIT; BEGIN past the refusal: dead (non-retryable) at completion, the completion not applied', async () => {
    const job = await enqueue('smuggled-commit-begin', 'W-SLIP');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({
      state: 'dead',
      attempt: 1,
      result: null,
      lastError: { name: 'JobTransactionEndedError', retryable: false },
    });
    expect(dead.lastError!.message).toMatch(/the handler ended the job's transaction .* may have landed outside the fence/);
    // What landed before the smuggled COMMIT is the handler's doing; what came after rolled back.
    expect(await ledgerRows('W-SLIP')).toBe(3);
    expect(await ledgerRows('W-SLIP-after')).toBe(0);
  });

  it('a handler whose text leaves no transaction open: dead, and nothing after it ran', async () => {
    const job = await enqueue('smuggled-commit', 'W-SLIP-IDLE');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 1, lastError: { name: 'JobTransactionEndedError' } });
    expect(await ledgerRows('W-SLIP-IDLE-after')).toBe(0);
  });

  it('a handler that CALLs a committing procedure: the attempt fails (PostgreSQL refuses), nothing lands, retried until dead', async () => {
    const job = await enqueue('call-committing-procedure', 'W-CALL');
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 2 });
    expect(dead.lastError!.message).toMatch(/invalid transaction termination/);
    expect(await ledgerRows('W-CALL%')).toBe(0);
  });

  it('a handler whose DO block COMMITs: the attempt fails, nothing lands', async () => {
    const job = await enqueue('do-commit', 'W-DO', 1);
    const dead = await settled(job.id);
    expect(dead).toMatchObject({ state: 'dead', attempt: 1 });
    expect(dead.lastError!.message).toMatch(/invalid transaction termination/);
    expect(await ledgerRows('W-DO%')).toBe(0);
  });

  it('an ordinary handler still succeeds with its rows', async () => {
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'W-OK', entries: 4 } });
    const done = await settled(r!.job.id);
    expect(done.state).toBe('succeeded');
    expect(await ledgerRows('W-OK')).toBe(4);
  });
});
