// The chaos run's verdict can fail: each check, given crafted data with the violation it exists
// for, reports it (and a clean run passes them all). The last test writes a broken outcome into
// a real database — a double-posted batch, a batch with a missing line, rows of a job that never
// committed, a committed job that vanished, one left running — and reads it back through the
// same collectors the run uses.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectEffects, collectJobs } from '../../scripts/chaos/collect.ts';
import { checkKeys } from '../../scripts/chaos/keys.ts';
import { KeySampler } from '../../scripts/chaos/keys-sampler.ts';
import { formatReport } from '../../scripts/chaos/report.ts';
import { CHAOS_TIMINGS, DEFAULT_CHAOS, type ChaosResult } from '../../scripts/chaos/run.ts';
import { expectedEffects, REQUIRED_FAULTS, stats, verify, type FinalJob, type Observations } from '../../scripts/chaos/verify.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const T0 = '2026-11-01T10:00:00.000000';
const T1 = '2026-11-01T10:00:05.000000';

function job(over: Partial<FinalJob> & { id: string }): FinalJob {
  return {
    type: 'ledger.post',
    state: 'succeeded',
    attempt: 1,
    releases: 0,
    maxAttempts: 6,
    idempotencyKey: null,
    payload: { batch: `B-${over.id}`, entries: 3 },
    createdAt: T0,
    finishedAt: T1,
    lastError: null,
    attemptLog: [],
    ...over,
  };
}

/** A clean run: two ledger jobs (one dead as planned), a costing run, a rollback, a burst, a kill. */
function clean(): Observations {
  const inv = job({
    id: 'inv-1',
    type: 'inventory.cost',
    payload: { store: 'S1', period: '2026-10', skus: 12, movementsPerSku: 20, chunkSize: 5 },
  });
  const invTotal = expectedEffects(inv).total!;
  return {
    planned: [
      { id: 'ok-1', type: 'ledger.post', expect: 'succeeded', via: 'api' },
      { id: 'dead-1', type: 'ledger.post', expect: 'dead', via: 'api' },
      { id: 'inv-1', type: 'inventory.cost', expect: 'succeeded', via: 'api' },
      { id: 'key-1', type: 'ledger.post', expect: 'succeeded', via: 'api', idempotencyKey: 'k1' },
    ],
    bursts: [{ key: 'k1', type: 'ledger.post', returnedIds: ['key-1', 'key-1', 'key-1', 'key-1'] }],
    rolledBack: [{ jobIds: ['rb-1'], batch: 'RB-1' }],
    kills: [{ workerId: 'w1', at: 1000, jobs: [{ id: 'ok-1', attempt: 1, resumedAt: 4000, outcome: 'resumed' }] }],
    pauses: [],
    unpublished: [],
    jobs: [
      job({ id: 'ok-1', attempt: 2, attemptLog: [{ outcome: 'rescued', name: 'LeaseExpired', message: 'lease expired' }] }),
      job({
        id: 'dead-1',
        state: 'dead',
        maxAttempts: 2,
        attempt: 2,
        payload: { batch: 'B-dead', entries: 3, failAttempts: 99 },
        lastError: 'simulated failure',
      }),
      inv,
      job({ id: 'key-1', idempotencyKey: 'k1', payload: { batch: 'KEY-1', entries: 9 } }),
    ],
    ledger: [
      { jobId: 'ok-1', batch: 'B-ok-1', rows: 3 },
      { jobId: 'key-1', batch: 'KEY-1', rows: 9 },
    ],
    inventory: [{ jobId: 'inv-1', rows: 12, total: invTotal }],
    dlq: [JSON.stringify({ jobId: 'dead-1', type: 'ledger.post', reason: 'attempts-exhausted' })],
    queue: [],
    claimedJobIds: ['ok-1', 'dead-1', 'inv-1', 'key-1'],
    faults: Object.fromEntries(REQUIRED_FAULTS.map((f) => [f, 1])),
    events: {},
    enqueueErrors: 0,
    failoverToClaim: [],
    purgeToHealed: [],
    unexpectedExits: [],
  };
}

