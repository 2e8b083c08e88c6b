// Schedules against a real PostgreSQL, with the scheduler's clock injected: no test waits for a
// minute to pass. Each occurrence is enqueued once however many schedulers race (with and
// without the schedule's row lock), missed occurrences follow each policy after a platform was
// down, daylight-saving changes in Europe/Berlin fire the skipped and the repeated hour once,
// pause and resume hold across scheduler instances, and a broken declaration stops the start.
import pino from 'pino';
import * as z from 'zod';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { withTransaction } from '../../runtime/db/transaction.ts';
import { ConfigError } from '../../runtime/config/rules.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { checkSchedules, defineSchedule, occurrence, type MissedPolicy, type ScheduleDefinition } from '../../runtime/handlers/schedule.ts';
import { monthEndClose } from '../../runtime/handlers/schedules.ts';
import { Scheduler } from '../../runtime/maintenance/scheduler.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import { CountingMetrics } from '../../runtime/observability/metrics.ts';
import { DeadJobService } from '../../runtime/oncall/dead-jobs.ts';
import { ScheduleService } from '../../runtime/oncall/schedules.ts';
import { describe as describeSchedule } from '../../runtime/cli/schedules.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { ScheduleStore } from '../../runtime/store/schedules.ts';
import { RETENTION_SQL } from '../../runtime/store/sql-retention.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

let p: Platform;
beforeAll(async () => {
  p = await createPlatform();
});
afterAll(async () => {
  await p.close();
});

/** A ledger.post schedule (the batch names the occurrence). */
const schedule = (name: string, cron: string, missed: MissedPolicy, timeZone = 'Europe/Berlin') =>
  defineSchedule({ name, cron, timeZone, job: ledgerPost, payload: (o) => ({ batch: `${name}@${o.label}`, entries: 1 }), missed });

/** A clock the test moves. */
function testClock(start: string) {
  let now = new Date(start);
  return { now: () => now, set: (iso: string) => void (now = new Date(iso)) };
}

/** A scheduler with its own pool and client: one "task" (without a clock: the system's, and the database's for what is due). */
function task(defs: readonly ScheduleDefinition[], clock?: () => Date, log = silentLogger, metrics?: CountingMetrics) {
  const pool = p.db.newPool(3);
  const client = new JobClient({
    pool,
    registry: p.registry,
    publisher: new Publisher(pool, p.queue, silentLogger),
    defaultMaxAttempts: 3,
  });
  return new Scheduler({ pool, client, schedules: defs, log, ...(clock ? { clock } : {}), ...(metrics ? { metrics } : {}) });
}

/** A skip schedule whose enqueue fails as in a failover (connection refused) while `db.down`. */
function failoverSchedule(name: string, cron: string) {
  const db = { down: true };
  const def = defineSchedule({
    ...schedule(name, cron, 'skip', 'UTC'),
    payload: (o) => {
      if (db.down) throw Object.assign(new Error('connect ECONNREFUSED 10.0.3.12:5432'), { code: 'ECONNREFUSED' });
      return { batch: `${name}@${o.label}`, entries: 1 };
    },
  });
  return { def, db };
}

/** The jobs of schedule `name`, oldest first: their keys without the `schedule:<name>:` prefix. */
async function occurrencesOf(name: string): Promise<string[]> {
  const { rows } = await p.db.pool.query<{ key: string }>(
    'SELECT idempotency_key AS key FROM jobs.job WHERE idempotency_key LIKE $1 ORDER BY created_at, idempotency_key',
    [`schedule:${name}:%`],
  );
  return rows.map((r) => r.key.slice(`schedule:${name}:`.length));
}

describe('exactly once', () => {
  it('5 schedulers racing over 10 occurrences enqueue each once; the message is published after COMMIT', async () => {
    const def = schedule('race', '*/5 * * * *', 'latest', 'UTC');
    const clock = testClock('2026-06-01T00:00:30Z');
    const tasks = Array.from({ length: 5 }, () => task([def], clock.now));
    await Promise.all(tasks.map((t) => t.runOnce()));
    const firedPerRound: number[] = [];
    for (let round = 1; round <= 10; round++) {
      clock.set(new Date(Date.UTC(2026, 5, 1, 0, 5 * round, 0, 300)).toISOString());
      const passes = await Promise.all(tasks.map((t) => t.runOnce()));
      firedPerRound.push(passes.reduce((n, r) => n + r.fired.length, 0));
      // The ones that found the row locked look again: the occurrence is settled by then.
      const again = await Promise.all(tasks.map((t) => t.runOnce()));
      firedPerRound[round - 1]! += again.reduce((n, r) => n + r.fired.length, 0);
    }
    expect(firedPerRound).toEqual(Array(10).fill(1));
    expect(await occurrencesOf('race')).toEqual(
      Array.from({ length: 10 }, (_, i) => `2026-06-01T00:${String(5 * (i + 1)).padStart(2, '0')}:00+00:00`),
    );
    // Every job's message was sent after its COMMIT, and its outbox row goes once the publisher's
    // batched delete runs (a moment later: wait for it rather than race it).
    const inOutbox = async () =>
      (
        await p.db.pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM jobs.outbox o JOIN jobs.job j ON j.id = o.job_id WHERE j.idempotency_key LIKE 'schedule:race:%'",
        )
      ).rows[0]!.n;
    await waitFor(async () => (await inOutbox()) === 0, 5_000, 'the outbox rows of sent messages deleted');
    const sent = p.queue.peek().map((m) => JSON.parse(m.body).jobId as string);
    const ids = (await p.db.pool.query<{ id: string }>("SELECT id FROM jobs.job WHERE idempotency_key LIKE 'schedule:race:%'")).rows;
    expect(ids.every((j) => sent.includes(j.id))).toBe(true);
  });

  it('without the row lock, 5 transactions claiming the same occurrence at once enqueue one job (the occurrence table alone)', async () => {
    const def = schedule('claim-race', '0 6 * * *', 'all');
    const store = (pool = p.db.newPool(2)) =>
      new ScheduleStore(pool, new JobClient({ pool, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 }));
    await store(p.db.pool).ensure([def.name], new Date('2026-06-01T00:00:00Z'));
    const at = new Date('2026-06-01T04:00:00Z');
    const results = await Promise.all(
      Array.from({ length: 5 }, async () => {
        const pool = p.db.newPool(2);
        const s = store(pool);
        return withTransaction(pool, async (tx) => {
          const r = await s.fire(tx, def, [{ at, late: false }]);
          // Hold the transaction open so that all five overlap.
          await new Promise((res) => setTimeout(res, 100));
          return r.fired.length;
        });
      }),
    );
    expect(results.sort()).toEqual([0, 0, 0, 0, 1]);
    expect(await occurrencesOf('claim-race')).toEqual(['2026-06-01T06:00:00+02:00']);
    // And never again, even once its job has ended and its idempotency key is free: a later claim
    // of it (a scheduler with a stale view) enqueues nothing.
    const { rows } = await p.db.pool.query<{ id: string }>("SELECT id FROM jobs.job WHERE idempotency_key LIKE 'schedule:claim-race:%'");
    await p.store.cancel(rows[0]!.id, 'test');
    const late = await withTransaction(p.db.pool, (tx) => store(p.db.pool).fire(tx, def, [{ at, late: true }]));
    expect(late.fired).toEqual([]);
    expect(await occurrencesOf('claim-race')).toEqual(['2026-06-01T06:00:00+02:00']);
  });
});

describe("the database's clock decides what is due", () => {
  it('a task whose clock runs 30 s ahead enqueues no occurrence before its time, and settles none it has not reached', async () => {
    // Fault review: a task planned by its own clock, so one 30 s ahead enqueued the occurrence of
    // 10:22:50 at 10:22:23 by the database (a month-end close before the month has ended).
    const def = schedule('skew-ahead', '*/10 * * * * *', 'latest', 'UTC');
    const ahead = task([def]);
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 30_000 });
    try {
      for (let i = 0; i < 3; i++) await ahead.runOnce();
    } finally {
      vi.useRealTimers();
    }
    const { rows } = await p.db.pool.query<{ occurrence_at: Date; created_at: Date }>(
      `SELECT o.occurrence_at, j.created_at FROM jobs.schedule_occurrence o JOIN jobs.job j ON j.id = o.job_id WHERE o.schedule = $1`,
      [def.name],
    );
    for (const r of rows) expect(r.occurrence_at.getTime()).toBeLessThanOrEqual(r.created_at.getTime());
    const settled = await p.db.pool.query<{ ahead: boolean }>(
      'SELECT settled_through > statement_timestamp() AS ahead FROM jobs.schedule WHERE name = $1',
      [def.name],
    );
    expect(settled.rows[0]!.ahead).toBe(false);
  });

  /**
   * With the process's wall clock (Date) 2 minutes behind the database from here on: `before`
   * runs in it, then one pass a second later, when the next occurrence of a per-second schedule
   * is due. The real time comes from performance, which is not faked.
   */
  async function passWithClockBehind(t: Scheduler, before: () => Promise<unknown> = async () => {}) {
    const wallClock = () => performance.timeOrigin + performance.now();
    vi.useFakeTimers({ toFake: ['Date'], now: wallClock() - 120_000 });
    try {
      await before();
      await new Promise((resolve) => setTimeout(resolve, 1100));
      vi.setSystemTime(wallClock() - 120_000);
      return await t.runOnce();
    } finally {
      vi.useRealTimers();
    }
  }
  const onTime = (pass: Awaited<ReturnType<Scheduler['runOnce']>>) => {
    expect(pass.failed).toEqual([]);
    expect(pass.fired.length).toBeGreaterThan(0);
    expect(pass.fired.filter((f) => f.late)).toEqual([]);
  };

  it('a task whose clock runs 2 minutes behind enqueues a skip occurrence on time: it looks by the database clock too', async () => {
    // Review: the scheduler decided when to look by the task's own clock, so a task 2 minutes
    // behind reached every occurrence 2 minutes after its time, and under skip dropped it as missed.
    const behind = task([schedule('skew-behind', '* * * * * *', 'skip', 'UTC')]);
    // The first pass creates the schedule's row, settled through the database's now.
    onTime(await passWithClockBehind(behind, () => behind.runOnce()));
  });

  it('a task whose clock steps 2 minutes back after it started (NTP) still enqueues a skip occurrence on time', async () => {
    // Review: a sampled offset goes stale when the wall clock steps after the sample, and a
    // daily schedule samples once a day; the scheduler carries the database's time forward on
    // the monotonic clock instead, and samples again when the two clocks disagree.
    const stepping = task([schedule('skew-step', '* * * * * *', 'skip', 'UTC')]);
    await stepping.runOnce(); // the row, and a sample taken with a correct clock
    const resampled = vi.spyOn(ScheduleStore.prototype, 'sampleClock');
    const pass = await passWithClockBehind(stepping);
    expect(resampled).toHaveBeenCalledTimes(1); // the wall clock stepped: a fresh sample
    resampled.mockRestore();
    onTime(pass);
  });
});

describe('missed occurrences: the platform down over three of them', () => {
  it('latest enqueues the newest, all each in order (late), skip none; the next one runs as usual', async () => {
    const defs = (['latest', 'all', 'skip'] as const).map((m) => schedule(`down-${m}`, '0 * * * *', m));
    const clock = testClock('2026-06-01T09:59:50Z');
    const before = task(defs, clock.now);
    await before.runOnce();
    clock.set('2026-06-01T10:00:02Z');
    expect((await before.runOnce()).fired.map((f) => f.late)).toEqual([false, false, false]);
    await before.stop(); // every task is down from here: 11:00, 12:00 and 13:00 pass unseen

    clock.set('2026-06-01T13:20:00Z');
    const lines: { level: number; msg: string }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const after = task(defs, clock.now, log); // a task that starts afresh: nothing in memory
    const pass = await after.runOnce();
    expect(pass.fired.map((f) => [f.schedule, f.occurrence, f.late])).toEqual([
      ['down-latest', '2026-06-01T15:00:00+02:00', true],
      ['down-all', '2026-06-01T13:00:00+02:00', true],
      ['down-all', '2026-06-01T14:00:00+02:00', true],
      ['down-all', '2026-06-01T15:00:00+02:00', true],
    ]);
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
      'schedule down-latest: 2 missed occurrence(s) not run (missed: latest)',
      'schedule down-skip: 3 missed occurrence(s) not run (missed: skip)',
    ]);

    clock.set('2026-06-01T14:00:03Z'); // 3 s late: on time, for skip too
    await after.runOnce();
    expect(await occurrencesOf('down-latest')).toEqual([
      '2026-06-01T12:00:00+02:00',
      '2026-06-01T15:00:00+02:00',
      '2026-06-01T16:00:00+02:00',
    ]);
    expect(await occurrencesOf('down-all')).toEqual([
      '2026-06-01T12:00:00+02:00',
      '2026-06-01T13:00:00+02:00',
      '2026-06-01T14:00:00+02:00',
      '2026-06-01T15:00:00+02:00',
      '2026-06-01T16:00:00+02:00',
    ]);
    expect(await occurrencesOf('down-skip')).toEqual(['2026-06-01T12:00:00+02:00', '2026-06-01T16:00:00+02:00']);
    const { rows } = await p.db.pool.query(
      "SELECT to_char(occurrence_at AT TIME ZONE 'UTC', 'HH24:MI') AS at, late FROM jobs.schedule_occurrence WHERE schedule = 'down-all' ORDER BY 1",
    );
    expect(rows).toEqual([
      { at: '10:00', late: false },
      { at: '11:00', late: true },
      { at: '12:00', late: true },
      { at: '13:00', late: true },
      { at: '14:00', late: false },
    ]);
  });

  it('all catches up at most the latest 100 and says the older ones were not run', async () => {
    const def = schedule('down-long', '* * * * *', 'all', 'UTC');
    const clock = testClock('2026-06-02T00:00:30Z');
    await task([def], clock.now).runOnce();
    clock.set('2026-06-02T02:30:10Z'); // 150 occurrences missed
    const lines: { level: number; msg: string }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const pass = await task([def], clock.now, log).runOnce();
    expect(pass.fired).toHaveLength(100);
    const keys = await occurrencesOf('down-long');
    expect([keys.length, keys[0], keys.at(-1)]).toEqual([100, '2026-06-02T00:51:00+00:00', '2026-06-02T02:30:00+00:00']);
    expect(lines.find((l) => l.level === 40)?.msg).toBe(
      'schedule down-long: at least 1 missed occurrence(s) not run (missed: all; at most the latest 100 are caught up)',
    );
  });
});