const failed = (o: Observations) =>
  verify(o)
    .checks.filter((c) => !c.ok)
    .map((c) => c.name);
const violations = (o: Observations, name: string) => verify(o).checks.find((c) => c.name === name)!.violations;

describe('chaos verdict on crafted data', () => {
  it('a clean run passes every check, with its figures', () => {
    const v = verify(clean());
    expect(v.checks.filter((c) => !c.ok)).toEqual([]);
    expect(v.ok).toBe(true);
    expect(v.figures).toMatchObject({
      committed: 4,
      succeeded: 3,
      dead: 1,
      doubleEffects: 0,
      lost: 0,
      stuck: 0,
      duplicatesReturned: 3,
      killToResumption: { n: 1, medianMs: 3000, maxMs: 3000 },
    });
  });

  it('double effects: a batch posted twice, and rows of a job that does not exist', () => {
    const o = clean();
    o.ledger.push({ jobId: 'ok-1', batch: 'B-ok-1', rows: 3 });
    o.ledger.push({ jobId: 'ghost', batch: 'B-ghost', rows: 5 });
    expect(failed(o)).toEqual(['exact-effects']);
    expect(verify(o).figures.doubleEffects).toBe(2);
    expect(violations(o, 'exact-effects')[0]).toMatch(/job ok-1 .* has 6 rows, expected 3/);
  });

  it('effects of a dead job, a missing line, and costing figures that differ from an uninterrupted run', () => {
    const o = clean();
    o.ledger.push({ jobId: 'dead-1', batch: 'B-dead', rows: 3 });
    o.ledger.find((r) => r.jobId === 'key-1')!.rows = 8;
    o.inventory[0]!.total += 0.01;
    expect(violations(o, 'exact-effects')).toEqual([
      expect.stringMatching(/job dead-1 .* has 3 rows, expected 0/),
      expect.stringMatching(/job inv-1 \(inventory.cost\) costed .* expected/),
      expect.stringMatching(/job key-1 .* has 8 rows, expected 9: effects missing/),
    ]);
  });

  it('lost and stuck jobs', () => {
    const o = clean();
    o.jobs = o.jobs.filter((j) => j.id !== 'inv-1');
    o.jobs.find((j) => j.id === 'key-1')!.state = 'running';
    expect(failed(o)).toEqual(expect.arrayContaining(['lost', 'stuck']));
    const v = verify(o);
    expect(v.figures).toMatchObject({ lost: 1, stuck: 1 });
  });

  it('a job that ended otherwise than planned; dying is allowed only when faults used up its attempts', () => {
    const o = clean();
    o.jobs.find((j) => j.id === 'dead-1')!.state = 'succeeded';
    o.ledger.push({ jobId: 'dead-1', batch: 'B-dead', rows: 3 });
    expect(failed(o)).toContain('final-state');

    const ok = clean();
    Object.assign(ok.jobs.find((j) => j.id === 'ok-1')!, { state: 'dead', attempt: 6, lastError: 'lease expired' });
    ok.ledger = ok.ledger.filter((r) => r.jobId !== 'ok-1');
    ok.dlq.push(JSON.stringify({ jobId: 'ok-1', reason: 'lease-expired-final-attempt' }));
    expect(failed(ok)).toEqual([]);
    expect(verify(ok).figures.deadByFaults).toBe(1);

    // Dead with attempts to spare, or dead from its own planned failures only: a violation.
    const early = clean();
    Object.assign(early.jobs.find((j) => j.id === 'ok-1')!, { state: 'dead', attempt: 2 });
    early.ledger = early.ledger.filter((r) => r.jobId !== 'ok-1');
    early.dlq.push(JSON.stringify({ jobId: 'ok-1', reason: 'non-retryable' }));
    expect(failed(early)).toEqual(['final-state']);
  });

  it('a dead job without its reason on the DLQ, and a live job redriven to the DLQ', () => {
    const o = clean();
    o.dlq = [JSON.stringify({ jobId: 'ok-1', type: 'ledger.post' })];
    expect(failed(o)).toEqual(['dead-lettered', 'dlq-only-dead']);
    expect(violations(o, 'dlq-only-dead')[0]).toMatch(/job ok-1 \(succeeded\) had its message redriven/);
  });

  it('a rolled-back enqueue that exists, ran, wrote, or was published', () => {
    for (const mutate of [
      (o: Observations) => o.jobs.push(job({ id: 'rb-1', state: 'pending' })),
      (o: Observations) => o.claimedJobIds.push('rb-1'),
      (o: Observations) => o.ledger.push({ jobId: 'rb-1', batch: 'RB-1', rows: 5 }),
      (o: Observations) => o.queue.push(JSON.stringify({ jobId: 'rb-1', type: 'ledger.post' })),
    ]) {
      const o = clean();
      mutate(o);
      expect(failed(o)).toContain('rolled-back');
    }
  });

  it('two active jobs for one idempotency key, and a burst answered with two jobs', () => {
    const o = clean();
    o.jobs.push(
      job({ id: 'key-2', idempotencyKey: 'k1', createdAt: '2026-11-01T10:00:04.999999', payload: { batch: 'KEY-1', entries: 9 } }),
    );
    o.ledger.push({ jobId: 'key-2', batch: 'KEY-1', rows: 9 });
    expect(violations(o, 'idempotency')).toEqual([expect.stringMatching(/job key-2 was created while job key-1 .* was still active/)]);
    const b = clean();
    b.bursts[0]!.returnedIds = ['key-1', 'key-1', 'key-x', 'key-1'];
    expect(failed(b)).toEqual(['idempotency']);
    // One microsecond after the first ended is a new job, not a duplicate.
    const later = clean();
    later.jobs.push(
      job({ id: 'key-3', idempotencyKey: 'k1', createdAt: '2026-11-01T10:00:05.000001', payload: { batch: 'KEY-3', entries: 1 } }),
    );
    later.ledger.push({ jobId: 'key-3', batch: 'KEY-3', rows: 1 });
    expect(failed(later)).toEqual([]);
  });

  it('a run that did not inject every kind of fault proves nothing about it', () => {
    const o = clean();
    o.faults.pause = 0;
    delete o.faults['sqs-error'];
    expect(violations(o, 'faults-injected')).toEqual([
      expect.stringMatching(/no pause fault/),
      expect.stringMatching(/no sqs-error fault/),
    ]);
  });

  it('a job a killed worker held that was never taken up again', () => {
    const o = clean();
    o.kills[0]!.jobs[0]!.outcome = 'not-resumed';
    o.kills[0]!.jobs[0]!.resumedAt = null;
    expect(failed(o)).toEqual(['resumed-after-kill']);
  });

  it('a process that ended without the kill fault ending it (a failover must end none)', () => {
    const o = clean();
    o.unexpectedExits = ['worker local-worker-2 exited without being killed'];
    const v = verify(o);
    expect(v.ok).toBe(false);
    expect(v.checks.find((c) => c.name === 'no-exits')?.violations).toEqual(['worker local-worker-2 exited without being killed']);
  });

  it('jobs of one concurrency key that ran at once beyond its limit, in the recorded runs or in a sample', () => {
    const o = clean();
    const keyed = (id: string, key: string, limit: number, claimedAt: string, finishedAt: string) =>
      // A type without effects to count, so only this check looks at them.
      job({ id, type: 'other.keyed', concurrencyKey: key, concurrencyLimit: limit, claimedAt, finishedAt, payload: {} });
    const t = (s: number) => `2026-11-01T10:00:0${s}.000000`;
    o.jobs.push(
      // limit 1: a hand-over at the same microsecond is not an overlap; c starts before b ends.
      keyed('a', 'ledger:company-1', 1, t(0), t(2)),
      keyed('b', 'ledger:company-1', 1, t(2), t(4)),
      keyed('c', 'ledger:company-1', 1, t(3), t(5)),
      // limit 2: three at once between 1 and 2.
      keyed('d', 'costing:store-1', 2, t(0), t(2)),
      keyed('e', 'costing:store-1', 2, t(1), t(3)),
      keyed('f', 'costing:store-1', 2, t(1), t(4)),
    );
    o.planned.push(
      ...['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ({ id, type: 'other.keyed', expect: 'succeeded' as const, via: 'api' as const })),
    );
    o.keySamples = { samples: 40, most: { 'ledger:company-1': 2 }, over: [{ at: 'T', key: 'ledger:company-1', running: 2, limit: 1 }] };
    expect(failed(o)).toEqual(['concurrency-keys']);
    expect(violations(o, 'concurrency-keys')).toEqual([
      expect.stringMatching(/^key costing:store-1 \(limit 2\): 3 jobs ran at once: d .*, e .*, f /),
      expect.stringMatching(/^key ledger:company-1 \(limit 1\): 2 jobs ran at once: b 10:00:02.000000–10:00:04.000000, c /),
      'key ledger:company-1 (limit 1): 2 jobs running at T (sampled from the job table)',
    ]);
    expect(verify(o).figures.concurrencyKeys).toMatchObject({
      jobs: 6,
      keys: 2,
      overlaps: 3,
      perKey: { 'ledger:company-1': { limit: 1, jobs: 3, recorded: 2, sampled: 2 }, 'costing:store-1': { limit: 2, jobs: 3, recorded: 3 } },
    });
    // Within their limits, the same jobs pass.
    o.jobs.find((j) => j.id === 'c')!.claimedAt = t(4);
    o.jobs.find((j) => j.id === 'f')!.claimedAt = t(2);
    o.keySamples.over = [];
    expect(failed(o)).toEqual([]);
  });

  it('stats: median and max', () => {
    expect(stats([])).toEqual({ n: 0, medianMs: null, maxMs: null });
    expect(stats([400, 100, 300, 200])).toEqual({ n: 4, medianMs: 250, maxMs: 400 });
  });

  it('the table prints the guarantees and closes with the pass/fail line CI reads', () => {
    const o = clean();
    o.ledger.push({ jobId: 'ok-1', batch: 'B-ok-1', rows: 3 });
    const result: ChaosResult = {
      verdict: verify(o),
      observations: o,
      options: { ...DEFAULT_CHAOS, seed: 1 },
      timings: CHAOS_TIMINGS,
      notes: {
        zombieRefusals: 2,
        heldAtKill: 1,
        heldAtPause: 0,
        connectionsDropped: 3,
        faultsSkipped: 0,
        drainSeconds: 4,
        failoverSeconds: 8,
        purgedPending: 5,
      },
    };
    const text = formatReport(result, 60);
    expect(text).toMatch(/double effects\s+1\s+must be 0/);
    expect(text).toMatch(/kill -9 → job resumed by another worker\s+3\.0 s/);
    expect(text).toMatch(/✗ exact-effects/);
    expect(text.trim().split('\n').at(-1)).toBe('chaos: 11 passed, 1 failed');
  });
});

describe('chaos collectors on a real database', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(() => db?.drop());

  it('find a double post, a missing line, rows of a rolled-back job, a vanished job and a running one', async () => {
    const ids = Array.from({ length: 4 }, () => randomUUID());
    const [twice, short, vanished, running] = ids as [string, string, string, string];
    await db.pool.query(
      `INSERT INTO jobs.job (id, type, payload, state, attempt, max_attempts, finished_at, lease_owner, lease_expires_at)
       VALUES ($1, 'ledger.post', '{"batch":"TWICE","entries":4}', 'succeeded', 2, 6, now(), NULL, NULL),
              ($2, 'ledger.post', '{"batch":"SHORT","entries":4}', 'succeeded', 1, 6, now(), NULL, NULL),
              ($3, 'ledger.post', '{"batch":"RUN","entries":1}', 'running', 1, 6, NULL, 'w-1', now() + interval '1 minute')`,
      [twice, short, running],
    );
    const rolledBackJob = randomUUID();
    await db.pool.query(
      `INSERT INTO ledger_entries (job_id, batch, line_no)
       SELECT $1::uuid, 'TWICE', g FROM generate_series(1, 4) g UNION ALL SELECT $1::uuid, 'TWICE', g FROM generate_series(1, 4) g
       UNION ALL SELECT $2::uuid, 'SHORT', g FROM generate_series(1, 3) g
       UNION ALL SELECT $3::uuid, 'RB-X', g FROM generate_series(1, 2) g`,
      [twice, short, rolledBackJob],
    );
    const o: Observations = {
      planned: [twice, short, vanished, running].map((id) => ({
        id,
        type: 'ledger.post',
        expect: 'succeeded' as const,
        via: 'api' as const,
      })),
      bursts: [],
      rolledBack: [{ jobIds: [rolledBackJob], batch: 'RB-X' }],
      kills: [],
      pauses: [],
      unpublished: [],
      jobs: await collectJobs(db.pool),
      ...(await collectEffects(db.pool)),
      dlq: [],
      queue: [],
      claimedJobIds: [],
      faults: Object.fromEntries(REQUIRED_FAULTS.map((f) => [f, 1])),
      events: {},
      enqueueErrors: 0,
      failoverToClaim: [],
      purgeToHealed: [],
      unexpectedExits: [],
    };
    const v = verify(o);
    expect(v.ok).toBe(false);
    expect(v.figures).toMatchObject({ doubleEffects: 2, missingEffects: 1, lost: 1, stuck: 1 });
    expect(
      v.checks
        .filter((c) => !c.ok)
        .map((c) => c.name)
        .sort(),
    ).toEqual(['exact-effects', 'lost', 'rolled-back', 'stuck']);
    expect(o.jobs.find((j) => j.id === twice)!.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$/);
  });

  it('find two jobs of a key with limit 1 that ran at once: from their claimed_at and finished_at, and in a sample', async () => {
    const [a, b, c]: string[] = [randomUUID(), randomUUID(), randomUUID()];
    // a and b overlap by a microsecond; c (another key) overlaps neither's limit.
    await db.pool.query(
      `INSERT INTO jobs.job (id, type, payload, state, attempt, max_attempts, concurrency_key, concurrency_limit, claimed_at, finished_at)
       VALUES ($1, 'other.keyed', '{}', 'succeeded', 1, 6, 'ledger:company-9', 1, '2026-11-01 10:00:00.000000+00', '2026-11-01 10:00:02.000001+00'),
              ($2, 'other.keyed', '{}', 'succeeded', 1, 6, 'ledger:company-9', 1, '2026-11-01 10:00:02.000000+00', '2026-11-01 10:00:03+00'),
              ($3, 'other.keyed', '{}', 'succeeded', 1, 6, 'costing:store-9', 2, '2026-11-01 10:00:00+00', '2026-11-01 10:00:03+00')`,
      [a, b, c],
    );
    const jobs = (await collectJobs(db.pool)).filter((j) => [a, b, c].includes(j.id));
    expect(jobs.find((j) => j.id === a)).toMatchObject({
      concurrencyKey: 'ledger:company-9',
      concurrencyLimit: 1,
      claimedAt: '2026-11-01T10:00:00.000000',
      finishedAt: '2026-11-01T10:00:02.000001',
    });
    expect(checkKeys(jobs, undefined).violations).toEqual([
      `key ledger:company-9 (limit 1): 2 jobs ran at once: ${a} 10:00:00.000000–10:00:02.000001, ${b} 10:00:02.000000–10:00:03.000000`,
    ]);

    // The sampler reads the running jobs per key from the same table.
    await db.pool.query(
      "UPDATE jobs.job SET state = 'running', finished_at = NULL, lease_owner = 'w', lease_expires_at = now() + interval '1 minute' WHERE id = ANY($1::uuid[])",
      [[a, b, c]],
    );
    const sampler = new KeySampler(db.pool);
    sampler.start();
    await waitFor(() => sampler.result().samples >= 2 || null, 5000, 'two samples');
    await sampler.stop();
    expect(sampler.result().most).toMatchObject({ 'ledger:company-9': 2, 'costing:store-9': 1 });
    expect(sampler.result().over[0]).toMatchObject({ key: 'ledger:company-9', running: 2, limit: 1 });
    expect(sampler.result().over.every((x) => x.key === 'ledger:company-9')).toBe(true);
  });
});