describe('daylight saving in Europe/Berlin', () => {
  /** Step the clock every 5 minutes from `from` to `to`, one pass each. */
  async function walk(defs: readonly ScheduleDefinition[], from: string, to: string) {
    const clock = testClock(from);
    const t = task(defs, clock.now);
    for (let ms = Date.parse(from); ms <= Date.parse(to); ms += 5 * 60_000) {
      clock.set(new Date(ms).toISOString());
      await t.runOnce();
    }
  }

  it('spring forward: 02:30 does not exist on 29 March; that day runs once, at 03:00 CEST', async () => {
    await walk([schedule('dst-spring', '30 2 * * *', 'all')], '2026-03-28T12:00:00Z', '2026-03-30T12:00:00Z');
    expect(await occurrencesOf('dst-spring')).toEqual(['2026-03-29T03:00:00+02:00', '2026-03-30T02:30:00+02:00']);
  });

  it('fall back: 02:30 happens twice on 25 October; it runs once, at the first (CEST)', async () => {
    await walk([schedule('dst-fall', '30 2 * * *', 'all')], '2026-10-24T12:00:00Z', '2026-10-26T12:00:00Z');
    expect(await occurrencesOf('dst-fall')).toEqual(['2026-10-25T02:30:00+02:00', '2026-10-26T02:30:00+01:00']);
  });

  it('an every-30-minutes schedule runs through the repeated hour, each instant once, the offset telling them apart', async () => {
    await walk([schedule('dst-interval', '*/30 * * * *', 'all')], '2026-10-24T23:50:00Z', '2026-10-25T02:10:00Z');
    expect(await occurrencesOf('dst-interval')).toEqual([
      '2026-10-25T02:00:00+02:00',
      '2026-10-25T02:30:00+02:00',
      '2026-10-25T02:00:00+01:00',
      '2026-10-25T02:30:00+01:00',
      '2026-10-25T03:00:00+01:00',
    ]);
  });
});

describe('the payload and the key from the occurrence', () => {
  it('the month-end close of December costs November, keyed by the occurrence', async () => {
    const clock = testClock('2026-11-30T22:00:00Z');
    const t = task([monthEndClose], clock.now);
    await t.runOnce();
    clock.set('2026-12-01T01:00:04Z'); // 02:00:04 in Berlin
    const pass = await t.runOnce();
    expect(pass.fired).toHaveLength(1);
    const job = await p.store.get(pass.fired[0]!.jobId);
    expect(job).toMatchObject({
      type: 'inventory.cost',
      idempotencyKey: 'schedule:month-end-close:2026-12-01T02:00:00+01:00',
      payload: expect.objectContaining({ store: 'S01', period: '2026-11' }),
    });
    const o = occurrence({ timeZone: 'Europe/Berlin' }, new Date('2027-01-01T01:00:00Z'));
    expect([o.label, o.month(-1), o.day(-1)]).toEqual(['2027-01-01T02:00:00+01:00', '2026-12', '2026-12-31']);
  });
});

describe("a schedule's work key: the work once, however the schedule changes", () => {
  it('moved to another day after it ran, renamed during a deploy, or triggered again: the month is closed once; --again runs it anyway', async () => {
    // Fault review: an occurrence named its instant, not its work: a close moved from the 1st to
    // the 2nd on deploy day, or renamed while old and new tasks both ran, or triggered twice, closed
    // the same month twice (inventory.cost adds a second set of cost rows).
    const keyed = (name: string, cron: string) =>
      defineSchedule({ ...schedule(name, cron, 'latest'), key: (o) => `wk-close:${o.month(-1)}` });
    const monthly = keyed('wk-close', '0 2 1 * *');
    const clock = testClock('2026-11-30T22:00:00Z');
    const old = task([monthly], clock.now);
    await old.runOnce();
    clock.set('2026-12-01T01:00:05Z');
    const first = await old.runOnce();
    expect(first.fired).toHaveLength(1);
    const closedBy = first.fired[0]!.jobId;

    // The deploy moves it to the 2nd: its occurrence on the 2nd finds November closed.
    const lines: { msg: string; doneBy?: { jobId: string } }[] = [];
    const log = pino({ level: 'warn' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    const moved = task([keyed('wk-close', '0 2 2 * *')], clock.now, log);
    await moved.runOnce();
    clock.set('2026-12-02T01:00:05Z');
    expect((await moved.runOnce()).fired).toEqual([]);
    expect(lines.map((l) => l.msg)).toEqual([
      `schedule wk-close: occurrence 2026-12-02T02:00:00+01:00 not enqueued: its work wk-close:2026-11 was done already by job ${closedBy} (schedule wk-close, its occurrence at 2026-12-01T01:00:00.000Z)`,
    ]);

    // Renamed in a deploy whose old and new tasks both run at the next close: one job.
    clock.set('2026-12-31T22:00:00Z');
    const renamed = task([keyed('wk-close-s01', '0 2 1 * *')], clock.now);
    const stillOld = task([monthly], clock.now);
    await renamed.runOnce();
    await stillOld.runOnce();
    clock.set('2027-01-01T01:00:05Z');
    const both = [...(await renamed.runOnce()).fired, ...(await stillOld.runOnce()).fired];
    expect(both).toHaveLength(1);

    // Two on-call engineers trigger it (or one retries after a timeout): nothing more, named.
    const svc = new ScheduleService(p.db.pool, p.client, [monthly], clock.now);
    const again = await svc.trigger('wk-close', 'alice (cli)', 'rerun');
    expect(again).toMatchObject({
      duplicate: true,
      alreadyDone: { workKey: 'wk-close:2026-12', jobId: both[0]!.jobId },
      job: { id: both[0]!.jobId },
    });
    const forced = await svc.trigger('wk-close', 'alice (cli)', 'costs corrected, run it again', true);
    expect(forced.alreadyDone).toBeUndefined();
    expect(forced.job!.id).not.toBe(both[0]!.jobId);
    const { rows } = await p.db.pool.query<{ batch: string }>(
      "SELECT payload->>'batch' AS batch FROM jobs.job WHERE idempotency_key LIKE 'schedule:wk-close%' ORDER BY created_at",
    );
    // November once, December once by the schedule and once on purpose (--again).
    expect(rows).toHaveLength(3);
  });

  it('a trigger --again before the occurrence does the work for it; a cancelled job gives its key back; list says what was skipped and why', async () => {
    // Review: --again recorded no key, so the occurrence after it did the month a second time; a
    // job cancelled by mistake held its key for good.
    const def = defineSchedule({ ...schedule('wk-again', '0 2 1 * *', 'latest'), key: (o) => `wk-again:${o.month(-1)}` });
    const clock = testClock('2027-01-31T23:30:00Z'); // 00:30 in Berlin on 1 February: before the close
    const t = task([def], clock.now);
    await t.runOnce();
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    const early = await svc.trigger('wk-again', 'alice (cli)', 'needed before 02:00', true);
    clock.set('2027-02-01T01:00:05Z');
    expect((await t.runOnce()).fired).toEqual([]);
    const [view] = await svc.list();
    expect(view!.last[0]).toMatchObject({
      label: '2027-02-01T02:00:00+01:00',
      skipped: { workKey: 'wk-again:2027-01', jobId: early.job!.id },
    });
    expect(describeSchedule(view!)).toContain(
      `    last: 2027-02-01T02:00:00+01:00  not enqueued: its work wk-again:2027-01 was done by job ${early.job!.id} (pending)`,
    );
    // Cancelled: the work is not done; the next trigger takes the key over.
    await p.client.cancel(early.job!.id, 'alice (cli)');
    const retried = await svc.trigger('wk-again', 'alice (cli)', 'the real one');
    expect(retried.alreadyDone).toBeUndefined();
    expect(retried.job!.id).not.toBe(early.job!.id);
    expect(await svc.trigger('wk-again', 'bob (cli)', null)).toMatchObject({ alreadyDone: { jobId: retried.job!.id } });
  });

  it('a rerun (--again) cancelled afterwards does not free the work the first job did', async () => {
    // Review: --again made its job the key's; cancelling it let the next trigger take the key over
    // and do the month a third time, though the first job had done it.
    const def = defineSchedule({ ...schedule('wk-rerun', '0 2 1 * *', 'latest'), key: (o) => `wk-rerun:${o.month(-1)}` });
    const clock = testClock('2027-03-31T22:00:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    clock.set('2027-04-01T00:00:05Z'); // 02:00:05 in Berlin (CEST)
    const first = (await t.runOnce()).fired[0]!;
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    const rerun = await svc.trigger('wk-rerun', 'alice (cli)', 'rerun', true);
    await p.client.cancel(rerun.job!.id, 'alice (cli)');
    expect(await svc.trigger('wk-rerun', 'bob (cli)', null)).toMatchObject({
      alreadyDone: { workKey: 'wk-rerun:2027-03', jobId: first.jobId },
    });
  });

  it("a redrive does not do a schedule's work again: a discarded job whose key a later job holds, a dead one whose work a --again does, or two dead jobs of one work redriven together; one whose taker gave up takes its key back", async () => {
    // Review: the key's row named only the later job, so `jobs dead redrive <id>` of the discarded
    // one (or a filtered redrive of a dead one after --again) closed the month a second time.
    const def = defineSchedule({ ...schedule('wk-redrive', '0 2 1 * *', 'latest'), key: (o) => `wk-redrive:${o.month(-1)}` });
    const clock = testClock('2027-05-31T22:00:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    const dead = new DeadJobService(p.db.pool, p.publisher);
    const die = async (id: string) => {
      const [c] = await p.store.claim([id], 'worker-a', 30);
      await p.store.fail({ id, attempt: c!.attempt }, { name: 'Error', message: 'period locked', retryable: false }, 0, true);
    };
    const succeed = async (id: string) => {
      const [c] = await p.store.claim([id], 'worker-b', 30);
      expect(await p.store.complete(p.db.pool, { id, attempt: c!.attempt }, null)).toBe(true);
    };
    const holder = async (key: string) =>
      (await p.db.pool.query('SELECT job_id FROM jobs.schedule_work WHERE work_key = $1', [key])).rows[0]?.job_id as string;
    // A dies and is discarded; the next trigger takes the key over and B closes the month.
    const a = (await svc.trigger('wk-redrive', 'alice (cli)', 'close May')).job!;
    await die(a.id);
    await dead.discard({ ids: [a.id], by: 'alice', reason: 'redone below' });
    clock.set('2027-05-31T22:01:00Z'); // a trigger's job is keyed by its instant
    const b = (await svc.trigger('wk-redrive', 'alice (cli)', 'close May again')).job!;
    expect(await holder('wk-redrive:2027-05')).toBe(b.id);
    await succeed(b.id);
    const r = await dead.redrive({ ids: [a.id], by: 'carol' });
    expect(r.jobs).toEqual([]);
    expect(r.skipped).toEqual([
      { id: a.id, type: 'ledger.post', state: 'dead', reason: `job ${b.id} holds its schedule work wk-redrive:2027-05` },
    ]);
    // Still after the pruner removed B (its key's row stays, naming it).
    await p.db.pool.query('DELETE FROM jobs.job WHERE id = $1', [b.id]);
    expect((await dead.redrive({ ids: [a.id], by: 'carol' })).skipped).toMatchObject([{ id: a.id, reason: /holds its schedule work/ }]);
    // June: C dies (not discarded), a trigger --again runs D while the key stays with C.
    clock.set('2027-06-30T22:00:00Z');
    const c = (await svc.trigger('wk-redrive', 'alice (cli)', 'close June')).job!;
    await die(c.id);
    clock.set('2027-06-30T22:01:00Z');
    const d = (await svc.trigger('wk-redrive', 'alice (cli)', 'close June, again', true)).job!;
    const r2 = await dead.redrive({ type: 'ledger.post', by: 'carol' });
    expect(r2.skipped).toContainEqual({
      id: c.id,
      type: 'ledger.post',
      state: 'dead',
      reason: `job ${d.id} does its schedule work wk-redrive:2027-06`,
    });
    expect(r2.jobs.map((j) => j.id)).not.toContain(c.id);
    // D cancelled (given up) and C discarded; E takes the key and is cancelled too: C redriven takes its key back.
    await p.client.cancel(d.id, 'alice (cli)');
    await dead.discard({ ids: [c.id], by: 'alice', reason: 'not now' });
    clock.set('2027-06-30T22:02:00Z');
    const e = (await svc.trigger('wk-redrive', 'alice (cli)', 'close June, third')).job!;
    expect(await holder('wk-redrive:2027-06')).toBe(e.id);
    await p.client.cancel(e.id, 'alice (cli)');
    const r3 = await dead.redrive({ ids: [c.id], by: 'carol' });
    expect(r3.jobs.map((j) => j.id)).toEqual([c.id]);
    expect(await holder('wk-redrive:2027-06')).toBe(c.id);
    clock.set('2027-06-30T22:03:00Z');
    expect(await svc.trigger('wk-redrive', 'bob (cli)', null)).toMatchObject({ alreadyDone: { jobId: c.id } });
    await p.client.cancel(c.id, 'cleanup');
    // July: F dies, a --again G dies too; one redrive of both runs the work once, by the key's holder.
    clock.set('2027-07-31T22:00:00Z');
    const f = (await svc.trigger('wk-redrive', 'alice (cli)', 'close July')).job!;
    await die(f.id);
    clock.set('2027-07-31T22:01:00Z');
    const g = (await svc.trigger('wk-redrive', 'alice (cli)', 'close July, again', true)).job!;
    await die(g.id);
    const r4 = await dead.redrive({ ids: [g.id, f.id], by: 'carol' });
    expect(r4.jobs.map((j) => j.id)).toEqual([f.id]);
    expect(r4.skipped).toMatchObject([{ id: g.id, reason: `job ${f.id} holds its schedule work wk-redrive:2027-07` }]);
    await p.client.cancel(f.id, 'cleanup');
  });

  it('two occurrences of one catch-up with one key: the oldest does the work, the other names its job', async () => {
    const def = defineSchedule({ ...schedule('wk-daily', '0 3 * * *', 'all'), key: (o) => `wk-daily:${o.month(0)}` });
    const clock = testClock('2027-03-01T00:00:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    clock.set('2027-03-03T04:00:00Z'); // two days' occurrences due, both in March
    const pass = await t.runOnce();
    expect(pass.fired).toHaveLength(1);
    const [view] = await new ScheduleService(p.db.pool, p.client, [def], clock.now).list();
    expect(view!.last[0]!.skipped).toMatchObject({ workKey: 'wk-daily:2027-03', jobId: pass.fired[0]!.jobId });
  });

  it('a key added in the release that moves the close: the work the previous image did is not done again, by the moved occurrence or a trigger', async () => {
    // Rollout review: only code that knows keys records them, so the month the previous image
    // closed (before the release, during its rolling deploy, after a rollback) looked never done.
    const unkeyed = schedule('wk-rollout', '0 2 1 * *', 'latest');
    const keyed = (cron: string) => defineSchedule({ ...schedule('wk-rollout', cron, 'latest'), key: (o) => `wk-rollout:${o.month(-1)}` });
    const clock = testClock('2027-04-30T21:00:00Z');
    const previous = task([unkeyed], clock.now);
    await previous.runOnce();
    clock.set('2027-05-01T00:00:05Z'); // 02:00:05 in Berlin: the previous image closes April
    const april = (await previous.runOnce()).fired[0]!;
    // Enqueued by a release whose type had none of today's defaults: still the same job.
    await p.db.pool.query("UPDATE jobs.job SET payload = payload - 'workMs' - 'failAttempts' - 'workAfterWriteMs' WHERE id = $1", [
      april.jobId,
    ]);
    // The previous image's trigger during the deploy (by the database's clock, as on-call's are).
    const oldTrigger = await new ScheduleService(p.db.pool, p.client, [unkeyed]).trigger('wk-rollout', 'alice (cli)', 'old image');
    const moved = task([keyed('0 2 2 * *')], clock.now);
    await moved.runOnce();
    clock.set('2027-05-02T00:00:05Z');
    expect((await moved.runOnce()).fired).toEqual([]);
    expect(
      await new ScheduleService(p.db.pool, p.client, [keyed('0 2 2 * *')], clock.now).trigger('wk-rollout', 'bob (cli)', null),
    ).toMatchObject({
      duplicate: true,
      alreadyDone: { workKey: 'wk-rollout:2027-04', jobId: april.jobId },
    });
    const triggerKey = `wk-rollout:${occurrence(unkeyed, new Date()).month(-1)}`;
    expect(await new ScheduleService(p.db.pool, p.client, [keyed('0 2 2 * *')]).trigger('wk-rollout', 'bob (cli)', null)).toMatchObject({
      alreadyDone: { workKey: triggerKey, jobId: oldTrigger.job!.id, occurrence: expect.stringMatching(/^trigger at /) },
    });
    const { rows } = await p.db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM jobs.job WHERE idempotency_key LIKE 'schedule:wk-rollout:%'",
    );
    expect(rows[0]!.n).toBe(2);
  });

  it("history is recorded in the pass's transaction: a pass that fails reads it again, and the month the previous image closed is closed once", async () => {
    // Diff review: the read marker moved in memory while the pass rolled back, so the next pass
    // never recorded April's close and closed April again.
    const unkeyed = schedule('wk-rolled', '0 2 1 * *', 'all');
    const broken = { june: true };
    const keyed = defineSchedule({
      ...schedule('wk-rolled', '0 2 2 * *', 'all'),
      key: (o) => `wk-rolled:${o.month(-1)}`,
      payload: (o) => {
        if (broken.june && o.month(0) === '2027-06') throw new Error('payload not ready for June');
        return { batch: `wk-rolled@${o.label}`, entries: 1 };
      },
    });
    const clock = testClock('2027-04-30T21:00:00Z');
    const previous = task([unkeyed], clock.now);
    await previous.runOnce();
    clock.set('2027-05-01T00:00:05Z');
    const april = (await previous.runOnce()).fired[0]!;
    const next = task([keyed], clock.now);
    await next.runOnce();
    clock.set('2027-06-02T00:00:05Z'); // 2 May (April's close) and 2 June (May's) in one pass
    await expect(next.runOnce()).resolves.toMatchObject({ fired: [] });
    broken.june = false;
    const pass = await next.runOnce();
    expect(pass.fired.map((f) => f.jobId)).toHaveLength(1);
    const { rows } = await p.db.pool.query<{ work_key: string; job_id: string }>(
      "SELECT work_key, job_id FROM jobs.schedule_work WHERE schedule = 'wk-rolled' ORDER BY work_key",
    );
    expect(rows).toEqual([
      { work_key: 'wk-rolled:2027-04', job_id: april.jobId },
      { work_key: 'wk-rolled:2027-05', job_id: pass.fired[0]!.jobId },
    ]);
  });

  it('a past job that did other work holds no key: a schedule moved to close the current month still closes it', async () => {
    // Diff review: the history was keyed by today's declaration whatever its job had done, so
    // the close of April on 1 May was taken for May's, and May was never closed.
    const lastMonth = defineSchedule({
      ...schedule('wk-other', '0 2 1 * *', 'latest'),
      payload: (o) => ({ batch: `close:${o.month(-1)}`, entries: 1 }),
    });
    const thisMonth = defineSchedule({
      ...schedule('wk-other', '0 2 28 * *', 'latest'),
      key: (o) => `wk-other:${o.month(0)}`,
      payload: (o) => ({ batch: `close:${o.month(0)}`, entries: 1 }),
    });
    const clock = testClock('2027-04-30T21:00:00Z');
    const previous = task([lastMonth], clock.now);
    await previous.runOnce();
    clock.set('2027-05-01T00:00:05Z');
    expect((await previous.runOnce()).fired).toHaveLength(1);
    const next = task([thisMonth], clock.now);
    await next.runOnce();
    clock.set('2027-05-28T00:00:05Z');
    expect((await next.runOnce()).fired).toHaveLength(1);
    const { rows } = await p.db.pool.query<{ batch: string }>(
      "SELECT payload->>'batch' AS batch FROM jobs.job WHERE idempotency_key LIKE 'schedule:wk-other:%' ORDER BY created_at",
    );
    expect(rows.map((r) => r.batch)).toEqual(['close:2027-04', 'close:2027-05']);
  });

  it('a trigger beside a pass of the same schedule: the schedule row, then the keys, in both (no deadlock); a succeeded job holds the key before a rerun', async () => {
    // Second review: a trigger locked the key rows its backfill touched, then waited for the
    // schedule's row, which a pass held while it waited for those keys: 40P01.
    const unkeyed = schedule('wk-order', '0 2 1 * *', 'latest');
    const def = defineSchedule({ ...schedule('wk-order', '0 2 1 * *', 'latest'), key: (o) => `wk-order:${o.month(-1)}` });
    const clock = testClock('2026-11-30T21:00:00Z');
    const previous = task([unkeyed], clock.now);
    await previous.runOnce();
    clock.set('2026-12-01T01:00:05Z');
    const november = (await previous.runOnce()).fired[0]!;
    await p.db.pool.query("UPDATE jobs.job SET state = 'succeeded', finished_at = now() WHERE id = $1", [november.jobId]);
    // The previous image's rerun of the same month (no key recorded), still pending.
    const rerun = await new ScheduleService(p.db.pool, p.client, [unkeyed], clock.now).trigger('wk-order', 'alice (cli)', 'rerun');
    const pass = await p.db.pool.connect();
    try {
      await pass.query('BEGIN');
      await pass.query("SELECT 1 FROM jobs.schedule WHERE name = 'wk-order' FOR UPDATE");
      const trigger = new ScheduleService(p.db.pool, p.client, [def], clock.now).trigger('wk-order', 'bob (cli)', null);
      await waitFor(
        async () =>
          (
            await p.db.pool.query(
              "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE jobs.schedule SET work_read_through%'",
            )
          ).rowCount === 1,
        5_000,
        'the trigger waiting for the schedule row',
      );
      // What a pass then does: the key's row (before, it waited for the trigger, which waited for it).
      await pass.query(
        "INSERT INTO jobs.schedule_work (work_key, schedule, occurrence_at) VALUES ('wk-order:2026-11', 'wk-order', now()) ON CONFLICT (work_key) DO NOTHING",
      );
      await pass.query('ROLLBACK');
      expect(await trigger).toMatchObject({ alreadyDone: { workKey: 'wk-order:2026-11', jobId: november.jobId } });
    } finally {
      pass.release();
    }
    expect(rerun.job!.id).not.toBe(november.jobId);
  });

  it('a cancelled keyed job pruned with its history frees its key: the next trigger does the work', async () => {
    // Rollout review: the key outlived the cancelled job that held it (400 days against 30) and
    // named a job that was gone as having done the work.
    const def = defineSchedule({ ...schedule('wk-pruned', '0 2 1 * *', 'latest'), key: (o) => `wk-pruned:${o.month(-1)}` });
    const clock = testClock('2027-05-31T21:00:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    clock.set('2027-06-01T00:00:05Z');
    const fired = (await t.runOnce()).fired[0]!;
    await p.client.cancel(fired.jobId, 'alice (cli)');
    // Its retention over (ledger.post keeps its keys for good; a type keeping them 30 days here).
    await p.db.pool.query(
      "UPDATE jobs.job SET finished_at = now() - interval '40 days', keep_days = 30, prune_after = now() - interval '1 second' WHERE id = $1",
      [fired.jobId],
    );
    await p.db.pool.query('UPDATE jobs.idempotency_key SET keep_days = 30 WHERE job_id = $1', [fired.jobId]);
    await p.db.pool.query(RETENTION_SQL.jobPrune, [1000, 90]);
    expect((await p.db.pool.query('SELECT 1 FROM jobs.job WHERE id = $1', [fired.jobId])).rowCount).toBe(0);
    expect((await p.db.pool.query("SELECT 1 FROM jobs.schedule_work WHERE work_key = 'wk-pruned:2027-05'")).rowCount).toBe(0);
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    const retried = await svc.trigger('wk-pruned', 'bob (cli)', 'the month was never closed');
    expect(retried.alreadyDone).toBeUndefined();
    expect(retried.job!.id).not.toBe(fired.jobId);
  });

  it('two schedules naming one work with different payloads refuse the start (a copy for another store, its key left as it was)', () => {
    const s01 = defineSchedule({ ...schedule('wk-s01', '0 2 1 * *', 'latest'), key: (o) => `close:S01:${o.month(-1)}` });
    const s02 = defineSchedule({ ...s01, name: 'wk-s02', payload: (o) => ({ batch: `S02@${o.label}`, entries: 1 }) });
    expect(() => checkSchedules([s01, s02], p.registry)).toThrow(
      /schedules "wk-s01" and "wk-s02" name the same work \(close:S01:.*\) with different payloads/,
    );
  });

  it('a key that is not a non-empty string refuses the start, naming the schedule and the rule', () => {
    const bad = defineSchedule({ ...schedule('wk-bad', '0 2 1 * *', 'latest'), key: () => '' });
    expect(() => checkSchedules([bad], p.registry)).toThrow(/schedule-key.*schedule "wk-bad": its key for .* must be a non-empty string/s);
  });
});

describe('pause, resume and trigger', () => {
  it('hold across scheduler instances; a resume does not enqueue what fell while paused; each is an operator action', async () => {
    const def = schedule('pausable', '0 * * * *', 'all');
    const clock = testClock('2026-06-03T07:59:00Z');
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    const a = task([def], clock.now);
    await a.runOnce();
    expect(await svc.pause('pausable', 'alice (cli)', 'period closed')).toMatchObject({ changed: true });
    expect(await svc.pause('pausable', 'bob (cli)', null)).toMatchObject({
      changed: false,
      schedule: { paused: { by: 'alice (cli)', reason: 'period closed' } },
    });
    clock.set('2026-06-03T08:00:05Z');
    expect((await a.runOnce()).fired).toEqual([]);
    clock.set('2026-06-03T09:00:05Z');
    expect((await task([def], clock.now).runOnce()).fired).toEqual([]); // another task, the same answer

    clock.set('2026-06-03T09:30:00Z');
    expect(await svc.resume('pausable', 'alice (cli)', 'reopened')).toMatchObject({ changed: true, schedule: { paused: null } });
    expect(await svc.resume('pausable', 'alice (cli)', null)).toMatchObject({ changed: false });
    clock.set('2026-06-03T10:00:05Z');
    await a.runOnce();
    expect(await occurrencesOf('pausable')).toEqual(['2026-06-03T12:00:00+02:00']); // not 10:00 or 11:00, despite missed: all

    const t = await svc.trigger('pausable', 'carol (api, 127.0.0.1)', 'rerun after the fix');
    expect(t).toMatchObject({ duplicate: false, key: 'schedule:pausable:manual:2026-06-03T10:00:05.000Z' });
    const { rows } = await p.db.pool.query(
      "SELECT action, by, reason, job_id, detail->>'schedule' AS schedule FROM jobs.operator_action WHERE detail->>'schedule' = 'pausable' ORDER BY id",
    );
    expect(rows).toEqual([
      { action: 'schedule-pause', by: 'alice (cli)', reason: 'period closed', job_id: null, schedule: 'pausable' },
      { action: 'schedule-resume', by: 'alice (cli)', reason: 'reopened', job_id: null, schedule: 'pausable' },
      { action: 'schedule-trigger', by: 'carol (api, 127.0.0.1)', reason: 'rerun after the fix', job_id: t.job!.id, schedule: 'pausable' },
    ]);
    const [view] = await svc.list();
    expect(view).toMatchObject({
      name: 'pausable',
      paused: null,
      next: [{ label: '2026-06-03T13:00:00+02:00' }, { label: '2026-06-03T14:00:00+02:00' }, { label: '2026-06-03T15:00:00+02:00' }],
      last: [{ label: '2026-06-03T12:00:00+02:00', state: 'pending', late: false }],
    });
  });
});

describe('a trigger from a machine whose clock is wrong', () => {
  it("names the database's time, not the operator's laptop's: a payload of the month before is the right month", async () => {
    // Fault review: the trigger made its occurrence from the clock of the machine running the
    // command; a laptop a month off would close the wrong month.
    const def = schedule('wrong-clock', '0 2 1 * *', 'latest');
    const svc = new ScheduleService(p.db.pool, p.client, [def]); // no injected clock: as deployed
    const real = Date.now();
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(new Date(real + 40 * 86_400_000)); // 40 days ahead
      const t = await svc.trigger('wrong-clock', 'alice (cli)', null);
      const at = Date.parse(t.key.replace('schedule:wrong-clock:manual:', ''));
      expect(Math.abs(at - real)).toBeLessThan(60_000);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('a schedule whose pass fails', () => {
  it('is counted and logged each pass, shown overdue, and its occurrence enqueued (late) by the first pass that succeeds', async () => {
    let broken = true;
    const def = defineSchedule({
      ...schedule('fragile', '0 * * * *', 'latest', 'UTC'),
      payload: (o) => {
        if (broken) throw new Error('no exchange rate for this period yet');
        return { batch: `fragile@${o.label}`, entries: 1 };
      },
    });
    const clock = testClock('2026-06-04T09:59:50Z');
    const lines: { level: number; msg: string; schedule?: string; overdueSeconds?: number }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    const metrics = new CountingMetrics();
    const t = task([def], clock.now, log, metrics);
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    await t.runOnce();

    clock.set('2026-06-04T10:00:04Z');
    expect((await t.runOnce()).failed).toEqual(['fragile']);
    clock.set('2026-06-04T10:04:00Z');
    expect((await t.runOnce()).failed).toEqual(['fragile']);
    expect(metrics.get(METRIC.schedulePassesFailed)).toBe(2);
    expect(lines.filter((l) => l.level === 40).map((l) => [l.msg, l.overdueSeconds])).toEqual([
      [
        'schedule fragile: pass failed, its occurrence due 2026-06-04T10:00:00.000Z not enqueued (4 s overdue); retrying at the next pass',
        4,
      ],
      [
        'schedule fragile: pass failed, its occurrence due 2026-06-04T10:00:00.000Z not enqueued (240 s overdue); retrying at the next pass',
        240,
      ],
    ]);
    expect(await occurrencesOf('fragile')).toEqual([]);
    const [view] = await svc.list();
    expect(view!.overdue).toEqual({ at: '2026-06-04T10:00:00.000Z', label: '2026-06-04T10:00:00+00:00', seconds: 240 });
    expect(describeSchedule(view!)).toContainEqual(
      expect.stringMatching(/^ {4}OVERDUE: 2026-06-04T10:00:00\+00:00 not enqueued, 4 min past due/),
    );

    broken = false; // the fix is deployed
    clock.set('2026-06-04T10:05:00Z');
    const pass = await t.runOnce();
    expect(pass.fired.map((f) => [f.occurrence, f.late])).toEqual([['2026-06-04T10:00:00+00:00', true]]);
    expect(metrics.get(METRIC.schedulePassesFailed)).toBe(2);
    expect((await svc.list())[0]!.overdue).toBeNull();
  });

  it('under skip, an occurrence tried in its time through a failover still runs once the database answers, within 5 minutes of its time; not after', async () => {
    // Fault review: the first pass to succeed after a minute's failover judged the occurrence
    // late from its own time and dropped it, though every task had tried it on time.
    const { def, db } = failoverSchedule('failover-skip', '0 * * * *');
    const clock = testClock('2026-06-06T09:55:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    for (const at of ['10:00:01', '10:00:20', '10:00:40', '10:00:59', '10:01:30']) {
      clock.set(`2026-06-06T${at}Z`);
      expect((await t.runOnce()).failed).toEqual(['failover-skip']);
    }
    db.down = false;
    clock.set('2026-06-06T10:01:44Z');
    expect((await t.runOnce()).fired.map((f) => [f.occurrence, f.late])).toEqual([['2026-06-06T10:00:00+00:00', true]]);
    // The next hour's occurrence, down from its first try until more than 5 minutes past: not run.
    db.down = true;
    clock.set('2026-06-06T11:00:02Z');
    expect((await t.runOnce()).failed).toEqual(['failover-skip']);
    db.down = false;
    clock.set('2026-06-06T11:05:03Z');
    expect(await t.runOnce()).toMatchObject({ fired: [], failed: [] });
    expect(await occurrencesOf('failover-skip')).toEqual(['2026-06-06T10:00:00+00:00']);
  });

  it('under skip, a failover longer than the period: the newest occurrence tried in its minute runs, the older ones do not', async () => {
    const { def, db } = failoverSchedule('failover-skip-2', '*/2 * * * *');
    const clock = testClock('2026-06-07T09:59:00Z');
    const t = task([def], clock.now);
    await t.runOnce();
    for (const at of ['10:00:05', '10:01:00', '10:02:05', '10:03:00', '10:04:02']) {
      clock.set(`2026-06-07T${at}Z`);
      expect((await t.runOnce()).failed).toEqual(['failover-skip-2']);
    }
    db.down = false;
    clock.set('2026-06-07T10:05:30Z');
    expect((await t.runOnce()).fired.map((f) => f.occurrence)).toEqual(['2026-06-07T10:04:00+00:00']);
    expect(await occurrencesOf('failover-skip-2')).toEqual(['2026-06-07T10:04:00+00:00']);
  });

  it("the runbook's way to run it before the fix: pause, trigger, resume; the overdue occurrence does not run as well", async () => {
    let broken = true;
    const def = defineSchedule({
      ...schedule('fragile-2', '0 * * * *', 'all', 'UTC'),
      payload: (o) => {
        if (broken && o.label.startsWith('2026-06-05T10')) throw new Error('this hour cannot be costed by the scheduler');
        return { batch: `fragile-2@${o.label}`, entries: 1 };
      },
    });
    const clock = testClock('2026-06-05T09:59:50Z');
    const t = task([def], clock.now);
    const svc = new ScheduleService(p.db.pool, p.client, [def], clock.now);
    await t.runOnce();
    clock.set('2026-06-05T10:03:00Z');
    expect((await t.runOnce()).failed).toEqual(['fragile-2']);
    expect((await svc.list())[0]!.overdue).toMatchObject({ label: '2026-06-05T10:00:00+00:00' });

    await svc.pause('fragile-2', 'oncall (cli)', 'run it by hand');
    expect((await svc.list())[0]!.overdue).toBeNull(); // paused: not overdue, on purpose
    clock.set('2026-06-05T11:03:00Z');
    const manual = await svc.trigger('fragile-2', 'oncall (cli)', 'run it by hand');
    broken = false; // the fix is live: 10:00 could be enqueued now, and must not be
    await svc.resume('fragile-2', 'oncall (cli)', 'fix deployed');
    expect(await t.runOnce()).toMatchObject({ fired: [], failed: [] });
    clock.set('2026-06-05T12:00:03Z');
    await t.runOnce();
    expect(await occurrencesOf('fragile-2')).toEqual([`manual:${manual.key.split(':manual:')[1]}`, '2026-06-05T12:00:00+00:00']);
  });

  it('a database that refuses before the schedules are read counts a failed pass for each of them', async () => {
    const defs = [schedule('refused-a', '0 * * * *', 'latest'), schedule('refused-b', '0 * * * *', 'latest')];
    const metrics = new CountingMetrics();
    const pool = p.db.newPool(1);
    await pool.end();
    const client = new JobClient({
      pool,
      registry: p.registry,
      publisher: new Publisher(pool, p.queue, silentLogger),
      defaultMaxAttempts: 3,
    });
    const t = new Scheduler({ pool, client, schedules: defs, log: silentLogger, metrics });
    await expect(t.runOnce()).rejects.toThrow();
    expect(metrics.get(METRIC.schedulePassesFailed)).toBe(2);
  });
});

describe('declarations', () => {
  it('a bad name, cron expression, time zone or policy stops at the declaration, naming the schedule and the rule', () => {
    const base = {
      job: ledgerPost,
      payload: () => ({ batch: 'b', entries: 1 }),
      missed: 'latest' as const,
      timeZone: 'UTC',
      cron: '0 * * * *',
    };
    expect(() => defineSchedule({ ...base, name: 'Month End' })).toThrow(/schedule "Month End": name must be lower-case words/);
    expect(() => defineSchedule({ ...base, name: 'x', cron: '61 * * * *' })).toThrow(
      /schedule "x": cron = "61 \* \* \* \*" is not a cron expression: .*minute/,
    );
    expect(() => defineSchedule({ ...base, name: 'x', timeZone: 'Mars/Olympus' })).toThrow(
      /schedule "x": timeZone = "Mars\/Olympus" is not an IANA time zone/,
    );
    expect(() => defineSchedule({ ...base, name: 'x', missed: 'sometimes' as never })).toThrow(
      /missed = "sometimes" must be latest, all or skip/,
    );
    expect(() => defineSchedule({ ...base, name: 'x', cron: '0 0 30 2 *' })).toThrow(/has no future occurrence/);
  });

  it('a payload without the field its type keys jobs on refuses the start too (every pass would be refused)', () => {
    const recount = defineJob({
      type: 'test.recount',
      description: 'a type keyed on an optional field',
      schema: z.object({ warehouse: z.string().optional() }),
      concurrency: { key: 'recount:{warehouse}' },
      run: async () => undefined,
    });
    const nightly = defineSchedule({
      name: 'nightly-recount',
      cron: '0 2 * * *',
      timeZone: 'UTC',
      job: recount,
      payload: () => ({}),
      missed: 'latest',
    });
    expect(() => checkSchedules([nightly], new JobRegistry([recount]))).toThrow(
      /schedule "nightly-recount": its payload for .* is refused: payload: has no warehouse, which job type test\.recount keys its jobs on/,
    );
  });

  it('a type the process does not know, a payload its type refuses, or a name twice refuses the start', () => {
    const ok = schedule('ok', '0 * * * *', 'latest');
    const badPayload = defineSchedule({ ...ok, name: 'bad-payload', payload: () => ({ batch: 'b', entries: 0 }) });
    const registry = new JobRegistry([ledgerPost]);
    expect(() => checkSchedules([ok], registry)).not.toThrow();
    let err: unknown;
    try {
      checkSchedules([ok, ok, badPayload, monthEndClose], registry);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).violations.map((v) => v.message)).toEqual([
      'schedule "ok" is declared twice',
      expect.stringMatching(
        /^schedule "bad-payload": its payload for .* is refused: payload.entries: must be a whole number from 1 to 100000/,
      ),
      'schedule "month-end-close": job type "inventory.cost" is not registered (known: ledger.post)',
    ]);
  });
});
